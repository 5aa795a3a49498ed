"""NumPy references of the ``nn`` convolutions and pools."""

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
class ConvFunctions(InterpreterFunctions):
    """Reference semantics of the ``nn`` convolutions and pools."""

    # -- convolution and pooling -------------------------------------------------------
    @impl(nn.Conv2DOp)
    @in_compute_type
    def run_conv2d(op: nn.Conv2DOp, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        x = to_nchw(x, op.data_layout)
        if op.kernel_layout == "OHWI":
            w = w.transpose(0, 3, 1, 2)
        t, left, b, r = op.padding
        x = np.pad(x, [(0, 0), (0, 0), (t, b), (left, r)])
        win = windows(x, w.shape[2:], op.strides, op.dilation)
        g, cin, cout = op.groups, w.shape[1], w.shape[0] // op.groups
        parts = [
            np.tensordot(win[:, i * cin:(i + 1) * cin], w[i * cout:(i + 1) * cout],
                         axes=([1, 4, 5], [1, 2, 3]))
            for i in range(g)
        ]
        out = np.concatenate(parts, axis=-1).transpose(0, 3, 1, 2)
        return from_nchw(out, op.data_layout)

    @impl(nn.MaxPool2DOp)
    @in_compute_type
    def run_max_pool2d(op: nn.MaxPool2DOp, x: np.ndarray) -> np.ndarray:
        x = to_nchw(x, op.layout)
        ph, pw = pool_pads(op, *x.shape[2:])
        x = np.pad(x, [(0, 0), (0, 0), ph, pw], constant_values=-np.inf)
        out = windows(x, op.pool_size, op.strides, op.dilation).max(axis=(-2, -1))
        return from_nchw(out, op.layout)

    @impl(nn.AvgPool2DOp)
    @in_compute_type
    def run_avg_pool2d(op: nn.AvgPool2DOp, x: np.ndarray) -> np.ndarray:
        x = to_nchw(x, op.layout)
        h, w = x.shape[2:]
        ph, pw = pool_pads(op, h, w)
        t, left, b, r = op.padding
        # Cells that count towards the divisor: the input, plus the declared padding
        # when count_include_pad (never the extra ceil_mode cells).
        counted = np.zeros((1, 1, h + sum(ph), w + sum(pw)), np.float32)
        if op.count_include_pad:
            counted[..., ph[0] - t:ph[0] + h + b, pw[0] - left:pw[0] + w + r] = 1
        else:
            counted[..., ph[0]:ph[0] + h, pw[0]:pw[0] + w] = 1
        x = np.pad(x, [(0, 0), (0, 0), ph, pw])
        total = windows(x, op.pool_size, op.strides, op.dilation).sum(axis=(-2, -1))
        count = windows(counted, op.pool_size, op.strides, op.dilation).sum(axis=(-2, -1))
        return from_nchw(total / count, op.layout)

    @impl(nn.GlobalAvgPool2DOp)
    @in_compute_type
    def run_global_avg_pool2d(op: nn.GlobalAvgPool2DOp, x: np.ndarray) -> np.ndarray:
        axes = (2, 3) if op.layout == "NCHW" else (1, 2)
        return x.mean(axis=axes, keepdims=True)
