"""NumPy reference of ``nn.dyn``: the static op its bound params stand for, run on the data."""

from __future__ import annotations

from typing import Any

from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.dialects import nn


@register_impls
class DynFunctions(InterpreterFunctions):
    @impl(nn.DynOp)
    def run_dyn(self, interpreter: Interpreter, op: nn.DynOp, args: tuple[Any, ...]):
        data, params = args[:len(op.inputs)], args[len(op.inputs):]
        shapes = {v: a.shape for v, a in zip(op.inputs, data)}
        values = dict(zip(op.params, params))
        static = op.specialize(shapes.__getitem__, values.__getitem__)
        try:
            return tuple(interpreter.run_op(static, tuple(data)))
        finally:
            static.drop_all_references()
