"""ONNX converters of convolutions and pools."""

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


def spatial_attrs(cx, attrs, x_shape, kernel):
    """(strides, [t, l, b, r] padding, dilations) of a 2-d Conv/Pool node."""
    if len(x_shape) != 4 or len(kernel) != 2:
        fail(f"only 2-d spatial ops are supported (input rank {len(x_shape)})")
    strides = list(attrs.get("strides", [1, 1]))
    dilations = list(attrs.get("dilations", [1, 1]))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad == "NOTSET":
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
    elif auto_pad == "VALID":
        pads = [0, 0, 0, 0]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for size, k, s, d in zip(x_shape[2:], kernel, strides, dilations):
            if size == nn.DYN:
                fail(f"auto_pad {auto_pad} needs static spatial dimensions")
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            lo.append(small if auto_pad == "SAME_UPPER" else big)
            hi.append(big if auto_pad == "SAME_UPPER" else small)
        pads = lo + hi
    else:
        fail(f"unsupported auto_pad '{auto_pad}'")
    return strides, pads, dilations


@converter("Conv")
def _conv(cx, ins, attrs):
    x = cx.tensor(ins[0])
    w = cx.tensor(ins[1], x)
    kernel = attrs.get("kernel_shape", list(shape_of(w)[2:]))
    strides, pads, dilations = spatial_attrs(cx, attrs, shape_of(x), kernel)
    out = cx.emit(nn.Conv2DOp(x, w, strides=strides, padding=pads, dilation=dilations,
                              groups=attrs.get("group", 1)))
    if len(ins) > 2 and ins[2] is not None:
        out = cx.emit(nn.BiasAddOp(out, cx.tensor(ins[2], x), axis=1))
    return out



def _pool(op_cls):
    def convert(cx, ins, attrs):
        if cx._used_output(1):
            fail("the Indices output is not supported")
        if attrs.get("storage_order", 0):
            fail("storage_order 1 is not supported")
        x = cx.tensor(ins[0])
        kernel = list(attrs["kernel_shape"])
        strides, pads, dilations = spatial_attrs(cx, attrs, shape_of(x), kernel)
        extra = {}
        if op_cls is nn.AvgPool2DOp:
            extra["count_include_pad"] = bool(attrs.get("count_include_pad", 0))
        return [cx.emit(op_cls(x, kernel, strides=strides, padding=pads, dilation=dilations,
                               ceil_mode=bool(attrs.get("ceil_mode", 0)), **extra))]

    return convert


CONVERTERS["MaxPool"] = _pool(nn.MaxPool2DOp)
CONVERTERS["AveragePool"] = _pool(nn.AvgPool2DOp)


@converter("GlobalAveragePool")
def _global_avg_pool(cx, ins, attrs):
    return cx.emit(nn.GlobalAvgPool2DOp(cx.tensor(ins[0])))


