"""NumPy references of the ``nn`` element-wise ops.

Operands arrive in their compute type (f16 / bf16 widened to f32, everything else as
stored); ``in_compute_type`` rounds the result once to the result's storage type. Integer
ops keep integer arithmetic (NumPy wrap-around), as the kernels' C does.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from xdsl.interpreter import InterpreterFunctions, impl, register_impls

from partita.dialects import nn
from partita.runtime.reference.nn.base import erf, in_compute_type


def _is_int(x: np.ndarray) -> bool:
    return np.issubdtype(x.dtype, np.integer)


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Floats divide; integers divide truncating toward zero in integer arithmetic (C,
    ONNX), a zero divisor giving 0."""
    if not _is_int(a):
        return a / b
    with np.errstate(divide="ignore", invalid="ignore"):
        q, r = np.floor_divide(a, b), np.remainder(a, b)
    return q + ((r != 0) & ((a < 0) ^ (b < 0))).astype(q.dtype)


def _mod(op: nn.ModOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(a, b) if op.fmod else np.mod(a, b)


def _pow(op: nn.PowOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if not _is_int(a):
        return np.power(a, b.astype(a.dtype))
    if not _is_int(b):
        return np.power(a.astype(np.float64), b.astype(np.float64))
    # Integer powers wrap; a negative exponent truncates the real power toward zero.
    a, b = np.broadcast_arrays(a, b.astype(np.int64))
    out = np.power(a, np.maximum(b, 0))
    neg = b < 0
    odd = (b & 1) == 1
    return np.where(neg, np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0)), out)


