"""The IR-level Collage driver: candidates from a function body, costs, search, rewrite.

``collage_partition(module, config, estimator, max_depth)`` partitions every function
with a body (but the partition functions, ``byoc.compiler`` set):

1. The top-level ops of the body become a :class:`~partita.collage.graph.DataflowGraph`
   (``ir_graph.graph_from_ops``; constants are not nodes).
2. Candidates come from partition rules (:mod:`partita.collage.rules`): each external
   target's backend rule as declared at registration (pattern-only for CUTLASS, cuBLAS,
   cuDNN; TVM's default for a backend that declares none; ``combine`` forces arbitrary
   fusion on the backends it names), and the rule of each native target
   (:func:`~partita.collage.rules.native_rule`; by default only :func:`main_target`,
   since native groups stay in the caller). On a device, ops the native fuser cannot put
   in a kernel get host candidates, charged their device-host copies. Existing
   ``byoc.partition`` ops are fixed nodes costed through their body; other non-``nn``
   ops (calls...) are fixed nodes of cost 0.
3. ``search`` picks the cheapest cover; an op no candidate covers is a located error.
   Then MaxCoalesce (:mod:`partita.collage.coalesce`) merges adjacent chosen groups of
   one target when the target's rule allows it and the merge is cheaper. The eager
   baseline is not coalesced, so the Collage total never exceeds it.
4. Chosen BYOC candidates become ``byoc.partition`` regions (``byoc.compiler``,
   ``byoc.primitive``, ``byoc.inline``, and ``byoc.composite`` for a single pattern
   match), then are outlined with structural deduplication, so equal partitions share
   one function named ``collage_<backend>_<k>``. Native groups stay in the caller (TVM's
   Collage leaves them to native fusion); their placement is only in the report.

The report (:class:`CollageReport`) lists each chosen group with its ops, target and
estimated cost, the total, and (``baseline=True``) the eager partitioner's total on the
same functions costed with the same estimator (see :func:`eager_total`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr, UnitAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Block, Operation

from partita.analysis.global_symbols import (
    FreshSymbolNames,
    StructuralDedupCache,
)
from partita.backends import resolve_backends
from partita.collage.coalesce import max_coalesce
from partita.collage.cost import CostEstimator, device_spec, host_copy_time
from partita.collage.graph import DataflowGraph
from partita.collage.ir_graph import graph_from_block, graph_from_ops
from partita.collage.rules import (
    HOST_LABEL,
    PartitionRule,
    RuleContext,
    arbitrary_fusion_rule,
    backend_rule,
    native_rule,
)
from partita.collage.search import MAX_EXACT_STATES, Candidate, PartitionError, Plan, search
from partita.dialects import make_context
from partita.dialects.byoc import COMPILER, COMPOSITE, INLINE, PRIMITIVE, PartitionOp
from partita.ir import PartitaError, op_error
from partita.runtime.cuda import parse_arch
from partita.target import CompilationConfig, TargetError, as_target, split_target_list
from partita.transforms.backend_phases import run_phase
from partita.transforms.outline_compiler_functions import outline_partitions
from partita.transforms.partition_eager import PartitionEager
from partita.transforms.partition_utils import create_partition

__all__ = [
    "CollageReport",
    "FunctionReport",
    "PlacedGroup",
    "collage_partition",
    "eager_total",
    "function_candidates",
    "main_target",
    "parse_config",
    "partition_function",
    "partition_rules",
]

FIXED = "collage.fixed"
"""Label of a node Collage does not place (an existing partition, a call...)."""


# -------------------------------------------------------------------------- report
@dataclass
class PlacedGroup:
    """One chosen candidate: ``kind`` is ``byoc`` (a partition), ``native`` (stays in
    the caller, runs on ``target``) or ``fixed`` (was already placed)."""

    kind: str
    target: str
    label: str
    ops: tuple[str, ...]
    cost: float
    nodes: tuple[int, ...] = ()
    symbol: str | None = None
    """The function a ``byoc`` partition was outlined to."""

    def describe(self) -> str:
        where = f" @{self.symbol}" if self.symbol else ""
        return f"{self.kind} {self.target}{where} [{self.label}] cost={self.cost:.6g}s ops={', '.join(self.ops)}"


@dataclass
class FunctionReport:
    name: str
    groups: list[PlacedGroup]
    total: float
    candidates: int
    eager_total: float | None = None
    exact: bool = True
    """Whether the search's cover is the least-cost one (else its beam search's: a graph
    whose covered sets passed ``MAX_EXACT_STATES``)."""


@dataclass
class CollageReport:
    """What Collage chose, per function, with estimated costs (seconds)."""

    functions: list[FunctionReport] = field(default_factory=list)
    estimator: str = ""
    targets: tuple[str, ...] = ()

    @property
    def total(self) -> float:
        return sum(f.total for f in self.functions)

    @property
    def eager_total(self) -> float | None:
        totals = [f.eager_total for f in self.functions]
        return None if any(t is None for t in totals) else sum(totals)  # type: ignore[misc]

    @property
    def partitions(self) -> list[PlacedGroup]:
        return [g for f in self.functions for g in f.groups if g.kind == "byoc"]

    @property
    def native(self) -> list[PlacedGroup]:
        return [g for f in self.functions for g in f.groups if g.kind == "native"]

    def format(self) -> str:
        lines = [f"collage: targets={','.join(self.targets)} estimator={self.estimator}"]
        for f in self.functions:
            bounded = "" if f.exact else f" (beam search: more than {MAX_EXACT_STATES} covered sets)"
            lines.append(f"collage: @{f.name}: {f.candidates} candidates, {len(f.groups)} groups{bounded}")
            for g in f.groups:
                lines.append(f"collage:   {g.describe()}")
            eager = "n/a" if f.eager_total is None else f"{f.eager_total:.6g}s"
            lines.append(f"collage: @{f.name}: total={f.total:.6g}s eager={eager}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- config
def parse_config(targets: CompilationConfig | str | Sequence[str],
                 fallback_device: str | None = None) -> CompilationConfig:
    """A compilation config from a target list. The order is free (Collage searches):
    primary targets are moved before the external codegens of their device."""
    if isinstance(targets, CompilationConfig):
        return targets
    try:
        pieces = split_target_list(targets if isinstance(targets, str) else list(targets))
        parsed = [as_target(p) for p in pieces]
        ordered = [t for t in parsed if not t.is_external_codegen] + [t for t in parsed if t.is_external_codegen]
        return CompilationConfig(ordered, fallback_device)
    except TargetError as err:
        raise PartitaError(f"collage-partition: {err}") from None


NativeOption = str | Sequence[str] | None


def is_device(config: CompilationConfig) -> bool:
    """Whether the ops left in the caller run on a device (so host placements cost copies)."""
    main = config.find_target_for_kind(main_target(config))
    return main is not None and main.device_type != config.host_target.device_type


def device_sm(config: CompilationConfig) -> int:
    """The compute capability the config compiles for (``90`` from ``cuda -arch=sm_90a``,
    else the cutlass target's ``sm``): pattern rows that need a newer device are not
    candidates. 0 when neither names one (``native``, no cuda target): every row is."""
    for kind, option in (("cuda", "arch"), ("cutlass", "sm")):
        target = config.find_target_for_kind(kind)
        value = str(target.options.get(option, "")) if target is not None else ""
        try:
            return parse_arch(value)[0]
        except ValueError:
            continue
    return 0


def main_target(config: CompilationConfig) -> str:
    """Where the ops left in the caller run: the default device's primary target, or the
    host when that device has only external codegens (``"cudnn,llvm"``)."""
    primary = config.default_primary_target
    return config.host_target.kind_name if primary.is_external_codegen else primary.kind_name


def _split_targets(config: CompilationConfig, native: NativeOption = None) -> tuple[list[str], list[str]]:
    """External targets of the config, and the native targets ops may be placed on:
    by default (``None``/``"auto"``) only :func:`main_target` -- native groups stay in the
    caller, so they run where it runs; offering ``llvm`` to ops of a function running on
    ``cuda`` would cost a placement that never happens. ``"none"``/``()``: none (every
    op must go to a backend); or an explicit list of non-external kinds."""
    external = [t.kind_name for t in config.external_targets]
    if external:
        resolve_backends(external)  # an external target without a registered backend: error
    if native is None or native == "auto":
        return external, [main_target(config)]
    if native == "none":
        return external, []
    names = [n.strip() for n in (native.split(",") if isinstance(native, str) else native) if n.strip()]
    for n in names:
        if n == "none" or n == "auto" or config.find_target_for_kind(n) is None or n in external:
            raise PartitaError(
                f"collage-partition: native target '{n}' is not a non-external target of the config ({config})"
            )
    return external, names


# ---------------------------------------------------------------------------- costs
class _PlanCost:
    """The estimator, plus the fixed cost of nodes Collage does not place, plus (when the
    caller runs on a device) the copies a host placement costs."""

    def __init__(self, estimator: CostEstimator, on_device: bool = False):
        self.estimator = estimator
        self.on_device = on_device
        self.device = device_spec(estimator)

    def __call__(self, graph: DataflowGraph, cand: Candidate) -> float:
        if cand.label == FIXED:
            return float(cand.data)
        try:
            copies = host_copy_time(graph, cand, self.device) if self.on_device and cand.label == HOST_LABEL else 0.0
            return float(self.estimator.estimate(graph, cand)) + copies
        except (ValueError, KeyError, RuntimeError) as err:
            msg = err.args[0] if err.args else str(err)
            raise PartitaError(f"collage-partition: cannot cost {cand.label} on '{cand.target}': {msg}") from None


def _fixed_cost(op: Operation, estimator: CostEstimator) -> float:
    """An existing partition costs its body as one candidate of its compiler."""
    if isinstance(op, PartitionOp) and op.body.blocks:
        built = graph_from_block(op.body.block)
        if not len(built.graph):
            return 0.0
        compiler = op.compiler or "llvm"
        composite = op.attributes.get(COMPOSITE)
        label = composite.data if isinstance(composite, StringAttr) else f"{compiler}.combined"
        cand = Candidate(frozenset(range(len(built.graph))), compiler, label)
        return _PlanCost(estimator)(built.graph, cand)
    return 0.0


# ------------------------------------------------------------------------ candidates
def partition_rules(
    external: Sequence[str],
    native: Sequence[str],
    max_depth: int,
    combine: Iterable[str] | None = None,
) -> dict[str, PartitionRule]:
    """The rule of each target: each backend's declared rule (``combine`` names backends
    to fuse arbitrarily instead), and each native target's own rule."""
    forced = set(combine or ())
    rules: dict[str, PartitionRule] = {}
    for backend in resolve_backends(external) if external else []:
        if backend.name in forced:
            rules[backend.name] = arbitrary_fusion_rule(backend.name, max_depth)
        else:
            rules[backend.name] = backend_rule(backend, max_depth)
    for t in native:
        rules[t] = native_rule(t, max_depth)
    return rules


