"""Element-wise ``nn`` ops: arithmetic with NumPy broadcasting, math functions, activations,
comparisons and logic (``i1`` results), ``where`` and ``cast``.

Each op accepts the element types of its ONNX definition (``ALLOWED_TYPES``); integer ops
follow C / NumPy semantics (wrap-around, division truncating toward zero)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float4E2M1FNType,
    Float64Type,
    FloatAttr,
    IntegerType,
    Signedness,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    result_def,
)
from xdsl.traits import Commutative
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    ELEMENT_TYPES,
    FLOAT8_TYPES,
    FLOATS,
    FORMAT_BINARY,
    INTEGERS,
    NUMERIC_TYPES,
    SUB_BYTE_INTEGERS,
    NNOp,
    OpKind,
    Shape,
    UnaryOp,
    _bool_prop,
    _float_prop,
    _fmt,
    _init,
    _int_prop,
    _shape,
    _str_prop,
    _tensor,
    _value,
    broadcast_shapes,
    kind_trait,
    merge_dims,
    normalize_axis,
    numpy_dtype,
)

# ---------------------------------------------------------------------------------------
# Element types of the ONNX operator definitions
# ---------------------------------------------------------------------------------------

SIGNED_INTEGERS = tuple(t for t in INTEGERS if t.signedness.data != Signedness.UNSIGNED)
SIGNED_NUMERIC = (*FLOATS, *SIGNED_INTEGERS)
"""Floats and signed integers (Neg, Relu, ...)."""
BOOL = (IntegerType(1),)


class ElementwiseBinaryOp(NNOp):
    """Elementwise binary op with NumPy broadcasting."""
    traits = kind_trait(OpKind.BROADCAST)

    ALLOWED_TYPES: ClassVar = NUMERIC_TYPES

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = FORMAT_BINARY

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation,
                 result_type: Attribute | None = None, **props: object):
        _init(self, [lhs, rhs], result_type, **props)

    def infer_shape(self) -> Shape:
        return broadcast_shapes(_shape(self.lhs), _shape(self.rhs))


@irdl_op_definition
class AddOp(ElementwiseBinaryOp):
    name = "nn.add"
    traits = kind_trait(OpKind.BROADCAST, Commutative())


@irdl_op_definition
class SubtractOp(ElementwiseBinaryOp):
    name = "nn.subtract"


@irdl_op_definition
class MultiplyOp(ElementwiseBinaryOp):
    name = "nn.multiply"
    traits = kind_trait(OpKind.BROADCAST, Commutative())


@irdl_op_definition
class DivideOp(ElementwiseBinaryOp):
    name = "nn.divide"



class ElementwiseUnaryOp(UnaryOp):
    """One-input op computing each element from the input's element at the same index;
    its properties are scalars, so it commutes with any layout change."""
    traits = kind_trait(OpKind.ELEMWISE)


@irdl_op_definition
class ReluOp(ElementwiseUnaryOp):
    name = "nn.relu"
    ALLOWED_TYPES: ClassVar = SIGNED_NUMERIC


@irdl_op_definition
class SigmoidOp(ElementwiseUnaryOp):
    name = "nn.sigmoid"
    ALLOWED_TYPES: ClassVar = FLOATS


@irdl_op_definition
class TanhOp(ElementwiseUnaryOp):
    name = "nn.tanh"
    ALLOWED_TYPES: ClassVar = FLOATS


@irdl_op_definition
class GeluOp(ElementwiseUnaryOp):
    """GELU; ``approximate`` is "none" (erf form) or "tanh"."""

    name = "nn.gelu"
    ALLOWED_TYPES: ClassVar = FLOATS
    approximate_attr = _str_prop("approximate", "none")
    approximate = _value("approximate")

    def __init__(self, input: SSAValue | Operation, approximate: str | None = None,
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, approximate=approximate)

    def infer_shape(self) -> Shape:
        if self.approximate not in ("none", "tanh"):
            raise VerifyException(
                f"approximate must be \"none\" or \"tanh\", got {self.approximate!r}")
        return super().infer_shape()


@irdl_op_definition
class ClipOp(ElementwiseUnaryOp):
    """``min(max(x, min), max)``: a bound that is absent does not clamp; with
    ``min > max`` every element is ``max`` (ONNX). Integer inputs clamp to the bounds
    converted to their type."""

    name = "nn.clip"
    ALLOWED_TYPES: ClassVar = NUMERIC_TYPES
    min_attr = opt_prop_def(FloatAttr[Float64Type], prop_name="min")
    max_attr = opt_prop_def(FloatAttr[Float64Type], prop_name="max")

    def __init__(self, input: SSAValue | Operation, min: float | None = None,
                 max: float | None = None, result_type: Attribute | None = None):
        super().__init__(input, result_type, min=None if min is None else float(min),
                         max=None if max is None else float(max))

    @property
    def min(self) -> float | None:
        """The lower bound, or ``None``."""
        return None if self.min_attr is None else self.min_attr.value.data

    @property
    def max(self) -> float | None:
        """The upper bound, or ``None``."""
        return None if self.max_attr is None else self.max_attr.value.data


# ---------------------------------------------------------------------------------------
# Unary math (floats)
# ---------------------------------------------------------------------------------------


class FloatUnaryOp(ElementwiseUnaryOp):
    """Element-wise math function on floats (f64 computes in double)."""

    ALLOWED_TYPES: ClassVar = FLOATS


@irdl_op_definition
class SqrtOp(FloatUnaryOp):
    name = "nn.sqrt"


@irdl_op_definition
class ReciprocalOp(FloatUnaryOp):
    name = "nn.reciprocal"


@irdl_op_definition
class ExpOp(FloatUnaryOp):
    name = "nn.exp"


@irdl_op_definition
class LogOp(FloatUnaryOp):
    name = "nn.log"


@irdl_op_definition
class ErfOp(FloatUnaryOp):
    name = "nn.erf"


@irdl_op_definition
class FloorOp(FloatUnaryOp):
    name = "nn.floor"


@irdl_op_definition
class CeilOp(FloatUnaryOp):
    name = "nn.ceil"


@irdl_op_definition
class RoundOp(FloatUnaryOp):
    """Round to the nearest integer, halves to even (ONNX Round, ``np.round``)."""

    name = "nn.round"


@irdl_op_definition
class SinOp(FloatUnaryOp):
    name = "nn.sin"


@irdl_op_definition
class CosOp(FloatUnaryOp):
    name = "nn.cos"


@irdl_op_definition
class TanOp(FloatUnaryOp):
    name = "nn.tan"


@irdl_op_definition
class AsinOp(FloatUnaryOp):
    name = "nn.asin"


@irdl_op_definition
class AcosOp(FloatUnaryOp):
    name = "nn.acos"


@irdl_op_definition
class AtanOp(FloatUnaryOp):
    name = "nn.atan"


@irdl_op_definition
class SinhOp(FloatUnaryOp):
    name = "nn.sinh"


@irdl_op_definition
class CoshOp(FloatUnaryOp):
    name = "nn.cosh"


@irdl_op_definition
class AsinhOp(FloatUnaryOp):
    name = "nn.asinh"


@irdl_op_definition
class AcoshOp(FloatUnaryOp):
    name = "nn.acosh"


@irdl_op_definition
class AtanhOp(FloatUnaryOp):
    name = "nn.atanh"


@irdl_op_definition
class NegOp(ElementwiseUnaryOp):
    name = "nn.neg"
    ALLOWED_TYPES: ClassVar = SIGNED_NUMERIC


@irdl_op_definition
class AbsOp(ElementwiseUnaryOp):
    name = "nn.abs"
    ALLOWED_TYPES: ClassVar = NUMERIC_TYPES


@irdl_op_definition
class SignOp(ElementwiseUnaryOp):
    """-1, 0 or 1 in the input's type (NaN stays NaN)."""

    name = "nn.sign"
    ALLOWED_TYPES: ClassVar = NUMERIC_TYPES


