"""NumPy reference of ``nn.loop``: the body function called once per iteration through the
interpreter. The launch plan runs it on the host at a stage boundary, so it is also what a
GPU run computes."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls
from xdsl.utils.exceptions import VerifyException

from partita.dialects import nn
from partita.ir import op_error


def _first(value: Any) -> Any:
    """The one element of a trip count or condition."""
    flat = np.asarray(value).reshape(-1)
    if flat.size != 1:
        raise ValueError(f"expected one element, got shape {list(np.shape(value))}")
    return flat[0]


def _empty_stack(op: nn.LoopOp, k: int, element: TensorType) -> np.ndarray:
    """Scan output ``k`` of a loop that ran no iteration: no element, of the body's shape."""
    shape = element.get_shape()
    if nn.DYN in shape:
        raise op_error(op, f"ran no iteration, and the elements of scan output #{k} have no static shape "
                           f"({element}): its empty result's shape is unknown")
    return np.empty((0, *shape), dtype=nn.numpy_dtype(element.element_type))


@register_impls
class ControlFlowFunctions(InterpreterFunctions):
    """The reference of ``nn.loop``."""

    @impl(nn.LoopOp)
    def run_loop(self, interpreter: Interpreter, op: nn.LoopOp, args: tuple[Any, ...]):
        try:
            body = op.body_function()
        except VerifyException as err:
            raise op_error(op, str(err)) from None
        if body is None:
            raise op_error(op, f"its body {op.body} cannot be found outside a module")
        count = len(op.carried)
        ins, outs = body.function_type.inputs.data, body.function_type.outputs.data
        limit, running = int(_first(args[0])), bool(_first(args[1]))
        carried, captured = list(args[2:2 + count]), tuple(args[2 + count:])
        elements: list[list[np.ndarray]] = [[] for _ in op.scans]
        iteration = 0
        while running and iteration < limit:
            # The iteration and condition in the body's own one-element shapes.
            step = (np.full([1] * ins[0].get_num_dims(), iteration, np.int64),
                    np.full([1] * ins[1].get_num_dims(), running, np.bool_))
            results = interpreter.call_op(body, (*step, *carried, *captured))
            running = bool(_first(results[0]))
            carried = list(results[1:1 + count])
            for stacked, element in zip(elements, results[1 + count:]):
                stacked.append(element)
            iteration += 1
        finals = [np.array(v, dtype=nn.numpy_dtype(r.type.element_type), copy=True)
                  for v, r in zip(carried, op.finals)]
        scans = [np.stack(stacked) if stacked else _empty_stack(op, k, outs[1 + count + k])
                 for k, stacked in enumerate(elements)]
        return (*finals, *scans)
