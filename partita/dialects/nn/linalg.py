"""Linear-algebra ``nn`` ops: dense, matmul, batch_matmul, matmul_integer, matmul_float8,
matmul_nbits and bias_add.

GEMMs take every numeric type (CUTLASS and the tiled native kernels take f16 / bf16 /
f32; f64 and integers, which multiply and accumulate in their own type, get a simple
native kernel)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import Float32Type, IntegerType, Signedness, TensorType
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    irdl_op_definition,
    operand_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    FLOAT8_TYPES,
    FLOATS,
    FORMAT_BINARY,
    NUMERIC_TYPES,
    Dims,
    NNOp,
    OpKind,
    Shape,
    ShapeArith,
    UnaryOp,
    _bool_prop,
    _fmt,
    _init,
    _int_prop,
    _shape,
    _static_product,
    _tensor,
    _value,
    broadcast_shapes,
    check_channel_vector,
    kind_trait,
    merge_dims,
    normalize_axis,
)


def infer_dense_shape(x: Shape, w: Shape) -> Shape:
    """``x[..., K] @ w[N, K]^T -> [..., N]`` (Relay ``nn.dense``)."""
    if len(x) < 2 or len(w) != 2:
        raise VerifyException(
            f"dense expects input rank >= 2 and weight rank 2, got {len(x)} and {len(w)}"
        )
    merge_dims(x[-1], w[1], "dense reduction dimension mismatch")
    return (*x[:-1], w[0])


def infer_matmul_shape(a: Shape, b: Shape) -> Shape:
    """NumPy ``matmul`` for rank >= 2 operands with broadcast batch dimensions."""
    if len(a) < 2 or len(b) < 2:
        raise VerifyException(f"matmul expects rank >= 2 operands, got {len(a)} and {len(b)}")
    merge_dims(a[-1], b[-2], "matmul reduction dimension mismatch")
    return (*broadcast_shapes(a[:-2], b[:-2]), a[-2], b[-1])


def infer_batch_matmul_shape(a: Shape, b: Shape, transpose_a: bool, transpose_b: bool) -> Shape:
    """Rank-3 batched matmul; ``transpose_b`` means ``b`` is ``[B, N, K]`` (Relay default)."""
    if len(a) != 3 or len(b) != 3:
        raise VerifyException(f"batch_matmul expects rank 3 operands, got {len(a)} and {len(b)}")
    m, ka = (a[2], a[1]) if transpose_a else (a[1], a[2])
    kb, n = (b[2], b[1]) if transpose_b else (b[1], b[2])
    merge_dims(ka, kb, "batch_matmul reduction dimension mismatch")
    (batch,) = broadcast_shapes(a[:1], b[:1])
    return (batch, m, n)



@irdl_op_definition
class DenseOp(NNOp):
    """``input[..., K] x weight[N, K] -> [..., N]``."""
    traits = kind_trait(OpKind.OUT_EWISE_FUSABLE)

    name = "nn.dense"
    ALLOWED_TYPES: ClassVar = NUMERIC_TYPES
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$input `,` $weight attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue | Operation, weight: SSAValue | Operation,
                 result_type: Attribute | None = None):
        _init(self, [input, weight], result_type)

    def infer_shape(self) -> Shape:
        return infer_dense_shape(_shape(self.input), _shape(self.weight))


@irdl_op_definition
class MatmulOp(NNOp):
    """NumPy ``matmul`` with batch broadcasting (ranks >= 2)."""
    traits = kind_trait(OpKind.OUT_EWISE_FUSABLE)

    name = "nn.matmul"
    ALLOWED_TYPES: ClassVar = NUMERIC_TYPES
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = FORMAT_BINARY

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation,
                 result_type: Attribute | None = None):
        _init(self, [lhs, rhs], result_type)

    def infer_shape(self) -> Shape:
        return infer_matmul_shape(_shape(self.lhs), _shape(self.rhs))


@irdl_op_definition
class BatchMatmulOp(NNOp):
    """Rank-3 batched matmul; by default ``rhs`` is ``[B, N, K]`` (``transpose_b``)."""
    traits = kind_trait(OpKind.OUT_EWISE_FUSABLE)

    name = "nn.batch_matmul"
    ALLOWED_TYPES: ClassVar = NUMERIC_TYPES
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    transpose_a_attr = _bool_prop("transpose_a", False)
    transpose_b_attr = _bool_prop("transpose_b", True)
    transpose_a = _value("transpose_a")
    transpose_b = _value("transpose_b")
    assembly_format = FORMAT_BINARY

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation,
                 transpose_a: bool | None = None, transpose_b: bool | None = None,
                 result_type: Attribute | None = None):
        _init(self, [lhs, rhs], result_type, transpose_a=transpose_a, transpose_b=transpose_b)

    def infer_shape(self) -> Shape:
        return infer_batch_matmul_shape(_shape(self.lhs), _shape(self.rhs),
                                        self.transpose_a, self.transpose_b)


@irdl_op_definition
class BiasAddOp(NNOp):
    """Add a rank-1 ``bias`` along ``axis``."""
    traits = kind_trait(OpKind.BROADCAST)

    name = "nn.bias_add"
    input = operand_def(TensorType)
    bias = operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis", -1)
    axis = _value("axis")
    assembly_format = "$input `,` $bias attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue | Operation, bias: SSAValue | Operation,
                 axis: int | None = None, result_type: Attribute | None = None):
        _init(self, [input, bias], result_type, axis=axis)

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        check_channel_vector(x, _shape(self.bias), normalize_axis(self.axis, len(x)), "bias")
        return x




class IntegerProductOp(NNOp):
    """A product of i8 / ui8 operands, each shifted by its zero point (of its own type),
    accumulated and returned in i32: exact, which a float product of the shifted operands
    is not for long sums (``matmul_integer``, ``conv_integer``)."""

    traits = kind_trait(OpKind.OUT_EWISE_FUSABLE)
    ALLOWED_TYPES: ClassVar = (IntegerType(8), IntegerType(8, Signedness.UNSIGNED))

    def factors(self) -> tuple[tuple[SSAValue, SSAValue, str], ...]:
        """(operand, its zero point, its name in messages) of each factor."""
        raise NotImplementedError

    def infer_element_type(self) -> Attribute:
        return IntegerType(32)

    def verify_element_types(self) -> None:
        for operand, zero_point, what in self.factors():
            t = _tensor(operand).element_type
            self.check_element_type(t, f"{what} element type")
            self.check_element_type(_tensor(zero_point).element_type,
                                    f"{what} zero point element type", (t,))
        self.check_element_type(_tensor(self.results[0]).element_type, "result element type",
                                (IntegerType(32),))


@irdl_op_definition
class MatmulIntegerOp(IntegerProductOp):
    """``(lhs - lhs_zero_point) @ (rhs - rhs_zero_point)`` in i32 (ONNX MatMulInteger) for
    i8 / ui8 operands of rank >= 2 (NumPy batch broadcasting); each zero point is one
    element of its operand's type. With ``transpose_b`` the rhs is stored ``[..., N, K]``
    (a constant weight laid out at import as ``nn.dense``'s is: the K-contiguous "TN"
    form int8 tensor-core GEMMs read)."""
    name = "nn.matmul_integer"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    lhs_zero_point = operand_def(TensorType)
    rhs_zero_point = operand_def(TensorType)
    result = result_def(TensorType)
    transpose_b_attr = _bool_prop("transpose_b", False)
    transpose_b = _value("transpose_b")
    assembly_format = ("$lhs `,` $rhs `,` $lhs_zero_point `,` $rhs_zero_point attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, lhs, rhs, lhs_zero_point, rhs_zero_point,
                 result_type: Attribute | None = None, *, transpose_b: bool | None = None):
        _init(self, [lhs, rhs, lhs_zero_point, rhs_zero_point], result_type,
              transpose_b=transpose_b or None)

    def factors(self) -> tuple[tuple[SSAValue, SSAValue, str], ...]:
        return (self.lhs, self.lhs_zero_point, "lhs"), (self.rhs, self.rhs_zero_point, "rhs")

    def infer_shape(self) -> Shape:
        for what, v in (("lhs", self.lhs_zero_point), ("rhs", self.rhs_zero_point)):
            if _static_product(_shape(v)) != 1 or DYN in _shape(v):
                raise VerifyException(f"{what} zero point must have one element, got shape "
                                      f"{_fmt(_shape(v))}")
        return _transposed_matmul_shape(_shape(self.lhs), _shape(self.rhs), self.transpose_b)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        return _transposed_matmul_dims(self, dims)


FP8_GEMM_TYPES = (FLOAT8_TYPES[0], FLOAT8_TYPES[2])
"""f8E4M3FN and f8E5M2: the OCP 8-bit floats FP8 tensor cores (sm_89 and later) multiply;
the FNUZ forms are another vendor's encoding and stay dequantized float products."""


