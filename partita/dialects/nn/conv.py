"""Convolution and pooling ``nn`` ops and their sliding-window shape rules."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    FORMAT_BINARY,
    FORMAT_UNARY,
    NNOp,
    Shape,
    UnaryOp,
    _bool_prop,
    _check_ints,
    _float_prop,
    _fmt,
    _init,
    _int_prop,
    _ints_prop,
    _shape,
    _static_product,
    _str_prop,
    _tensor,
    _value,
    broadcast_shapes,
    check_channel_vector,
    dense_from_numpy,
    dense_to_numpy,
    merge_dims,
    normalize_axis,
)


def conv_output_dim(size: int, kernel: int, stride: int, pad_lo: int, pad_hi: int,
                    dilation: int, ceil_mode: bool = False) -> int:
    """Output extent of a sliding window; ``ceil_mode`` drops a window that would start in
    the trailing padding (PyTorch / ONNX rule)."""
    if size == DYN or kernel == DYN:
        return DYN
    span = size + pad_lo + pad_hi - dilation * (kernel - 1) - 1
    if span < 0:
        raise VerifyException(f"window of extent {dilation * (kernel - 1) + 1} larger than "
                              f"padded input {size + pad_lo + pad_hi}")
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_lo:
        out -= 1
    return out



def _spatial_axes(layout: str) -> tuple[int, int, int]:
    """(channel, height, width) axes of a 4-d activation layout."""
    if layout == "NCHW":
        return 1, 2, 3
    if layout == "NHWC":
        return 3, 1, 2
    raise VerifyException(f"unsupported layout {layout!r} (expected NCHW or NHWC)")


KERNEL_LAYOUT_FOR = {"NCHW": "OIHW", "NHWC": "OHWI"}


def infer_conv2d_shape(x: Shape, w: Shape, strides: Sequence[int], padding: Sequence[int],
                       dilation: Sequence[int], groups: int, data_layout: str = "NCHW",
                       kernel_layout: str = "OIHW") -> Shape:
    """2-d convolution; ``padding`` is ``[top, left, bottom, right]``; NCHW pairs with OIHW
    and NHWC with OHWI."""
    c_ax, h_ax, w_ax = _spatial_axes(data_layout)
    if KERNEL_LAYOUT_FOR[data_layout] != kernel_layout:
        raise VerifyException(f"kernel_layout {kernel_layout!r} does not match data_layout "
                              f"{data_layout!r} (expected {KERNEL_LAYOUT_FOR[data_layout]!r})")
    if len(x) != 4 or len(w) != 4:
        raise VerifyException(f"conv2d expects rank 4 input and weight, got {len(x)} and {len(w)}")
    _check_ints(strides, 2, "strides", 1)
    _check_ints(dilation, 2, "dilation", 1)
    _check_ints(padding, 4, "padding", 0)
    if groups < 1:
        raise VerifyException(f"groups must be >= 1, got {groups}")
    if kernel_layout == "OIHW":
        out_c, in_c, kh, kw = w
    else:
        out_c, kh, kw, in_c = w
    if x[c_ax] != DYN and x[c_ax] % groups:
        raise VerifyException(f"groups {groups} does not divide input channels {x[c_ax]}")
    if out_c != DYN and out_c % groups:
        raise VerifyException(f"groups {groups} does not divide output channels {out_c}")
    if x[c_ax] != DYN and in_c != DYN and x[c_ax] != in_c * groups:
        raise VerifyException(f"input channels {x[c_ax]} != weight input channels {in_c} "
                              f"* groups {groups}")
    out = list(x)
    out[c_ax] = out_c
    out[h_ax] = conv_output_dim(x[h_ax], kh, strides[0], padding[0], padding[2], dilation[0])
    out[w_ax] = conv_output_dim(x[w_ax], kw, strides[1], padding[1], padding[3], dilation[1])
    return tuple(out)


def infer_pool2d_shape(x: Shape, pool_size: Sequence[int], strides: Sequence[int],
                       padding: Sequence[int], dilation: Sequence[int], layout: str = "NCHW",
                       ceil_mode: bool = False) -> Shape:
    """2-d max/avg pooling output shape; padding must be smaller than the window."""
    _, h_ax, w_ax = _spatial_axes(layout)
    if len(x) != 4:
        raise VerifyException(f"pool2d expects a rank 4 input, got rank {len(x)}")
    _check_ints(pool_size, 2, "pool_size", 1)
    _check_ints(strides, 2, "strides", 1)
    _check_ints(dilation, 2, "dilation", 1)
    _check_ints(padding, 4, "padding", 0)
    for i, p in enumerate(padding):
        extent = dilation[i % 2] * (pool_size[i % 2] - 1) + 1
        if p >= extent:
            raise VerifyException(f"padding {list(padding)} must be smaller than the window")
    out = list(x)
    out[h_ax] = conv_output_dim(x[h_ax], pool_size[0], strides[0], padding[0], padding[2],
                                dilation[0], ceil_mode)
    out[w_ax] = conv_output_dim(x[w_ax], pool_size[1], strides[1], padding[1], padding[3],
                                dilation[1], ceil_mode)
    return tuple(out)


def infer_global_pool_shape(x: Shape, layout: str = "NCHW") -> Shape:
    """Global pooling keeps rank 4 with H = W = 1."""
    _, h_ax, w_ax = _spatial_axes(layout)
    if len(x) != 4:
        raise VerifyException(f"global pooling expects a rank 4 input, got rank {len(x)}")
    out = list(x)
    out[h_ax] = out[w_ax] = 1
    return tuple(out)



@irdl_op_definition
class Conv2DOp(NNOp):
    """2-d convolution (no bias); ``padding`` is ``[top, left, bottom, right]``."""

    name = "nn.conv2d"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)
    strides_attr = _ints_prop("strides", (1, 1))
    padding_attr = _ints_prop("padding", (0, 0, 0, 0))
    dilation_attr = _ints_prop("dilation", (1, 1))
    groups_attr = _int_prop("groups", 1)
    data_layout_attr = _str_prop("data_layout", "NCHW")
    kernel_layout_attr = _str_prop("kernel_layout", "OIHW")
    strides = _value("strides")
    padding = _value("padding")
    dilation = _value("dilation")
    groups = _value("groups")
    data_layout = _value("data_layout")
    kernel_layout = _value("kernel_layout")
    assembly_format = "$input `,` $weight attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue | Operation, weight: SSAValue | Operation,
                 strides: Sequence[int] | None = None, padding: Sequence[int] | None = None,
                 dilation: Sequence[int] | None = None, groups: int | None = None,
                 data_layout: str | None = None, kernel_layout: str | None = None,
                 result_type: Attribute | None = None):
        if kernel_layout is None and data_layout is not None:
            kernel_layout = KERNEL_LAYOUT_FOR.get(data_layout)
        _init(self, [input, weight], result_type, strides=strides, padding=padding,
              dilation=dilation, groups=groups, data_layout=data_layout,
              kernel_layout=kernel_layout)

    def infer_shape(self) -> Shape:
        return infer_conv2d_shape(_shape(self.input), _shape(self.weight), self.strides,
                                  self.padding, self.dilation, self.groups, self.data_layout,
                                  self.kernel_layout)


class Pool2DOp(UnaryOp):
    """Shared properties and shape rule of max/avg 2-d pooling."""

    pool_size_attr = _ints_prop("pool_size")
    strides_attr = _ints_prop("strides", (1, 1))
    padding_attr = _ints_prop("padding", (0, 0, 0, 0))
    dilation_attr = _ints_prop("dilation", (1, 1))
    layout_attr = _str_prop("layout", "NCHW")
    ceil_mode_attr = _bool_prop("ceil_mode", False)
    pool_size = _value("pool_size")
    strides = _value("strides")
    padding = _value("padding")
    dilation = _value("dilation")
    layout = _value("layout")
    ceil_mode = _value("ceil_mode")

    def __init__(self, input: SSAValue | Operation, pool_size: Sequence[int],
                 strides: Sequence[int] | None = None, padding: Sequence[int] | None = None,
                 dilation: Sequence[int] | None = None, layout: str | None = None,
                 ceil_mode: bool | None = None, result_type: Attribute | None = None,
                 **extra: object):
        super().__init__(input, result_type, pool_size=pool_size, strides=strides,
                         padding=padding, dilation=dilation, layout=layout,
                         ceil_mode=ceil_mode, **extra)

    def infer_shape(self) -> Shape:
        return infer_pool2d_shape(_shape(self.input), self.pool_size, self.strides,
                                  self.padding, self.dilation, self.layout, self.ceil_mode)


@irdl_op_definition
class MaxPool2DOp(Pool2DOp):
    name = "nn.max_pool2d"


@irdl_op_definition
class AvgPool2DOp(Pool2DOp):
    """Average pooling; ``count_include_pad`` counts padding cells in the divisor."""

    name = "nn.avg_pool2d"
    count_include_pad_attr = _bool_prop("count_include_pad", False)
    count_include_pad = _value("count_include_pad")

    def __init__(self, input: SSAValue | Operation, pool_size: Sequence[int],
                 count_include_pad: bool | None = None, **kwargs):
        super().__init__(input, pool_size, count_include_pad=count_include_pad, **kwargs)


@irdl_op_definition
class GlobalAvgPool2DOp(UnaryOp):
    name = "nn.global_avg_pool2d"
    layout_attr = _str_prop("layout", "NCHW")
    layout = _value("layout")

    def __init__(self, input: SSAValue | Operation, layout: str | None = None,
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, layout=layout)

    def infer_shape(self) -> Shape:
        return infer_global_pool_shape(_shape(self.input), self.layout)


