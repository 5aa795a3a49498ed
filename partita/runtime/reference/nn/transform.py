"""NumPy references of the ``nn`` data movement and constants."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.dialects import nn
from partita.runtime.reference.nn.base import (
    store,
)


@register_impls
class TransformFunctions(InterpreterFunctions):
    """Reference semantics of the ``nn`` data movement and constants."""

    # -- data movement (exact: no f32 round trip needed) -------------------------------
    @impl(nn.PadOp)
    def run_pad(self, interpreter: Interpreter, op: nn.PadOp, args: tuple[Any, ...]):
        widths = list(zip(op.pad_before, op.pad_after))
        if op.mode == "constant":
            return store(op, np.pad(args[0], widths, constant_values=op.pad_value))
        return (np.pad(args[0], widths, mode=op.mode),)

    @impl(nn.ReshapeOp)
    def run_reshape(self, interpreter: Interpreter, op: nn.ReshapeOp, args: tuple[Any, ...]):
        shape = [-1 if d == nn.DYN else d for d in op.result.type.get_shape()]
        for ref, axis, target in zip(args[1:], op.ref_axes, op.targets):
            shape[target] = ref.shape[axis]
        return store(op, args[0].reshape(shape))

    @impl(nn.TransposeOp)
    def run_transpose(self, interpreter: Interpreter, op: nn.TransposeOp, args):
        return store(op, args[0].transpose(op.perm))

    @impl(nn.ConcatenateOp)
    def run_concatenate(self, interpreter: Interpreter, op: nn.ConcatenateOp, args):
        return store(op, np.concatenate(args, axis=op.axis))

    @impl(nn.ShapeOfOp)
    def run_shape_of(self, interpreter: Interpreter, op: nn.ShapeOfOp, args):
        return (np.asarray(args[0].shape, dtype=np.int64),)

    @impl(nn.ConstantOp)
    def run_constant(self, interpreter: Interpreter, op: nn.ConstantOp, args):
        return (op.to_numpy(),)
