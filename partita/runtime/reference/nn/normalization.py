"""NumPy references of the ``nn`` normalizations."""

from __future__ import annotations

import numpy as np
from xdsl.interpreter import InterpreterFunctions, impl, register_impls

from partita.dialects import nn
from partita.runtime.reference.nn.base import (
    channel,
    in_compute_type,
    layer_norm,
    sliding_window_view,
)


@register_impls
class NormalizationFunctions(InterpreterFunctions):
    """Reference semantics of the ``nn`` normalizations."""

    # -- normalization -----------------------------------------------------------------
    @impl(nn.SoftmaxOp)
    @in_compute_type
    def run_softmax(op: nn.SoftmaxOp, x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(axis=op.axis, keepdims=True))
        return e / e.sum(axis=op.axis, keepdims=True)

    @impl(nn.LogSoftmaxOp)
    @in_compute_type
    def run_log_softmax(op: nn.LogSoftmaxOp, x: np.ndarray) -> np.ndarray:
        shifted = x - x.max(axis=op.axis, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=op.axis, keepdims=True))

    @impl(nn.HardmaxOp)
    @in_compute_type
    def run_hardmax(op: nn.HardmaxOp, x: np.ndarray) -> np.ndarray:
        axis = op.axis % x.ndim
        first = np.argmax(x, axis=axis, keepdims=True)
        return np.arange(x.shape[axis]).reshape([-1] + [1] * (x.ndim - 1 - axis)) == first

    @impl(nn.LpNormOp)
    @in_compute_type
    def run_lp_norm(op: nn.LpNormOp, x: np.ndarray) -> np.ndarray:
        if op.p == 1:
            norm = np.abs(x).sum(axis=op.axis, keepdims=True)
        else:
            norm = np.sqrt((x * x).sum(axis=op.axis, keepdims=True))
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(norm == 0, 0, x / norm)

    @impl(nn.MeanVarianceNormOp)
    @in_compute_type
    def run_mean_variance_norm(op: nn.MeanVarianceNormOp, x: np.ndarray) -> np.ndarray:
        mean = x.mean(axis=op.axes, keepdims=True)
        var = (x * x).mean(axis=op.axes, keepdims=True) - mean * mean
        return (x - mean) / (np.sqrt(np.maximum(var, 0)) + x.dtype.type(1e-9))

    @impl(nn.RMSNormOp)
    @in_compute_type
    def run_rms_norm(op: nn.RMSNormOp, x, scale) -> np.ndarray:
        axes = tuple(range(op.axis % x.ndim, x.ndim))
        ms = (x * x).mean(axis=axes, keepdims=True)
        return x / np.sqrt(ms + x.dtype.type(op.epsilon)) * scale

    @impl(nn.GroupNormOp)
    @in_compute_type
    def run_group_norm(op: nn.GroupNormOp, x, scale, bias) -> np.ndarray:
        n, c = x.shape[:2]
        grouped = x.reshape(n, op.num_groups, -1)
        normed = layer_norm(grouped, (2,), op.epsilon).reshape(x.shape)
        return normed * channel(scale, x.ndim, 1) + channel(bias, x.ndim, 1)

    @impl(nn.LayerNormOp)
    @in_compute_type
    def run_layer_norm(op: nn.LayerNormOp, x, gamma, beta) -> np.ndarray:
        axes = tuple(range(op.axis % x.ndim, x.ndim))
        return layer_norm(x, axes, op.epsilon) * gamma + beta

    @impl(nn.BatchNormOp)
    @in_compute_type
    def run_batch_norm(op: nn.BatchNormOp, x, gamma, beta, mean, var) -> np.ndarray:
        axis = op.axis % x.ndim
        scale = gamma / np.sqrt(var + np.float32(op.epsilon))
        return (x - channel(mean, x.ndim, axis)) * channel(scale, x.ndim, axis) + channel(
            beta, x.ndim, axis
        )

    @impl(nn.LRNOp)
    @in_compute_type
    def run_lrn(op: nn.LRNOp, x: np.ndarray) -> np.ndarray:
        axis = op.axis % x.ndim
        lo, hi = (op.size - 1) // 2, op.size // 2
        sq = np.moveaxis(x * x, axis, -1)
        padded = np.pad(sq, [(0, 0)] * (sq.ndim - 1) + [(lo, hi)])
        window_sum = np.moveaxis(sliding_window_view(padded, op.size, axis=-1).sum(-1), -1, axis)
        return x / (op.bias + op.alpha / op.size * window_sum) ** op.beta
