"""Target kinds: the registry of code generators a program can be partitioned onto.

A *target kind* (TVM's ``TargetKind``) names a code generator, the device type it
emits code for, the options it understands (with their types and defaults) and a few
capability flags the partitioner and the compilation config rely on.

This module is pure Python on purpose: the ``byoc`` dialect imports it to verify
``byoc.compiler`` names, so it must not import any xDSL dialect.
"""

from __future__ import annotations

import enum
import re
import threading
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from partita.target.target import Target

__all__ = [
    "DeviceType",
    "OptionType",
    "TargetError",
    "TargetKind",
    "TargetOption",
    "get_target_kind",
    "is_external_codegen_for",
    "is_registered",
    "list_target_kinds",
    "register_target_kind",
]


class TargetError(ValueError):
    """A target, target kind or compilation config is invalid."""


class DeviceType(enum.Enum):
    """Device types, named as in TVM's ``DLDeviceType`` (lower-case names)."""

    CPU = "cpu"
    CUDA = "cuda"
    METAL = "metal"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: DeviceType | str) -> DeviceType:
        """Accept a ``DeviceType`` or its name (case-insensitive); raise ``TargetError`` otherwise."""
        if isinstance(value, DeviceType):
            return value
        if isinstance(value, str):
            try:
                return cls(value.strip().lower())
            except ValueError:
                pass
        valid = ", ".join(d.value for d in cls)
        raise TargetError(f"invalid device type {value!r}; valid device types: {valid}")


#: The option value types a target kind may declare.  ``list[str]`` values are stored
#: as tuples inside a (hashable) ``Target``.
OptionType = type | types.GenericAlias

_LIST_STR = list[str]
_OPTION_TYPES: tuple[Any, ...] = (int, str, bool, float, _LIST_STR)
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KIND_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")


def _normalize_option_type(ty: Any) -> OptionType:
    if ty is list or ty == _LIST_STR:
        return _LIST_STR
    if ty in _OPTION_TYPES:
        return ty
    raise TargetError(
        f"unsupported target option type {ty!r}; supported: int, str, bool, float, list[str]"
    )


def type_name(ty: OptionType) -> str:
    """The printed name of an option type (``int``, ``list[str]``, ...)."""
    return "list[str]" if ty == _LIST_STR else ty.__name__  # type: ignore[union-attr]


def check_option_value(kind: str, name: str, ty: OptionType, value: Any) -> Any:
    """Check a typed (not textual) option value and return its canonical form.

    Canonical forms keep ``Target`` hashable and typed: ``list[str]`` becomes a tuple,
    an ``int`` given for a ``float`` option becomes a float.  ``bool`` is never accepted
    for ``int``/``float`` (it is an ``int`` subclass in Python, but not a number here).
    """

    def bad() -> TargetError:
        return TargetError(
            f"option '{name}' of target kind '{kind}' expects {type_name(ty)}, "
            f"got {type(value).__name__} {value!r}"
        )

    if ty is bool:
        if not isinstance(value, bool):
            raise bad()
        return value
    if ty is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad()
        return int(value)
    if ty is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad()
        value = float(value)
        if value != value:
            raise TargetError(f"option '{name}' of target kind '{kind}' must not be NaN")
        return value
    if ty is str:
        if not isinstance(value, str):
            raise bad()
        return value
    # list[str]
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise bad()
    items = tuple(value)
    for item in items:
        if not isinstance(item, str):
            raise bad()
        if item == "" or "," in item:
            # Such elements cannot be written back in the comma-separated text form.
            raise TargetError(
                f"option '{name}' of target kind '{kind}': list elements must be non-empty "
                f"and must not contain ',', got {item!r}"
            )
    return items


def parse_option_text(kind: str, name: str, ty: OptionType, text: str) -> Any:
    """Convert the textual value of ``-name=text`` to the option's type."""
    if ty is str:
        return text
    if ty is bool:
        low = text.strip().lower()
        if low in ("1", "true"):
            return True
        if low in ("0", "false"):
            return False
    elif ty is int:
        try:
            return int(text.strip(), 10)
        except ValueError:
            pass
    elif ty is float:
        try:
            return check_option_value(kind, name, ty, float(text.strip()))
        except ValueError:
            pass
    else:  # list[str]
        if text == "":
            return ()
        return check_option_value(kind, name, ty, text.split(","))
    expected = "true/false/1/0" if ty is bool else type_name(ty)
    raise TargetError(
        f"option '{name}' of target kind '{kind}' expects {expected}, got {text!r}"
    )


@dataclass(frozen=True)
class TargetOption:
    """The schema of one target option: its value type and default (``None``: unset)."""

    type: OptionType
    default: Any = None


