"""Convolution and pooling ``nn`` ops, their sliding-window shape rules, and the window
rearrangements that undo them (col2im, max-unpooling)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import IntegerType, StringAttr, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    FLOATS,
    INTEGERS,
    Dims,
    NNOp,
    OpKind,
    Shape,
    ShapeArith,
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
    kind_trait,
    merge_dims,
)
from partita.dialects.nn.linalg import IntegerProductOp


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


def window_extent(arith: Any, size: Any, kernel: int, stride: int, pad_lo: int, pad_hi: int, dilation: int,
                  ceil_mode: bool) -> Any:
    """:func:`conv_output_dim` of a run-time ``size`` in ``arith`` (a shape function's
    ``ShapeBuilder``, a kernel's C expressions), the window's span at least 0 (a bound
    shape that leaves none is refused when the plan binds)."""
    span = arith.add(size, pad_lo + pad_hi - dilation * (kernel - 1) - 1)
    if not ceil_mode:
        return arith.add(arith.floordiv(span, stride), 1)
    out = arith.add(arith.floordiv(arith.add(span, stride - 1), stride), 1)
    # A last window starting in the trailing padding is dropped.
    last = arith.mul(arith.add(out, -1), stride)
    return arith.select_ge(last, arith.add(size, pad_lo), arith.add(out, -1), out)


SPATIAL_LETTERS = {1: "W", 2: "HW", 3: "DHW"}


def channels_first(rank: int) -> str:
    """``NCW`` / ``NCHW`` / ``NCDHW`` for ``rank`` spatial dims."""
    return "NC" + SPATIAL_LETTERS[rank]


def channels_last(rank: int) -> str:
    """``NWC`` / ``NHWC`` / ``NDHWC`` for ``rank`` spatial dims."""
    return "N" + SPATIAL_LETTERS[rank] + "C"


def layout_axes(layout: str, rank: int) -> tuple[int, tuple[int, ...]]:
    """(channel axis, spatial axes) of an activation layout with ``rank`` spatial dims."""
    if layout not in (channels_first(rank), channels_last(rank)):
        raise VerifyException(f"unsupported layout {layout!r} (expected "
                              f"{channels_first(rank)} or {channels_last(rank)})")
    spatial = tuple(i for i, c in enumerate(layout) if c not in "NC")
    return layout.index("C"), spatial


def _spatial_axes(layout: str) -> tuple[int, int, int]:
    """(channel, height, width) axes of a 4-d activation layout."""
    c, (h, w) = layout_axes(layout, 2)
    return c, h, w


def kernel_layout_for(data_layout: str) -> str:
    """OIHW for NCHW, OHWI for NHWC (and the 1-d / 3-d analogues)."""
    spatial = data_layout.replace("N", "").replace("C", "")
    return "OI" + spatial if data_layout.index("C") == 1 else "O" + spatial + "I"


KERNEL_LAYOUT_FOR = {"NCHW": "OIHW", "NHWC": "OHWI"}


def infer_conv_shape(x: Shape, w: Shape, strides: Sequence[int], padding: Sequence[int],
                     dilation: Sequence[int], groups: int, data_layout: str,
                     kernel_layout: str, rank: int) -> Shape:
    """Convolution over ``rank`` spatial dims; ``padding`` is all leading pads, then all
    trailing pads (ONNX ``pads``, Relay's ``(top, left, bottom, right)``)."""
    c_ax, spatial = layout_axes(data_layout, rank)
    if kernel_layout_for(data_layout) != kernel_layout:
        raise VerifyException(f"kernel_layout {kernel_layout!r} does not match data_layout "
                              f"{data_layout!r} (expected {kernel_layout_for(data_layout)!r})")
    if len(x) != rank + 2 or len(w) != rank + 2:
        raise VerifyException(f"conv{rank}d expects rank {rank + 2} input and weight, got "
                              f"{len(x)} and {len(w)}")
    _check_ints(strides, rank, "strides", 1)
    _check_ints(dilation, rank, "dilation", 1)
    _check_ints(padding, 2 * rank, "padding", 0)
    if groups < 1:
        raise VerifyException(f"groups must be >= 1, got {groups}")
    out_c, in_c = w[0], w[kernel_layout.index("I")]
    kernel = [w[kernel_layout.index(c)] for c in SPATIAL_LETTERS[rank]]
    if x[c_ax] != DYN and x[c_ax] % groups:
        raise VerifyException(f"groups {groups} does not divide input channels {x[c_ax]}")
    if out_c != DYN and out_c % groups:
        raise VerifyException(f"groups {groups} does not divide output channels {out_c}")
    if x[c_ax] != DYN and in_c != DYN and x[c_ax] != in_c * groups:
        raise VerifyException(f"input channels {x[c_ax]} != weight input channels {in_c} "
                              f"* groups {groups}")
    out = list(x)
    out[c_ax] = out_c
    for k, ax in enumerate(spatial):
        out[ax] = conv_output_dim(x[ax], kernel[k], strides[k], padding[k], padding[rank + k],
                                  dilation[k])
    return tuple(out)


def infer_conv2d_shape(x: Shape, w: Shape, strides: Sequence[int], padding: Sequence[int],
                       dilation: Sequence[int], groups: int, data_layout: str = "NCHW",
                       kernel_layout: str = "OIHW") -> Shape:
    """2-d convolution; ``padding`` is ``[top, left, bottom, right]``; NCHW pairs with OIHW
    and NHWC with OHWI."""
    return infer_conv_shape(x, w, strides, padding, dilation, groups, data_layout,
                            kernel_layout, 2)


def conv_transpose_output_dim(size: int, kernel: int, stride: int, pad_lo: int, pad_hi: int,
                              dilation: int, output_padding: int) -> int:
    """Output extent of a transposed convolution (the input extent of the convolution it
    is the gradient of, plus ``output_padding``)."""
    if size == DYN or kernel == DYN:
        return DYN
    out = (size - 1) * stride - pad_lo - pad_hi + dilation * (kernel - 1) + output_padding + 1
    if out < 1:
        raise VerifyException(f"transposed convolution output extent {out} is not positive")
    return out


def infer_conv_transpose_shape(x: Shape, w: Shape, strides: Sequence[int],
                               padding: Sequence[int], output_padding: Sequence[int],
                               dilation: Sequence[int], groups: int, rank: int) -> Shape:
    """Transposed convolution, NC+spatial data and IO+spatial weight
    ``[C_in, C_out / groups, k...]`` (ONNX ConvTranspose)."""
    if len(x) != rank + 2 or len(w) != rank + 2:
        raise VerifyException(f"conv{rank}d_transpose expects rank {rank + 2} input and "
                              f"weight, got {len(x)} and {len(w)}")
    _check_ints(strides, rank, "strides", 1)
    _check_ints(dilation, rank, "dilation", 1)
    _check_ints(padding, 2 * rank, "padding", 0)
    _check_ints(output_padding, rank, "output_padding", 0)
    if groups < 1:
        raise VerifyException(f"groups must be >= 1, got {groups}")
    merge_dims(x[1], w[0], "input channels must match the weight's first dimension")
    if w[0] != DYN and w[0] % groups:
        raise VerifyException(f"groups {groups} does not divide input channels {w[0]}")
    out = [x[0], w[1] * groups if w[1] != DYN else DYN]
    for k in range(rank):
        out.append(conv_transpose_output_dim(x[2 + k], w[2 + k], strides[k], padding[k],
                                             padding[rank + k], dilation[k],
                                             output_padding[k]))
    return tuple(out)


def infer_pool_shape(x: Shape, pool_size: Sequence[int], strides: Sequence[int],
                     padding: Sequence[int], dilation: Sequence[int], layout: str,
                     ceil_mode: bool, rank: int) -> Shape:
    """Max / avg / Lp pooling over ``rank`` spatial dims; padding must be smaller than the
    window."""
    _, spatial = layout_axes(layout, rank)
    if len(x) != rank + 2:
        raise VerifyException(f"pool{rank}d expects a rank {rank + 2} input, got rank {len(x)}")
    _check_ints(pool_size, rank, "pool_size", 1)
    _check_ints(strides, rank, "strides", 1)
    _check_ints(dilation, rank, "dilation", 1)
    _check_ints(padding, 2 * rank, "padding", 0)
    for i, p in enumerate(padding):
        extent = dilation[i % rank] * (pool_size[i % rank] - 1) + 1
        if p >= extent:
            raise VerifyException(f"padding {list(padding)} must be smaller than the window")
    out = list(x)
    for k, ax in enumerate(spatial):
        out[ax] = conv_output_dim(x[ax], pool_size[k], strides[k], padding[k],
                                  padding[rank + k], dilation[k], ceil_mode)
    return tuple(out)


def infer_pool2d_shape(x: Shape, pool_size: Sequence[int], strides: Sequence[int],
                       padding: Sequence[int], dilation: Sequence[int], layout: str = "NCHW",
                       ceil_mode: bool = False) -> Shape:
    """2-d max/avg pooling output shape; padding must be smaller than the window."""
    return infer_pool_shape(x, pool_size, strides, padding, dilation, layout, ceil_mode, 2)


def infer_global_pool_shape(x: Shape, layout: str = "NCHW") -> Shape:
    """Global pooling keeps rank 4 with H = W = 1."""
    _, h_ax, w_ax = _spatial_axes(layout)
    if len(x) != 4:
        raise VerifyException(f"global pooling expects a rank 4 input, got rank {len(x)}")
    out = list(x)
    out[h_ax] = out[w_ax] = 1
    return tuple(out)


class ConvOp(NNOp):
    """Convolution (no bias) over ``SPATIAL`` dims, grouped when ``groups > 1`` (depthwise
    when ``groups`` is the channel count); ``padding`` is the leading pad of each spatial
    dim, then the trailing ones. Data ``NC<spatial>`` pairs with weight ``OI<spatial>``, and
    channels-last data with ``O<spatial>I``."""
    traits = kind_trait(OpKind.OUT_EWISE_FUSABLE)

    SPATIAL: ClassVar[int] = 2
    ALLOWED_TYPES: ClassVar = FLOATS
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)
    groups_attr = _int_prop("groups", 1)
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
            kernel_layout = kernel_layout_for(data_layout)
        _init(self, [input, weight], result_type, strides=strides, padding=padding,
              dilation=dilation, groups=groups, data_layout=data_layout,
              kernel_layout=kernel_layout)

    def infer_shape(self) -> Shape:
        return infer_conv_shape(_shape(self.input), _shape(self.weight), self.strides,
                                self.padding, self.dilation, self.groups, self.data_layout,
                                self.kernel_layout, self.SPATIAL)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        """Symbolic result dims (shape functions; ``arith`` is their ``ShapeBuilder``)."""
        rank = self.SPATIAL
        x, w = dims(self.input), dims(self.weight)
        c_ax, spatial = layout_axes(self.data_layout, rank)
        out = list(x)
        out[c_ax] = w[0]
        for k, ax in enumerate(spatial):
            kernel = w[self.kernel_layout.index(SPATIAL_LETTERS[rank][k])]
            out[ax] = arith.window(x[ax], kernel, self.strides[k], self.padding[k],
                                   self.padding[rank + k], self.dilation[k], False, self)
        return out


@irdl_op_definition
class Conv1DOp(ConvOp):
    """1-d convolution (``NCW`` / ``OIW`` or ``NWC`` / ``OWI``)."""

    name = "nn.conv1d"
    SPATIAL: ClassVar[int] = 1
    strides_attr = _ints_prop("strides", (1,))
    padding_attr = _ints_prop("padding", (0, 0))
    dilation_attr = _ints_prop("dilation", (1,))
    data_layout_attr = _str_prop("data_layout", "NCW")
    kernel_layout_attr = _str_prop("kernel_layout", "OIW")


@irdl_op_definition
class Conv2DOp(ConvOp):
    """2-d convolution (no bias); ``padding`` is ``[top, left, bottom, right]``."""

    name = "nn.conv2d"
    strides_attr = _ints_prop("strides", (1, 1))
    padding_attr = _ints_prop("padding", (0, 0, 0, 0))
    dilation_attr = _ints_prop("dilation", (1, 1))
    data_layout_attr = _str_prop("data_layout", "NCHW")
    kernel_layout_attr = _str_prop("kernel_layout", "OIHW")


@irdl_op_definition
class Conv3DOp(ConvOp):
    """3-d convolution (``NCDHW`` / ``OIDHW`` or ``NDHWC`` / ``ODHWI``)."""

    name = "nn.conv3d"
    SPATIAL: ClassVar[int] = 3
    strides_attr = _ints_prop("strides", (1, 1, 1))
    padding_attr = _ints_prop("padding", (0, 0, 0, 0, 0, 0))
    dilation_attr = _ints_prop("dilation", (1, 1, 1))
    data_layout_attr = _str_prop("data_layout", "NCDHW")
    kernel_layout_attr = _str_prop("kernel_layout", "OIDHW")


class ConvTransposeOp(NNOp):
    """Transposed convolution (the gradient of ``conv<n>d`` with respect to its input;
    ONNX ConvTranspose): ``NC<spatial>`` data, weight ``[C_in, C_out / groups, k...]``;
    ``padding`` crops the full output (leading pads, then trailing ones) and
    ``output_padding`` extends it at the end."""
    traits = kind_trait(OpKind.OUT_EWISE_FUSABLE)

    SPATIAL: ClassVar[int] = 2
    ALLOWED_TYPES: ClassVar = FLOATS
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)
    groups_attr = _int_prop("groups", 1)
    strides = _value("strides")
    padding = _value("padding")
    output_padding = _value("output_padding")
    dilation = _value("dilation")
    groups = _value("groups")
    assembly_format = "$input `,` $weight attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue | Operation, weight: SSAValue | Operation,
                 strides: Sequence[int] | None = None, padding: Sequence[int] | None = None,
                 output_padding: Sequence[int] | None = None,
                 dilation: Sequence[int] | None = None, groups: int | None = None,
                 result_type: Attribute | None = None):
        _init(self, [input, weight], result_type, strides=strides, padding=padding,
              output_padding=output_padding, dilation=dilation, groups=groups)

    def infer_shape(self) -> Shape:
        return infer_conv_transpose_shape(_shape(self.input), _shape(self.weight),
                                          self.strides, self.padding, self.output_padding,
                                          self.dilation, self.groups, self.SPATIAL)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        """Symbolic result dims (shape functions)."""
        rank = self.SPATIAL
        x, w = dims(self.input), dims(self.weight)
        if not isinstance(w[1], int) or not all(isinstance(k, int) for k in w[2:]):
            raise VerifyException("a transposed convolution needs a static weight shape")
        out = [x[0], w[1] * self.groups]
        for k in range(rank):
            extra = (self.dilation[k] * (w[2 + k] - 1) + self.output_padding[k] + 1
                     - self.padding[k] - self.padding[rank + k])
            out.append(arith.add(arith.mul(arith.sub(x[2 + k], 1), self.strides[k]), extra))
        return out


