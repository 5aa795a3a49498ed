"""Shared helpers of the NumPy references of ``nn`` ops.

Values are ``np.ndarray`` in the storage dtype of the op's element type. f16 / bf16 ops
compute in float32 and round the result once, like a GPU kernel accumulating in f32; f32,
f64 and integer ops compute in their own type.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from xdsl.interpreter import Interpreter

from partita.dialects import nn

erf = np.frompyfunc(math.erf, 1, 1)


def as_f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def compute_type(x: np.ndarray) -> np.ndarray:
    """``x`` in the type a kernel computes it in: f16 / bf16 widen to f32, others stay."""
    x = np.asarray(x)
    if x.dtype in (np.float16, ml_dtypes.bfloat16):
        return x.astype(np.float32)
    return x


def store(op: nn.NNOp, value: np.ndarray) -> tuple[np.ndarray]:
    """Round ``value`` to the result's storage dtype."""
    return (np.asarray(value).astype(nn.numpy_dtype(op.result.type.element_type)),)


def in_compute_type(fn: Callable[..., np.ndarray]) -> Callable[..., tuple[np.ndarray]]:
    """Impl whose body sees operands in their compute type (``compute_type``); the result
    is rounded to the result's storage type."""

    def run(self, interpreter: Interpreter, op: nn.NNOp, args: tuple[Any, ...]):
        return store(op, fn(op, *(compute_type(a) for a in args)))

    return run


def to_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 3, 1, 2)


def from_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 2, 3, 1)


def windows(x: np.ndarray, kernel, strides, dilation) -> np.ndarray:
    """``[N, C, OH, OW, KH, KW]`` view of the sliding windows of an (already padded)
    NCHW array."""
    extent = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    view = sliding_window_view(x, extent, axis=(2, 3))
    return view[:, :, :: strides[0], :: strides[1], :: dilation[0], :: dilation[1]]


def pool_pads(op: nn.Pool2DOp, h: int, w: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Leading / trailing padding per spatial dim, extended on the right so that every
    ceil_mode window has cells to read."""
    t, left, b, r = op.padding
    pads = []
    for size, k, s, d, lo, hi in ((h, op.pool_size[0], op.strides[0], op.dilation[0], t, b),
                                   (w, op.pool_size[1], op.strides[1], op.dilation[1], left, r)):
        out = nn.conv_output_dim(size, k, s, lo, hi, d, op.ceil_mode)
        needed = (out - 1) * s + d * (k - 1) + 1
        pads.append((lo, max(hi, needed - size - lo)))
    return pads[0], pads[1]


def layer_norm(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + x.dtype.type(eps))


def channel(v: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """Reshape a rank-1 per-channel vector to broadcast along ``axis``."""
    shape = [1] * rank
    shape[axis] = -1
    return v.reshape(shape)


