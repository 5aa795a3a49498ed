"""ONNX converters of MatMul (NumPy semantics, rank-1 operands too), Gemm, MatMulInteger and
Einsum (the contractions of transformers, as transposes, sums and one matmul)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np
from xdsl.ir import SSAValue

from partita.dialects import nn
from partita.frontends.einsum import EinsumError, lower_einsum
from partita.frontends.onnx.importer import Importer
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.values import Value, fail, is_const, shape_of


def transpose_value(cx: Importer, v: Value, like: SSAValue | None = None) -> SSAValue:
    """A 2-D value transposed: constants at import time, others by ``nn.transpose``."""
    if is_const(v):
        return cx.tensor(np.asarray(v).T, like)  # laid out once, by the constant's tobytes
    return cx.emit(nn.TransposeOp(cx.tensor(v), [1, 0]))


@converter("Gemm")
def _gemm(cx, ins, attrs):
    a = cx.tensor(ins[0])
    if len(shape_of(a)) != 2:
        fail("Gemm input A must have rank 2")
    out = None if attrs.get("transA", 0) else _qdq_matmul(cx, a, cx.node.input[1], bool(attrs.get("transB", 0)))
    if out is None:
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
        if is_const(c) and beta != 1.0:
            c = np.asarray(c, np.float32) * np.float32(beta)
        elif beta != 1.0:
            c = cx.emit(nn.MultiplyOp(c, cx.tensor(np.asarray(beta, np.float32), a)))
        out = cx.emit(nn.AddOp(out, cx.tensor(c, a)))
    return out


def _reshape(cx: Importer, v: SSAValue, shape) -> SSAValue:
    """``v`` reshaped to ``shape`` (at most one dynamic dim), or ``v`` if it has it."""
    shape = list(shape)
    if tuple(shape) == shape_of(v):
        return v
    if shape.count(nn.DYN) > 1:
        fail(f"reshaping {list(shape_of(v))} to {shape} needs more than one dynamic dimension")
    return cx.emit(nn.ReshapeOp(v, shape))


def _product(dims) -> int:
    return nn.DYN if nn.DYN in dims else math.prod(dims)


def _constant(v: SSAValue) -> np.ndarray | None:
    return v.owner.to_numpy() if isinstance(v.owner, nn.ConstantOp) else None


@dataclass(frozen=True)
class QDQOperands:
    """A float product ``DequantizeLinear(xq) x DequantizeLinear(wq)`` (onnxruntime's static
    quantization, QDQ format) read as the integer product it stands for,
    ``sx * sw * ((xq - zx) x (wq - zw))``: the activation's per-tensor dequantize (bypassed:
    its integers are read), its zero point, the constant quantized weight with its zero
    point, and ``sx * sw`` (f64, then ``sx``'s type: one rounding), one element or one per
    output channel."""

    dequantize: nn.DequantizeOp
    zero_point: np.ndarray
    weight: np.ndarray
    weight_zero_point: np.ndarray
    scale: np.ndarray

    @property
    def is_float8(self) -> bool:
        """8-bit float operands (an FP8 product), not integers."""
        return not np.issubdtype(self.weight.dtype, np.integer)


def per_tensor_dequantize(v: Value) -> tuple[nn.DequantizeOp, np.ndarray, np.ndarray] | None:
    """``v``'s producer when it dequantizes a run-time tensor by one constant scale and
    zero point (an activation's QDQ pair): the op, its scale and its zero point (0-d);
    else None."""
    dequantize = v.owner if isinstance(v, SSAValue) else None
    if not isinstance(dequantize, nn.DequantizeOp) or dequantize.block_size:
        return None
    scale, zero = _constant(dequantize.scale), _constant(dequantize.zero_point)
    if scale is None or zero is None or scale.size != 1 or zero.size != 1:
        return None
    return dequantize, scale.reshape(()), zero.reshape(())


def qdq_operands(cx: Importer, a: Value, weight: str, rank: int, channel_axis: int,
                 symmetric: bool = False) -> QDQOperands | None:
    """The integer operands of a QDQ product of activation ``a`` and the dequantized
    constant ``weight`` (by name; ``rank`` dims, its output channels along
    ``channel_axis``): a per-tensor activation and a weight quantized per tensor or per
    output channel, per-channel zero points 0 (they do not factor out of the product), and
    any weight zero point 0 when ``symmetric``. None for anything else (the float product
    of the dequantized operands stays)."""
    record = cx.dequantized.get(weight)
    activation = per_tensor_dequantize(a)
    if record is None or record.block_size or activation is None:
        return None
    dequantize, sx, zx = activation
    wq, sw, zw = record.values, record.scale.reshape(-1), record.zero_point.reshape(-1)
    if wq.ndim != rank:
        return None
    if np.issubdtype(zx.dtype, np.integer) != np.issubdtype(wq.dtype, np.integer):
        return None  # an int8 activation beside an 8-bit float weight: no one product
    per_channel = sw.size == wq.shape[channel_axis] and sw.size > 1
    if not (sw.size == 1 or per_channel and record.axis % rank == channel_axis) or zw.size not in (1, sw.size):
        return None
    if (zw.size > 1 or symmetric) and zw.any():
        return None
    scale = (sx.astype(np.float64) * sw.astype(np.float64)).astype(sx.dtype)
    return QDQOperands(dequantize, zx, wq, zw[:1].reshape(()), scale if per_channel else scale.reshape(()))


def scaled_product(cx: Importer, q: QDQOperands, product: SSAValue, channel_shape: Sequence[int]) -> SSAValue:
    """The i32 ``product`` of ``q``'s integers in the activation's float type, scaled once
    by ``sx * sw`` (a per-channel scale shaped ``channel_shape`` to broadcast over the
    product), as onnxruntime's own QDQ fusions compute it; the bypassed dequantize is
    erased at the end of the import when nothing else reads it."""
    cx.orphans.append(q.dequantize)
    scale = q.scale if q.scale.ndim == 0 else q.scale.reshape(channel_shape)
    float_type = q.dequantize.result.type.element_type
    if product.type.element_type != float_type:
        product = cx.emit(nn.CastOp(product, float_type))
    return cx.emit(nn.MultiplyOp(product, cx.tensor(scale)))


def _qdq_matmul(cx: Importer, a: Value, weight: str, transposed: bool = False) -> SSAValue | None:
    """The QDQ form of a quantized MatMul (or Gemm, its weight ``transposed``: ``[N, K]``)
    as an int8 GEMM (tensor cores for a symmetric weight) whose i32 result is scaled once
    (onnxruntime's ``MatMulIntegerToFloat``): a 2-D weight quantized per tensor or per
    output column; else None (the float product of the dequantized operands)."""
    if not isinstance(a, SSAValue) or len(shape_of(a)) < 2:
        return None
    q = qdq_operands(cx, a, weight, 2, 0 if transposed else 1)  # the output channels' axis of the stored weight
    if q is None:
        return None
    if q.is_float8:
        return _float8_matmul(cx, q, transposed)
    product = integer_matmul(cx, q.dequantize.input, q.weight.T if transposed else q.weight, q.zero_point,
                             q.weight_zero_point)
    return scaled_product(cx, q, product, [-1])


def _float8_matmul(cx: Importer, q: QDQOperands, transposed: bool) -> SSAValue | None:
    """An FP8 QDQ product (TensorRT Model Optimizer's and onnxruntime's float8 QDQ form):
    the activation's 8-bit floats times the constant 8-bit float weight, laid out ``[N, K]``
    (``transpose_b``) at import, accumulated in f32 and scaled once by ``sx * sw``. Both
    zero points must be 0 (an 8-bit float zero point does not factor out of the product)
    and the types OCP FP8 (E4M3FN, E5M2); else None."""
    x = q.dequantize.input
    types = {x.type.element_type, nn.element_type_of(q.weight.dtype)}
    if q.zero_point.astype(np.float32).any() or q.weight_zero_point.astype(np.float32).any() \
            or not types <= set(nn.FP8_GEMM_TYPES):
        return None
    weight = q.weight if transposed else q.weight.T
    product = cx.emit(nn.MatmulFloat8Op(x, cx.tensor(np.ascontiguousarray(weight)), transpose_b=True))
    return scaled_product(cx, q, product, [-1])


def _float8_activation_product(cx: Importer, a: Value, b: Value) -> SSAValue | None:
    """A MatMul of two run-time FP8 QDQ activations (attention's ``Q·Kᵀ`` and ``P·V`` in an
    FP8 QDQ export): ``nn.matmul_float8`` of their 8-bit floats, the right one transposed
    to ``[..., N, K]`` (the "TN" form FP8 GEMMs read), scaled once by ``sa * sb`` (f64,
    then the activations' float type: one rounding). Both dequantizes per tensor with
    constant scales, zero points 0 and OCP FP8 types (E4M3FN, E5M2); else None."""
    dequantizes, scales = [], []
    for v in (a, b):
        if (operand := per_tensor_dequantize(v)) is None:
            return None
        dq, scale, zero = operand
        if zero.astype(np.float32).any() or dq.input.type.element_type not in nn.FP8_GEMM_TYPES \
                or len(shape_of(dq.input)) < 2:
            return None
        dequantizes.append(dq)
        scales.append(scale.astype(np.float64))
    lhs, rhs = (dq.input for dq in dequantizes)
    rank = len(shape_of(rhs))
    rhs = cx.emit(nn.TransposeOp(rhs, [*range(rank - 2), rank - 1, rank - 2]))
    product = cx.emit(nn.MatmulFloat8Op(lhs, rhs, transpose_b=True))
    cx.orphans.extend(dequantizes)
    float_type = dequantizes[0].result.type.element_type
    if product.type.element_type != float_type:
        product = cx.emit(nn.CastOp(product, float_type))
    scale = (scales[0] * scales[1]).astype(nn.numpy_dtype(float_type))
    return cx.emit(nn.MultiplyOp(product, cx.tensor(scale)))


def _nbits_matmul(cx: Importer, a: Value, b: Value, weight: str) -> SSAValue | None:
    """A weight-only 4-bit MatMul (``x @ DequantizeLinear(wq)`` with ``wq`` a constant
    ``[K, N]`` INT4 / UINT4 weight quantized in blocks along K, as block-quantized LLM
    exports write it) as ``nn.matmul_nbits``: the codes laid out ``[N, K / 2]``, two a byte
    (signed ones shifted by 8 into 0..15, their zero points too: the differences are the
    same), so the weight stays packed on the device; the scales in the input's type. None
    for anything else (the folded float weight). A dequantize the import kept as an op
    (folding past its budget) is erased at the end when nothing else reads it."""
    record = cx.dequantized.get(weight)
    if record is None or not record.block_size or not isinstance(a, SSAValue) or len(shape_of(a)) < 2:
        return None
    wq, bs = record.values, record.block_size
    if wq.ndim != 2 or record.axis % 2 != 0 or bs < 16 or bs & (bs - 1) or wq.shape[0] % bs \
            or shape_of(a)[-1] != wq.shape[0]:
        return None
    dtype = nn.numpy_dtype(a.type.element_type)
    if record.scale.dtype != dtype or record.scale.shape != (wq.shape[0] // bs, wq.shape[1]):
        return None
    shift = 8 if wq.dtype == np.dtype(ml_dtypes.int4) else 0
    codes = (wq.astype(np.int16) + shift).T  # [N, K], 0..15
    zero = np.broadcast_to(record.zero_point.astype(np.int16) + shift, record.scale.shape).T
    if isinstance(b, SSAValue) and isinstance(b.owner, nn.DequantizeOp):
        cx.orphans.append(b.owner)
    return cx.emit(nn.MatmulNBitsOp(a, cx.tensor(nn.pack_nibbles(codes)),
                                    cx.tensor(np.ascontiguousarray(record.scale.T)),
                                    cx.tensor(np.ascontiguousarray(zero.astype(np.uint8))), bs))


def _rows_of(b: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """``b``'s bytes as ``shape``: for an initializer mapped from its file (external data)
    a mapping of the same region, named as ``b`` is, so the weight stays a parameter whose
    bytes never enter the process; else a reshape."""
    if isinstance(b, np.memmap) and b.filename is not None and b.flags.c_contiguous and b.dtype == np.uint8:
        rows = np.memmap(b.filename, np.uint8, "r", b.offset, shape)
        rows.parameter_name = getattr(b, "parameter_name", None)  # type: ignore[attr-defined]
        return rows
    return np.asarray(b, np.uint8).reshape(shape)


@converter("MatMulNBits", domain="com.microsoft")
def _matmul_nbits(cx, ins, attrs):
    """onnxruntime's MatMulNBits (what its ``MatMulNBitsQuantizer`` writes for weight-only
    4-bit LLMs): ``A @ dequantize(B)ᵀ [+ bias]`` with ``B`` ``[N, K / block_size,
    block_size / 2]`` bytes, already ``nn.matmul_nbits``'s ``[N, K / 2]`` layout; the
    scales ``[N * blocks]``; the zero points 4-bit codes packed two a byte per row (8, the
    middle code, when absent)."""
    a, b, scales, zero_points, g_idx, bias = (list(ins) + [None] * 6)[:6]
    k, n, bits, block = attrs.get("K"), attrs.get("N"), attrs.get("bits", 4), attrs.get("block_size")
    if bits != 4:
        fail(f"MatMulNBits with {bits}-bit weights is not supported (4-bit is)")
    if g_idx is not None:
        fail("MatMulNBits with g_idx (act-order) is not supported")
    if k is None or n is None or block is None or block < 16 or block & (block - 1):
        fail("MatMulNBits needs its K, N and a block_size that is a power of two >= 16")
    if k % block:
        fail(f"MatMulNBits with K = {k} not a multiple of block_size {block} is not supported")
    if a is None or b is None or scales is None:
        fail("MatMulNBits needs its inputs A, B and scales")
    if not is_const(b) or not is_const(scales) or (zero_points is not None and not is_const(zero_points)):
        fail("MatMulNBits weights, scales and zero points must be constants")
    x = cx.tensor(a)
    if not shape_of(x) or shape_of(x)[-1] != k:
        fail(f"MatMulNBits input A must end in K = {k}, got shape {list(shape_of(x))}")
    blocks = k // block
    if np.size(b) != n * k // 2 or np.asarray(b).dtype != np.uint8:
        fail(f"MatMulNBits B must be N * K / 2 = {n * k // 2} bytes (uint8), got {np.size(b)} of {np.asarray(b).dtype}")
    scale = np.asarray(scales)
    if scale.size != n * blocks or scale.dtype != nn.numpy_dtype(x.type.element_type):
        fail(f"MatMulNBits scales must be {n * blocks} values of A's type")
    if zero_points is None:
        zero = np.full((n, blocks), 8, np.uint8)
    elif np.asarray(zero_points).dtype == np.uint8:
        zero = nn.unpack_nibbles(np.asarray(zero_points).reshape(n, -1))[:, :blocks]
    else:
        fail("MatMulNBits with zero points of A's float type is not supported (packed 4-bit codes are)")
    out = cx.emit(nn.MatmulNBitsOp(x, cx.tensor(_rows_of(b, (n, k // 2))), cx.tensor(scale.reshape(n, blocks)),
                                   cx.tensor(np.ascontiguousarray(zero, np.uint8)), block))
    return out if bias is None else cx.emit(nn.AddOp(out, cx.tensor(bias, x)))


@converter("MatMul")
def _matmul(cx, ins, attrs):
    a, b = ins
    if (fused := _qdq_matmul(cx, a, cx.node.input[1])) is not None:
        return fused
    if (packed := _nbits_matmul(cx, a, b, cx.node.input[1])) is not None:
        return packed
    if (float8 := _float8_activation_product(cx, a, b)) is not None:
        return float8
    if isinstance(a, SSAValue) and is_const(b) and np.asarray(b).ndim == 2 and len(shape_of(a)) >= 2:
        return cx.emit(nn.DenseOp(a, transpose_value(cx, b, a)))
    a, b = cx.operands(a, b)
    # NumPy semantics for rank-1 operands: a vector lhs gains a leading 1, a vector rhs a
    # trailing 1, and the product drops them again.
    sa, sb = shape_of(a), shape_of(b)
    if not sa or not sb:
        fail("MatMul operands must have rank >= 1")
    if len(sa) == 1:
        a = _reshape(cx, a, [1, *sa])
    if len(sb) == 1:
        b = _reshape(cx, b, [*sb, 1])
    out = cx.emit(nn.MatmulOp(a, b))
    if len(sa) == 1 or len(sb) == 1:
        shape = list(shape_of(out))
        keep = [k for k in range(len(shape))
                if not (len(sa) == 1 and k == len(shape) - 2) and not (len(sb) == 1 and k == len(shape) - 1)]
        out = _reshape(cx, out, [shape[k] for k in keep])
    return out


def _scalar_zero_point(cx: Importer, v: Value | None, like: SSAValue, what: str) -> SSAValue:
    """A zero point as a one-element tensor of ``like``'s type (0 when absent); a per-row
    or per-column one is refused, unless it is a constant holding one value."""
    if v is None:
        return cx.tensor(np.zeros((), nn.numpy_dtype(like.type.element_type)), like)
    if is_const(v):
        values = np.asarray(v).reshape(-1)
        if values.size != 1 and not (values.size and (values == values[0]).all()):
            fail(f"per-row or per-column {what} zero points are not supported")
        return cx.tensor(values[:1].reshape(()), like)
    if math.prod(shape_of(v)) != 1 or nn.DYN in shape_of(v):
        fail(f"per-row or per-column {what} zero points are not supported")
    return v


def integer_matmul(cx: Importer, a: Value, b: Value, za: Value | None, zb: Value | None) -> SSAValue:
    """``(a - za) @ (b - zb)`` in i32 (MatMulInteger, and the product inside QLinearMatMul).

    The quantizers' form, a constant 2-D weight with zero point 0 (symmetric int8), is laid
    out for int8 tensor cores: the weight transposed at import (``transpose_b``, ``[N, K]``,
    as ``nn.dense`` weights are) and the lhs zero point folded out of the product,
    ``(a - za) @ b = a @ b - za * colsum(b)``, into an i32 row added after it: a constant
    when ``za`` is one, else ``za`` times the constant column sums (one tiny kernel). Both
    sides are integers: the rewrite is exact (i32 wraps as the product's accumulator does).
    Any other operands keep their zero points in the op (the native kernel subtracts them)."""
    a = cx.tensor(a)
    if len(shape_of(a)) < 2 or (not is_const(b) and len(shape_of(b)) < 2) or (is_const(b) and np.ndim(b) < 2):
        fail("rank-1 operands are not supported")
    b_type = nn.numpy_dtype(cx.tensor(b).type.element_type) if not is_const(b) else np.asarray(b).dtype
    zero_b = zb is None or (is_const(zb) and not np.asarray(zb).any())
    if is_const(b) and np.ndim(b) == 2 and zero_b and b_type in (np.int8, np.uint8):
        w = np.asarray(b)
        zeros = [cx.tensor(np.zeros((), t)) for t in (nn.numpy_dtype(a.type.element_type), w.dtype)]
        out = cx.emit(nn.MatmulIntegerOp(a, cx.tensor(np.ascontiguousarray(w.T)), *zeros, transpose_b=True))
        if za is None or (is_const(za) and not np.asarray(za).any()):
            return out
        colsum = w.astype(np.int64).sum(axis=0)
        if is_const(za):
            values = np.asarray(za).reshape(-1)
            if not (values == values[0]).all():
                fail("per-row or per-column lhs zero points are not supported")
            offset = values[0].astype(np.int64) * colsum
            bias = cx.tensor((-offset).astype(np.int32))  # wraps as the i32 accumulator does
        else:
            za_value = _scalar_zero_point(cx, za, a, "lhs")
            za_i32 = cx.emit(nn.CastOp(cx.emit(nn.ReshapeOp(za_value, [])) if shape_of(za_value) else za_value,
                                       nn.element_type_of(np.dtype(np.int32))))
            bias = cx.emit(nn.MultiplyOp(za_i32, cx.tensor((-colsum).astype(np.int32))))
        return cx.emit(nn.AddOp(out, bias))
    b = cx.tensor(b)
    return cx.emit(nn.MatmulIntegerOp(a, b, _scalar_zero_point(cx, za, a, "lhs"),
                                      _scalar_zero_point(cx, zb, b, "rhs")))


@converter("MatMulInteger")
def _matmul_integer(cx, ins, attrs):
    ins = list(ins) + [None] * (4 - len(ins))
    return integer_matmul(cx, ins[0], ins[1], ins[2], ins[3])


@converter("Einsum")
def _einsum(cx, ins, attrs):
    xs = [cx.tensor(v) for v in ins]
    equation = attrs["equation"]
    equation = equation.decode() if isinstance(equation, bytes) else equation
    try:
        return lower_einsum(equation, xs, cx.emit, cx.tensor)
    except EinsumError as err:
        fail(str(err))


@converter("Det")
def _det(cx, ins, attrs):
    return cx.emit(nn.DetOp(cx.tensor(ins[0])))