@irdl_op_definition
class Conv1DTransposeOp(ConvTransposeOp):
    name = "nn.conv1d_transpose"
    SPATIAL: ClassVar[int] = 1
    strides_attr = _ints_prop("strides", (1,))
    padding_attr = _ints_prop("padding", (0, 0))
    output_padding_attr = _ints_prop("output_padding", (0,))
    dilation_attr = _ints_prop("dilation", (1,))


@irdl_op_definition
class Conv2DTransposeOp(ConvTransposeOp):
    name = "nn.conv2d_transpose"
    strides_attr = _ints_prop("strides", (1, 1))
    padding_attr = _ints_prop("padding", (0, 0, 0, 0))
    output_padding_attr = _ints_prop("output_padding", (0, 0))
    dilation_attr = _ints_prop("dilation", (1, 1))


@irdl_op_definition
class Conv3DTransposeOp(ConvTransposeOp):
    name = "nn.conv3d_transpose"
    SPATIAL: ClassVar[int] = 3
    strides_attr = _ints_prop("strides", (1, 1, 1))
    padding_attr = _ints_prop("padding", (0, 0, 0, 0, 0, 0))
    output_padding_attr = _ints_prop("output_padding", (0, 0, 0))
    dilation_attr = _ints_prop("dilation", (1, 1, 1))