# ---------------------------------------------------------------------------------------
# Activations (floats)
# ---------------------------------------------------------------------------------------


@irdl_op_definition
class LeakyReluOp(FloatUnaryOp):
    """``x < 0 ? alpha * x : x``."""

    name = "nn.leaky_relu"
    alpha_attr = _float_prop("alpha", 0.01)
    alpha = _value("alpha")


@irdl_op_definition
class EluOp(FloatUnaryOp):
    """``x < 0 ? alpha * (exp(x) - 1) : x``."""

    name = "nn.elu"
    alpha_attr = _float_prop("alpha", 1.0)
    alpha = _value("alpha")


@irdl_op_definition
class SeluOp(FloatUnaryOp):
    """``gamma * (x <= 0 ? alpha * (exp(x) - 1) : x)``."""

    name = "nn.selu"
    alpha_attr = _float_prop("alpha", 1.67326319217681884765625)
    gamma_attr = _float_prop("gamma", 1.05070102214813232421875)
    alpha = _value("alpha")
    gamma = _value("gamma")


@irdl_op_definition
class CeluOp(FloatUnaryOp):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""

    name = "nn.celu"
    alpha_attr = _float_prop("alpha", 1.0)
    alpha = _value("alpha")

    def infer_shape(self) -> Shape:
        if self.alpha == 0:
            raise VerifyException("celu alpha must not be 0")
        return super().infer_shape()