def _candidates(
    graph: DataflowGraph,
    ops: Sequence[Operation],
    block: Block,
    external: Sequence[str],
    native: Sequence[str],
    estimator: CostEstimator,
    max_depth: int,
    combine: Iterable[str] | None,
    sm: int = 0,
) -> list[Candidate]:
    cands: list[Candidate] = []
    # Nodes Collage leaves where they are.
    for i, op in enumerate(ops):
        if not op.name.startswith("nn."):
            cands.append(Candidate(frozenset((i,)), "fixed", FIXED, data=_fixed_cost(op, estimator)))
    ctx = RuleContext(graph, tuple(ops), block, sm)
    for rule in partition_rules(external, native, max_depth, combine).values():
        cands.extend(rule.candidates(ctx))
    return cands


def function_candidates(
    function: FuncOp,
    config: CompilationConfig | str | Sequence[str],
    estimator: CostEstimator,
    max_depth: int = 3,
    combine: Iterable[str] | None = None,
    native: NativeOption = None,
) -> tuple[DataflowGraph, tuple[Operation, ...], list[Candidate]]:
    """The graph of ``function``'s body, its ops (one per node) and every candidate
    Collage searches over (for tests and tools; ``estimator`` costs fixed partitions)."""
    config = parse_config(config)
    external, native = _split_targets(config, native)
    block = function.body.block
    built = graph_from_ops(block.ops)
    cands = _candidates(built.graph, built.ops, block, external, native, estimator, max_depth, combine,
                        device_sm(config))
    return built.graph, built.ops, cands


