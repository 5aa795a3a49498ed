"""ONNX converters of MatMul and Gemm."""

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


def transpose_value(cx: Importer, v: Value, like: SSAValue | None = None) -> SSAValue:
    """A 2-D value transposed: constants at import time, others by ``nn.transpose``."""
    if is_const(v):
        return cx.tensor(np.ascontiguousarray(np.asarray(v).T), like)
    return cx.emit(nn.TransposeOp(cx.tensor(v), [1, 0]))


@converter("Gemm")
def _gemm(cx, ins, attrs):
    a = cx.tensor(ins[0])
    if len(shape_of(a)) != 2:
        fail("Gemm input A must have rank 2")
    if attrs.get("transA", 0):
        a = cx.emit(nn.TransposeOp(a, [1, 0]))
    b = ins[1]
    w = cx.tensor(b, a) if attrs.get("transB", 0) else transpose_value(cx, b, a)
    out = cx.emit(nn.DenseOp(a, w))
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if alpha != 1.0:
        out = cx.emit(nn.MultiplyOp(out, cx.tensor(np.asarray(alpha, np.float32), a)))
    if len(ins) > 2 and ins[2] is not None and beta != 0.0:
        c = ins[2]
        if is_const(c):
            c = np.asarray(c, np.float32) * np.float32(beta)
        elif beta != 1.0:
            c = cx.emit(nn.MultiplyOp(c, cx.tensor(np.asarray(beta, np.float32), a)))
        out = cx.emit(nn.AddOp(out, cx.tensor(c, a)))
    return out


@converter("MatMul")
def _matmul(cx, ins, attrs):
    a, b = ins
    if isinstance(a, SSAValue) and is_const(b) and np.asarray(b).ndim == 2:
        if len(shape_of(a)) < 2:
            fail("MatMul with a rank-1 lhs is not supported")
        return cx.emit(nn.DenseOp(a, transpose_value(cx, b, a)))
    a, b = cx.operands(a, b)
    if len(shape_of(a)) < 2 or len(shape_of(b)) < 2:
        fail("MatMul with rank-1 operands is not supported")
    return cx.emit(nn.MatmulOp(a, b))