@irdl_op_definition
class ThresholdedReluOp(FloatUnaryOp):
    """``x > alpha ? x : 0``."""

    name = "nn.thresholded_relu"
    alpha_attr = _float_prop("alpha", 1.0)
    alpha = _value("alpha")


@irdl_op_definition
class HardSigmoidOp(FloatUnaryOp):
    """``max(0, min(1, alpha * x + beta))``."""

    name = "nn.hard_sigmoid"
    alpha_attr = _float_prop("alpha", 0.2)
    beta_attr = _float_prop("beta", 0.5)
    alpha = _value("alpha")
    beta = _value("beta")


@irdl_op_definition
class HardSwishOp(FloatUnaryOp):
    """``x * max(0, min(1, x / 6 + 0.5))``."""

    name = "nn.hard_swish"


@irdl_op_definition
class SoftplusOp(FloatUnaryOp):
    """``log(1 + exp(x))``."""

    name = "nn.softplus"


@irdl_op_definition
class SoftsignOp(FloatUnaryOp):
    """``x / (1 + |x|)``."""

    name = "nn.softsign"


@irdl_op_definition
class MishOp(FloatUnaryOp):
    """``x * tanh(softplus(x))``."""

    name = "nn.mish"


@irdl_op_definition
class SwishOp(FloatUnaryOp):
    """``x * sigmoid(alpha * x)`` (SiLU for ``alpha = 1``)."""

    name = "nn.swish"
    alpha_attr = _float_prop("alpha", 1.0)
    alpha = _value("alpha")


# ---------------------------------------------------------------------------------------
# Binary arithmetic beyond add / subtract / multiply / divide
# ---------------------------------------------------------------------------------------


@irdl_op_definition
class MinimumOp(ElementwiseBinaryOp):
    """Element-wise minimum (a NaN operand gives NaN, as ``np.minimum``)."""

    name = "nn.minimum"


@irdl_op_definition
class MaximumOp(ElementwiseBinaryOp):
    """Element-wise maximum (a NaN operand gives NaN, as ``np.maximum``)."""

    name = "nn.maximum"