@irdl_op_definition
class MatmulFloat8Op(NNOp):
    """``lhs @ rhs`` of 8-bit float operands (f8E4M3FN or f8E5M2, either on either side),
    every product exact in f32 and accumulated in f32, returned in f32 and unscaled: the
    FP8 tensor cores' GEMM (cuBLASLt's FP8 matmul, torch's ``_scaled_mm``). The dequantize
    scales of a QDQ product multiply its result once, as they do an int8 product's. Ranks
    >= 2 with NumPy batch broadcasting; with ``transpose_b`` the rhs is stored
    ``[..., N, K]``, the K-contiguous "TN" form FP8 GEMMs read (cuBLASLt takes no other)."""

    traits = kind_trait(OpKind.OUT_EWISE_FUSABLE)
    name = "nn.matmul_float8"
    ALLOWED_TYPES: ClassVar = FP8_GEMM_TYPES
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    transpose_b_attr = _bool_prop("transpose_b", False)
    transpose_b = _value("transpose_b")
    assembly_format = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation,
                 result_type: Attribute | None = None, *, transpose_b: bool | None = None):
        _init(self, [lhs, rhs], result_type, transpose_b=transpose_b or None)

    def infer_element_type(self) -> Attribute:
        return Float32Type()

    def verify_element_types(self) -> None:
        for what, v in (("lhs", self.lhs), ("rhs", self.rhs)):
            self.check_element_type(_tensor(v).element_type, f"{what} element type")
        self.check_element_type(_tensor(self.result).element_type, "result element type", (Float32Type(),))

    def infer_shape(self) -> Shape:
        return _transposed_matmul_shape(_shape(self.lhs), _shape(self.rhs), self.transpose_b)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        return _transposed_matmul_dims(self, dims)


