"""NumPy references of the ``nn`` ops: reductions over axes, arg-reductions, top-k, cumulative sums.

Integer reductions accumulate like NumPy (sums and products in 64 bits, wrapped to the
result type on store); float ones in the compute type (f32 for f16 / bf16)."""

from __future__ import annotations

import numpy as np
from xdsl.interpreter import InterpreterFunctions, impl, register_impls

from partita.dialects import nn
from partita.runtime.reference.nn.base import in_compute_type


def _lowest(dtype: np.dtype):
    if dtype == np.bool_:
        return False
    return -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


def _highest(dtype: np.dtype):
    if dtype == np.bool_:
        return True
    return np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).max


def _real(x: np.ndarray) -> np.ndarray:
    """``x`` for math that leaves the integers (sqrt, log): ints in float64."""
    return x if np.issubdtype(x.dtype, np.floating) else x.astype(np.float64)


def log_sum_exp(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    x = _real(x)
    m = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    shift = np.where(np.isfinite(m), m, 0).astype(x.dtype)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(x - shift), axis=axes, keepdims=True)) + shift
    return out if keepdims else np.squeeze(out, axis=axes)


def inv_std_dev(x: np.ndarray, axes: tuple[int, ...], keepdims: bool, eps: float) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=keepdims)
    return 1 / np.sqrt(var + x.dtype.type(eps))


def reduce(op: nn.ReduceOp, x: np.ndarray) -> np.ndarray:
    return reduce_over(type(op), x, op.axes, op.keepdims,
                       op.epsilon if isinstance(op, nn.ReduceInvStdDevOp) else 0.0)


def reduce_over(kind: type[nn.ReduceOp], x: np.ndarray, axes: tuple[int, ...], keep: bool,
                epsilon: float = 0.0) -> np.ndarray:
    """The reduction ``kind`` (an ``nn.reduce_*`` op class) of ``x`` over ``axes``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind is nn.ReduceSumOp:
            return np.sum(x, axis=axes, keepdims=keep)
        if kind is nn.ReduceMeanOp:
            return np.mean(x, axis=axes, keepdims=keep)
        if kind is nn.ReduceMaxOp:
            return np.max(x, axis=axes, keepdims=keep, initial=_lowest(x.dtype))
        if kind is nn.ReduceMinOp:
            return np.min(x, axis=axes, keepdims=keep, initial=_highest(x.dtype))
        if kind is nn.ReduceProdOp:
            return np.prod(x, axis=axes, keepdims=keep)
        if kind is nn.ReduceL1Op:
            return np.sum(np.abs(x), axis=axes, keepdims=keep)
        if kind is nn.ReduceL2Op:
            return np.sqrt(_real(np.sum(x * x, axis=axes, keepdims=keep)))
        if kind is nn.ReduceSumSquareOp:
            return np.sum(x * x, axis=axes, keepdims=keep)
        if kind is nn.ReduceLogSumOp:
            return np.log(_real(np.sum(x, axis=axes, keepdims=keep)))
        if kind is nn.ReduceLogSumExpOp:
            return log_sum_exp(x, axes, keep)
        if kind is nn.ReduceInvStdDevOp:
            return inv_std_dev(x, axes, keep, epsilon)
    raise NotImplementedError(kind.name)  # pragma: no cover


def dynamic_reduce(op: nn.DynamicReduceOp, x: np.ndarray, axes: np.ndarray) -> np.ndarray:
    reduced = op.reduced_axes(axes.reshape(-1).tolist(), x.ndim)
    return x if reduced is None else reduce_over(op.static_op, x, reduced, op.keepdims)


def arg_reduce(op: nn.ArgReduceOp, x: np.ndarray) -> np.ndarray:
    axis = op.axis % x.ndim
    pick = np.argmax if isinstance(op, nn.ArgMaxOp) else np.argmin
    if op.select_last_index:
        out = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis, keepdims=True)
    else:
        out = pick(x, axis=axis, keepdims=True)
    return out if op.keepdims else np.squeeze(out, axis=axis)


def topk_order(op: nn.TopKValuesOp | nn.TopKIndicesOp, x: np.ndarray) -> np.ndarray:
    """Indices of the ``k`` best elements along the axis, best first, ties by index."""
    axis = op.axis % x.ndim
    if op.largest:
        # A stable ascending sort of the flipped axis, reversed: descending, and among
        # equal values the lower original index first.
        n = x.shape[axis]
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    return np.take(order, np.arange(op.k), axis=axis)


def cumulative(op: nn.CumulativeOp, x: np.ndarray) -> np.ndarray:
    axis = op.axis % x.ndim
    product = isinstance(op, nn.CumProdOp)
    if op.reverse:
        x = np.flip(x, axis)
    if op.exclusive:  # the running sum (product) of the elements before each one
        head = (np.ones_like if product else np.zeros_like)(np.take(x, [0], axis=axis))
        x = np.concatenate([head, np.take(x, np.arange(x.shape[axis] - 1), axis=axis)], axis)
    out = (np.cumprod if product else np.cumsum)(x, axis=axis, dtype=x.dtype)
    return np.flip(out, axis) if op.reverse else out


@register_impls
class ReductionFunctions(InterpreterFunctions):
    """Reference semantics of the ``nn`` ops: reductions over axes, arg-reductions, top-k,
    cumulative sums."""

    run_reduce_sum = impl(nn.ReduceSumOp)(in_compute_type(reduce))
    run_reduce_mean = impl(nn.ReduceMeanOp)(in_compute_type(reduce))
    run_reduce_max = impl(nn.ReduceMaxOp)(in_compute_type(reduce))
    run_reduce_min = impl(nn.ReduceMinOp)(in_compute_type(reduce))
    run_reduce_prod = impl(nn.ReduceProdOp)(in_compute_type(reduce))
    run_reduce_l1 = impl(nn.ReduceL1Op)(in_compute_type(reduce))
    run_reduce_l2 = impl(nn.ReduceL2Op)(in_compute_type(reduce))
    run_reduce_sum_square = impl(nn.ReduceSumSquareOp)(in_compute_type(reduce))
    run_reduce_log_sum = impl(nn.ReduceLogSumOp)(in_compute_type(reduce))
    run_reduce_log_sum_exp = impl(nn.ReduceLogSumExpOp)(in_compute_type(reduce))
    run_reduce_inv_std_dev = impl(nn.ReduceInvStdDevOp)(in_compute_type(reduce))
    run_dynamic_reduce = impl(nn.DynamicReduceOp)(in_compute_type(dynamic_reduce))

    run_argmax = impl(nn.ArgMaxOp)(in_compute_type(arg_reduce))
    run_argmin = impl(nn.ArgMinOp)(in_compute_type(arg_reduce))
    run_topk_indices = impl(nn.TopKIndicesOp)(in_compute_type(topk_order))
    run_topk_values = impl(nn.TopKValuesOp)(in_compute_type(
        lambda op, x: np.take_along_axis(x, topk_order(op, x), axis=op.axis % x.ndim)))
    run_cumsum = impl(nn.CumSumOp)(in_compute_type(cumulative))
    run_cumprod = impl(nn.CumProdOp)(in_compute_type(cumulative))