@irdl_op_definition
class ModOp(ElementwiseBinaryOp):
    """Remainder: with ``fmod`` the sign of the dividend (C ``fmod``), otherwise of the
    divisor (Python ``%``, ``np.mod``). A zero integer divisor gives 0."""

    name = "nn.mod"
    fmod_attr = _bool_prop("fmod", False)
    fmod = _value("fmod")


@irdl_op_definition
class PowOp(ElementwiseBinaryOp):
    """``lhs ** rhs`` in the type of ``lhs``; the exponent may have any numeric type."""

    name = "nn.pow"
    ALLOWED_TYPES: ClassVar = (*FLOATS, IntegerType(32), IntegerType(64))

    def verify_element_types(self) -> None:
        base, result = _tensor(self.lhs).element_type, _tensor(self.result).element_type
        if base != result:
            raise VerifyException(f"result element type {result} must be the base's, {base}")
        self.check_element_type(base, "base element type")
        self.check_element_type(_tensor(self.rhs).element_type, "exponent element type",
                                NUMERIC_TYPES)


@irdl_op_definition
class PReluOp(ElementwiseBinaryOp):
    """``lhs < 0 ? rhs * lhs : lhs``, the slope ``rhs`` broadcast to ``lhs``."""

    name = "nn.prelu"
    ALLOWED_TYPES: ClassVar = (*FLOATS, IntegerType(32), IntegerType(64),
                               IntegerType(32, Signedness.UNSIGNED),
                               IntegerType(64, Signedness.UNSIGNED))

    def infer_shape(self) -> Shape:
        x = _shape(self.lhs)
        out = broadcast_shapes(x, _shape(self.rhs))
        if len(out) != len(x) or any(o != d and d != DYN for o, d in zip(out, x)):
            raise VerifyException(f"slope {_fmt(_shape(self.rhs))} does not broadcast to "
                                  f"input {_fmt(x)}")
        return x


@irdl_op_definition
class BitShiftOp(ElementwiseBinaryOp):
    """``lhs << rhs`` or ``lhs >> rhs`` (ONNX 28): left shifts are logical (on the bits of
    the type), right shifts of signed integers arithmetic; a shift count outside
    ``[0, width)`` gives 0, or -1 for a right shift of a negative value."""

    name = "nn.bit_shift"
    ALLOWED_TYPES: ClassVar = INTEGERS
    direction_attr = _str_prop("direction", "left")
    direction = _value("direction")

    def infer_shape(self) -> Shape:
        if self.direction not in ("left", "right"):
            raise VerifyException(
                f"direction must be \"left\" or \"right\", got {self.direction!r}")
        return super().infer_shape()


@irdl_op_definition
class ShrinkOp(ElementwiseUnaryOp):
    """``x < -lambd ? x + bias : (x > lambd ? x - bias : 0)``."""

    name = "nn.shrink"
    ALLOWED_TYPES: ClassVar = (*(t for t in NUMERIC_TYPES if not isinstance(t, BFloat16Type)),)
    bias_attr = _float_prop("bias", 0.0)
    lambd_attr = _float_prop("lambd", 0.5)
    bias = _value("bias")
    lambd = _value("lambd")


class BitwiseBinaryOp(ElementwiseBinaryOp):
    """Element-wise bitwise connective on integers."""

    ALLOWED_TYPES: ClassVar = INTEGERS


@irdl_op_definition
class BitwiseAndOp(BitwiseBinaryOp):
    name = "nn.bitwise_and"


@irdl_op_definition
class BitwiseOrOp(BitwiseBinaryOp):
    name = "nn.bitwise_or"


@irdl_op_definition
class BitwiseXorOp(BitwiseBinaryOp):
    name = "nn.bitwise_xor"


@irdl_op_definition
class BitwiseNotOp(ElementwiseUnaryOp):
    name = "nn.bitwise_not"
    ALLOWED_TYPES: ClassVar = INTEGERS


# ---------------------------------------------------------------------------------------
# Comparisons and logic (i1 results)
# ---------------------------------------------------------------------------------------


