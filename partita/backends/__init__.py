"""BYOC backends: registration, pattern tables and phase passes (TVM's UMA).

A backend is an external codegen: a target kind of device type cuda (by default) with
``is_external_codegen``, a pattern table and optional passes to run before and after
partitioning. Backends are registered once, in order; that order is the priority of their
patterns (TVM's pattern table order), and within a backend the patterns keep their own
registration order. Pattern names are stored qualified, ``<backend>.<name>``, which is
the ``byoc.composite`` name a composite region carries.

Two ways to register::

    register_backend("mybe", target_options={"tile": (int, 128)},
                     patterns=[("dense", is_op("nn.dense")(wildcard(), wildcard()), None)])

    class MyBackend(UMABackend):          # UMA style
        target_name = "mybe"
        def __init__(self):
            super().__init__()
            self._register_target_attr("tile", int, 128)
            self._register_pattern("dense", is_op("nn.dense")(wildcard(), wildcard()))
            self._register_pass("before_partitioning", "canonicalize")
    MyBackend().register()

A backend declares how Collage builds its candidates with ``partition_rule``: a fusion
style (``"pattern"``: each match one kernel, like CUTLASS; ``"tvm"``: FuseOps-like fusion of
matches; ``"arbitrary"``: any touching matches combine, like TensorRT) or a function
``(backend, max_depth) -> PartitionRule`` of :mod:`partita.collage.rules`. A backend that
declares nothing gets TVM's default for its name (``default_style``).

The native ``cuda`` target and the host (``llvm``/``c``) are not BYOC backends: they run
every nn op, see ``native_supports``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass

from partita.backends.pattern import Match, Pattern
from partita.ir.diagnostics import PartitaError
from partita.target import (
    CompilationConfig,
    Target,
    TargetError,
    TargetOption,
    get_target_kind,
    is_registered,
    register_target_kind,
)

__all__ = [
    "FUSION_STYLES",
    "PHASES",
    "Backend",
    "BackendMatch",
    "PatternEntry",
    "Predicate",
    "UMABackend",
    "backend_target",
    "get_backend",
    "get_pattern_table",
    "list_backends",
    "match_patterns",
    "native_supports",
    "register_backend",
    "requires_sm",
    "resolve_backends",
    "unregister_backend",
]

Predicate = Callable[[Match], bool]
RuleSpec = str | Callable[[str, int], Any]
"""A fusion style name, or ``(backend, max_depth) -> PartitionRule``."""
PhasePass = ModulePass | str
PHASES = ("before_partitioning", "after_partitioning")
FUSION_STYLES = ("pattern", "tvm", "arbitrary")
"""How Collage combines a backend's matches (TVM's ``BYOCStyle``; the rules are
``partita.collage.rules.styles``)."""


def requires_sm(sm: int) -> Callable[[Predicate], Predicate]:
    """Mark a pattern predicate as taking only devices of compute capability ``sm`` (as
    ``89`` for 8.9) or newer: FP8 tensor cores are Ada and Hopper only. Partitioners
    that know the device's arch skip the row below it (TVM's ``partition_for_cutlass(mod,
    sm)`` checks the same way); without an arch every row stays."""

    def mark(predicate: Predicate) -> Predicate:
        predicate.min_sm = sm  # type: ignore[attr-defined]
        return predicate

    return mark


@dataclass(frozen=True)
class PatternEntry:
    """One row of the pattern table: qualified name, pattern, predicate, backend name."""

    name: str
    pattern: Pattern
    predicate: Predicate | None
    backend: str

    @property
    def min_sm(self) -> int:
        """The oldest compute capability the row takes (0: any; see :func:`requires_sm`)."""
        return int(getattr(self.predicate, "min_sm", 0))

    def runs_on(self, sm: int) -> bool:
        """Whether a device of compute capability ``sm`` takes the row (0: unknown, every
        row does)."""
        return not sm or self.min_sm <= sm

    def accepts(self, match: Match) -> bool:
        return self.predicate is None or bool(self.predicate(match))

    def match(self, op: Operation, sm: int = 0) -> Match | None:
        """The preferred match rooted at ``op`` that also satisfies the predicate, on a
        device of compute capability ``sm`` (0: unknown, every row applies)."""
        if not self.runs_on(sm):
            return None
        for m in self.pattern.matches(op):
            if self.accepts(m):
                return m
        return None


@dataclass(frozen=True)
class Backend:
    """A registered backend. ``ops`` are single ops the backend supports outside any
    composite (TVM's ``target.<compiler>`` op attribute), used by ``annotate-target``."""

    name: str
    patterns: tuple[PatternEntry, ...]
    before_partitioning: tuple[PhasePass, ...] = ()
    after_partitioning: tuple[PhasePass, ...] = ()
    ops: frozenset[str] = field(default_factory=frozenset)
    partition_rule: RuleSpec | None = None
    """What the backend declared (``None``: TVM's default for its name)."""

    @property
    def compiler(self) -> str:
        """The ``byoc.compiler`` name of this backend's partitions (its target kind)."""
        return self.name

    def passes(self, phase: str) -> tuple[PhasePass, ...]:
        if phase not in PHASES:
            raise PartitaError(f"unknown backend phase '{phase}'; phases: {', '.join(PHASES)}")
        return getattr(self, phase)


_BACKENDS: dict[str, Backend] = {}


def register_backend(
    name: str,
    *,
    target_options: Mapping[str, TargetOption | Any] | None = None,
    patterns: Iterable[tuple[str, Pattern, Predicate | None] | tuple[str, Pattern]] = (),
    before_partitioning: Sequence[PhasePass] = (),
    after_partitioning: Sequence[PhasePass] = (),
    ops: Iterable[str] = (),
    device_type: str = "cuda",
    partition_rule: RuleSpec | None = None,
) -> Backend:
    """Register backend ``name`` (once) and its target kind as an external codegen.

    If the kind already exists (cutlass, cublas, cudnn, tensorrt are built in) it must be
    an external codegen; ``target_options`` are added to it (a duplicate option is an
    error). ``patterns`` are ``(name, pattern, predicate)`` rows, stored as
    ``<backend>.<name>`` in the given order. ``partition_rule`` is the backend's Collage
    rule (see the module docstring).
    """
    if name in _BACKENDS:
        raise PartitaError(f"backend '{name}' is already registered")
    if isinstance(partition_rule, str):
        if partition_rule not in FUSION_STYLES:
            raise PartitaError(
                f"backend '{name}': unknown fusion style '{partition_rule}' (choose from {', '.join(FUSION_STYLES)})"
            )
    elif partition_rule is not None and not callable(partition_rule):
        raise PartitaError(f"backend '{name}': partition_rule must be a style name or a function, got {partition_rule!r}")
    entries: list[PatternEntry] = []
    seen: set[str] = set()
    for row in patterns:
        if len(row) == 2:
            short, pattern = row  # type: ignore[misc]
            predicate = None
        else:
            short, pattern, predicate = row  # type: ignore[misc]
        if not isinstance(pattern, Pattern):
            raise PartitaError(f"pattern '{short}' of backend '{name}' is not a Pattern")
        qualified = f"{name}.{short}"
        if qualified in seen:
            raise PartitaError(f"pattern '{qualified}' is already registered")
        seen.add(qualified)
        entries.append(PatternEntry(qualified, pattern, predicate, name))
    for phase_passes in (before_partitioning, after_partitioning):
        for p in phase_passes:
            if not isinstance(p, ModulePass | str):
                raise PartitaError(
                    f"backend '{name}': phase passes must be ModulePass instances or pipeline strings, got {p!r}"
                )
    try:
        if is_registered(name):
            kind = get_target_kind(name)
            if not kind.is_external_codegen:
                raise PartitaError(
                    f"cannot register backend '{name}': target kind '{name}' exists and is not an external codegen"
                )
            kind.add_options(target_options or {})
        else:
            register_target_kind(name, device_type, target_options, is_external_codegen=True)
    except TargetError as err:
        raise PartitaError(str(err)) from None
    backend = Backend(name, tuple(entries), tuple(before_partitioning), tuple(after_partitioning), frozenset(ops),
                      partition_rule)
    _BACKENDS[name] = backend
    return backend


class UMABackend:
    """UMA-style registration: subclass, set ``target_name``, call the ``_register_*``
    methods in ``__init__``, then ``register()``."""

    target_name: str = ""

    def __init__(self) -> None:
        self._patterns: list[tuple[str, Pattern, Predicate | None]] = []
        self._target_attrs: dict[str, tuple[Any, Any]] = {}
        self._passes: dict[str, list[PhasePass]] = {phase: [] for phase in PHASES}
        self._ops: list[str] = []
        self._partition_rule: RuleSpec | None = None

    def _register_pattern(self, name: str, pattern: Pattern, predicate: Predicate | None = None) -> None:
        self._patterns.append((name, pattern, predicate))

    def _register_target_attr(self, name: str, type: Any, default: Any = None) -> None:
        self._target_attrs[name] = (type, default)

    def _register_pass(self, phase: str, pass_: PhasePass) -> None:
        if phase not in PHASES:
            raise PartitaError(f"unknown backend phase '{phase}'; phases: {', '.join(PHASES)}")
        self._passes[phase].append(pass_)

    def _register_partition_rule(self, rule: RuleSpec) -> None:
        self._partition_rule = rule

    def _register_op(self, name: str) -> None:
        self._ops.append(name)

    def register(self) -> Backend:
        if not self.target_name:
            raise PartitaError(f"{type(self).__name__} has no target_name")
        return register_backend(
            self.target_name,
            target_options=self._target_attrs,
            patterns=self._patterns,
            before_partitioning=self._passes["before_partitioning"],
            after_partitioning=self._passes["after_partitioning"],
            ops=self._ops,
            partition_rule=self._partition_rule,
        )


def unregister_backend(name: str) -> None:
    """Remove a backend (for tests). Its target kind and options stay registered."""
    get_backend(name)
    del _BACKENDS[name]


def get_backend(name: str) -> Backend:
    try:
        return _BACKENDS[name]
    except KeyError:
        known = ", ".join(_BACKENDS) or "(none)"
        raise PartitaError(f"unknown backend '{name}'; registered backends: {known}") from None


def list_backends() -> list[str]:
    """Names of the registered backends, in registration (priority) order."""
    return list(_BACKENDS)


def resolve_backends(names: str | Iterable[str] | None) -> list[Backend]:
    """The named backends in *registration* order (unknown names are an error). ``None``
    or empty means every registered backend. A string may be comma-separated."""
    if names is None:
        wanted: list[str] = []
    elif isinstance(names, str):
        wanted = [n.strip() for n in names.split(",") if n.strip()]
    else:
        wanted = [n.strip() for n in names if n.strip()]
    if not wanted:
        return list(_BACKENDS.values())
    for n in wanted:
        get_backend(n)
    return [b for b in _BACKENDS.values() if b.name in wanted]


def get_pattern_table(backend: str | Iterable[str] | None = None) -> list[PatternEntry]:
    """The pattern table (priority order) of one backend, several, or all of them."""
    return [e for b in resolve_backends(backend) for e in b.patterns]


# --------------------------------------------------------------------------------------
# Matching (for merge-composite and the Collage wiring)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BackendMatch:
    """A pattern-table row that matched (predicate included) at some root op."""

    entry: PatternEntry
    match: Match

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def backend(self) -> str:
        return self.entry.backend

    @property
    def ops(self) -> tuple[Operation, ...]:
        return self.match.ops


def _body(where: FuncOp | Block) -> Block | None:
    if isinstance(where, FuncOp):
        return where.body.block if where.body.blocks else None
    return where


def match_patterns(
    where: FuncOp | Block,
    backends: str | Iterable[str] | None = None,
    *,
    first_only: bool = False,
    sm: int = 0,
) -> list[BackendMatch]:
    """Every match of every pattern of ``backends`` (default: all) on the top-level ops
    of a function body or block, for a device of compute capability ``sm`` (0: any). Ops
    inside ``byoc.partition`` regions are not visited and partitions are opaque to
    patterns.

    Matches may overlap (this is the candidate set Collage searches). They are ordered
    by root op in block order, then by pattern-table order; with ``first_only`` only the
    highest-priority row per root is kept.
    """
    block = _body(where)
    if block is None:
        return []
    table = get_pattern_table(backends)
    found: list[BackendMatch] = []
    for op in block.ops:
        if op.name == "byoc.partition":
            continue
        for entry in table:
            m = entry.match(op, sm)
            if m is not None:
                found.append(BackendMatch(entry, m))
                if first_only:
                    break
    return found


def greedy_matches(block: Block, table: Sequence[PatternEntry], sm: int = 0) -> list[BackendMatch]:
    """TVM's MergeComposite selection: walk ops in reverse order; at each unclaimed op
    the first row of ``table`` (that a device of compute capability ``sm`` runs; 0: any)
    whose match claims no op already taken wins. The result is a set of disjoint matches
    (reverse block order of their roots)."""
    claimed: set[Operation] = set()
    chosen: list[BackendMatch] = []
    table = [entry for entry in table if entry.runs_on(sm)]
    for op in reversed(list(block.ops)):
        if op in claimed or op.name == "byoc.partition":
            continue
        for entry in table:
            m = next(
                (m for m in entry.pattern.matches(op) if not claimed.intersection(m.ops) and entry.accepts(m)),
                None,
            )
            if m is not None:
                claimed.update(m.ops)
                chosen.append(BackendMatch(entry, m))
                break
    return chosen


# --------------------------------------------------------------------------------------
# Phases, targets, native support
# --------------------------------------------------------------------------------------


def backend_target(config: CompilationConfig | str | Sequence[str] | None, name: str) -> Target:
    """The target instance a backend's codegen reads its options from (UMA's
    ``Target.current()``): the config's target of kind ``name`` (``cutlass -sm=80``).
    Without a config, the kind with its defaults."""
    get_backend(name)
    if config is None:
        return Target(name)
    try:
        if not isinstance(config, CompilationConfig):
            config = CompilationConfig.parse(config)
        return config.target_for_kind(name)
    except TargetError as err:
        raise PartitaError(str(err)) from None


def native_supports(target_kind: str, op_name: str) -> bool:
    """True if a non-BYOC target kind (native ``cuda``, host ``llvm``/``c``) can run
    ``op_name``: they run every nn op (and constants). External codegens answer False:
    they support what their pattern tables match."""
    if not is_registered(target_kind) or get_target_kind(target_kind).is_external_codegen:
        return False
    return op_name.startswith("nn.") or op_name == "arith.constant"


# Built-in backends register on import, after the API above exists.
from partita.backends import builtin as _builtin  # noqa: E402,F401
