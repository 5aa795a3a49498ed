"""ONNX converters of element-wise ops: arithmetic, math functions, activations,
comparisons and logic, Where, Cast / CastLike, Clip."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import onnx
from xdsl.ir import SSAValue
from xdsl.traits import Commutative

from partita.dialects import nn
from partita.frontends.onnx.importer import Importer
from partita.frontends.onnx.registry import CONVERTERS, converter
from partita.frontends.onnx.values import ONNX_DTYPES, QuantizedConstant, Value, fail, is_const, is_symbolic


def _binary(op_cls, **fixed):
    commutative = op_cls.has_trait(Commutative)

    def convert(cx: Importer, ins, attrs):
        lhs, rhs = ins[0], ins[1]
        if commutative and is_const(lhs) and not is_const(rhs):
            # MLIR's canonical form of a commutative op, the constant on the right: an
            # exported Add(bias, MatMul) is then a GEMM with a bias epilogue to the patterns.
            lhs, rhs = rhs, lhs
        a, b = cx.operands(lhs, rhs)
        return cx.emit(op_cls(a, b, **fixed))

    return convert


for _t, _cls in (("Add", nn.AddOp), ("Sub", nn.SubtractOp), ("Mul", nn.MultiplyOp),
                 ("Div", nn.DivideOp), ("Equal", nn.EqualOp), ("Less", nn.LessOp),
                 ("LessOrEqual", nn.LessEqualOp), ("Greater", nn.GreaterOp),
                 ("GreaterOrEqual", nn.GreaterEqualOp), ("And", nn.AndOp), ("Or", nn.OrOp),
                 ("Xor", nn.XorOp), ("PRelu", nn.PReluOp), ("BitwiseAnd", nn.BitwiseAndOp),
                 ("BitwiseOr", nn.BitwiseOrOp), ("BitwiseXor", nn.BitwiseXorOp)):
    CONVERTERS[_t] = _binary(_cls)


def _variadic(op_cls):
    """Sum / Min / Max over any number of broadcasting inputs: a chain of binary ops."""

    def convert(cx: Importer, ins, attrs):
        vals = [v for v in ins if v is not None]
        if not vals:
            fail("needs at least one input")
        if len(vals) == 1:
            return cx.tensor(vals[0])
        vals = cx.operands(*vals)
        out = vals[0]
        for v in vals[1:]:
            out = cx.emit(op_cls(out, v))
        return out

    return convert


CONVERTERS["Sum"] = _variadic(nn.AddOp)
CONVERTERS["Min"] = _variadic(nn.MinimumOp)
CONVERTERS["Max"] = _variadic(nn.MaximumOp)


@converter("Mean")
def _mean(cx, ins, attrs):
    total = CONVERTERS["Sum"](cx, ins, attrs)
    count = sum(v is not None for v in ins)
    if count == 1:
        return total
    return cx.emit(nn.DivideOp(total, cx.tensor(np.asarray(count), like=total)))


@converter("Mod")
def _mod(cx, ins, attrs):
    a, b = cx.operands(ins[0], ins[1])
    return cx.emit(nn.ModOp(a, b, fmod=bool(attrs.get("fmod", 0))))


@converter("Pow")
def _pow(cx, ins, attrs):
    base = cx.tensor(ins[0])
    return cx.emit(nn.PowOp(base, cx.tensor(ins[1])))


@converter("BitShift")
def _bit_shift(cx, ins, attrs):
    direction = _text(attrs.get("direction", b"")).lower()
    if direction not in ("left", "right"):
        fail(f"direction must be LEFT or RIGHT, got {direction.upper()!r}")
    a, b = cx.operands(ins[0], ins[1])
    return cx.emit(nn.BitShiftOp(a, b, direction=direction))


def _text(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _unary(op_cls, **defaults):
    """A one-input op; ``defaults`` maps ONNX attribute names to their default values
    (the nn properties have the same names)."""

    def convert(cx: Importer, ins, attrs):
        props = {k: float(attrs.get(k, d)) for k, d in defaults.items()}
        return cx.emit(op_cls(cx.tensor(ins[0]), **props))

    return convert


for _t, _cls in (("Relu", nn.ReluOp), ("Tanh", nn.TanhOp), ("Sigmoid", nn.SigmoidOp),
                 ("Sqrt", nn.SqrtOp), ("Reciprocal", nn.ReciprocalOp), ("Exp", nn.ExpOp),
                 ("Log", nn.LogOp), ("Erf", nn.ErfOp), ("Floor", nn.FloorOp),
                 ("Ceil", nn.CeilOp), ("Round", nn.RoundOp), ("Neg", nn.NegOp),
                 ("Abs", nn.AbsOp), ("Sign", nn.SignOp), ("Not", nn.NotOp),
                 ("IsNaN", nn.IsNaNOp), ("HardSwish", nn.HardSwishOp),
                 ("Softplus", nn.SoftplusOp), ("Softsign", nn.SoftsignOp), ("Mish", nn.MishOp),
                 ("Sin", nn.SinOp), ("Cos", nn.CosOp), ("Tan", nn.TanOp), ("Asin", nn.AsinOp),
                 ("Acos", nn.AcosOp), ("Atan", nn.AtanOp), ("Sinh", nn.SinhOp),
                 ("Cosh", nn.CoshOp), ("Asinh", nn.AsinhOp), ("Acosh", nn.AcoshOp),
                 ("Atanh", nn.AtanhOp), ("BitwiseNot", nn.BitwiseNotOp)):
    CONVERTERS[_t] = _unary(_cls)

CONVERTERS["LeakyRelu"] = _unary(nn.LeakyReluOp, alpha=0.01)
CONVERTERS["Elu"] = _unary(nn.EluOp, alpha=1.0)
CONVERTERS["Selu"] = _unary(nn.SeluOp, alpha=1.67326319217681884765625,
                            gamma=1.05070102214813232421875)
CONVERTERS["Celu"] = _unary(nn.CeluOp, alpha=1.0)
CONVERTERS["ThresholdedRelu"] = _unary(nn.ThresholdedReluOp, alpha=1.0)
CONVERTERS["HardSigmoid"] = _unary(nn.HardSigmoidOp, alpha=0.2, beta=0.5)
CONVERTERS["Swish"] = _unary(nn.SwishOp, alpha=1.0)
CONVERTERS["Shrink"] = _unary(nn.ShrinkOp, bias=0.0, lambd=0.5)


@converter("SwiGLU")
def _swiglu(cx, ins, attrs):
    """``Swish_alpha(a) * b`` (same shapes)."""
    a, b = cx.operands(ins[0], ins[1])
    if a.type.get_shape() != b.type.get_shape():
        fail("gate and linear inputs must have the same shape")
    gate = cx.emit(nn.SwishOp(a, alpha=float(attrs.get("alpha", 1.0))))
    return cx.emit(nn.MultiplyOp(gate, b))


@converter("IsInf")
def _is_inf(cx, ins, attrs):
    return cx.emit(nn.IsInfOp(cx.tensor(ins[0]),
                              detect_positive=bool(attrs.get("detect_positive", 1)),
                              detect_negative=bool(attrs.get("detect_negative", 1))))


@converter("Gelu")
def _gelu(cx, ins, attrs):
    return cx.emit(nn.GeluOp(cx.tensor(ins[0]),
                             approximate=_text(attrs.get("approximate", b"none"))))


@converter("Where")
def _where(cx, ins, attrs):
    on_true, on_false = cx.operands(ins[1], ins[2])
    return cx.emit(nn.WhereOp(cx.tensor(ins[0]), on_true, on_false))


def _cast_to(cx: Importer, x: Value, dtype: np.dtype, saturate: bool = True, round_mode: str = "up") -> Value:
    x = cx.tensor(x)
    to = nn.element_type_of(dtype)
    return x if x.type.element_type == to else cx.emit(nn.CastOp(x, to, saturate=saturate, round_mode=round_mode))


def _to(attrs: dict, what: str) -> np.dtype:
    """The dtype named by the ``to`` attribute (an ONNX TensorProto data type)."""
    to = attrs.get("to")
    if to not in ONNX_DTYPES:
        name = onnx.TensorProto.DataType.Name(to) if to is not None else "nothing"
        fail(f"{what} to {name} is not supported")
    return ONNX_DTYPES[to]


@converter("Cast")
def _cast(cx, ins, attrs):
    # ``saturate`` only concerns float8 targets: out-of-range values clamp to the largest
    # finite; ``round_mode`` only f8E8M0 (MX scales): how a value rounds to a power of two.
    return _cast_to(cx, ins[0], _to(attrs, "cast"), bool(attrs.get("saturate", 1)), _round_mode(attrs))


def _round_mode(attrs: dict) -> str:
    mode = attrs.get("round_mode", b"up")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in nn.CastOp.ROUND_MODES:
        fail(f"round_mode '{mode}' is not one of {', '.join(nn.CastOp.ROUND_MODES)}")
    return mode


@converter("BitCast")
def _bitcast(cx, ins, attrs):
    return cx.emit(nn.BitcastOp(cx.tensor(ins[0]), nn.element_type_of(_to(attrs, "bitcast"))))


@converter("CastLike")
def _cast_like(cx, ins, attrs):
    target = ins[1]
    if isinstance(target, SSAValue):
        dtype = nn.numpy_dtype(target.type.element_type)
    elif is_const(target) and not is_symbolic(target):
        dtype = np.asarray(target).dtype
    else:
        fail("the target of CastLike is missing or symbolic")
    if dtype not in ONNX_DTYPES.values():
        fail(f"cast to {dtype} is not supported")
    return _cast_to(cx, ins[0], dtype, bool(attrs.get("saturate", 1)), _round_mode(attrs))


_EXACT = 2.0**53


@converter("Clip")
def _clip(cx, ins, attrs):
    """Constant bounds become properties; run-time bounds (or integers too large for an f64
    property) become ``maximum`` / ``minimum`` with the bound tensors."""
    x = cx.tensor(ins[0])
    if cx.opset < 11:
        lo, hi = attrs.get("min"), attrs.get("max")
        bounds: list[Value] = [None if lo is None else np.asarray(lo, np.float32),
                               None if hi is None else np.asarray(hi, np.float32)]
    else:
        bounds = [ins[k] if len(ins) > k else None for k in (1, 2)]
    props: dict[str, float] = {}
    tensors: list[tuple[type, SSAValue]] = []
    for name, v, op_cls in zip(("min", "max"), bounds, (nn.MaximumOp, nn.MinimumOp)):
        if v is None:
            continue
        if is_const(v) and not is_symbolic(v) and np.asarray(v).size == 1 \
                and abs(float(np.asarray(v).reshape(-1)[0])) < _EXACT:
            props[name] = float(np.asarray(v).reshape(-1)[0])
        else:
            bound = cx.tensor(v, like=x)
            if bound.type.get_shape():
                fail(f"{name} must be a scalar")
            tensors.append((op_cls, bound))
    out = cx.emit(nn.ClipOp(x, **props)) if props or not tensors else x
    for op_cls, bound in tensors:
        out = cx.emit(op_cls(out, bound))
    return out


_QUANTIZED = {onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16,
              onnx.TensorProto.UINT16, onnx.TensorProto.INT4, onnx.TensorProto.UINT4,
              onnx.TensorProto.INT2, onnx.TensorProto.UINT2, onnx.TensorProto.FLOAT4E2M1,
              onnx.TensorProto.FLOAT8E4M3FN, onnx.TensorProto.FLOAT8E4M3FNUZ,
              onnx.TensorProto.FLOAT8E5M2, onnx.TensorProto.FLOAT8E5M2FNUZ}


def _quantization_operands(cx: Importer, ins, attrs, default_zero: np.dtype):
    x, scale = cx.tensor(ins[0]), cx.tensor(ins[1])
    zp = cx.tensor(ins[2] if len(ins) > 2 and ins[2] is not None else
                   np.zeros(np.shape(ins[1]) if is_const(ins[1]) else scale.type.get_shape(), default_zero))
    # Per-tensor parameters come as a scalar or a one-element vector, and exporters mix the
    # two (onnxruntime's QDQ BERT: a [1] scale beside a scalar zero point): both scalars.
    sizes = [math.prod(v.type.get_shape()) for v in (scale, zp)]
    if sizes == [1, 1] and scale.type.get_shape() != zp.type.get_shape():
        scale, zp = (cx.emit(nn.ReshapeOp(v, [])) if v.type.get_shape() else v for v in (scale, zp))
    return x, scale, zp


@converter("QuantizeLinear")
def _quantize_linear(cx, ins, attrs):
    # ``saturate`` only concerns float8 outputs, which nn always saturates.
    out = attrs.get("output_dtype", 0) or onnx.TensorProto.UINT8
    if out not in _QUANTIZED:
        fail(f"quantization to {onnx.TensorProto.DataType.Name(out)} is not supported")
    if attrs.get("precision", 0):
        fail("the precision attribute is not supported")
    x, scale, zp = _quantization_operands(cx, ins, attrs, ONNX_DTYPES[out])
    return cx.emit(nn.QuantizeOp(x, scale, zp, axis=attrs.get("axis", 1),
                                 block_size=attrs.get("block_size", 0)))


QDQ_WEIGHT_DTYPES = tuple(np.dtype(t) for t in (np.int8, np.uint8, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2))
"""Quantized weights a product reads as they are stored: int8 (IMMA) and the two OCP 8-bit
floats (FP8 tensor cores)."""
BLOCK_WEIGHT_DTYPES = (np.dtype(ml_dtypes.int4), np.dtype(ml_dtypes.uint4))
"""Block-quantized weights a product reads packed (weight-only 4-bit LLM exports)."""


@converter("DequantizeLinear")
def _dequantize_linear(cx, ins, attrs):
    if attrs.get("output_dtype", 0):
        fail("the output_dtype attribute is not supported")
    # (the input's type read without emitting a constant nothing would read)
    dtype = np.asarray(ins[0]).dtype if is_const(ins[0]) else nn.numpy_dtype(cx.tensor(ins[0]).type.element_type)
    x, scale, zp = _quantization_operands(cx, ins, attrs, dtype)
    axis, block_size = attrs.get("axis", 1), attrs.get("block_size", 0)
    if is_const(ins[0]) and (dtype in QDQ_WEIGHT_DTYPES and not block_size or dtype in BLOCK_WEIGHT_DTYPES and block_size):
        # A quantized weight: its integers (or 8-bit floats) kept for a low-precision
        # product (MatMul's QDQ form; a block-quantized 4-bit one stays packed).
        zero = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros((), dtype)
        if is_const(ins[1]) and is_const(zero):
            cx.dequantized[cx.node.output[0]] = QuantizedConstant(*(np.asarray(v) for v in (ins[0], ins[1], zero)),
                                                                  axis, block_size)
    return cx.emit(nn.DequantizeOp(x, scale, zp, axis=axis, block_size=block_size))


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(cx, ins, attrs):
    """uint8 per-tensor quantization whose range is measured at run time (onnxruntime's
    dynamic quantization): the range of ``x`` widened to hold 0 gives the scale, the zero
    point is ``round(clip(-min / scale, 0, 255))``, then ``y`` is a QuantizeLinear."""
    x = cx.tensor(ins[0])
    axes = list(range(len(x.type.get_shape())))
    zero = cx.tensor(np.zeros((), np.float32))
    lo = cx.emit(nn.MinimumOp(cx.emit(nn.ReduceMinOp(x, axes, keepdims=False)), zero))
    hi = cx.emit(nn.MaximumOp(cx.emit(nn.ReduceMaxOp(x, axes, keepdims=False)), zero))
    scale = cx.emit(nn.DivideOp(cx.emit(nn.SubtractOp(hi, lo)), cx.tensor(np.asarray(255, np.float32))))
    shifted = cx.emit(nn.SubtractOp(zero, cx.emit(nn.DivideOp(lo, scale))))
    zp = cx.emit(nn.CastOp(cx.emit(nn.RoundOp(cx.emit(nn.ClipOp(shifted, min=0.0, max=255.0)))),
                           nn.element_type_of(np.dtype(np.uint8))))
    return [cx.emit(nn.QuantizeOp(x, scale, zp)), scale, zp]
