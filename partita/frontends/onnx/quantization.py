"""ONNX converters of the quantized operators that compute in integers: QLinearMatMul,
ConvInteger and QLinearConv.

Each is an exact integer product (``nn.matmul_integer`` / ``nn.conv_integer``, i32
accumulation) followed by the requantization the spec states: the i32 result times
``sa * sb / sy`` (the multiplier in the scales' own type, the product in f64, as the ONNX
reference computes them), rounded half to even, plus ``zy``, saturated to ``zy``'s type:
an ``nn.quantize`` with scale 1, the op QuantizeLinear becomes. The element-wise tail
fuses into one kernel. A convolution of a constant weight with zero point 0 (onnxruntime's
QOperator quantization) is built as QDQ convolutions are (``conv.integer_conv``: a
constant input zero point folded out), so int8 tensor cores take it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import SSAValue

from partita.dialects import nn
from partita.frontends.onnx.conv import _kernel_shape, _spatial_rank, integer_conv, spatial_attrs
from partita.frontends.onnx.linalg import _scalar_zero_point, integer_matmul
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.values import Value, fail, is_const, shape_of

if TYPE_CHECKING:  # pragma: no cover
    from partita.frontends.onnx.importer import Importer

_INT8 = (np.dtype(np.int8), np.dtype(np.uint8))
_F32 = nn.element_type_of(np.dtype(np.float32))
_F64 = nn.element_type_of(np.dtype(np.float64))


def _dtype(v: Value) -> np.dtype:
    return np.asarray(v).dtype if is_const(v) else nn.numpy_dtype(v.type.element_type)  # type: ignore[union-attr]


def _size(v: Value) -> int:
    return math.prod(shape_of(v))


def _check_int8(*values: Value) -> None:
    for v in values:
        if v is not None and _dtype(v) not in _INT8:
            fail(f"quantized tensors of type {_dtype(v)} are not supported (int8 / uint8)")


def _per_tensor(v: Value, what: str) -> None:
    if _size(v) != 1 or nn.DYN in shape_of(v):
        fail(f"{what} must be per tensor (one element), got shape {list(shape_of(v))}")


def _scale_along(cx: Importer, scale: Value, shape: tuple[int, ...], what: str) -> Value:
    """A scale broadcastable to a tensor of ``shape``: one element (a scalar), or what
    the spec allows per row / column / channel (``shape`` says where it runs, as a rank
    ``len(shape)`` shape of ones but that axis)."""
    if _size(scale) == 1:
        return np.asarray(scale).reshape(()) if is_const(scale) else _reshaped(cx, scale, [])
    axis = next((k for k, d in enumerate(shape) if d != 1), None)
    target = shape_of(scale)
    if axis is not None and (target == (shape[axis],) or target == shape):
        full = list(shape)
        return np.asarray(scale).reshape(full) if is_const(scale) else _reshaped(cx, scale, full)
    fail(f"{what} of shape {list(target)} is neither per tensor nor per {'row' if what.startswith('a') else 'channel'}")
    raise AssertionError


def _reshaped(cx: Importer, v: SSAValue, shape: list[int]) -> SSAValue:
    return v if list(shape_of(v)) == shape else cx.emit(nn.ReshapeOp(v, shape))


def _multiplier(cx: Importer, *scales: Value) -> Value:
    """``s0 * s1 / s2`` in the scales' type (as the ONNX reference computes it), then as
    f64: folded when all are constants."""
    s0, s1, s2 = scales
    if all(is_const(s) for s in scales):
        dtype = np.result_type(*(np.asarray(s).dtype for s in scales))
        m = (np.asarray(s0, dtype) * np.asarray(s1, dtype)) / np.asarray(s2, dtype)
        return np.asarray(m, np.float64)
    like = next(s for s in scales if not is_const(s))
    t = [cx.tensor(s, like) for s in scales]
    m = cx.emit(nn.DivideOp(cx.emit(nn.MultiplyOp(t[0], t[1])), t[2]))
    return cx.emit(nn.CastOp(m, _F64))


def _requantize(cx: Importer, acc: SSAValue, multiplier: Value, zy: Value) -> SSAValue:
    """``saturate(round_half_even(acc * multiplier) + zy)`` in ``zy``'s type. The product
    is f64, as the ONNX reference forms it (an i32 times an f32 can round differently in
    f32, one step at a tie), rounded there; the rounded integer is exact in f32 wherever
    it is in range, and ``nn.quantize`` with scale 1 adds ``zy`` and saturates."""
    x = cx.emit(nn.CastOp(acc, _F64))
    x = cx.emit(nn.RoundOp(cx.emit(nn.MultiplyOp(x, cx.tensor(multiplier, x)))))
    x = cx.emit(nn.CastOp(x, _F32))
    zy = cx.tensor(np.asarray(zy).reshape(())) if is_const(zy) else _reshaped(cx, zy, [])
    return cx.emit(nn.QuantizeOp(x, cx.tensor(np.ones((), np.float32)), zy))


@converter("QLinearMatMul")
def _qlinear_matmul(cx, ins, attrs):
    """Per-tensor zero points (a constant vector of one value counts as one), scales per
    tensor, ``a``'s per row and ``b``'s per column; the output's per tensor."""
    a, sa, za, b, sb, zb, sy, zy = (list(ins) + [None] * 8)[:8]
    if zy is None or sy is None:
        fail("y_scale and y_zero_point are required")
    _check_int8(a, b, za, zb, zy)
    _per_tensor(sy, "y_scale")
    _per_tensor(zy, "y_zero_point")
    acc = integer_matmul(cx, a, b, za, zb)
    out = shape_of(acc)
    rows = tuple(d if k == len(out) - 2 else 1 for k, d in enumerate(out))
    cols = tuple(d if k == len(out) - 1 else 1 for k, d in enumerate(out))
    multiplier = _multiplier(cx, _scale_along(cx, sa, rows, "a_scale"), _scale_along(cx, sb, cols, "b_scale"),
                             np.asarray(sy).reshape(()) if is_const(sy) else _reshaped(cx, sy, []))
    return _requantize(cx, acc, multiplier, zy)


