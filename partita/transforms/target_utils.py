"""Helpers shared by the target passes: pass options to a ``CompilationConfig``, and
reading a function's (or an op's) target.

A function's ``byoc.target`` attribute is the single source of truth for where it
runs; an op inside a ``byoc.on_target`` region runs on that region's target.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation

from partita.dialects.byoc import COMPILER, PRIMITIVE, TARGET, OnTargetOp, TargetAttr, kept_for_reference
from partita.ir import PartitaError, op_error
from partita.target import CompilationConfig, Target, TargetError, as_target, split_target_list

__all__ = [
    "TargetOption",
    "config_from_options",
    "effective_target",
    "func_compiler",
    "func_index",
    "func_target",
    "func_target_attr",
    "is_entry",
    "set_func_target",
    "target_of",
]

#: The type of a target-list pass option: a comma inside a value makes xDSL's option
#: parser hand over a tuple of strings, so both forms must be accepted.
TargetOption = str | tuple[str, ...] | None


def _option_text(value: str | Sequence[str]) -> str:
    return value if isinstance(value, str) else ",".join(value)


def config_from_options(
    pass_name: str,
    targets: str | Sequence[str] | None = None,
    target: str | Sequence[str] | None = None,
    host: str | Sequence[str] | None = None,
    fallback_device: str | None = None,
) -> tuple[CompilationConfig, Target]:
    """The compilation config and the default target named by a pass's options.

    ``targets`` is a comma-separated target list (``"cuda -arch=sm_90,cutlass,llvm"``);
    without it, ``target`` (and optionally ``host``) make a one-target config.  ``host``
    with ``targets`` becomes the explicit host of the first target (TVM's rule A).  The
    default target is ``target`` when given (it must be in the config), else the
    config's default primary target.  ``fallback_device`` is the config's default device
    type (TVM's rule D).  Bad options raise an unlocated ``PartitaError``.
    """
    try:
        if targets is not None:
            items: list[Target] = [as_target(t) for t in split_target_list(_option_text(targets))]
        elif target is not None:
            pieces = split_target_list(_option_text(target))
            if len(pieces) != 1:
                raise TargetError(
                    f"option 'target' names {len(pieces)} targets; use 'targets' for a list"
                )
            items = [as_target(pieces[0])]
        else:
            raise TargetError("needs a 'targets' list or a 'target' option")
        if host is not None:
            host_target = as_target(_option_text(host))
            if not items[0].same_as(host_target):
                items[0] = items[0].with_host(host_target)
        config = CompilationConfig(items, fallback_device or None)
        if target is not None:
            default = config.canonical(_option_text(target))
        else:
            default = config.default_primary_target
    except TargetError as err:
        raise PartitaError(f"{pass_name}: {err}") from None
    return config, default


def func_index(module: ModuleOp) -> dict[str, FuncOp]:
    """The module's top-level functions by name (built once per pass)."""
    return {op.sym_name.data: op for op in module.ops if isinstance(op, FuncOp)}


def is_entry(func: FuncOp) -> bool:
    """Public functions are entry points (host code); private ones are internal."""
    return func.sym_visibility is None or func.sym_visibility.data == "public"


def func_compiler(func: FuncOp) -> str | None:
    attr = func.attributes.get(COMPILER)
    data = getattr(attr, "data", None)
    return data if isinstance(data, str) else None


def lowers_on_target(func: FuncOp, kind: str) -> bool:
    """Whether the native codegen of ``kind`` lowers ``func``'s body: a function bound to a
    ``kind`` target, or a public entry without one; never a partition of an external
    codegen (``byoc.compiler``), an outlined kernel (``byoc.primitive``), a reference or a
    body the host runs (``kept_for_reference``)."""
    if not func.body.blocks or kept_for_reference(func) or any(a in func.attributes for a in (COMPILER, PRIMITIVE)):
        return False
    target = func_target_attr(func)
    return target.kind.data == kind if target is not None else is_entry(func)


def func_target_attr(func: FuncOp) -> TargetAttr | None:
    attr = func.attributes.get(TARGET)
    return attr if isinstance(attr, TargetAttr) else None


def target_of(attr: TargetAttr, op: Operation) -> Target:
    """``attr`` as a ``Target``; an invalid attribute is an error located at ``op``."""
    try:
        return attr.to_target()
    except TargetError as err:
        raise op_error(op, f"invalid target: {err}") from None


def func_target(func: FuncOp) -> Target | None:
    attr = func_target_attr(func)
    return target_of(attr, func) if attr is not None else None


def set_func_target(func: FuncOp, target: Target | TargetAttr) -> None:
    func.attributes[TARGET] = target if isinstance(target, TargetAttr) else TargetAttr.from_target(target)


def effective_target(op: Operation) -> Target | None:
    """Where ``op`` runs: the innermost enclosing ``byoc.on_target``'s target, else its
    function's ``byoc.target`` (``None`` if neither is set)."""
    parent = op.parent_op()
    while parent is not None:
        if isinstance(parent, OnTargetOp):
            return target_of(parent.target, parent)
        if isinstance(parent, FuncOp):
            return func_target(parent)
        parent = parent.parent_op()
    return None
