"""ONNX converters of normalizations: Softmax / LogSoftmax / Hardmax, LayerNormalization
(all outputs), RMSNormalization, GroupNormalization, InstanceNormalization, LpNormalization,
MeanVarianceNormalization, BatchNormalization and LRN."""

from __future__ import annotations

import math

import numpy as np

from partita.dialects import nn
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.values import ONNX_DTYPES, fail, fail_variant, is_const, shape_of

SOFTMAX_OPS = {"Softmax": nn.SoftmaxOp, "LogSoftmax": nn.LogSoftmaxOp, "Hardmax": nn.HardmaxOp}


def _static_product(dims) -> int:
    return math.prod(dims) if nn.DYN not in dims else nn.DYN


@converter(*SOFTMAX_OPS)
def _softmax(cx, ins, attrs):
    op_type = SOFTMAX_OPS[cx.node.op_type]
    x = cx.tensor(ins[0])
    shape = shape_of(x)
    rank = len(shape)
    axis = nn.normalize_axis(attrs.get("axis", 1 if cx.opset < 13 else -1), max(rank, 1))
    if cx.opset >= 13 or axis == rank - 1:
        return cx.emit(op_type(x, axis=axis))
    # Before opset 13 the input is coerced to 2-D at axis: [..axis) and [axis..) flatten
    # into one row each, and the op normalizes along the row.
    if sum(d == nn.DYN for d in shape) > 1:
        fail(f"opset {cx.opset} {cx.node.op_type} flattens at axis {axis}: more than one "
             "dynamic dimension is not supported")
    rows = cx.emit(nn.ReshapeOp(x, [_static_product(shape[:axis]),
                                    _static_product(shape[axis:])]))
    return cx.emit(nn.ReshapeOp(cx.emit(op_type(rows, axis=1)), shape))


def _stash_type_matches(cx, x, attrs) -> bool:
    """Whether the stash type (ONNX's type of the statistics) is x's element type."""
    stash = ONNX_DTYPES.get(attrs.get("stash_type", 1))
    return stash is not None and stash == nn.numpy_dtype(x.type.element_type)


def _broadcast_const(cx, v, shape, like, what):
    """A parameter of shape ``shape``: constants broadcast at import time, values must
    already have it."""
    if is_const(v):
        return cx.tensor(np.broadcast_to(v, shape).copy(), like)
    if shape_of(v) != tuple(shape):
        fail(f"a {what} of shape {list(shape_of(v))} computed at run time must have the "
             f"normalized shape {list(shape)}")
    return v


@converter("LayerNormalization")
def _layer_norm(cx, ins, attrs):
    x = cx.tensor(ins[0])
    shape = shape_of(x)
    axis = nn.normalize_axis(attrs.get("axis", -1), len(shape))
    eps = attrs.get("epsilon", 1e-5)
    norm_shape = shape[axis:]
    if nn.DYN in norm_shape:
        fail("LayerNormalization over a dynamic dimension is not supported")
    # Statistics are computed in f32 or wider whatever stash_type says (f16 / bf16 inputs
    # compute in f32, f64 in f64); the Mean / InvStdDev outputs have the stash type.
    stats_used = cx._used_output(1) or cx._used_output(2)
    if stats_used and not _stash_type_matches(cx, x, attrs):
        fail_variant("the Mean / InvStdDev outputs in a stash_type other than the input's type "
                     "are not supported")
    bias = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros(norm_shape, np.float32)
    gamma = _broadcast_const(cx, ins[1], norm_shape, x, "scale")
    beta = _broadcast_const(cx, bias, norm_shape, x, "bias")
    out = [cx.emit(nn.LayerNormOp(x, gamma, beta, axis=axis, epsilon=eps))]
    axes = list(range(axis, len(shape)))
    if cx._used_output(1):
        out.append(cx.emit(nn.ReduceMeanOp(x, axes, keepdims=True)))
    elif stats_used:
        out.append(None)
    if cx._used_output(2):
        out.append(cx.emit(nn.ReduceInvStdDevOp(x, axes, keepdims=True, epsilon=eps)))
    return out


@converter("RMSNormalization")
def _rms_norm(cx, ins, attrs):
    x = cx.tensor(ins[0])
    axis = nn.normalize_axis(attrs.get("axis", -1), len(shape_of(x)))
    scale = cx.tensor(ins[1], x)
    return cx.emit(nn.RMSNormOp(x, scale, axis=axis, epsilon=attrs.get("epsilon", 1e-5)))


def _channels(x) -> int:
    shape = shape_of(x)
    if len(shape) < 2 or shape[1] == nn.DYN:
        fail("the channel dimension (1) must be static")
    return shape[1]


@converter("GroupNormalization")
def _group_norm(cx, ins, attrs):
    x = cx.tensor(ins[0])
    groups, channels = attrs["num_groups"], _channels(x)
    if groups < 1 or channels % groups:
        fail(f"num_groups {groups} does not divide the {channels} channels")
    scale, bias = ins[1], ins[2]
    if cx.opset < 21:  # opset 18: one scale and bias per group
        if not (is_const(scale) and is_const(bias)):
            fail("opset 18 GroupNormalization with per-group scale / bias computed at run "
                 "time is not supported")
        scale = np.repeat(np.asarray(scale), channels // groups)
        bias = np.repeat(np.asarray(bias), channels // groups)
    return cx.emit(nn.GroupNormOp(x, cx.tensor(scale, x), cx.tensor(bias, x), groups,
                                  epsilon=attrs.get("epsilon", 1e-5)))


@converter("InstanceNormalization")
def _instance_norm(cx, ins, attrs):
    x = cx.tensor(ins[0])
    return cx.emit(nn.GroupNormOp(x, cx.tensor(ins[1], x), cx.tensor(ins[2], x),
                                  _channels(x), epsilon=attrs.get("epsilon", 1e-5)))


@converter("LpNormalization")
def _lp_norm(cx, ins, attrs):
    p = attrs.get("p", 2)
    if p not in (1, 2):
        fail(f"LpNormalization p must be 1 or 2, got {p}")
    return cx.emit(nn.LpNormOp(cx.tensor(ins[0]), axis=attrs.get("axis", -1), p=p))


@converter("MeanVarianceNormalization")
def _mean_variance_norm(cx, ins, attrs):
    x = cx.tensor(ins[0])
    axes = nn.normalize_axes(attrs.get("axes", [0, 2, 3]), len(shape_of(x)))
    return cx.emit(nn.MeanVarianceNormOp(x, axes))


@converter("BatchNormalization")
def _batch_norm(cx, ins, attrs):
    if attrs.get("training_mode", 0):
        fail("training_mode is not supported (inference only)")
    if any(cx._used_output(i) for i in range(1, 5)):
        fail("the running-statistics outputs are not supported (inference only)")
    if cx.opset < 9 or attrs.get("spatial", 1) != 1:
        fail("non-spatial batch normalization is not supported")
    x = cx.tensor(ins[0])
    rest = [cx.tensor(v, x) for v in ins[1:5]]
    return [cx.emit(nn.BatchNormOp(x, *rest, axis=1, epsilon=attrs.get("epsilon", 1e-5)))]



@converter("LRN")
def _lrn(cx, ins, attrs):
    return cx.emit(nn.LRNOp(cx.tensor(ins[0]), size=attrs["size"], axis=1,
                            alpha=attrs.get("alpha", 1e-4), beta=attrs.get("beta", 0.75),
                            bias=attrs.get("bias", 1.0)))