@irdl_op_definition
class ConvIntegerOp(IntegerProductOp):
    """``conv(input - input_zero_point, weight - weight_zero_point)`` with i32
    accumulation and result (ONNX ConvInteger) over 1 to 3 spatial dims: ``NC<spatial>``
    i8 / ui8 data with an ``OI<spatial>`` i8 / ui8 weight, or channels-last data with an
    ``O<spatial>I`` weight (``data_layout`` / ``kernel_layout``, as ``conv<n>d``'s; absent:
    channels first), grouped when ``groups > 1``. The input
    zero point is one element of the input's type, the weight's one element or one per
    output channel of the weight's type; the padding cells hold the input zero point (they
    add nothing). ``padding`` is the leading pad of each spatial dim, then the trailing
    ones. Integer sums are exact, which a float convolution of the shifted operands is
    not for large windows: hence its own op."""

    name = "nn.conv_integer"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    input_zero_point = operand_def(TensorType)
    weight_zero_point = operand_def(TensorType)
    result = result_def(TensorType)
    strides_attr = _ints_prop("strides")
    padding_attr = _ints_prop("padding")
    dilation_attr = _ints_prop("dilation")
    groups_attr = _int_prop("groups", 1)
    # The rank varies (1 to 3 spatial dims), so the default (channels first) is no fixed
    # string: absent means it, and only another layout is spelled.
    data_layout_attr = opt_prop_def(StringAttr, prop_name="data_layout")
    kernel_layout_attr = opt_prop_def(StringAttr, prop_name="kernel_layout")
    strides = _value("strides")
    padding = _value("padding")
    dilation = _value("dilation")
    groups = _value("groups")
    assembly_format = ("$input `,` $weight `,` $input_zero_point `,` $weight_zero_point attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, input: SSAValue | Operation, weight: SSAValue | Operation,
                 input_zero_point: SSAValue | Operation, weight_zero_point: SSAValue | Operation,
                 strides: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                 groups: int | None = None, result_type: Attribute | None = None,
                 data_layout: str | None = None, kernel_layout: str | None = None):
        if kernel_layout is None and data_layout is not None:
            kernel_layout = kernel_layout_for(data_layout)
        if data_layout is not None and data_layout.index("C") == 1 and kernel_layout == kernel_layout_for(data_layout):
            data_layout = kernel_layout = None  # channels first: the default, left unspelled
        _init(self, [input, weight, input_zero_point, weight_zero_point], result_type,
              strides=strides, padding=padding, dilation=dilation, groups=groups,
              data_layout=data_layout, kernel_layout=kernel_layout)

    @property
    def SPATIAL(self) -> int:
        """The number of spatial dims (the input's rank less two)."""
        return len(_shape(self.input)) - 2

    @property
    def data_layout(self) -> str:
        attr = self.data_layout_attr
        return channels_first(self.SPATIAL) if attr is None else attr.data

    @property
    def kernel_layout(self) -> str:
        attr = self.kernel_layout_attr
        return kernel_layout_for(self.data_layout) if attr is None else attr.data

    def factors(self) -> tuple[tuple[SSAValue, SSAValue, str], ...]:
        return (self.input, self.input_zero_point, "input"), (self.weight, self.weight_zero_point, "weight")

    def infer_shape(self) -> Shape:
        x, w = _shape(self.input), _shape(self.weight)
        rank = len(x) - 2
        if rank not in SPATIAL_LETTERS:
            raise VerifyException(f"conv_integer expects an input of rank 3 to 5, got rank {len(x)}")
        zx, zw = _shape(self.input_zero_point), _shape(self.weight_zero_point)
        if DYN in zx or _static_product(zx) != 1:
            raise VerifyException(f"input zero point must have one element, got shape {_fmt(zx)}")
        if DYN in zw or len(zw) > 1 or (zw and zw[0] not in (1, w[0])):
            raise VerifyException(f"weight zero point must be one element or one per output channel "
                                  f"({w[0]}), got shape {_fmt(zw)}")
        return infer_conv_shape(x, w, self.strides, self.padding, self.dilation, self.groups,
                                self.data_layout, self.kernel_layout, rank)

    result_dims = ConvOp.result_dims


