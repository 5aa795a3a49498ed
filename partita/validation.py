"""Up-front checks of ``partita.compile``'s arguments: a wrong value is a ``PartitaError``
that names the argument, before any pass runs (never a TypeError from deep inside)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp

from partita.collage.cost import load_devices
from partita.dialects.byoc import EXTERN
from partita.ir import PartitaError, op_error
from partita.lowering.nvrtc import check_arch
from partita.target import CompilationConfig, Target

COSTS = ("roofline", "measure")
LAYOUTS = ("auto", "NCHW", "NHWC")


def _choice(name: str, value: Any, choices: Sequence[str]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise PartitaError(f"unknown {name} {value!r} (choose from {', '.join(choices)})")


def check_compile_arguments(
    *,
    targets: Any,
    partitioner: Any,
    partitioners: Sequence[str],
    cost: Any,
    device: Any,
    max_depth: Any,
    cache_dir: Any,
    layout: Any,
    entry: Any,
    progress: Any,
) -> None:
    """Raises ``PartitaError`` for the first argument of ``compile`` that cannot work."""
    if isinstance(targets, CompilationConfig | str):
        pass
    elif isinstance(targets, Sequence) and targets and all(isinstance(t, Target | str) for t in targets):
        pass
    else:
        raise PartitaError(
            f"targets={targets!r}: pass a target string (\"cuda -arch=sm_90,cutlass,llvm\"), "
            "a non-empty list of targets, or a CompilationConfig"
        )
    _choice("partitioner", partitioner, partitioners)
    _choice("cost", cost, COSTS)
    _choice("device", device, ["native", *sorted(load_devices()["devices"])])
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
        raise PartitaError(f"max_depth={max_depth!r} must be a positive integer")
    if cache_dir is not None and (not isinstance(cache_dir, str | os.PathLike) or not os.fspath(cache_dir)):
        raise PartitaError(f"cache_dir={cache_dir!r} must be a non-empty path (or None for the default cache)")
    _choice("layout", layout, LAYOUTS)
    if not isinstance(entry, str) or not entry:
        raise PartitaError(f"entry={entry!r} must be the name of a function")
    if progress is not None and not callable(progress):
        raise PartitaError(f"progress={progress!r} must be a callable(pass_name, index, count) or None")


def check_target_archs(config: Any) -> None:
    """The cuda target's ``arch`` and the cutlass target's ``sm`` must be something NVRTC
    compiles for: a typo is an error now, not a failure after minutes of partitioning."""
    for kind, option, spell in (("cuda", "arch", str), ("cutlass", "sm", lambda v: f"sm_{v}")):
        target = config.find_target_for_kind(kind)
        if target is None or option not in target.options:
            continue
        try:
            check_arch(spell(target.options[option]))
        except ValueError as err:
            raise PartitaError(f"target '{target}': {err}") from None


def check_entry(module: ModuleOp, entry: str) -> None:
    """The entry function must exist and have a body."""
    for op in module.ops:
        if isinstance(op, FuncOp) and op.sym_name.data == entry and op.body.blocks:
            return
    defined = [op.sym_name.data for op in module.ops if isinstance(op, FuncOp) and op.body.blocks]
    raise PartitaError(f"entry=@{entry}: no such function in the module (it defines {', '.join('@' + d for d in defined) or 'none'})")


def check_calls(module: ModuleOp) -> None:
    """Every ``func.call`` must reach a function with a body or a ``byoc.extern``
    declaration (which ``lower-extern-calls`` turns into a runtime call); anything else
    has nothing to run."""
    from xdsl.dialects.func import CallOp

    functions = {op.sym_name.data: op for op in module.ops if isinstance(op, FuncOp)}
    for op in module.walk():
        if not isinstance(op, CallOp):
            continue
        callee = functions.get(op.callee.root_reference.data)
        if callee is not None and not callee.body.blocks and EXTERN not in callee.attributes:
            raise op_error(op, f"calls @{callee.sym_name.data}, a declaration with no body "
                           f"(define it, or mark it '{EXTERN}')")


MAX_RANK = 64
"""NumPy's limit on array dimensions: inputs and outputs of more cannot cross the API."""


def check_ranks(module: ModuleOp) -> None:
    """Functions take and return tensors of at most ``MAX_RANK`` dimensions."""
    from xdsl.dialects.builtin import TensorType

    for op in module.ops:
        if not isinstance(op, FuncOp):
            continue
        for kind, types in (("argument", op.function_type.inputs), ("result", op.function_type.outputs)):
            for i, t in enumerate(types):
                if isinstance(t, TensorType) and len(t.get_shape()) > MAX_RANK:
                    raise op_error(op, f"@{op.sym_name.data} {kind} #{i} has rank {len(t.get_shape())}: "
                                   f"tensors of more than {MAX_RANK} dimensions are not supported")


ProgressCallback = Callable[[str, int, int], None]