def _transposed_matmul_shape(lhs: Shape, rhs: Shape, transpose_b: bool) -> Shape:
    """``infer_matmul_shape`` with a rhs stored ``[..., N, K]`` when ``transpose_b``."""
    if transpose_b and len(rhs) >= 2:
        rhs = (*rhs[:-2], rhs[-1], rhs[-2])
    return infer_matmul_shape(lhs, rhs)


def _transposed_matmul_dims(op: NNOp, dims: Dims) -> list:
    """Result dims of ``lhs @ op(rhs)``: batch dims broadcast (a literal 1 gives way to the
    other operand's dim), M from the lhs, N from the rhs as ``transpose_b`` stores it."""
    a, b = dims(op.operands[0]), dims(op.operands[1])
    rank = max(len(a), len(b)) - 2
    pa = [1] * (rank - len(a) + 2) + list(a[:-2])
    pb = [1] * (rank - len(b) + 2) + list(b[:-2])
    n = b[-2] if op.transpose_b else b[-1]
    return [y if isinstance(x, int) and x == 1 else x for x, y in zip(pa, pb)] + [a[-2], n]


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """4-bit codes (0..15) ``[..., 2m]`` as bytes ``[..., m]`` in ``nn.matmul_nbits``'s
    layout (onnxruntime's): element ``k`` in byte ``k // 2``, the low nibble first."""
    return np.ascontiguousarray((codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8))


def unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    """The codes of ``pack_nibbles``' bytes: ``[..., m]`` -> ``[..., 2m]``, low nibble first."""
    return np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)


@irdl_op_definition
class MatmulNBitsOp(NNOp):
    """``input[..., K] @ dequantize(weight)ᵀ -> [..., N]``: a weight-only 4-bit GEMM (ONNX's
    block-quantized QDQ MatMul; onnxruntime's MatMulNBits). ``weight`` is ``[N, K / 2]`` ui8,
    two 4-bit codes a byte along K (element ``k`` in byte ``k // 2``, the low nibble first:
    onnxruntime's layout), so it stays packed in memory (a quarter of f16's bytes).
    ``scales`` (of the input's type) and ``zero_points`` (ui8 codes 0..15) are ``[N, K /
    block_size]`` (``pack_nibbles`` / ``unpack_nibbles`` spell the packing): weight element ``(n, k)`` is ``(code - zero_points[n, b]) * scales[n, b]``
    with ``b = k // block_size``; the products are summed in f32."""

    traits = kind_trait(OpKind.OUT_EWISE_FUSABLE)
    name = "nn.matmul_nbits"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    scales = operand_def(TensorType)
    zero_points = operand_def(TensorType)
    result = result_def(TensorType)
    block_size_attr = _int_prop("block_size")
    block_size = _value("block_size")
    assembly_format = ("$input `,` $weight `,` $scales `,` $zero_points attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, input: SSAValue | Operation, weight: SSAValue | Operation, scales: SSAValue | Operation,
                 zero_points: SSAValue | Operation, block_size: int, result_type: Attribute | None = None):
        _init(self, [input, weight, scales, zero_points], result_type, block_size=block_size)

    def verify_element_types(self) -> None:
        x = _tensor(self.input).element_type
        self.check_element_type(x, "input element type")
        self.check_element_type(_tensor(self.scales).element_type, "scales element type", (x,))
        self.check_element_type(_tensor(self.result).element_type, "result element type", (x,))
        ui8 = (IntegerType(8, Signedness.UNSIGNED),)
        self.check_element_type(_tensor(self.weight).element_type, "weight element type", ui8)
        self.check_element_type(_tensor(self.zero_points).element_type, "zero point element type", ui8)

    def infer_shape(self) -> Shape:
        x, w = _shape(self.input), _shape(self.weight)
        bs = self.block_size
        if len(x) < 2 or len(w) != 2:
            raise VerifyException(f"matmul_nbits expects input rank >= 2 and a weight of rank 2, got {len(x)} "
                                  f"and {len(w)}")
        if bs < 16 or bs & (bs - 1):
            raise VerifyException(f"block_size must be a power of two >= 16, got {bs}")
        k = x[-1]
        if k == DYN or k % bs:
            raise VerifyException(f"the reduction dimension ({_fmt(x[-1:])}) must be a static multiple of "
                                  f"block_size {bs}")
        for what, got, want in (("weight", w, (w[0], k // 2)), ("scales", _shape(self.scales), (w[0], k // bs)),
                                ("zero points", _shape(self.zero_points), (w[0], k // bs))):
            if tuple(got) != want:
                raise VerifyException(f"{what} must be {_fmt(want)} (two codes a byte, one per block of "
                                      f"{bs}), got {_fmt(got)}")
        return (*x[:-1], w[0])

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        return [*dims(self.input)[:-1], dims(self.weight)[0]]


@irdl_op_definition
class DetOp(UnaryOp):
    """Determinant of each square matrix in the last two axes (ONNX Det): the result has
    the input's shape less those two axes. No kernel computes it: a host step (LU by
    NumPy's LAPACK)."""
    traits = kind_trait(OpKind.OPAQUE)

    name = "nn.det"
    ALLOWED_TYPES: ClassVar = FLOATS

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        if len(x) < 2 or DYN not in x[-2:] and x[-1] != x[-2]:
            raise VerifyException(f"det needs square matrices in the last two axes, got {_fmt(x)}")
        return x[:-2]

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        return list(dims(self.input))[:-2]
