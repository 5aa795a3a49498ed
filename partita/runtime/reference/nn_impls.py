"""NumPy implementations of the ``nn`` ops (and ``tensor.dim``) for the xDSL interpreter.

Values are ``np.ndarray`` in the storage dtype of the op's element type. f16 / bf16 ops
compute in float32 and round the result once, like a GPU kernel accumulating in f32.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from xdsl.dialects import tensor
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.dialects import nn

_erf = np.frompyfunc(math.erf, 1, 1)


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def _store(op: nn.NNOp, value: np.ndarray) -> tuple[np.ndarray]:
    """Round ``value`` to the result's storage dtype."""
    return (np.asarray(value).astype(nn.numpy_dtype(op.result.type.element_type)),)


def _on_f32(fn: Callable[..., np.ndarray]) -> Callable[..., tuple[np.ndarray]]:
    """Impl whose body sees float32 operands; the result is rounded to storage."""

    def run(self, interpreter: Interpreter, op: nn.NNOp, args: tuple[Any, ...]):
        return _store(op, fn(op, *(_f32(a) for a in args)))

    return run


def _to_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 3, 1, 2)


def _from_nchw(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout == "NCHW" else x.transpose(0, 2, 3, 1)


def _windows(x: np.ndarray, kernel, strides, dilation) -> np.ndarray:
    """``[N, C, OH, OW, KH, KW]`` view of the sliding windows of an (already padded)
    NCHW array."""
    extent = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    view = sliding_window_view(x, extent, axis=(2, 3))
    return view[:, :, :: strides[0], :: strides[1], :: dilation[0], :: dilation[1]]


def _pool_pads(op: nn.Pool2DOp, h: int, w: int) -> tuple[tuple[int, int], tuple[int, int]]:
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


def _layer_norm(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + np.float32(eps))


def _channel(v: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """Reshape a rank-1 per-channel vector to broadcast along ``axis``."""
    shape = [1] * rank
    shape[axis] = -1
    return v.reshape(shape)


@register_impls
class NNFunctions(InterpreterFunctions):
    """Reference semantics of every ``nn`` op."""

    # -- elementwise -------------------------------------------------------------------
    run_add = impl(nn.AddOp)(_on_f32(lambda op, a, b: a + b))
    run_subtract = impl(nn.SubtractOp)(_on_f32(lambda op, a, b: a - b))
    run_multiply = impl(nn.MultiplyOp)(_on_f32(lambda op, a, b: a * b))
    run_divide = impl(nn.DivideOp)(_on_f32(lambda op, a, b: a / b))
    run_relu = impl(nn.ReluOp)(_on_f32(lambda op, x: np.maximum(x, np.float32(0))))
    run_sigmoid = impl(nn.SigmoidOp)(_on_f32(lambda op, x: 1 / (1 + np.exp(-x))))
    run_tanh = impl(nn.TanhOp)(_on_f32(lambda op, x: np.tanh(x)))
    run_clip = impl(nn.ClipOp)(_on_f32(lambda op, x: np.clip(x, op.min, op.max)))

    @impl(nn.GeluOp)
    @_on_f32
    def run_gelu(op: nn.GeluOp, x: np.ndarray) -> np.ndarray:
        if op.approximate == "tanh":
            inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
            return 0.5 * x * (1 + np.tanh(inner))
        x64 = x.astype(np.float64)
        return 0.5 * x64 * (1 + _erf(x64 / math.sqrt(2)).astype(np.float64))

    # -- linear algebra ----------------------------------------------------------------
    run_dense = impl(nn.DenseOp)(_on_f32(lambda op, x, w: x @ w.T))
    run_matmul = impl(nn.MatmulOp)(_on_f32(lambda op, a, b: a @ b))

    @impl(nn.BatchMatmulOp)
    @_on_f32
    def run_batch_matmul(op: nn.BatchMatmulOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if op.transpose_a:
            a = a.transpose(0, 2, 1)
        if op.transpose_b:
            b = b.transpose(0, 2, 1)
        return a @ b

    @impl(nn.BiasAddOp)
    @_on_f32
    def run_bias_add(op: nn.BiasAddOp, x: np.ndarray, bias: np.ndarray) -> np.ndarray:
        return x + _channel(bias, x.ndim, op.axis % x.ndim)

    # -- normalization -----------------------------------------------------------------
    @impl(nn.SoftmaxOp)
    @_on_f32
    def run_softmax(op: nn.SoftmaxOp, x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(axis=op.axis, keepdims=True))
        return e / e.sum(axis=op.axis, keepdims=True)

    @impl(nn.LayerNormOp)
    @_on_f32
    def run_layer_norm(op: nn.LayerNormOp, x, gamma, beta) -> np.ndarray:
        axes = tuple(range(op.axis % x.ndim, x.ndim))
        return _layer_norm(x, axes, op.epsilon) * gamma + beta

    @impl(nn.BatchNormOp)
    @_on_f32
    def run_batch_norm(op: nn.BatchNormOp, x, gamma, beta, mean, var) -> np.ndarray:
        axis = op.axis % x.ndim
        scale = gamma / np.sqrt(var + np.float32(op.epsilon))
        return (x - _channel(mean, x.ndim, axis)) * _channel(scale, x.ndim, axis) + _channel(
            beta, x.ndim, axis
        )

    @impl(nn.LRNOp)
    @_on_f32
    def run_lrn(op: nn.LRNOp, x: np.ndarray) -> np.ndarray:
        axis = op.axis % x.ndim
        lo, hi = (op.size - 1) // 2, op.size // 2
        sq = np.moveaxis(x * x, axis, -1)
        padded = np.pad(sq, [(0, 0)] * (sq.ndim - 1) + [(lo, hi)])
        window_sum = np.moveaxis(sliding_window_view(padded, op.size, axis=-1).sum(-1), -1, axis)
        return x / (op.bias + op.alpha / op.size * window_sum) ** op.beta

    # -- convolution and pooling -------------------------------------------------------
    @impl(nn.Conv2DOp)
    @_on_f32
    def run_conv2d(op: nn.Conv2DOp, x: np.ndarray, w: np.ndarray) -> np.ndarray:
        x = _to_nchw(x, op.data_layout)
        if op.kernel_layout == "OHWI":
            w = w.transpose(0, 3, 1, 2)
        t, left, b, r = op.padding
        x = np.pad(x, [(0, 0), (0, 0), (t, b), (left, r)])
        win = _windows(x, w.shape[2:], op.strides, op.dilation)
        g, cin, cout = op.groups, w.shape[1], w.shape[0] // op.groups
        parts = [
            np.tensordot(win[:, i * cin:(i + 1) * cin], w[i * cout:(i + 1) * cout],
                         axes=([1, 4, 5], [1, 2, 3]))
            for i in range(g)
        ]
        out = np.concatenate(parts, axis=-1).transpose(0, 3, 1, 2)
        return _from_nchw(out, op.data_layout)

    @impl(nn.MaxPool2DOp)
    @_on_f32
    def run_max_pool2d(op: nn.MaxPool2DOp, x: np.ndarray) -> np.ndarray:
        x = _to_nchw(x, op.layout)
        ph, pw = _pool_pads(op, *x.shape[2:])
        x = np.pad(x, [(0, 0), (0, 0), ph, pw], constant_values=-np.inf)
        out = _windows(x, op.pool_size, op.strides, op.dilation).max(axis=(-2, -1))
        return _from_nchw(out, op.layout)

    @impl(nn.AvgPool2DOp)
    @_on_f32
    def run_avg_pool2d(op: nn.AvgPool2DOp, x: np.ndarray) -> np.ndarray:
        x = _to_nchw(x, op.layout)
        h, w = x.shape[2:]
        ph, pw = _pool_pads(op, h, w)
        t, left, b, r = op.padding
        # Cells that count towards the divisor: the input, plus the declared padding
        # when count_include_pad (never the extra ceil_mode cells).
        counted = np.zeros((1, 1, h + sum(ph), w + sum(pw)), np.float32)
        if op.count_include_pad:
            counted[..., ph[0] - t:ph[0] + h + b, pw[0] - left:pw[0] + w + r] = 1
        else:
            counted[..., ph[0]:ph[0] + h, pw[0]:pw[0] + w] = 1
        x = np.pad(x, [(0, 0), (0, 0), ph, pw])
        total = _windows(x, op.pool_size, op.strides, op.dilation).sum(axis=(-2, -1))
        count = _windows(counted, op.pool_size, op.strides, op.dilation).sum(axis=(-2, -1))
        return _from_nchw(total / count, op.layout)

    @impl(nn.GlobalAvgPool2DOp)
    @_on_f32
    def run_global_avg_pool2d(op: nn.GlobalAvgPool2DOp, x: np.ndarray) -> np.ndarray:
        axes = (2, 3) if op.layout == "NCHW" else (1, 2)
        return x.mean(axis=axes, keepdims=True)

    # -- data movement (exact: no f32 round trip needed) -------------------------------
    @impl(nn.PadOp)
    def run_pad(self, interpreter: Interpreter, op: nn.PadOp, args: tuple[Any, ...]):
        widths = list(zip(op.pad_before, op.pad_after))
        return _store(op, np.pad(args[0], widths, constant_values=op.pad_value))

    @impl(nn.ReshapeOp)
    def run_reshape(self, interpreter: Interpreter, op: nn.ReshapeOp, args: tuple[Any, ...]):
        return _store(op, args[0].reshape(op.result.type.get_shape()))

    @impl(nn.TransposeOp)
    def run_transpose(self, interpreter: Interpreter, op: nn.TransposeOp, args):
        return _store(op, args[0].transpose(op.perm))

    @impl(nn.ConcatenateOp)
    def run_concatenate(self, interpreter: Interpreter, op: nn.ConcatenateOp, args):
        return _store(op, np.concatenate(args, axis=op.axis))

    @impl(nn.ConstantOp)
    def run_constant(self, interpreter: Interpreter, op: nn.ConstantOp, args):
        return (op.to_numpy(),)


@register_impls
class TensorDimFunctions(InterpreterFunctions):
    """``tensor.dim`` on NumPy arrays (for shape computations of dynamic partitions)."""

    @impl(tensor.DimOp)
    def run_dim(self, interpreter: Interpreter, op: tensor.DimOp, args: tuple[Any, ...]):
        return (int(args[0].shape[args[1]]),)