class CompareOp(ElementwiseBinaryOp):
    """Element-wise comparison of two operands of one type; the result is ``i1``."""

    ALLOWED_TYPES: ClassVar = NUMERIC_TYPES
    PREDICATE: ClassVar[str]
    """The C / Python comparison operator."""

    def infer_element_type(self) -> Attribute:
        return IntegerType(1)

    def verify_element_types(self) -> None:
        lhs, rhs = _tensor(self.lhs).element_type, _tensor(self.rhs).element_type
        if lhs != rhs:
            raise VerifyException(f"operands must share one element type, got {lhs}, {rhs}")
        self.check_element_type(lhs, "operand element type")
        self.check_element_type(_tensor(self.result).element_type, "result element type",
                                BOOL)


@irdl_op_definition
class EqualOp(CompareOp):
    name = "nn.equal"
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES
    PREDICATE: ClassVar[str] = "=="


@irdl_op_definition
class LessOp(CompareOp):
    name = "nn.less"
    PREDICATE: ClassVar[str] = "<"


@irdl_op_definition
class LessEqualOp(CompareOp):
    name = "nn.less_equal"
    PREDICATE: ClassVar[str] = "<="


@irdl_op_definition
class GreaterOp(CompareOp):
    name = "nn.greater"
    PREDICATE: ClassVar[str] = ">"


@irdl_op_definition
class GreaterEqualOp(CompareOp):
    name = "nn.greater_equal"
    PREDICATE: ClassVar[str] = ">="


class LogicalBinaryOp(ElementwiseBinaryOp):
    """Element-wise boolean connective on ``i1``."""

    ALLOWED_TYPES: ClassVar = BOOL


@irdl_op_definition
class AndOp(LogicalBinaryOp):
    name = "nn.and"


@irdl_op_definition
class OrOp(LogicalBinaryOp):
    name = "nn.or"


@irdl_op_definition
class XorOp(LogicalBinaryOp):
    name = "nn.xor"


@irdl_op_definition
class NotOp(ElementwiseUnaryOp):
    name = "nn.not"
    ALLOWED_TYPES: ClassVar = BOOL


class FloatClassOp(ElementwiseUnaryOp):
    """Float classification; the result is ``i1``."""

    ALLOWED_TYPES: ClassVar = FLOATS

    def infer_element_type(self) -> Attribute:
        return IntegerType(1)

    def verify_element_types(self) -> None:
        self.check_element_type(_tensor(self.input).element_type, "operand element type")
        self.check_element_type(_tensor(self.result).element_type, "result element type",
                                BOOL)


@irdl_op_definition
class IsNaNOp(FloatClassOp):
    name = "nn.is_nan"


@irdl_op_definition
class IsInfOp(FloatClassOp):
    """Infinities of the selected signs."""

    name = "nn.is_inf"
    detect_positive_attr = _bool_prop("detect_positive", True)
    detect_negative_attr = _bool_prop("detect_negative", True)
    detect_positive = _value("detect_positive")
    detect_negative = _value("detect_negative")


# ---------------------------------------------------------------------------------------
# Select and conversion
# ---------------------------------------------------------------------------------------


@irdl_op_definition
class WhereOp(NNOp):
    """``condition ? on_true : on_false`` with NumPy broadcasting of all three."""
    traits = kind_trait(OpKind.BROADCAST)

    name = "nn.where"
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES

    condition = operand_def(TensorType)
    on_true = operand_def(TensorType)
    on_false = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = ("$condition `,` $on_true `,` $on_false attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, condition: SSAValue | Operation, on_true: SSAValue | Operation,
                 on_false: SSAValue | Operation, result_type: Attribute | None = None):
        _init(self, [condition, on_true, on_false], result_type)

    def infer_element_type(self) -> Attribute:
        return _tensor(self.on_true).element_type

    def verify_element_types(self) -> None:
        self.check_element_type(_tensor(self.condition).element_type, "condition element type",
                                BOOL)
        types = {_tensor(v).element_type for v in (self.on_true, self.on_false, self.result)}
        if len(types) > 1:
            raise VerifyException("values and result must share one element type, got "
                                  + ", ".join(sorted(str(t) for t in types)))

    def infer_shape(self) -> Shape:
        return broadcast_shapes(broadcast_shapes(_shape(self.condition), _shape(self.on_true)),
                                _shape(self.on_false))