def _bit_shift(op: nn.BitShiftOp, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    bits = a.dtype.itemsize * 8
    outside = (b < 0) | (b >= bits)
    count = np.where(outside, 0, b).astype(np.uint64)
    if op.direction == "left":  # logical, on the unsigned view of the bits
        unsigned = a.view(np.dtype(f"u{a.dtype.itemsize}"))
        shifted = (unsigned.astype(np.uint64) << count).astype(unsigned.dtype).view(a.dtype)
        return np.where(outside, 0, shifted)
    shifted = np.right_shift(a, count.astype(a.dtype))
    return np.where(outside, np.where(a < 0, -1, 0).astype(a.dtype), shifted)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def _clip(op: nn.ClipOp, x: np.ndarray) -> np.ndarray:
    if op.min is not None:
        x = np.maximum(x, x.dtype.type(op.min))
    if op.max is not None:
        x = np.minimum(x, x.dtype.type(op.max))
    return x


def _cast(op: nn.CastOp, x: np.ndarray) -> np.ndarray:
    """``x`` converted as the kernels' C converts it. Where ``ml_dtypes`` decides otherwise
    (its releases differ on out-of-range values), the conversion goes through f32 or is
    written out here, so the reference does not change with the installed version."""
    element = op.result.type.element_type
    to = nn.numpy_dtype(element)
    with np.errstate(invalid="ignore", over="ignore"):
        if element == nn.Float8E8M0FNUType():
            return _to_e8m0(x, op.saturate, op.round_mode)
        if element in nn.FLOAT8_TYPES or element == nn.Float4E2M1FNType() \
                or to.name in ("float16", "bfloat16") and x.dtype != np.float32:
            # Kernels round to these from a float: an f64 rounds through f32 (as ONNX's
            # reference does for FP4); ml_dtypes rounds to nearest even, FP4 saturating
            # and float8 overflowing like a non-saturating cast.
            x = x.astype(np.float32)
            if element in nn.FLOAT8_TYPES and op.saturate:
                largest = float(ml_dtypes.finfo(to).max)
                x = np.clip(x, -largest, largest)  # infinities too; NaN stays NaN
        if x.dtype.kind == "V" and (np.issubdtype(to, np.integer) or to == np.bool_):
            x = x.astype(np.float32)  # bf16 / float8 / FP4 / E8M0, exact in f32, convert as an f32 does
        if element in nn.SUB_BYTE_INTEGERS and x.dtype.kind == "f":
            return _to_sub_byte_integer(x, to)
        return x.astype(to)


def _to_sub_byte_integer(x: np.ndarray, to: np.dtype) -> np.ndarray:
    """A float into int4 / uint4 / int2 / uint2: truncated toward zero, and 0 where that is
    outside the type's range (NaN and infinities too). ONNX leaves an out-of-range float's
    conversion undefined; this is what its reference and node cases compute with ml_dtypes
    0.7 (0.6 wrapped the truncated value into the bits), written out so that it does not
    change with the installed version."""
    info = ml_dtypes.iinfo(to)
    wide = x.astype(np.float64)
    inside = (wide > info.min - 1) & (wide < info.max + 1)  # False for NaN
    return np.where(inside, np.trunc(np.where(inside, wide, 0.0)), 0.0).astype(np.int8).astype(to)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """``x`` as f8E8M0FNU, whose byte is a float32's biased exponent (both bias 127; the sign
    is dropped): the fraction rounds the exponent ``up`` (any fraction), ``nearest`` (half or
    more; a subnormal, more than half) or ``down``; NaN and infinity become NaN (0xFF), and
    a value rounded past the largest power of two is NaN too unless ``saturate``."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    exponent = ((bits >> 23) & 0xFF).astype(np.uint16)
    fraction = bits & 0x7FFFFF
    special = exponent == 0xFF
    if round_mode == "up":
        carry = fraction > 0
    elif round_mode == "nearest":
        half = (fraction & 0x400000) > 0
        carry = half & (((fraction & 0x3FFFFF) > 0) | (exponent > 0))
    else:
        carry = np.zeros(bits.shape, bool)
    carry &= ~special
    if saturate:
        carry &= exponent != 0xFE
    out = np.where(special, 0xFF, exponent + carry).astype(np.uint8)
    return out.view(nn.numpy_dtype(nn.Float8E8M0FNUType()))


def _shrink(op: nn.ShrinkOp, x: np.ndarray) -> np.ndarray:
    lambd, bias = x.dtype.type(op.lambd), x.dtype.type(op.bias)
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, 0))


def _is_inf(op: nn.IsInfOp, x: np.ndarray) -> np.ndarray:
    return (np.isposinf(x) & op.detect_positive) | (np.isneginf(x) & op.detect_negative)


def _per_channel(op: nn.QuantizationOp, v: np.ndarray) -> np.ndarray:
    """Scale or zero point shaped to broadcast against the input."""
    axis = op.channel_axis()
    if axis is None:
        return v.reshape(())
    if op.block_size:
        extent = op.input.type.get_shape()[axis]
        return np.repeat(v, op.block_size, axis=axis).take(range(extent), axis=axis)
    shape = [1] * op.input.type.get_num_dims()
    shape[axis] = -1
    return v.reshape(shape)


def _quantize(op: nn.QuantizeOp, x: np.ndarray, scale: np.ndarray, zp: np.ndarray) -> np.ndarray:
    if op.result.type.element_type in nn.QUANTIZED_FLOATS:
        q = x.astype(np.float32) / _per_channel(op, scale) + _per_channel(op, zp).astype(np.float32)
        largest = float(ml_dtypes.finfo(nn.numpy_dtype(op.result.type.element_type)).max)
        return np.clip(q, -largest, largest)
    info = ml_dtypes.iinfo(nn.numpy_dtype(op.result.type.element_type))  # int4 and int2 too
    q = np.rint(x.astype(np.float32) / _per_channel(op, scale)) \
        + _per_channel(op, zp).astype(np.float32)
    return np.clip(q, info.min, info.max)


def _dequantize(op: nn.DequantizeOp, x: np.ndarray, scale: np.ndarray,
                zp: np.ndarray) -> np.ndarray:
    return (x.astype(np.float32) - _per_channel(op, zp).astype(np.float32)) \
        * _per_channel(op, scale)


@register_impls
class ElementwiseFunctions(InterpreterFunctions):
    """Reference semantics of the ``nn`` element-wise ops."""

    # -- arithmetic --------------------------------------------------------------------
    run_add = impl(nn.AddOp)(in_compute_type(lambda op, a, b: a + b))
    run_subtract = impl(nn.SubtractOp)(in_compute_type(lambda op, a, b: a - b))
    run_multiply = impl(nn.MultiplyOp)(in_compute_type(lambda op, a, b: a * b))
    run_divide = impl(nn.DivideOp)(in_compute_type(lambda op, a, b: _divide(a, b)))
    run_minimum = impl(nn.MinimumOp)(in_compute_type(lambda op, a, b: np.minimum(a, b)))
    run_maximum = impl(nn.MaximumOp)(in_compute_type(lambda op, a, b: np.maximum(a, b)))
    run_mod = impl(nn.ModOp)(in_compute_type(_mod))
    run_pow = impl(nn.PowOp)(in_compute_type(_pow))
    run_bit_shift = impl(nn.BitShiftOp)(in_compute_type(_bit_shift))
    run_neg = impl(nn.NegOp)(in_compute_type(lambda op, x: np.negative(x)))
    run_abs = impl(nn.AbsOp)(in_compute_type(lambda op, x: np.abs(x)))
    run_sign = impl(nn.SignOp)(in_compute_type(lambda op, x: np.sign(x)))
    run_clip = impl(nn.ClipOp)(in_compute_type(_clip))

    # -- math functions ----------------------------------------------------------------
    run_sqrt = impl(nn.SqrtOp)(in_compute_type(lambda op, x: np.sqrt(x)))
    run_reciprocal = impl(nn.ReciprocalOp)(in_compute_type(lambda op, x: 1 / x))
    run_exp = impl(nn.ExpOp)(in_compute_type(lambda op, x: np.exp(x)))
    run_log = impl(nn.LogOp)(in_compute_type(lambda op, x: np.log(x)))
    run_erf = impl(nn.ErfOp)(in_compute_type(lambda op, x: erf(x).astype(x.dtype)))
    run_floor = impl(nn.FloorOp)(in_compute_type(lambda op, x: np.floor(x)))
    run_ceil = impl(nn.CeilOp)(in_compute_type(lambda op, x: np.ceil(x)))
    run_round = impl(nn.RoundOp)(in_compute_type(lambda op, x: np.round(x)))

    run_sin = impl(nn.SinOp)(in_compute_type(lambda op, x: np.sin(x)))
    run_cos = impl(nn.CosOp)(in_compute_type(lambda op, x: np.cos(x)))
    run_tan = impl(nn.TanOp)(in_compute_type(lambda op, x: np.tan(x)))
    run_asin = impl(nn.AsinOp)(in_compute_type(lambda op, x: np.arcsin(x)))
    run_acos = impl(nn.AcosOp)(in_compute_type(lambda op, x: np.arccos(x)))
    run_atan = impl(nn.AtanOp)(in_compute_type(lambda op, x: np.arctan(x)))
    run_sinh = impl(nn.SinhOp)(in_compute_type(lambda op, x: np.sinh(x)))
    run_cosh = impl(nn.CoshOp)(in_compute_type(lambda op, x: np.cosh(x)))
    run_asinh = impl(nn.AsinhOp)(in_compute_type(lambda op, x: np.arcsinh(x)))
    run_acosh = impl(nn.AcoshOp)(in_compute_type(lambda op, x: np.arccosh(x)))
    run_atanh = impl(nn.AtanhOp)(in_compute_type(lambda op, x: np.arctanh(x)))

    # -- activations -------------------------------------------------------------------
    run_relu = impl(nn.ReluOp)(in_compute_type(lambda op, x: np.where(x < 0, 0, x)))
    run_sigmoid = impl(nn.SigmoidOp)(in_compute_type(lambda op, x: _sigmoid(x)))
    run_tanh = impl(nn.TanhOp)(in_compute_type(lambda op, x: np.tanh(x)))
    run_leaky_relu = impl(nn.LeakyReluOp)(
        in_compute_type(lambda op, x: np.where(x < 0, x.dtype.type(op.alpha) * x, x)))
    run_prelu = impl(nn.PReluOp)(in_compute_type(lambda op, x, s: np.where(x < 0, s * x, x)))
    run_elu = impl(nn.EluOp)(
        in_compute_type(lambda op, x: np.where(x < 0, x.dtype.type(op.alpha) * np.expm1(x), x)))
    run_selu = impl(nn.SeluOp)(in_compute_type(
        lambda op, x: x.dtype.type(op.gamma)
        * np.where(x <= 0, x.dtype.type(op.alpha) * np.expm1(x), x)))
    run_celu = impl(nn.CeluOp)(in_compute_type(
        lambda op, x: np.where(x > 0, x, x.dtype.type(op.alpha)
                               * np.expm1(x / x.dtype.type(op.alpha)))))
    run_thresholded_relu = impl(nn.ThresholdedReluOp)(
        in_compute_type(lambda op, x: np.where(x > x.dtype.type(op.alpha), x, 0)))
    run_hard_sigmoid = impl(nn.HardSigmoidOp)(in_compute_type(
        lambda op, x: np.clip(x.dtype.type(op.alpha) * x + x.dtype.type(op.beta), 0, 1)))
    run_hard_swish = impl(nn.HardSwishOp)(
        in_compute_type(lambda op, x: x * np.clip(x / 6 + x.dtype.type(0.5), 0, 1)))
    run_softplus = impl(nn.SoftplusOp)(in_compute_type(lambda op, x: _softplus(x)))
    run_softsign = impl(nn.SoftsignOp)(in_compute_type(lambda op, x: x / (1 + np.abs(x))))
    run_mish = impl(nn.MishOp)(in_compute_type(lambda op, x: x * np.tanh(_softplus(x))))
    run_swish = impl(nn.SwishOp)(
        in_compute_type(lambda op, x: x * _sigmoid(x.dtype.type(op.alpha) * x)))

    @impl(nn.GeluOp)
    @in_compute_type
    def run_gelu(op: nn.GeluOp, x: np.ndarray) -> np.ndarray:
        if op.approximate == "tanh":
            inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
            return 0.5 * x * (1 + np.tanh(inner))
        x64 = x.astype(np.float64)
        return 0.5 * x64 * (1 + erf(x64 / math.sqrt(2)).astype(np.float64))

    # -- comparisons, logic, select, conversion ------------------------------------------
    run_equal = impl(nn.EqualOp)(in_compute_type(lambda op, a, b: a == b))
    run_less = impl(nn.LessOp)(in_compute_type(lambda op, a, b: a < b))
    run_less_equal = impl(nn.LessEqualOp)(in_compute_type(lambda op, a, b: a <= b))
    run_greater = impl(nn.GreaterOp)(in_compute_type(lambda op, a, b: a > b))
    run_greater_equal = impl(nn.GreaterEqualOp)(in_compute_type(lambda op, a, b: a >= b))
    run_and = impl(nn.AndOp)(in_compute_type(lambda op, a, b: a & b))
    run_or = impl(nn.OrOp)(in_compute_type(lambda op, a, b: a | b))
    run_xor = impl(nn.XorOp)(in_compute_type(lambda op, a, b: a ^ b))
    run_not = impl(nn.NotOp)(in_compute_type(lambda op, x: ~x))
    run_bitwise_and = impl(nn.BitwiseAndOp)(in_compute_type(lambda op, a, b: a & b))
    run_bitwise_or = impl(nn.BitwiseOrOp)(in_compute_type(lambda op, a, b: a | b))
    run_bitwise_xor = impl(nn.BitwiseXorOp)(in_compute_type(lambda op, a, b: a ^ b))
    run_bitwise_not = impl(nn.BitwiseNotOp)(in_compute_type(lambda op, x: ~x))
    run_shrink = impl(nn.ShrinkOp)(in_compute_type(_shrink))
    run_is_nan = impl(nn.IsNaNOp)(in_compute_type(lambda op, x: np.isnan(x)))
    run_is_inf = impl(nn.IsInfOp)(in_compute_type(_is_inf))
    run_where = impl(nn.WhereOp)(in_compute_type(lambda op, c, a, b: np.where(c, a, b)))
    run_cast = impl(nn.CastOp)(in_compute_type(_cast))

    @impl(nn.BitcastOp)
    def run_bitcast(self, interpreter, op: nn.BitcastOp, args):
        # On the stored bits, not the compute type.
        return (np.array(args[0], order="C").view(nn.numpy_dtype(op.result.type.element_type)),)
    run_quantize = impl(nn.QuantizeOp)(in_compute_type(_quantize))
    run_dequantize = impl(nn.DequantizeOp)(in_compute_type(_dequantize))