class PoolOp(UnaryOp):
    """Shared properties and shape rule of windowed pooling over ``SPATIAL`` dims."""
    traits = kind_trait(OpKind.COMM_REDUCE)

    SPATIAL: ClassVar[int] = 2
    ALLOWED_TYPES: ClassVar = FLOATS
    pool_size_attr = _ints_prop("pool_size")
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
        return infer_pool_shape(_shape(self.input), self.pool_size, self.strides,
                                self.padding, self.dilation, self.layout, self.ceil_mode,
                                self.SPATIAL)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        """Symbolic result dims (shape functions)."""
        rank = self.SPATIAL
        out = list(dims(self.input))
        _, spatial = layout_axes(self.layout, rank)
        for k, ax in enumerate(spatial):
            out[ax] = arith.window(out[ax], self.pool_size[k], self.strides[k],
                                   self.padding[k], self.padding[rank + k], self.dilation[k],
                                   self.ceil_mode, self)
        return out


class Pool1DOp(PoolOp):
    SPATIAL: ClassVar[int] = 1
    strides_attr = _ints_prop("strides", (1,))
    padding_attr = _ints_prop("padding", (0, 0))
    dilation_attr = _ints_prop("dilation", (1,))
    layout_attr = _str_prop("layout", "NCW")


class Pool2DOp(PoolOp):
    """Shared properties and shape rule of 2-d pooling."""

    strides_attr = _ints_prop("strides", (1, 1))
    padding_attr = _ints_prop("padding", (0, 0, 0, 0))
    dilation_attr = _ints_prop("dilation", (1, 1))
    layout_attr = _str_prop("layout", "NCHW")