def _conv_integer(cx: Importer, x: Value, w: Value, zx: Value | None, zw: Value | None, attrs) -> SSAValue:
    weight = np.asarray(w) if is_const(w) else None
    x = cx.tensor(x)
    w = cx.tensor(w)
    _check_int8(x, w, zx, zw)
    _spatial_rank(shape_of(x), "ConvInteger")
    kernel = _kernel_shape(attrs, shape_of(w))
    strides, pads, dilations = spatial_attrs(attrs, shape_of(x), kernel)
    one_zx = zx is None or is_const(zx) and np.unique(np.asarray(zx)).size == 1
    if weight is not None and attrs.get("group", 1) == 1 and one_zx and (zw is None or is_const(zw) and
                                                                         not np.asarray(zw).any()):
        # A constant weight of zero point 0 (QOperator quantization's): the form int8 tensor
        # cores take, a constant input zero point folded out (``integer_conv``).
        value = np.zeros((), _dtype(x)) if zx is None else np.asarray(zx, _dtype(x)).reshape(-1)[:1].reshape(())
        return integer_conv(cx, x, weight, value, strides, pads, dilations)
    zx = _scalar_zero_point(cx, zx, x, "input")
    out_channels = shape_of(w)[0]
    if zw is None:
        zw = cx.tensor(np.zeros((), _dtype(w)))
    elif _size(zw) == 1:
        zw = cx.tensor(np.asarray(zw).reshape(()), w) if is_const(zw) else _reshaped(cx, zw, [])
    elif shape_of(zw) == (out_channels,):
        zw = cx.tensor(zw, w)
    else:
        fail(f"weight zero point of shape {list(shape_of(zw))} is neither per tensor nor per output channel")
    return cx.emit(nn.ConvIntegerOp(x, w, zx, zw, strides=strides, padding=pads, dilation=dilations,
                                    groups=attrs.get("group", 1)))


@converter("ConvInteger")
def _conv_integer_node(cx, ins, attrs):
    x, w, zx, zw = (list(ins) + [None] * 4)[:4]
    return _conv_integer(cx, x, w, zx, zw, attrs)


@converter("QLinearConv")
def _qlinear_conv(cx, ins, attrs):
    """Per-tensor input and output, per-tensor or per-output-channel weight scale and zero
    point, and the optional i32 bias added to the i32 sums (its scale is ``sx * sw``)."""
    x, sx, zx, w, sw, zw, sy, zy, bias = (list(ins) + [None] * 9)[:9]
    _per_tensor(sx, "x_scale")
    _per_tensor(sy, "y_scale")
    _per_tensor(zy, "y_zero_point")
    _check_int8(zy)
    acc = _conv_integer(cx, x, w, zx, zw, attrs)
    out = shape_of(acc)
    if bias is not None:
        if _dtype(bias) != np.int32 or shape_of(bias) != (out[1],):
            fail(f"the bias must be int32 of shape [{out[1]}], got {_dtype(bias)} {list(shape_of(bias))}")
        row = [out[1]] + [1] * (len(out) - 2)  # i32 per output channel, broadcast over the pixels
        bias = np.asarray(bias).reshape(row) if is_const(bias) else _reshaped(cx, bias, row)
        acc = cx.emit(nn.AddOp(acc, cx.tensor(bias)))
    channels = tuple(d if k == 1 else 1 for k, d in enumerate(out))
    multiplier = _multiplier(cx, np.asarray(sx).reshape(()) if is_const(sx) else _reshaped(cx, sx, []),
                             _scale_along(cx, sw, channels, "w_scale"),
                             np.asarray(sy).reshape(()) if is_const(sy) else _reshaped(cx, sy, []))
    return _requantize(cx, acc, multiplier, zy)
