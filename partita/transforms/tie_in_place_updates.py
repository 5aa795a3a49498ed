"""``tie-in-place-updates``: a kernel that replaces part of a buffer nothing reads again
writes into that buffer (IREE's tied operands; MLIR's in-place bufferization decision).

A KV cache's update (``nn.tensor_scatter``; ``nn.scatter_nd`` or ``nn.scatter_elements``
without a reduction, as ``index_copy_`` and ``index_copy`` export it) returns the cache
with a few new rows. Out of place, its kernel writes the whole cache into a fresh buffer each decode step, and a
decode loop that feeds the result back copies it into the input's slot again: two passes
over the cache per token for one row of data. In place, the kernel stores the new rows
into the cache's own buffer and nothing else moves.

A fused function (``fuse-native-kernels``) on the native ``target`` whose result is such
an update of argument ``k`` (``partita.lowering.cuda.fusion.in_place_update``: the
update's destination is an argument the body reads nowhere else) gets
``byoc.tied_operand = k`` on its result when every call of it passes, as operand ``k``, a
buffer that dies there:

* the caller's own argument (the launch plan's input slot, its copy of the input: the
  runtime never lets a kernel write a buffer the user owns) or the result of another
  call (a fresh buffer);
* used by nothing but that call (nothing reads the old cache after the update, and it
  is not returned).

``cuda-codegen`` then emits a ``scatter`` kernel (one thread per stored element) and
``lower-extern-calls`` makes operand ``k`` the call's ``outs``. A function called with a
buffer that is read again keeps its out-of-place kernel.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, ModuleOp, i64
from xdsl.dialects.func import CallOp, FuncOp
from xdsl.ir import BlockArgument, OpResult, SSAValue
from xdsl.passes import ModulePass

from partita.dialects.byoc import PRIMITIVE, TIED_OPERAND
from partita.lowering.cuda.fusion import has_in_place_form, in_place_update
from partita.transforms.target_utils import func_target_attr

__all__ = ["TieInPlaceUpdates", "dies_at", "has_in_place_updates"]


def has_in_place_updates(module: ModuleOp) -> bool:
    """Whether ``module`` holds an op with an in-place form (what the pass may tie)."""
    return any(has_in_place_form(op) for op in module.walk())


def dies_at(value: SSAValue, call: CallOp) -> bool:
    """Whether ``call`` may write ``value``'s buffer: an argument of the caller or another
    call's result, read by ``call`` alone (once)."""
    if not value.has_one_use():
        return False
    if isinstance(value, BlockArgument):
        return value.block is call.parent_block()
    return isinstance(value, OpResult) and isinstance(value.op, CallOp)


@dataclass(frozen=True)
class TieInPlaceUpdates(ModulePass):
    """Ties the result of each in-place update kernel on ``target`` to its destination."""

    name = "tie-in-place-updates"

    target: str = "cuda"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        calls: dict[str, list[CallOp]] = defaultdict(list)
        for call in op.walk():
            if isinstance(call, CallOp):
                calls[call.callee.string_value()].append(call)
        for function in op.ops:
            if not isinstance(function, FuncOp) or PRIMITIVE not in function.attributes:
                continue
            target = func_target_attr(function)
            if target is None or target.kind.data != self.target:
                continue
            update = in_place_update(function)
            sites = calls.get(function.sym_name.data, [])
            if update is None or not sites:
                continue
            k = update[2]
            if all(dies_at(call.arguments[k], call) for call in sites):
                _tie(function, k)


def _tie(function: FuncOp, operand: int) -> None:
    results = len(function.function_type.outputs.data)
    attrs = list(function.res_attrs.data) if function.res_attrs is not None else [DictionaryAttr({})] * results
    attrs[0] = DictionaryAttr({**attrs[0].data, TIED_OPERAND: IntegerAttr(operand, i64)})
    function.res_attrs = ArrayAttr(attrs)