def _uncovered_error(graph: DataflowGraph, ops: Sequence[Operation], cands: Sequence[Candidate],
                     targets: Sequence[str]) -> None:
    covered = 0
    for c in cands:
        covered |= c.mask
    missing = graph.full_mask & ~covered
    if missing:
        v = (missing & -missing).bit_length() - 1
        raise op_error(
            ops[v],
            f"cannot be placed by collage-partition: no candidate covers it "
            f"(no pattern of {', '.join(targets) or '(no targets)'} matches it and no native target runs it)",
        )


# --------------------------------------------------------------------------- rewrite
def _partition_attributes(cand: Candidate) -> dict[str, Attribute]:
    attrs: dict[str, Attribute] = {
        COMPILER: StringAttr(cand.target),
        PRIMITIVE: UnitAttr(),
        INLINE: UnitAttr(),
    }
    if not cand.primitive:
        del attrs[PRIMITIVE]
    if cand.composite is not None:
        attrs[COMPOSITE] = StringAttr(cand.composite)
    return attrs


def _group(kind: str, cand: Candidate, ops: Sequence[Operation], cost: float) -> PlacedGroup:
    nodes = tuple(sorted(cand.nodes))
    return PlacedGroup(kind, cand.target, cand.label, tuple(ops[v].name for v in nodes), cost, nodes)