class Pool3DOp(PoolOp):
    SPATIAL: ClassVar[int] = 3
    strides_attr = _ints_prop("strides", (1, 1, 1))
    padding_attr = _ints_prop("padding", (0, 0, 0, 0, 0, 0))
    dilation_attr = _ints_prop("dilation", (1, 1, 1))
    layout_attr = _str_prop("layout", "NCDHW")


class AvgPoolOp(PoolOp):
    """Average pooling; ``count_include_pad`` counts the declared padding cells in the
    divisor (never the extra cells ``ceil_mode`` reads past it)."""

    count_include_pad_attr = _bool_prop("count_include_pad", False)
    count_include_pad = _value("count_include_pad")

    def __init__(self, input: SSAValue | Operation, pool_size: Sequence[int],
                 count_include_pad: bool | None = None, **kwargs):
        super().__init__(input, pool_size, count_include_pad=count_include_pad, **kwargs)


class LpPoolOp(PoolOp):
    """Lp pooling: ``(sum |x|^p) ^ (1/p)`` over the window (padding cells are 0)."""

    p_attr = _float_prop("p", 2.0)
    p = _value("p")

    def __init__(self, input: SSAValue | Operation, pool_size: Sequence[int],
                 p: float | None = None, **kwargs):
        super().__init__(input, pool_size, p=None if p is None else float(p), **kwargs)


class MaxPoolOp(PoolOp):
    """Max pooling (padding cells are ``-inf``, the lowest value of an integer type)."""

    ALLOWED_TYPES: ClassVar = FLOATS + INTEGERS


@irdl_op_definition
class MaxPool1DOp(MaxPoolOp, Pool1DOp):
    name = "nn.max_pool1d"


@irdl_op_definition
class MaxPool2DOp(MaxPoolOp, Pool2DOp):
    name = "nn.max_pool2d"


@irdl_op_definition
class MaxPool3DOp(MaxPoolOp, Pool3DOp):
    name = "nn.max_pool3d"


class MaxPoolIndicesOp(MaxPoolOp):
    """Where each window's maximum is (ONNX MaxPool's ``Indices``): its row-major offset
    in the whole input in channels-first order (``((n * C + c) * H + h) * W + w``, in any
    layout; ``column_major``: the spatial offset with the first spatial axis fastest, ONNX's
    ``storage_order = 1``), the first of equal maxima in window order; i64."""

    column_major_attr = _bool_prop("column_major", False)
    column_major = _value("column_major")

    def infer_element_type(self) -> Attribute:
        return IntegerType(64)

    def verify_element_types(self) -> None:
        self.check_element_type(self.input.type.element_type, "input element type")
        if self.result.type.element_type != IntegerType(64):
            raise VerifyException(f"result element type must be i64, got "
                                  f"{self.result.type.element_type}")