@irdl_op_definition
class CastOp(ElementwiseUnaryOp):
    """Element type conversion (C semantics: floats truncate toward zero into integers,
    anything non-zero is true); the result type says the target."""

    name = "nn.cast"
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES
    saturate_attr = _bool_prop("saturate", True)
    saturate = _value("saturate")
    """Into a float8 type (ONNX Cast's ``saturate``): out-of-range values and infinities
    become the largest finite value; without it they overflow to infinity (f8E5M2) or NaN."""
    round_mode_attr = _str_prop("round_mode", "up")
    round_mode = _value("round_mode")
    """Into f8E8M0FNU, a power of two (ONNX Cast's ``round_mode``): ``up`` rounds away from
    zero, ``down`` toward it, ``nearest`` to the nearer with ties up."""

    ROUND_MODES: ClassVar = ("up", "down", "nearest")

    def __init__(self, input: SSAValue | Operation, to: Attribute, saturate: bool = True, round_mode: str = "up"):
        super().__init__(input, TensorType(to, _shape(SSAValue.get(input))),
                         saturate=None if saturate else False, round_mode=None if round_mode == "up" else round_mode)

    def verify_element_types(self) -> None:
        self.check_element_type(_tensor(self.input).element_type, "operand element type")
        self.check_element_type(_tensor(self.result).element_type, "result element type")
        if self.round_mode not in self.ROUND_MODES:
            raise VerifyException(f"round_mode must be one of {', '.join(self.ROUND_MODES)}, not '{self.round_mode}'")


@irdl_op_definition
class BitcastOp(ElementwiseUnaryOp):
    """The bits of each element reinterpreted as the result's element type, of the same
    storage width (little endian; ``i1`` is one byte)."""

    name = "nn.bitcast"
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES

    def __init__(self, input: SSAValue | Operation, to: Attribute):
        super().__init__(input, TensorType(to, _shape(SSAValue.get(input))))

    def verify_element_types(self) -> None:
        source, target = _tensor(self.input).element_type, _tensor(self.result).element_type
        self.check_element_type(source, "operand element type")
        self.check_element_type(target, "result element type")
        if numpy_dtype(source).itemsize != numpy_dtype(target).itemsize:
            raise VerifyException(f"{source} and {target} differ in storage width")


# ---------------------------------------------------------------------------------------
# Linear quantization
# ---------------------------------------------------------------------------------------

QUANTIZED_TYPES = (IntegerType(8), IntegerType(8, Signedness.UNSIGNED), IntegerType(16),
                   IntegerType(16, Signedness.UNSIGNED), *SUB_BYTE_INTEGERS)
"""Integer types of quantized tensors (int8/uint8, int16/uint16, int4/uint4, int2/uint2)."""
QUANTIZED_FLOATS = (*FLOAT8_TYPES, Float4E2M1FNType())
"""Float types of quantized tensors: the float8 formats and FP4 (E2M1)."""


