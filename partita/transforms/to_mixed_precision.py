"""``to-mixed-precision{dtype=f16|bf16}``: f32 models computed in f16 / bf16 storage
(TVM's ``ToMixedPrecision``, TensorRT's fp16 mode).

Every op with an f32 tensor operand computes in the low type, except those whose
numerics need f32 (:data:`KEEP_F32`: softmax and the normalizations, whose statistics are
sums over many elements, and the reductions), which get their operands cast back up.
f32 weights become low-precision constants (converted once, at compile time; a named
parameter is retyped, its bytes converted chunk by chunk where they are read), a finite
value past f16's range saturating at its largest (``parameters.narrowed``); other
values are cast (``nn.cast``) where a consumer first needs them in the other type. The
function's arguments and results keep the model's own types: inputs are cast down after
entry and outputs back up before return. GEMMs keep accumulating in f32 (the CUTLASS
and native tensor-core kernels do), so only storage and element-wise math change.

Runs before partitioning, on every function with a body but the ones the host runs as they
are (``kept_for_reference``: an ``nn.loop``'s body, whose operands keep their types).
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    ModuleOp,
    TensorType,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.passes import ModulePass

from partita.dialects import nn
from partita.dialects.byoc import kept_for_reference
from partita.ir import PartitaError
from partita.ir.constants import constant_values
from partita.ir.parameters import ParameterAttr, narrowed

__all__ = ["KEEP_F32", "ToMixedPrecision"]

KEEP_F32 = frozenset({
    "nn.softmax", "nn.log_softmax", "nn.hardmax", "nn.layer_norm", "nn.rms_norm", "nn.group_norm",
    "nn.batch_norm", "nn.instance_norm", "nn.lp_norm", "nn.lrn",
    "nn.reduce_sum", "nn.reduce_mean", "nn.reduce_prod", "nn.reduce_l1", "nn.reduce_l2",
    "nn.reduce_log_sum", "nn.reduce_log_sum_exp", "nn.reduce_sum_square", "nn.cumsum",
})
"""Ops that stay in f32 (TVM's never-list idea): their results are sums over many
elements, which f16's 11-bit mantissa (or bf16's 8) would visibly round."""

_LOW = {"f16": (Float16Type(), np.float16), "bf16": (BFloat16Type(), ml_dtypes.bfloat16)}


def _is_f32_tensor(t: Attribute) -> bool:
    return isinstance(t, TensorType) and isinstance(t.element_type, Float32Type)


def _with_element(t: TensorType, element: Attribute) -> TensorType:
    return TensorType(element, t.get_shape())


class _Converter:
    """Rewrites one block: ``current`` maps each original value to the value now holding
    it (the same, or a low-precision one); casts and converted constants are cached."""

    def __init__(self, block: Block, low: Attribute, np_low: type) -> None:
        self.block, self.low, self.np_low = block, low, np_low
        self.current: dict[SSAValue, SSAValue] = {}
        self.low_of: dict[SSAValue, SSAValue] = {}
        self.high_of: dict[SSAValue, SSAValue] = {}

    def now(self, value: SSAValue) -> SSAValue:
        return self.current.get(value, value)

    def _insert_after(self, value: SSAValue, op: Operation) -> None:
        owner = value.owner
        if isinstance(owner, Operation):
            self.block.insert_op_after(op, owner)
        else:  # a block argument: first in the block
            first = self.block.first_op
            if first is None:
                self.block.add_op(op)
            else:
                self.block.insert_op_before(op, first)

    def low_value(self, value: SSAValue) -> SSAValue:
        """``value`` in the low type (a converted constant, or a cast)."""
        v = self.now(value)
        if not _is_f32_tensor(v.type):
            return v
        if v in self.low_of:
            return self.low_of[v]
        owner = v.owner
        if isinstance(owner, nn.ConstantOp) and isinstance(owner.value, ParameterAttr):
            # A named parameter is retyped, not read: its bytes are converted where they are
            # needed, streamed a chunk at a time (the compiled-model file stores them converted).
            new: Operation = nn.ConstantOp(owner.value.retyped(self.low))
        elif isinstance(owner, nn.ConstantOp):
            new = nn.ConstantOp(narrowed(constant_values(owner), self.np_low))  # saturated, not infinite
        else:
            new = nn.CastOp(v, self.low)
        self._insert_after(v, new)
        self.low_of[v] = new.results[0]
        return new.results[0]

    def high_value(self, value: SSAValue) -> SSAValue:
        """``value`` in its original f32 (a cast up when it is now low)."""
        v = self.now(value)
        if _is_f32_tensor(value.type) and not _is_f32_tensor(v.type):
            if v not in self.high_of:
                cast = nn.CastOp(v, Float32Type())
                self._insert_after(v, cast)
                self.high_of[v] = cast.results[0]
            return self.high_of[v]
        return v

    def convert(self, op: Operation) -> None:
        if isinstance(op, ReturnOp):
            for i, operand in enumerate(op.operands):
                op.operands[i] = self.high_value(operand)
            return
        if isinstance(op, nn.ConstantOp) or op.regions:
            return
        f32_operands = [v for v in op.operands if _is_f32_tensor(v.type)]
        # An nn.loop keeps its body's types: the host runs that body as it is.
        lower = op.name.startswith("nn.") and op.name not in KEEP_F32 and not isinstance(op, nn.CastOp | nn.LoopOp) \
            and bool(f32_operands)
        operands = [self.low_value(v) if lower and _is_f32_tensor(v.type) else self.high_value(v)
                    for v in op.operands]
        if not lower and all(a is b for a, b in zip(operands, op.operands)):
            return
        result_types = [_with_element(r.type, self.low) if lower and _is_f32_tensor(r.type) else r.type
                        for r in op.results]
        new = type(op).create(operands=operands, result_types=result_types, properties=dict(op.properties),
                              attributes=dict(op.attributes))
        self.block.insert_op_before(new, op)
        for old, result in zip(op.results, new.results):
            self.current[old] = result


@dataclass(frozen=True)
class ToMixedPrecision(ModulePass):
    """f32 computation in f16 or bf16 storage; softmax and normalizations in f32."""

    name = "to-mixed-precision"

    dtype: str = "f16"
    """``f16`` or ``bf16``."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.dtype not in _LOW:
            raise PartitaError(f"{self.name}: dtype={self.dtype} is not one of f16, bf16")
        low, np_low = _LOW[self.dtype]
        for function in [f for f in op.ops if isinstance(f, FuncOp) and f.body.blocks and not kept_for_reference(f)]:
            block = function.body.block
            converter = _Converter(block, low, np_low)
            originals = list(block.ops)
            for original in originals:
                converter.convert(original)
            # the old ops, last first: every use of their results has moved to the new ones
            for original in reversed(originals):
                if any(r in converter.current for r in original.results):
                    for r in original.results:
                        if r in converter.current and r.uses:
                            r.replace_by(converter.current[r])
                    block.erase_op(original)
            # f32 weights whose every use now reads the converted copy
            for source in converter.low_of:
                owner = source.owner
                if isinstance(owner, nn.ConstantOp) and not source.uses and owner.parent is block:
                    block.erase_op(owner)