@irdl_op_definition
class MaxPool1DIndicesOp(MaxPoolIndicesOp, Pool1DOp):
    name = "nn.max_pool1d_indices"


@irdl_op_definition
class MaxPool2DIndicesOp(MaxPoolIndicesOp, Pool2DOp):
    name = "nn.max_pool2d_indices"


@irdl_op_definition
class MaxPool3DIndicesOp(MaxPoolIndicesOp, Pool3DOp):
    name = "nn.max_pool3d_indices"


@irdl_op_definition
class AvgPool1DOp(AvgPoolOp, Pool1DOp):
    name = "nn.avg_pool1d"


@irdl_op_definition
class AvgPool2DOp(AvgPoolOp, Pool2DOp):
    name = "nn.avg_pool2d"


@irdl_op_definition
class AvgPool3DOp(AvgPoolOp, Pool3DOp):
    name = "nn.avg_pool3d"


@irdl_op_definition
class LpPool1DOp(LpPoolOp, Pool1DOp):
    name = "nn.lp_pool1d"


@irdl_op_definition
class LpPool2DOp(LpPoolOp, Pool2DOp):
    name = "nn.lp_pool2d"


@irdl_op_definition
class LpPool3DOp(LpPoolOp, Pool3DOp):
    name = "nn.lp_pool3d"


@irdl_op_definition
class GlobalAvgPool2DOp(UnaryOp):
    traits = kind_trait(OpKind.COMM_REDUCE)
    name = "nn.global_avg_pool2d"
    ALLOWED_TYPES: ClassVar = FLOATS
    layout_attr = _str_prop("layout", "NCHW")
    layout = _value("layout")

    def __init__(self, input: SSAValue | Operation, layout: str | None = None,
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, layout=layout)

    def infer_shape(self) -> Shape:
        return infer_global_pool_shape(_shape(self.input), self.layout)


def col2im_blocks(image: Sequence[int], block: Sequence[int], strides: Sequence[int],
                  padding: Sequence[int], dilation: Sequence[int]) -> list[int]:
    """The number of sliding blocks along each spatial axis (the ``L`` factors of
    ``col2im``'s input, as ``im2col`` produced them)."""
    rank = len(image)
    return [conv_output_dim(image[k], block[k], strides[k], padding[k], padding[rank + k], dilation[k])
            for k in range(rank)]


