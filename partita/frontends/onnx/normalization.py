"""ONNX converters of normalizations (Softmax, LayerNormalization, BatchNormalization, LRN)."""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import numpy_helper
from xdsl.ir import SSAValue

from partita.dialects import nn
from partita.frontends.onnx.importer import (
    CONVERTERS,
    ONNX_DTYPES,
    Importer,
    SymDim,
    Value,
    const_ints,
    const_scalar,
    converter,
    fail,
    is_const,
    is_symbolic,
    shape_of,
)


@converter("Softmax")
def _softmax(cx, ins, attrs):
    x = cx.tensor(ins[0])
    rank = len(shape_of(x))
    axis = attrs.get("axis", 1 if cx.opset < 13 else -1)
    if cx.opset < 13 and axis % rank != rank - 1:
        fail(f"opset {cx.opset} Softmax flattens to 2-D at axis {axis}; only the last "
              "axis is supported")
    return cx.emit(nn.SoftmaxOp(x, axis=axis))


@converter("LayerNormalization")
def _layer_norm(cx, ins, attrs):
    x = cx.tensor(ins[0])
    axis = attrs.get("axis", -1)
    if attrs.get("stash_type", 1) != 1:
        fail("stash_type other than float is not supported")
    if cx._used_output(1) or cx._used_output(2):
        fail("the Mean / InvStdDev outputs are not supported")
    norm_shape = shape_of(x)[axis % len(shape_of(x)):]
    scale = ins[1]
    bias = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros(norm_shape, np.float32)
    if is_const(scale):
        scale = np.broadcast_to(scale, norm_shape).copy()
    if is_const(bias):
        bias = np.broadcast_to(bias, norm_shape).copy()
    gamma, beta = cx.tensor(scale, x), cx.tensor(bias, x)
    return cx.emit(nn.LayerNormOp(x, gamma, beta, axis=axis,
                                  epsilon=attrs.get("epsilon", 1e-5)))



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


