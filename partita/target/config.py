"""The compilation config: the set of targets one compilation may use.

Follows TVM's ``CompilationConfig`` rules, so that a list of targets has one meaning
for every pass:

* **host** (rules A-C): the host of the first target that has one; else the first
  host-capable (cpu) target in the list; else a default ``Target("llvm")``.
* **primitive targets**: the listed targets, each given that host, the listed target
  that *is* the host included (``llvm -host=llvm``, as TVM does).  If the host is not
  listed, ``primary_target(cpu)`` still returns it, since host code can always run
  there (TVM would fail instead).
* **ordering**: kind names are unique; per device type the first listed target is the
  primary (non-external) one and every later one must be an external codegen for it.
  Unlike TVM, a device may have *one* external codegen and no primary target
  (``["cutlass"]``): it then acts as that device's primary target, so
  ``primary_target(cuda)`` is ``cutlass``.  Several external codegens without the
  primary target (``["cutlass", "cublas"]``) are rejected, as TVM rejects them, with a
  message naming the target to add.  A native target after an external one is an error.
* **default device** (rules D-F): ``fallback_device`` if given; else the only device
  type among the targets other than the host; else cpu.  **This differs from TVM**,
  which counts the cpu target too, so that ``["cuda", "llvm"]`` defaults to cpu there
  (TVM's ``RuleA_RuleF_ReplaceHost``) and to cuda here: unannotated ops go to the GPU,
  which is what a user listing a GPU target wants.  ``fallback_device="cpu"`` (exposed
  by ``partita.compile``, ``partita-run --fallback-device`` and every pass taking
  ``targets=``) gives TVM's behaviour.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Sequence
from typing import Any

from partita.target.kind import (
    DeviceType,
    TargetError,
    get_target_kind,
    is_registered,
)
from partita.target.target import Target, as_target

__all__ = ["CompilationConfig", "split_target_list"]

_LIST_STR = list[str]


def _split_on_commas(text: str) -> list[str]:
    """Split on commas that are outside shell quotes."""
    pieces: list[str] = []
    current: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        ch = text[i]
        if quote is None and ch == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if quote is None and ch in "'\"":
            quote = ch
        elif quote == ch:
            quote = None
        elif quote == '"' and ch == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if ch == "," and quote is None:
            pieces.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    pieces.append("".join(current))
    return pieces


def _ends_with_list_option(piece: str) -> bool:
    """True if ``piece`` ends with ``-opt=...`` where ``opt`` is a ``list[str]`` option."""
    try:
        tokens = shlex.split(piece)
    except ValueError:
        return False
    if len(tokens) < 2 or not is_registered(tokens[0]):
        return False
    last = tokens[-1]
    if not last.startswith("-") or "=" not in last:
        return False
    key = last.lstrip("-").partition("=")[0]
    option = get_target_kind(tokens[0]).options.get(key)
    return option is not None and option.type == _LIST_STR


def split_target_list(spec: str | Sequence[str]) -> list[str]:
    """Split ``"cuda -arch=sm_90,cutlass,llvm"`` into one string per target.

    Also accepts a sequence of strings (a pass option containing commas may arrive
    already split).  A comma inside quotes does not start a new target, nor does one
    continuing an unquoted ``list[str]`` option value: in ``"x -libs=a,b -o=1,llvm"``
    the piece ``b -o=1`` does not start with a registered kind name, so it is joined
    back.  (A list element that is itself a kind name must be quoted: ``-libs='a,cublas'``.)
    """
    text = spec if isinstance(spec, str) else ",".join(spec)
    result: list[str] = []
    for raw in _split_on_commas(text):
        piece = raw.strip()
        if (
            result
            and piece
            and not is_registered(piece.split(None, 1)[0])
            and _ends_with_list_option(result[-1])
        ):
            result[-1] = f"{result[-1]},{piece}"
            continue
        if not piece:
            raise TargetError(f"empty target in target list {text!r}")
        result.append(piece)
    return result


def _primary_kind_name(device: DeviceType) -> str:
    """The native kind of a device type (``cuda`` for cuda), for error messages."""
    if is_registered(device.value) and not get_target_kind(device.value).is_external_codegen:
        return device.value
    return "llvm" if device is DeviceType.CPU else f"<a {device.value} target>"


class CompilationConfig:
    """The targets of one compilation, with TVM's host / ordering / default-device rules.

    ``CompilationConfig(targets, fallback_device=None)``; see the module docstring for
    the rules.  Iterating yields the primitive targets in the given order.
    """

    def __init__(
        self,
        targets: Sequence[Target | str] | str,
        fallback_device: str | DeviceType | None = None,
    ) -> None:
        if isinstance(targets, str):
            targets = split_target_list(targets)
        raw = [as_target(t) for t in targets]
        if not raw:
            raise TargetError("a compilation config needs at least one target")
        seen: set[str] = set()
        for t in raw:
            if t.kind_name in seen:
                raise TargetError(f"duplicate target kind '{t.kind_name}' in the target list")
            seen.add(t.kind_name)

        # Host: rule A (first explicit host), B (first host-capable target), C (llvm).
        host = next((t.host for t in raw if t.host is not None), None)
        if host is None:
            host = next((t for t in raw if t.kind.host_capable), None)
        if host is None:
            host = Target("llvm")
        self._host: Target = host

        self._targets: tuple[Target, ...] = tuple(
            t.with_host(host) for t in raw
        )
        self._check_order()

        # Default device: rule D (fallback), E (single non-host device type), F (cpu).
        if fallback_device is not None:
            try:
                device = DeviceType.parse(fallback_device)
            except TargetError:
                valid = ", ".join(d.value for d in DeviceType)
                raise TargetError(
                    f"invalid fallback device {fallback_device!r}; valid device types: {valid}"
                ) from None
        else:
            devices = {t.device_type for t in self._targets if not t.same_as(host)}
            device = devices.pop() if len(devices) == 1 else DeviceType.CPU
        self._default_device: DeviceType = device
        self._default_primary: Target = self.primary_target(device)

    @classmethod
    def parse(
        cls,
        spec: str | Sequence[str | Target],
        fallback_device: str | DeviceType | None = None,
    ) -> CompilationConfig:
        """Build a config from ``"cuda -arch=sm_90,cutlass,llvm"`` or a sequence of
        strings / targets (strings may themselves hold comma-separated targets)."""
        if isinstance(spec, str):
            return cls(split_target_list(spec), fallback_device)
        items: list[Target | str] = []
        run: list[str] = []
        for item in spec:
            if isinstance(item, str):
                run.append(item)
                continue
            if run:
                items += split_target_list(run)
                run = []
            items.append(item)
        if run:
            items += split_target_list(run)
        return cls(items, fallback_device)

    def _check_order(self) -> None:
        first_for: dict[DeviceType, Target] = {}
        externals: dict[DeviceType, list[str]] = {}
        for t in self._targets:
            if t.is_external_codegen:
                externals.setdefault(t.device_type, []).append(t.kind_name)
        for t in self._targets:
            first = first_for.get(t.device_type)
            if first is None:
                first_for[t.device_type] = t
            elif not t.is_external_codegen:
                dev = t.device_type.value
                if first.is_external_codegen:
                    raise TargetError(
                        f"external target '{first.kind_name}' is listed before the primary "
                        f"target '{t.kind_name}' of device type '{dev}'; list "
                        f"'{t.kind_name}' first"
                    )
                raise TargetError(
                    f"second primary target '{t.kind_name}' for device type '{dev}' "
                    f"(primary target is '{first.kind_name}'); only external codegens may "
                    "follow a device's primary target"
                )
        for device, names in externals.items():
            if len(names) > 1 and first_for[device].is_external_codegen:
                raise TargetError(
                    f"device type '{device.value}' has only external targets ({', '.join(repr(n) for n in names)}): "
                    f"add its primary target '{_primary_kind_name(device)}' before them "
                    f"(e.g. '{_primary_kind_name(device)},{','.join(names)}')"
                )

    # -- look-ups --------------------------------------------------------------------

    @property
    def host_target(self) -> Target:
        return self._host

    @property
    def primitive_targets(self) -> tuple[Target, ...]:
        """The listed targets in order, each with the config's host (see module doc)."""
        return self._targets

    @property
    def external_targets(self) -> tuple[Target, ...]:
        return tuple(t for t in self._targets if t.is_external_codegen)

    @property
    def device_types(self) -> tuple[DeviceType, ...]:
        """The device types of the primitive targets, in order of first appearance."""
        return tuple(dict.fromkeys(t.device_type for t in self._targets))

    @property
    def default_device(self) -> DeviceType:
        return self._default_device

    @property
    def default_primary_target(self) -> Target:
        return self._default_primary

    def targets_for_device(self, device_type: DeviceType | str) -> tuple[Target, ...]:
        """The primitive targets of one device type: primary first, then externals."""
        device = DeviceType.parse(device_type)
        return tuple(t for t in self._targets if t.device_type is device)

    def primary_target(self, device_type: DeviceType | str) -> Target:
        """The first target listed for ``device_type`` (the host for cpu if none)."""
        device = DeviceType.parse(device_type)
        for t in self._targets:
            if t.device_type is device:
                return t
        if self._host.device_type is device:
            return self._host
        raise TargetError(
            f"no target for device type '{device.value}' in the compilation config "
            f"({self}); available device types: "
            + ", ".join(d.value for d in self.device_types)
        )

    def find_target_for_kind(self, name: str) -> Target | None:
        for t in self._targets:
            if t.kind_name == name:
                return t
        return self._host if self._host.kind_name == name else None

    def target_for_kind(self, name: str) -> Target:
        """The config's target (with host) of kind ``name``; the host counts too."""
        t = self.find_target_for_kind(name)
        if t is None:
            raise TargetError(
                f"no target of kind '{name}' in the compilation config ({self}); "
                f"host target: {self._host}"
            )
        return t

    def canonical(self, target: Target | str) -> Target:
        """The config's own version (with host) of ``target``.

        ``target`` must match a config target (or the host) in kind and explicitly set
        options; a pass uses this to reject explicitly chosen targets the config lacks.
        """
        t = as_target(target)
        mine = self.find_target_for_kind(t.kind_name)
        if mine is None or not mine.same_as(t):
            where = f"the config has '{mine}'" if mine is not None else f"config: {self}"
            raise TargetError(f"target '{t}' is not in the compilation config ({where})")
        return mine

    def __contains__(self, item: object) -> bool:
        """Kind and explicit options equal to a primitive target or the host (hosts
        are ignored)."""
        if isinstance(item, str):
            try:
                item = Target(item)
            except TargetError:
                return False
        if not isinstance(item, Target):
            return False
        return any(t.same_as(item) for t in self._targets) or self._host.same_as(item)

    def __iter__(self) -> Iterator[Target]:
        return iter(self._targets)

    def __len__(self) -> int:
        return len(self._targets)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CompilationConfig):
            return NotImplemented
        return (
            self._targets == other._targets
            and self._host == other._host
            and self._default_device is other._default_device
        )

    def __hash__(self) -> int:
        return hash((self._targets, self._host, self._default_device))

    def __str__(self) -> str:
        """The comma-separated target list (hosts omitted), parseable by ``parse``."""
        return ",".join(str(t) for t in self._targets)

    def __repr__(self) -> str:
        return (
            f"CompilationConfig({str(self)!r}, host={str(self._host)!r}, "
            f"default_device={self._default_device.value!r})"
        )

    def describe(self) -> dict[str, Any]:
        """A plain summary, handy in diagnostics and tests."""
        return {
            "host": str(self._host),
            "targets": [str(t) for t in self._targets],
            "default_device": self._default_device.value,
            "default_primary_target": str(self._default_primary),
        }