def partition_function(
    function: FuncOp,
    external: Sequence[str],
    native: Sequence[str],
    estimator: CostEstimator,
    max_depth: int = 3,
    combine: Iterable[str] | None = None,
    on_device: bool = False,
    coalesce: bool = True,
    sm: int = 0,
) -> tuple[FunctionReport, dict[PartitionOp, PlacedGroup]]:
    """Search and rewrite one function body (no outlining) for a device of compute
    capability ``sm`` (0: any); returns its report and the partitions created, with their
    report entries."""
    block = function.body.block
    built = graph_from_ops(block.ops)
    graph, ops = built.graph, built.ops
    cands = _candidates(graph, ops, block, external, native, estimator, max_depth, combine, sm)
    _uncovered_error(graph, ops, cands, [*external, *native])
    try:
        cost = _PlanCost(estimator, on_device)
        plan: Plan = search(graph, cands, cost)
    except PartitionError as err:
        raise op_error(function, f"collage-partition: {err}") from None
    exact = plan.exact
    if coalesce:
        configs = {t: r.coalesce_config() for t, r in partition_rules(external, native, max_depth, combine).items()}
        natives = set(native)
        plan = max_coalesce(graph, plan, configs, cost,
                            label=lambda t: f"{t}.fused" if t in natives else f"{t}.combined")
    groups: list[PlacedGroup] = []
    created: dict[PartitionOp, PlacedGroup] = {}
    external_set = set(external)
    for cand, cost in zip(plan.candidates, plan.costs):
        if cand.label == FIXED:
            groups.append(_group("fixed", cand, ops, cost))
        elif cand.target in external_set:
            group = _group("byoc", cand, ops, cost)
            groups.append(group)
            members = [ops[v] for v in sorted(cand.nodes)]  # block order
            created[create_partition(members, _partition_attributes(cand))] = group
        else:
            groups.append(_group("native", cand, ops, cost))
    report = FunctionReport(function.sym_name.data, groups, plan.total_cost, len(cands), exact=exact)
    return report, created