@dataclass(eq=False)
class TargetKind:
    """A code generator: name, device type, option schema and capability flags.

    Kinds are registry singletons compared by identity.  ``is_external_codegen`` marks
    BYOC backends (CUTLASS, cuBLAS, ...) that compile partitions for a device whose
    primary code generator is another kind; ``host_capable`` kinds may serve as the
    host target; ``can_call_subroutines`` is False for code generators (Metal) whose
    kernels cannot call device subroutines, so the partitioner must inline them.
    """

    name: str
    device_type: DeviceType
    options: dict[str, TargetOption] = field(default_factory=dict)
    is_external_codegen: bool = False
    host_capable: bool = False
    can_call_subroutines: bool = True

    def add_option(self, name: str, type: Any, default: Any = None) -> TargetOption:
        """Add an option to this kind.  Adding the same option twice is an error."""
        with _LOCK:
            if not isinstance(name, str) or not _NAME_RE.match(name):
                raise TargetError(f"invalid option name {name!r} for target kind '{self.name}'")
            if name in self.options:
                raise TargetError(
                    f"option '{name}' is already registered for target kind '{self.name}'"
                )
            ty = _normalize_option_type(type)
            if default is not None:
                default = check_option_value(self.name, name, ty, default)
            option = TargetOption(ty, default)
            self.options[name] = option
            return option

    def add_options(self, options: Mapping[str, Any]) -> None:
        """Adds each option, given as a ``TargetOption``, a ``(type, default)`` pair or a
        bare type (default unset)."""
        for name, spec in options.items():
            if isinstance(spec, TargetOption):
                self.add_option(name, spec.type, spec.default)
            elif isinstance(spec, tuple):
                self.add_option(name, *spec)
            else:
                self.add_option(name, spec)

    def option(self, name: str) -> TargetOption:
        """The schema of option ``name``; error naming the valid options if unknown."""
        try:
            return self.options[name]
        except KeyError:
            valid = ", ".join(sorted(self.options)) or "(none)"
            raise TargetError(
                f"unknown option '{name}' for target kind '{self.name}'; valid options: {valid}"
            ) from None

    def defaults(self) -> dict[str, Any]:
        """The options that have a default value, with that value."""
        return {n: o.default for n, o in self.options.items() if o.default is not None}

    def __repr__(self) -> str:
        return f"TargetKind({self.name!r}, {self.device_type.value})"


_LOCK = threading.RLock()
_REGISTRY: dict[str, TargetKind] = {}


def register_target_kind(
    name: str,
    device_type: DeviceType | str,
    options: Mapping[str, TargetOption | Any] | None = None,
    *,
    is_external_codegen: bool = False,
    host_capable: bool = False,
    can_call_subroutines: bool = True,
) -> TargetKind:
    """Register and return a new target kind.  Registering a name twice is an error.

    ``options`` maps option names to a ``TargetOption``, a bare type (no default) or a
    ``(type, default)`` pair.
    """
    if not isinstance(name, str) or not _KIND_NAME_RE.match(name):
        raise TargetError(
            f"invalid target kind name {name!r}: must start with a letter or '_' and "
            "contain only letters, digits, '_' and '.'"
        )
    kind = TargetKind(
        name,
        DeviceType.parse(device_type),
        is_external_codegen=is_external_codegen,
        host_capable=host_capable,
        can_call_subroutines=can_call_subroutines,
    )
    kind.add_options(options or {})
    with _LOCK:
        if name in _REGISTRY:
            raise TargetError(f"target kind '{name}' is already registered")
        _REGISTRY[name] = kind
    return kind


def get_target_kind(name: str) -> TargetKind:
    """The registered kind ``name``; the error lists the known kinds."""
    with _LOCK:
        kind = _REGISTRY.get(name)
        if kind is None:
            known = ", ".join(sorted(_REGISTRY))
            raise TargetError(f"unknown target kind {name!r}; known kinds: {known}")
        return kind


def list_target_kinds() -> list[str]:
    """The names of all registered kinds, sorted."""
    with _LOCK:
        return sorted(_REGISTRY)


def is_registered(name: str) -> bool:
    with _LOCK:
        return name in _REGISTRY


def is_external_codegen_for(ext: Target, target: Target) -> bool:
    """True if ``ext`` is an external codegen that can take work from ``target``.

    As TVM's ``Target::IsExternalCodegenFor``: same device type, ``ext`` is an
    external codegen and ``target`` is not.
    """
    return (
        ext.kind.device_type is target.kind.device_type
        and ext.kind.is_external_codegen
        and not target.kind.is_external_codegen
    )


def _register_builtin_kinds() -> None:
    register_target_kind(
        "llvm",
        DeviceType.CPU,
        {"mcpu": str, "mtriple": str, "num_cores": int},
        host_capable=True,
    )
    # TVM's C source backend can also compile host code.
    register_target_kind("c", DeviceType.CPU, {"mcpu": str}, host_capable=True)
    register_target_kind(
        "cuda",
        DeviceType.CUDA,
        {
            "arch": (str, "sm_80"),
            "max_threads": (int, 1024),
            "max_shared_memory_per_block": (int, 49152),
        },
    )
    register_target_kind(
        "metal", DeviceType.METAL, {"max_threads": (int, 256)}, can_call_subroutines=False
    )
    register_target_kind(
        "cutlass",
        DeviceType.CUDA,
        {
            # TVM's cutlass kind, plus use_tf32; every option reaches cutlass-codegen
            # (partita.lowering.cutlass.options).
            "sm": (int, 80),
            "use_tf32": (bool, True),
            "use_3xtf32": (bool, False),
            "split_k_slices": (int, 1),
            "profile_all_alignments": (bool, False),
            "find_first_valid": (bool, True),
            "use_multiprocessing": (bool, False),
            "tmp_dir": (str, ""),
            "use_fast_math": (bool, False),
        },
        is_external_codegen=True,
    )
    register_target_kind("cublas", DeviceType.CUDA, is_external_codegen=True)
    register_target_kind("cudnn", DeviceType.CUDA, is_external_codegen=True)
    register_target_kind(
        "tensorrt",
        DeviceType.CUDA,
        {"max_workspace_size": (int, 1 << 30), "use_fp16": (bool, False)},
        is_external_codegen=True,
    )


_register_builtin_kinds()