@irdl_op_definition
class Col2ImOp(NNOp):
    """ONNX Col2Im (PyTorch's ``fold``): ``input`` is ``N x (C * prod(block_shape)) x L``,
    one column per sliding block of a ``block_shape`` window over an image of
    ``image_shape`` (``strides``, ``padding``: leading then trailing pads, ``dilation``),
    ``L`` the product of the blocks per axis; each column entry is added into the image
    cell it came from, so overlapping blocks sum and cells in the padding drop. Result
    ``N x C x image_shape``. The adjoint of im2col: a transposed convolution's data
    movement, so it takes an element-wise epilogue as one does."""
    traits = kind_trait(OpKind.OUT_EWISE_FUSABLE)

    name = "nn.col2im"
    ALLOWED_TYPES: ClassVar = FLOATS
    input = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"
    image_shape_attr = _ints_prop("image_shape")
    block_shape_attr = _ints_prop("block_shape")
    strides_attr = _ints_prop("strides", ())
    padding_attr = _ints_prop("padding", ())
    dilation_attr = _ints_prop("dilation", ())
    image_shape = _value("image_shape")
    block_shape = _value("block_shape")

    def __init__(self, input: SSAValue | Operation, image_shape: Sequence[int], block_shape: Sequence[int],
                 strides: Sequence[int] | None = None, padding: Sequence[int] | None = None,
                 dilation: Sequence[int] | None = None):
        _init(self, [input], None, image_shape=image_shape, block_shape=block_shape, strides=strides,
              padding=padding, dilation=dilation)

    @property
    def strides(self) -> tuple[int, ...]:
        """Per spatial axis (default 1)."""
        return tuple(self.properties["strides"].get_values()) or (1,) * len(self.image_shape)

    @property
    def padding(self) -> tuple[int, ...]:
        """The leading pad of each spatial axis, then the trailing ones (default 0)."""
        return tuple(self.properties["padding"].get_values()) or (0,) * (2 * len(self.image_shape))

    @property
    def dilation(self) -> tuple[int, ...]:
        """Per spatial axis (default 1)."""
        return tuple(self.properties["dilation"].get_values()) or (1,) * len(self.image_shape)

    def blocks(self) -> list[int]:
        """The sliding blocks along each spatial axis."""
        return col2im_blocks(self.image_shape, self.block_shape, self.strides, self.padding, self.dilation)

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        image, block = list(self.image_shape), list(self.block_shape)
        rank = len(image)
        if rank < 1 or len(block) != rank:
            raise VerifyException(f"image_shape {image} and block_shape {block} must name the same "
                                  "spatial axes (one or more)")
        if any(d < 1 for d in image + block):
            raise VerifyException(f"image_shape {image} and block_shape {block} must be positive")
        _check_ints(self.strides, rank, "strides", 1)
        _check_ints(self.dilation, rank, "dilation", 1)
        _check_ints(self.padding, 2 * rank, "padding", 0)
        if len(x) != 3:
            raise VerifyException(f"the input must be N x (C * prod(block_shape)) x L (rank 3), got rank {len(x)}")
        window = math.prod(block)
        if x[1] != DYN and x[1] % window:
            raise VerifyException(f"input dim 1 ({x[1]}) is not a multiple of prod(block_shape) = {window}")
        blocks = self.blocks()
        if any(b < 1 for b in blocks):
            raise VerifyException(f"no sliding block fits: {blocks} blocks per axis")
        merge_dims(x[2], math.prod(blocks), f"input dim 2 must count the {blocks} sliding blocks")
        return (x[0], DYN if x[1] == DYN else x[1] // window, *image)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        return [dims(self.input)[0], _shape(self.weight)[0], *dims(self.offset)[2:]]


def max_unpool_sizes(x: Shape, kernel: Sequence[int], strides: Sequence[int], padding: Sequence[int]) -> list[int]:
    """The spatial extent MaxUnpool restores by default: ``(in - 1) * stride - pads +
    kernel`` per axis (the input MaxPool had, up to what its floor dropped)."""
    rank = len(kernel)
    return [DYN if x[2 + k] == DYN else (x[2 + k] - 1) * strides[k] - padding[k] - padding[rank + k] + kernel[k]
            for k in range(rank)]


def check_max_unpool_size(given: Sequence[int], default: Sequence[int]) -> None:
    """Refuses an ONNX MaxUnpool ``output_shape`` other than the default extent: there the
    semantics split (onnxruntime and PyTorch read the indices as offsets into that result,
    onnx's reference as offsets into the default one, its end padded), and either choice
    gives some users wrong numbers."""
    if list(given) != list(default):
        raise ValueError(f"an output_shape whose spatial extent {list(given)} is not the default {list(default)} "
                         "is not supported: onnxruntime reads the indices as offsets into that result, onnx's "
                         "reference as offsets into the default one")


@irdl_op_definition
class MaxUnpoolOp(NNOp):
    """ONNX MaxUnpool, the partial inverse of MaxPool: a result of ``N x C x
    output_size`` zeros but for each input element ``input[j]`` written at the flat
    (row-major, whole-tensor) offset ``indices[j]`` of the result (MaxPool's ``Indices``),
    the last write winning where indices repeat, as onnxruntime and onnx's reference
    have it. An offset outside the result is an error the reference reports (the kernel
    writes nothing for it). The pooling attributes only size the result
    (``max_unpool_sizes``): the op keeps the size (an ONNX ``output_shape`` must be that
    size, ``check_max_unpool_size``)."""
    traits = kind_trait(OpKind.OUT_EWISE_FUSABLE)

    name = "nn.max_unpool"
    ALLOWED_TYPES: ClassVar = FLOATS
    input = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$input `,` $indices attr-dict `:` functional-type(operands, results)"
    output_size_attr = _ints_prop("output_size")
    output_size = _value("output_size")

    def __init__(self, input: SSAValue | Operation, indices: SSAValue | Operation, output_size: Sequence[int]):
        _init(self, [input, indices], None, output_size=output_size)

    def verify_element_types(self) -> None:
        element = _tensor(self.input).element_type
        self.check_element_type(element, "element type")
        self.check_element_type(_tensor(self.indices).element_type, "indices element type",
                                (IntegerType(32), IntegerType(64)))
        if _tensor(self.result).element_type != element:
            raise VerifyException(f"result must be {element} like the input, got {_tensor(self.result).element_type}")

    def infer_shape(self) -> Shape:
        x, i, size = _shape(self.input), _shape(self.indices), list(self.output_size)
        if len(x) < 3:
            raise VerifyException(f"the input must be N x C x D1 .. Dk (rank 3 or more), got rank {len(x)}")
        if len(i) != len(x) or any(a != b and DYN not in (a, b) for a, b in zip(x, i)):
            raise VerifyException(f"indices must have the input's shape {_fmt(x)}, got {_fmt(i)}")
        if len(size) != len(x) - 2 or any(d < 1 for d in size):
            raise VerifyException(f"output_size must hold {len(x) - 2} positive extents, got {size}")
        return (x[0], x[1], *size)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        x = dims(self.input)
        return [x[0], x[1], *self.output_size]


@irdl_op_definition
class DeformConv2DOp(NNOp):
    """ONNX DeformConv (torchvision's ``deform_conv2d``, DCN v1 and, with ``mask``, v2)
    over two spatial dims, NCHW / OIHW: tap ``(kh, kw)`` of output pixel ``(oh, ow)`` reads
    the input bilinearly at its regular position ``(oh * sh - ph + kh * dh, ow * sw - pw +
    kw * dw)`` moved by the learned ``offset`` of its offset group, the four neighbours
    outside the image reading zeros, scaled by ``mask`` (1 when absent). ``offset`` is
    ``N x (offset_groups * kH * kW * 2) x oH x oW`` ((dy, dx) per tap, taps row-major),
    ``mask`` ``N x (offset_groups * kH * kW) x oH x oW``; input channel ``c`` belongs to
    offset group ``c / (C / offset_groups)``. The result is ``N x O x oH x oW`` (a bias is an
    add after it, an epilogue)."""
    traits = kind_trait(OpKind.OUT_EWISE_FUSABLE)

    name = "nn.deform_conv2d"
    ALLOWED_TYPES: ClassVar = FLOATS
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    offset = operand_def(TensorType)
    mask = opt_operand_def(TensorType)
    result = result_def(TensorType)
    strides_attr = _ints_prop("strides", ())
    padding_attr = _ints_prop("padding", ())
    dilation_attr = _ints_prop("dilation", ())
    groups_attr = _int_prop("groups", 1)
    offset_groups_attr = _int_prop("offset_groups", 1)
    groups = _value("groups")
    offset_groups = _value("offset_groups")
    assembly_format = ("$input `,` $weight `,` $offset (`,` $mask^)? attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, input: SSAValue | Operation, weight: SSAValue | Operation, offset: SSAValue | Operation,
                 mask: SSAValue | Operation | None = None, *, strides: Sequence[int] | None = None,
                 padding: Sequence[int] | None = None, dilation: Sequence[int] | None = None,
                 groups: int | None = None, offset_groups: int | None = None):
        _init(self, [input, weight, offset, [] if mask is None else [mask]], None, strides=strides,
              padding=padding, dilation=dilation, groups=groups, offset_groups=offset_groups)

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(self.properties["strides"].get_values()) or (1, 1)

    @property
    def padding(self) -> tuple[int, ...]:
        """Top, left, bottom, right (ONNX ``pads``)."""
        return tuple(self.properties["padding"].get_values()) or (0, 0, 0, 0)

    @property
    def dilation(self) -> tuple[int, ...]:
        return tuple(self.properties["dilation"].get_values()) or (1, 1)

    def verify_element_types(self) -> None:
        element = _tensor(self.input).element_type
        self.check_element_type(element, "element type")
        for v, what in ((self.weight, "weight"), (self.offset, "offset"), (self.mask, "mask"), (self.result, "result")):
            if v is not None and _tensor(v).element_type != element:
                raise VerifyException(f"{what} must be {element} like the input, got {_tensor(v).element_type}")

    def infer_shape(self) -> Shape:
        x, w, off = _shape(self.input), _shape(self.weight), _shape(self.offset)
        if len(x) != 4 or len(w) != 4 or len(off) != 4:
            raise VerifyException(f"input, weight and offset must have rank 4, got {len(x)}, {len(w)} and {len(off)}")
        _check_ints(self.strides, 2, "strides", 1)
        _check_ints(self.dilation, 2, "dilation", 1)
        _check_ints(self.padding, 4, "padding", 0)
        groups, offset_groups = self.groups, self.offset_groups
        if groups < 1 or offset_groups < 1:
            raise VerifyException(f"groups and offset_groups must be >= 1, got {groups} and {offset_groups}")
        if DYN in w:
            raise VerifyException("the weight must have a static shape")
        if x[1] != DYN and (x[1] != w[1] * groups or x[1] % offset_groups):
            raise VerifyException(f"input channels {x[1]} must be weight input channels {w[1]} * groups {groups} "
                                  f"and a multiple of offset_groups {offset_groups}")
        if w[0] % groups:
            raise VerifyException(f"groups {groups} does not divide output channels {w[0]}")
        taps = w[2] * w[3]
        out = [conv_output_dim(x[2 + k], w[2 + k], self.strides[k], self.padding[k], self.padding[2 + k],
                               self.dilation[k]) for k in range(2)]
        merge_dims(x[0], off[0], "offset must have the input's batch")
        merge_dims(off[1], offset_groups * taps * 2, "offset must hold (dy, dx) per tap and offset group")
        for k in range(2):
            merge_dims(off[2 + k], out[k], f"offset must have the output's spatial dims {_fmt(out)}")
        if self.mask is not None:
            mask = _shape(self.mask)
            if len(mask) != 4:
                raise VerifyException(f"mask must have rank 4, got {len(mask)}")
            merge_dims(x[0], mask[0], "mask must have the input's batch")
            merge_dims(mask[1], offset_groups * taps, "mask must hold one weight per tap and offset group")
            for k in range(2):
                merge_dims(mask[2 + k], out[k], f"mask must have the output's spatial dims {_fmt(out)}")
        return (x[0], w[0], *out)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        return [dims(self.input)[0], _shape(self.weight)[0], *dims(self.offset)[2:]]
