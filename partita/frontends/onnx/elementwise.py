"""ONNX converters of element-wise ops (arithmetic, activations, Clip)."""

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


def _binary(op_cls):
    def convert(cx: Importer, ins, attrs):
        if cx.opset < 7 and attrs.get("broadcast"):
            fail("legacy broadcast attribute")
        a, b = cx.operands(ins[0], ins[1])
        return cx.emit(op_cls(a, b))

    return convert


for _t, _cls in (("Add", nn.AddOp), ("Sub", nn.SubtractOp), ("Mul", nn.MultiplyOp),
                 ("Div", nn.DivideOp)):
    CONVERTERS[_t] = _binary(_cls)


@converter("Sum")
def _sum(cx, ins, attrs):
    vals = cx.operands(*ins)
    out = vals[0]
    for v in vals[1:]:
        out = cx.emit(nn.AddOp(out, v))
    return out


def _unary(op_cls):
    return lambda cx, ins, attrs: cx.emit(op_cls(cx.tensor(ins[0])))


for _t, _cls in (("Relu", nn.ReluOp), ("Tanh", nn.TanhOp), ("Sigmoid", nn.SigmoidOp)):
    CONVERTERS[_t] = _unary(_cls)


@converter("Gelu")
def _gelu(cx, ins, attrs):
    approximate = attrs.get("approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    return cx.emit(nn.GeluOp(cx.tensor(ins[0]), approximate=approximate))


@converter("Erf")
def _erf(cx, ins, attrs):
    fail("Erf is only supported inside a GELU subgraph x * 0.5 * (1 + Erf(x / sqrt(2)))")



@converter("Clip")
def _clip(cx, ins, attrs):
    x = cx.tensor(ins[0])
    big = float(np.finfo(np.float32).max)
    if cx.opset < 11:
        lo, hi = attrs.get("min", -big), attrs.get("max", big)
    else:
        lo = const_scalar(ins[1], "min") if len(ins) > 1 and ins[1] is not None else -big
        hi = const_scalar(ins[2], "max") if len(ins) > 2 and ins[2] is not None else big
    lo, hi = max(lo, -big), min(hi, big)
    return cx.emit(nn.ClipOp(x, lo, hi))