# ----------------------------------------------------------------- eager baseline
def eager_total(
    module: ModuleOp,
    external: Sequence[str],
    native: Sequence[str],
    estimator: CostEstimator,
    max_depth: int = 3,
    ctx: Context | None = None,
    on_device: bool = False,
    sm: int = 0,
) -> dict[str, float]:
    """The eager partitioner's estimated total per function, costed like Collage.

    ``partition-eager`` runs on a clone; each partition it makes is a fixed node costed
    as one candidate of its backend (its body, the composite name as label: the same
    key as the Collage candidate of that match), and the remaining ops are covered by
    the same native fused groups Collage uses, at least cost. So the two totals differ
    only in which BYOC kernels were picked, and Collage's is never higher when its
    candidates include eager's (eager's partitions are pattern matches).
    """
    clone = module.clone()
    if ctx is None:
        ctx = make_context()
    if external:
        PartitionEager(backends=tuple(external), sm=sm).apply(ctx, clone)
    totals: dict[str, float] = {}
    cost = _PlanCost(estimator, on_device)
    for op in clone.ops:
        if not isinstance(op, FuncOp) or not op.body.blocks or COMPILER in op.attributes:
            continue
        built = graph_from_ops(op.body.block.ops)
        graph, ops = built.graph, built.ops
        cands = [
            Candidate(frozenset((i,)), "fixed", FIXED, data=_fixed_cost(o, estimator))
            for i, o in enumerate(ops)
            if not o.name.startswith("nn.")
        ]
        rule_ctx = RuleContext(graph, tuple(ops), op.body.block, sm)
        for rule in partition_rules((), native, max_depth).values():
            cands += rule.candidates(rule_ctx)
        try:
            _uncovered_error(graph, ops, cands, list(native))
            totals[op.sym_name.data] = search(graph, cands, cost).total_cost
        except (PartitaError, PartitionError):
            totals[op.sym_name.data] = float("inf")  # eager leaves ops no target can run
    return totals


# --------------------------------------------------------------------------- driver
def collage_partition(
    module: ModuleOp,
    config: CompilationConfig | str | Sequence[str],
    estimator: CostEstimator,
    max_depth: int = 3,
    *,
    combine: Iterable[str] | None = None,
    native: NativeOption = None,
    baseline: bool = True,
    outline: bool = True,
    coalesce: bool = True,
    ctx: Context | None = None,
) -> CollageReport:
    """Collage-partition ``module`` in place for the targets of ``config``; see the module
    docstring (``coalesce=False``: no MaxCoalesce, the plan is exactly the search's).
    Returns the report. Raises ``PartitaError``."""
    if max_depth < 1:
        raise PartitaError(f"collage-partition: max-depth must be >= 1, got {max_depth}")
    config = parse_config(config)
    external, native_targets = _split_targets(config, native)
    combine = tuple(combine) if combine is not None else None
    on_device = is_device(config)
    report = CollageReport(estimator=getattr(estimator, "name", type(estimator).__name__),
                           targets=tuple(t.kind_name for t in config.primitive_targets))
    if ctx is None:
        ctx = make_context()
    if external:
        run_phase(module, "before_partitioning", external, ctx)
    sm = device_sm(config)
    eager = eager_total(module, external, native_targets, estimator, max_depth, ctx, on_device, sm) if baseline else {}
    created: dict[PartitionOp, PlacedGroup] = {}
    for op in list(module.ops):
        if not isinstance(op, FuncOp) or not op.body.blocks or COMPILER in op.attributes:
            continue
        fn_report, made = partition_function(op, external, native_targets, estimator, max_depth, combine, on_device,
                                             coalesce, sm)
        fn_report.eager_total = eager.get(fn_report.name)
        report.functions.append(fn_report)
        created.update(made)
    if outline:
        cache = StructuralDedupCache(module, names=FreshSymbolNames(template="collage_{compiler}_{k}"))
        for partition, name in outline_partitions(module, cache).items():
            if partition in created:
                created[partition].symbol = name
    if external:
        run_phase(module, "after_partitioning", external, ctx)
    return report