class QuantizationOp(NNOp):
    """Linear (de)quantization with a scale and a zero point that are scalars (per
    tensor), vectors along ``axis`` (per channel), or, with ``block_size``, tensors of the
    input's rank holding one value per block of ``block_size`` elements along ``axis``."""
    traits = kind_trait(OpKind.BROADCAST)

    input = operand_def(TensorType)
    scale = operand_def(TensorType)
    zero_point = operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis", 1)
    block_size_attr = _int_prop("block_size", 0)
    axis = _value("axis")
    block_size = _value("block_size")
    assembly_format = ("$input `,` $scale `,` $zero_point attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, input: SSAValue | Operation, scale: SSAValue | Operation,
                 zero_point: SSAValue | Operation, axis: int | None = None,
                 block_size: int | None = None, result_type: Attribute | None = None):
        _init(self, [input, scale, zero_point], result_type, axis=axis,
              block_size=block_size or None)

    def channel_axis(self) -> int | None:
        """The axis the scale runs along, or ``None`` for one scale per tensor."""
        if not self.block_size and math.prod(_shape(self.scale)) == 1:
            return None
        return normalize_axis(self.axis, len(_shape(self.input)))

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        scale, zero_point = _shape(self.scale), _shape(self.zero_point)
        if scale != zero_point:
            raise VerifyException(f"zero point shape {_fmt(zero_point)} differs from scale "
                                  f"shape {_fmt(scale)}")
        if DYN in scale:
            raise VerifyException("scale must have a static shape")
        if self.block_size < 0:
            raise VerifyException(f"block_size must be >= 0, got {self.block_size}")
        if self.block_size:
            axis = normalize_axis(self.axis, len(x))
            blocks = DYN if x[axis] == DYN else -(-x[axis] // self.block_size)
            expected = tuple(blocks if k == axis else d for k, d in enumerate(x))
            if len(scale) != len(x) or any(DYN not in (a, b) and a != b
                                           for a, b in zip(scale, expected)):
                raise VerifyException(f"scale shape {_fmt(scale)} does not hold one value per "
                                      f"block of {self.block_size} of input {_fmt(x)}")
            return x
        if len(scale) > 1:
            raise VerifyException(f"scale must be a scalar or a vector, got {_fmt(scale)}")
        if scale and scale[0] != 1:
            axis = normalize_axis(self.axis, len(x))
            merge_dims(x[axis], scale[0], f"scale size does not match input dimension {axis}")
        return x

    def _check_types(self, x_types: Sequence[Attribute]) -> None:
        self.check_element_type(_tensor(self.input).element_type, "input element type", x_types)
        self.check_element_type(_tensor(self.scale).element_type, "scale element type", FLOATS[:3])
        self.check_element_type(_tensor(self.zero_point).element_type,
                                "zero point element type", QUANTIZED_TYPES + (IntegerType(32),) + QUANTIZED_FLOATS)


@irdl_op_definition
class QuantizeOp(QuantizationOp):
    """``saturate(round_half_even(input / scale) + zero_point)`` in the zero point's type
    (into a float8 or FP4 type: ``input / scale + zero_point`` rounded by the saturating cast)."""

    name = "nn.quantize"

    def infer_element_type(self) -> Attribute:
        return _tensor(self.zero_point).element_type

    def verify_element_types(self) -> None:
        result = _tensor(self.result).element_type
        self._check_types((*FLOATS[:3], IntegerType(32)))
        self.check_element_type(result, "result element type", QUANTIZED_TYPES + QUANTIZED_FLOATS)
        if _tensor(self.zero_point).element_type != result:
            raise VerifyException("zero point and result must share one element type")


@irdl_op_definition
class DequantizeOp(QuantizationOp):
    """``(input - zero_point) * scale`` in the scale's type."""

    name = "nn.dequantize"

    def infer_element_type(self) -> Attribute:
        return _tensor(self.scale).element_type

    def verify_element_types(self) -> None:
        x = _tensor(self.input).element_type
        self._check_types(QUANTIZED_TYPES + (IntegerType(32),) + QUANTIZED_FLOATS)
        if _tensor(self.zero_point).element_type != x:
            raise VerifyException("zero point and input must share one element type")
        if _tensor(self.result).element_type != _tensor(self.scale).element_type:
            raise VerifyException("result and scale must share one element type")
