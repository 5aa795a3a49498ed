"""NumPy references of the ``nn`` element-wise ops."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.dialects import nn
from partita.runtime.reference.nn.base import (
    channel,
    compute_type,
    erf,
    from_nchw,
    in_compute_type,
    layer_norm,
    pool_pads,
    sliding_window_view,
    store,
    to_nchw,
    windows,
)


@register_impls
class ElementwiseFunctions(InterpreterFunctions):
    """Reference semantics of the ``nn`` element-wise ops."""

    # -- elementwise -------------------------------------------------------------------
    run_add = impl(nn.AddOp)(in_compute_type(lambda op, a, b: a + b))
    run_subtract = impl(nn.SubtractOp)(in_compute_type(lambda op, a, b: a - b))
    run_multiply = impl(nn.MultiplyOp)(in_compute_type(lambda op, a, b: a * b))
    run_divide = impl(nn.DivideOp)(in_compute_type(lambda op, a, b: a / b))
    run_relu = impl(nn.ReluOp)(in_compute_type(lambda op, x: np.maximum(x, np.float32(0))))
    run_sigmoid = impl(nn.SigmoidOp)(in_compute_type(lambda op, x: 1 / (1 + np.exp(-x))))
    run_tanh = impl(nn.TanhOp)(in_compute_type(lambda op, x: np.tanh(x)))
    run_clip = impl(nn.ClipOp)(in_compute_type(lambda op, x: np.clip(x, op.min, op.max)))

    @impl(nn.GeluOp)
    @in_compute_type
    def run_gelu(op: nn.GeluOp, x: np.ndarray) -> np.ndarray:
        if op.approximate == "tanh":
            inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
            return 0.5 * x * (1 + np.tanh(inner))
        x64 = x.astype(np.float64)
        return 0.5 * x64 * (1 + erf(x64 / math.sqrt(2)).astype(np.float64))
