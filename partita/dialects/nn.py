"""The ``nn`` dialect: graph-level tensor operators (Relay-like) that Partita partitions.

Every operand and result is a ranked ``tensor`` of f16, bf16 or f32; dimensions may be
dynamic (``?``). Attributes live in properties (printed in the attribute dictionary).

The shape rules are plain functions over ``tuple[int, ...]`` with ``-1`` (``DYN``) for a
dynamic dimension, so importers and shape functions can reuse them without building IR.
They raise ``VerifyException`` on invalid input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BFloat16Type,
    BoolAttr,
    BytesAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    I64,
    IntegerAttr,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

DYN = DYNAMIC_INDEX
Shape = tuple[int, ...]
FLOAT_TYPES = (Float16Type, BFloat16Type, Float32Type)

# ---------------------------------------------------------------------------------------
# Element types <-> NumPy dtypes
# ---------------------------------------------------------------------------------------


def numpy_dtype(element_type: Attribute) -> np.dtype:
    """NumPy storage dtype of an nn element type (bf16 uses ``ml_dtypes.bfloat16``)."""
    if isinstance(element_type, Float16Type):
        return np.dtype(np.float16)
    if isinstance(element_type, BFloat16Type):
        return np.dtype(ml_dtypes.bfloat16)
    if isinstance(element_type, Float32Type):
        return np.dtype(np.float32)
    raise ValueError(f"nn does not support element type {element_type}")


def element_type_of(dtype: np.dtype | type) -> Attribute:
    """The nn element type storing NumPy ``dtype`` (f16, bf16 or f32)."""
    dtype = np.dtype(dtype)
    if dtype == np.float16:
        return Float16Type()
    if dtype == ml_dtypes.bfloat16:
        return BFloat16Type()
    if dtype == np.float32:
        return Float32Type()
    raise ValueError(f"nn has no element type for dtype {dtype}")


# ---------------------------------------------------------------------------------------
# Shape rules
# ---------------------------------------------------------------------------------------


def merge_dims(a: int, b: int, what: str) -> int:
    """Unify two dimensions that must be equal; ``?`` is compatible with anything."""
    if a == DYN:
        return b
    if b == DYN or a == b:
        return a
    raise VerifyException(f"{what}: {a} vs {b}")


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[-rank, rank)`` mapped to ``[0, rank)``."""
    if not -rank <= axis < rank:
        raise VerifyException(f"{what} {axis} out of range for rank {rank}")
    return axis % rank


def _static_product(shape: Sequence[int]) -> int:
    return math.prod(d for d in shape if d != DYN)


def broadcast_shapes(lhs: Shape, rhs: Shape) -> Shape:
    """NumPy broadcasting; ``?`` against 1 gives ``?``, ``?`` against n != 1 gives n."""
    rank = max(len(lhs), len(rhs))
    lhs = (1,) * (rank - len(lhs)) + tuple(lhs)
    rhs = (1,) * (rank - len(rhs)) + tuple(rhs)
    out: list[int] = []
    for a, b in zip(lhs, rhs):
        if a == 1:
            out.append(b)
        elif b == 1:
            out.append(a)
        elif a == DYN or b == DYN:
            out.append(b if a == DYN else a)
        elif a == b:
            out.append(a)
        else:
            raise VerifyException(f"shapes {lhs} and {rhs} are not broadcastable")
    return tuple(out)


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


def check_channel_vector(x: Shape, vec: Shape, axis: int, what: str) -> None:
    """``vec`` must be rank 1 with the size of ``x[axis]``."""
    if len(vec) != 1:
        raise VerifyException(f"{what} must have rank 1, got rank {len(vec)}")
    merge_dims(x[axis], vec[0], f"{what} size does not match input dimension {axis}")


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


def _check_ints(values: Sequence[int], length: int, what: str, minimum: int) -> None:
    if len(values) != length:
        raise VerifyException(f"{what} must have {length} values, got {len(values)}")
    if any(v < minimum for v in values):
        raise VerifyException(f"{what} values must be >= {minimum}, got {list(values)}")


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


def infer_pad_shape(x: Shape, before: Sequence[int], after: Sequence[int]) -> Shape:
    """Constant padding: one non-negative ``before``/``after`` amount per dimension."""
    _check_ints(before, len(x), "pad_before", 0)
    _check_ints(after, len(x), "pad_after", 0)
    return tuple(DYN if d == DYN else d + b + a for d, b, a in zip(x, before, after))


def infer_transpose_shape(x: Shape, perm: Sequence[int]) -> Shape:
    """``out[i] = x[perm[i]]``."""
    if sorted(perm) != list(range(len(x))):
        raise VerifyException(f"perm {list(perm)} is not a permutation of rank {len(x)}")
    return tuple(x[p] for p in perm)


def infer_concatenate_shape(shapes: Sequence[Shape], axis: int) -> Shape:
    """Concatenation along ``axis``; the other dimensions must agree."""
    if not shapes:
        raise VerifyException("concatenate expects at least one input")
    rank = len(shapes[0])
    if any(len(s) != rank for s in shapes):
        raise VerifyException("concatenate inputs must have the same rank")
    axis = normalize_axis(axis, rank)
    out = list(shapes[0])
    for s in shapes[1:]:
        for i in range(rank):
            if i == axis:
                out[i] = DYN if DYN in (out[i], s[i]) else out[i] + s[i]
            else:
                out[i] = merge_dims(out[i], s[i], f"concatenate dimension {i} mismatch")
    return tuple(out)


def check_reshape(x: Shape, out: Shape) -> None:
    """At most one ``?`` in ``out`` (inferred at run time); element counts must agree."""
    if out.count(DYN) > 1:
        raise VerifyException("reshape result may have at most one dynamic dimension")
    if DYN in x:
        return
    count, out_static = math.prod(x), _static_product(out)
    if DYN in out:
        if out_static == 0 or count % out_static:
            raise VerifyException(f"cannot reshape {count} elements into {out}")
    elif count != out_static:
        raise VerifyException(f"reshape changes the element count: {count} vs {out_static}")


def check_compatible_shapes(declared: Shape, inferred: Shape) -> None:
    """Declared result shape must have the inferred rank and agree on static dims."""
    if len(declared) != len(inferred) or any(
        a != b and DYN not in (a, b) for a, b in zip(declared, inferred)
    ):
        raise VerifyException(
            f"result shape {_fmt(declared)} is incompatible with inferred shape {_fmt(inferred)}"
        )


def _fmt(shape: Shape) -> str:
    return "[" + ", ".join("?" if d == DYN else str(d) for d in shape) + "]"


# ---------------------------------------------------------------------------------------
# Property helpers
# ---------------------------------------------------------------------------------------


def _i64(value: int) -> IntegerAttr:
    return IntegerAttr(value, i64)


def _f64(value: float) -> FloatAttr:
    return FloatAttr(value, Float64Type())


def _ints(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


def _int_prop(name: str, default: int | None = None):
    return prop_def(IntegerAttr[I64], prop_name=name,
                    default_value=None if default is None else _i64(default))


def _float_prop(name: str, default: float | None = None):
    return prop_def(FloatAttr[Float64Type], prop_name=name,
                    default_value=None if default is None else _f64(default))


def _ints_prop(name: str, default: Sequence[int] | None = None):
    return prop_def(DenseArrayBase.constr(i64), prop_name=name,
                    default_value=None if default is None else _ints(default))


def _str_prop(name: str, default: str):
    return prop_def(StringAttr, prop_name=name, default_value=StringAttr(default))


def _bool_prop(name: str, default: bool):
    return prop_def(BoolAttr, prop_name=name, default_value=IntegerAttr.from_bool(default))


def _value(name: str) -> property:
    """Python accessor unwrapping property ``name`` to int / float / str / bool / tuple."""

    def get(op: Operation):
        attr = op.properties[name]
        if isinstance(attr, DenseArrayBase):
            return tuple(attr.get_values())
        if isinstance(attr, StringAttr):
            return attr.data
        if isinstance(attr, IntegerAttr) and attr.type.width.data == 1:
            return bool(attr.value.data)
        return attr.value.data

    return property(get, doc=f"Value of the ``{name}`` property.")


def _props(**values: object) -> dict[str, Attribute]:
    """Wrap builder keyword values into property attributes (``None`` = use default)."""
    out: dict[str, Attribute] = {}
    for name, v in values.items():
        if v is None:
            continue
        if isinstance(v, Attribute):
            out[name] = v
        elif isinstance(v, bool):
            out[name] = IntegerAttr.from_bool(v)
        elif isinstance(v, int):
            out[name] = _i64(v)
        elif isinstance(v, float):
            out[name] = _f64(v)
        elif isinstance(v, str):
            out[name] = StringAttr(v)
        else:
            out[name] = _ints(v)  # type: ignore[arg-type]
    return out


def _tensor(value: SSAValue | Operation) -> TensorType:
    typ = SSAValue.get(value).type
    if not isinstance(typ, TensorType):
        raise ValueError(f"expected a tensor value, got {typ}")
    return typ


def _shape(value: SSAValue) -> Shape:
    return tuple(_tensor(value).get_shape())


# ---------------------------------------------------------------------------------------
# Operations
# ---------------------------------------------------------------------------------------

_FORMAT_1 = "$input attr-dict `:` functional-type(operands, results)"
_FORMAT_2 = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"


class NNOp(IRDLOperation):
    """Base of all nn ops: float tensors with one element type, a checked result shape."""

    irdl_options = (ParsePropInAttrDict(),)

    def infer_shape(self) -> Shape:
        """Result shape implied by operands and properties; raises VerifyException."""
        raise NotImplementedError

    def verify_(self) -> None:
        values = [*self.operands, *self.results]
        element_types = set()
        for v in values:
            if not isinstance(v.type, TensorType) or not isinstance(
                v.type.element_type, FLOAT_TYPES
            ):
                raise VerifyException(f"expected a tensor of f16, bf16 or f32, got {v.type}")
            element_types.add(v.type.element_type)
        if len(element_types) > 1:
            raise VerifyException(
                "operands and results must share one element type, got "
                + ", ".join(sorted(str(t) for t in element_types))
            )
        check_compatible_shapes(_shape(self.results[0]), self.infer_shape())


def _init(op: NNOp, operands: Sequence, result_type: Attribute | None, **props: object) -> None:
    """Shared builder: wrap properties; without ``result_type``, infer it from a scratch
    op carrying the same operands and properties (``infer_shape`` reads both)."""
    properties = _props(**props)
    if result_type is None:
        first = operands[0][0] if isinstance(operands[0], list | tuple) else operands[0]
        scratch = type(op).__new__(type(op))
        IRDLOperation.__init__(scratch, operands=operands, result_types=[_tensor(first)],
                               properties=properties)
        result_type = TensorType(_tensor(first).element_type, scratch.infer_shape())
        scratch.drop_all_references()
    IRDLOperation.__init__(op, operands=operands, result_types=[result_type],
                           properties=properties)


class ElementwiseBinaryOp(NNOp):
    """Elementwise binary op with NumPy broadcasting."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = _FORMAT_2

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation,
                 result_type: Attribute | None = None):
        _init(self, [lhs, rhs], result_type)

    def infer_shape(self) -> Shape:
        return broadcast_shapes(_shape(self.lhs), _shape(self.rhs))


@irdl_op_definition
class AddOp(ElementwiseBinaryOp):
    name = "nn.add"


@irdl_op_definition
class SubtractOp(ElementwiseBinaryOp):
    name = "nn.subtract"


@irdl_op_definition
class MultiplyOp(ElementwiseBinaryOp):
    name = "nn.multiply"


@irdl_op_definition
class DivideOp(ElementwiseBinaryOp):
    name = "nn.divide"


class UnaryOp(NNOp):
    """Single-input op whose result has the input's shape."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = _FORMAT_1

    def __init__(self, input: SSAValue | Operation, result_type: Attribute | None = None,
                 **props: object):
        _init(self, [input], result_type, **props)

    def infer_shape(self) -> Shape:
        return _shape(self.input)


@irdl_op_definition
class ReluOp(UnaryOp):
    name = "nn.relu"


@irdl_op_definition
class SigmoidOp(UnaryOp):
    name = "nn.sigmoid"


@irdl_op_definition
class TanhOp(UnaryOp):
    name = "nn.tanh"


@irdl_op_definition
class GeluOp(UnaryOp):
    """GELU; ``approximate`` is "none" (erf form) or "tanh"."""

    name = "nn.gelu"
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
class ClipOp(UnaryOp):
    """Clamp to ``[min, max]``."""

    name = "nn.clip"
    min_attr = _float_prop("min")
    max_attr = _float_prop("max")
    min = _value("min")
    max = _value("max")

    def __init__(self, input: SSAValue | Operation, min: float, max: float,
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, min=float(min), max=float(max))

    def infer_shape(self) -> Shape:
        if self.min > self.max:
            raise VerifyException(f"clip min {self.min} is greater than max {self.max}")
        return super().infer_shape()


@irdl_op_definition
class SoftmaxOp(UnaryOp):
    name = "nn.softmax"
    axis_attr = _int_prop("axis", -1)
    axis = _value("axis")

    def __init__(self, input: SSAValue | Operation, axis: int | None = None,
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, axis=axis)

    def infer_shape(self) -> Shape:
        shape = super().infer_shape()
        normalize_axis(self.axis, len(shape))
        return shape


@irdl_op_definition
class LRNOp(UnaryOp):
    """Local response normalization across ``axis`` (ONNX: alpha is divided by size)."""

    name = "nn.lrn"
    size_attr = _int_prop("size")
    axis_attr = _int_prop("axis", 1)
    alpha_attr = _float_prop("alpha", 1e-4)
    beta_attr = _float_prop("beta", 0.75)
    bias_attr = _float_prop("bias", 1.0)
    size = _value("size")
    axis = _value("axis")
    alpha = _value("alpha")
    beta = _value("beta")
    bias = _value("bias")

    def __init__(self, input: SSAValue | Operation, size: int, axis: int | None = None,
                 alpha: float | None = None, beta: float | None = None,
                 bias: float | None = None, result_type: Attribute | None = None):
        super().__init__(input, result_type, size=size, axis=axis,
                         alpha=None if alpha is None else float(alpha),
                         beta=None if beta is None else float(beta),
                         bias=None if bias is None else float(bias))

    def infer_shape(self) -> Shape:
        shape = super().infer_shape()
        normalize_axis(self.axis, len(shape))
        if self.size < 1:
            raise VerifyException(f"lrn size must be >= 1, got {self.size}")
        return shape


@irdl_op_definition
class DenseOp(NNOp):
    """``input[..., K] x weight[N, K] -> [..., N]``."""

    name = "nn.dense"
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

    name = "nn.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = _FORMAT_2

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation,
                 result_type: Attribute | None = None):
        _init(self, [lhs, rhs], result_type)

    def infer_shape(self) -> Shape:
        return infer_matmul_shape(_shape(self.lhs), _shape(self.rhs))


@irdl_op_definition
class BatchMatmulOp(NNOp):
    """Rank-3 batched matmul; by default ``rhs`` is ``[B, N, K]`` (``transpose_b``)."""

    name = "nn.batch_matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    transpose_a_attr = _bool_prop("transpose_a", False)
    transpose_b_attr = _bool_prop("transpose_b", True)
    transpose_a = _value("transpose_a")
    transpose_b = _value("transpose_b")
    assembly_format = _FORMAT_2

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


@irdl_op_definition
class LayerNormOp(NNOp):
    """Normalize over dims ``axis..end``; ``gamma``/``beta`` have shape ``input[axis:]``."""

    name = "nn.layer_norm"
    input = operand_def(TensorType)
    gamma = operand_def(TensorType)
    beta = operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis", -1)
    epsilon_attr = _float_prop("epsilon", 1e-5)
    axis = _value("axis")
    epsilon = _value("epsilon")
    assembly_format = ("$input `,` $gamma `,` $beta attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, input: SSAValue | Operation, gamma: SSAValue | Operation,
                 beta: SSAValue | Operation, axis: int | None = None,
                 epsilon: float | None = None, result_type: Attribute | None = None):
        _init(self, [input, gamma, beta], result_type, axis=axis,
              epsilon=None if epsilon is None else float(epsilon))

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        norm = x[normalize_axis(self.axis, len(x)):]
        for name, v in (("gamma", self.gamma), ("beta", self.beta)):
            s = _shape(v)
            if len(s) != len(norm):
                raise VerifyException(f"{name} must have shape {_fmt(norm)}, got {_fmt(s)}")
            for a, b in zip(norm, s):
                merge_dims(a, b, f"{name} must have shape {_fmt(norm)}, got {_fmt(s)}")
        if self.epsilon < 0:
            raise VerifyException(f"epsilon must be >= 0, got {self.epsilon}")
        return x


@irdl_op_definition
class BatchNormOp(NNOp):
    """Inference-mode batch norm with per-channel ``gamma, beta, mean, variance``."""

    name = "nn.batch_norm"
    input = operand_def(TensorType)
    gamma = operand_def(TensorType)
    beta = operand_def(TensorType)
    mean = operand_def(TensorType)
    variance = operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis", 1)
    epsilon_attr = _float_prop("epsilon", 1e-5)
    axis = _value("axis")
    epsilon = _value("epsilon")
    assembly_format = ("$input `,` $gamma `,` $beta `,` $mean `,` $variance attr-dict `:` "
                       "functional-type(operands, results)")

    def __init__(self, input, gamma, beta, mean, variance, axis: int | None = None,
                 epsilon: float | None = None, result_type: Attribute | None = None):
        _init(self, [input, gamma, beta, mean, variance], result_type, axis=axis,
              epsilon=None if epsilon is None else float(epsilon))

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        axis = normalize_axis(self.axis, len(x))
        for name in ("gamma", "beta", "mean", "variance"):
            check_channel_vector(x, _shape(getattr(self, name)), axis, name)
        if self.epsilon < 0:
            raise VerifyException(f"epsilon must be >= 0, got {self.epsilon}")
        return x


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


@irdl_op_definition
class PadOp(UnaryOp):
    """Constant-mode padding."""

    name = "nn.pad"
    pad_before_attr = _ints_prop("pad_before")
    pad_after_attr = _ints_prop("pad_after")
    pad_value_attr = _float_prop("pad_value", 0.0)
    pad_before = _value("pad_before")
    pad_after = _value("pad_after")
    pad_value = _value("pad_value")

    def __init__(self, input: SSAValue | Operation, pad_before: Sequence[int],
                 pad_after: Sequence[int], pad_value: float | None = None,
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, pad_before=pad_before, pad_after=pad_after,
                         pad_value=None if pad_value is None else float(pad_value))

    def infer_shape(self) -> Shape:
        return infer_pad_shape(_shape(self.input), self.pad_before, self.pad_after)


@irdl_op_definition
class ReshapeOp(UnaryOp):
    """Reshape to the result type's shape (one ``?`` allowed, inferred like -1)."""

    name = "nn.reshape"

    def __init__(self, input: SSAValue | Operation, shape: Sequence[int]):
        super().__init__(input, TensorType(_tensor(input).element_type, tuple(shape)))

    def infer_shape(self) -> Shape:
        out = _shape(self.result)
        check_reshape(_shape(self.input), out)
        return out


@irdl_op_definition
class TransposeOp(UnaryOp):
    name = "nn.transpose"
    perm_attr = _ints_prop("perm")
    perm = _value("perm")

    def __init__(self, input: SSAValue | Operation, perm: Sequence[int],
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, perm=perm)

    def infer_shape(self) -> Shape:
        return infer_transpose_shape(_shape(self.input), self.perm)


@irdl_op_definition
class ConcatenateOp(NNOp):
    name = "nn.concatenate"
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis")
    axis = _value("axis")
    assembly_format = "$inputs attr-dict `:` functional-type(operands, results)"

    def __init__(self, inputs: Sequence[SSAValue | Operation], axis: int,
                 result_type: Attribute | None = None):
        _init(self, [list(inputs)], result_type, axis=axis)

    def infer_shape(self) -> Shape:
        return infer_concatenate_shape([_shape(v) for v in self.inputs], self.axis)


@irdl_op_definition
class ConstantOp(NNOp):
    """A constant tensor; ``nn.constant dense<...> : tensor<...>``."""

    name = "nn.constant"
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorType)

    def __init__(self, value: DenseIntOrFPElementsAttr | np.ndarray):
        if isinstance(value, np.ndarray):
            value = dense_from_numpy(value)
        super(NNOp, self).__init__(result_types=[value.type], properties={"value": value})

    def infer_shape(self) -> Shape:
        if self.value.type != self.result.type:
            raise VerifyException(
                f"value type {self.value.type} does not match result type {self.result.type}")
        return tuple(self.value.get_shape())

    def to_numpy(self) -> np.ndarray:
        """The payload as a NumPy array of the storage dtype."""
        return dense_to_numpy(self.value)

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        from partita.ir.constants import parse_dense_constant

        value = parse_dense_constant(parser, cls.name)
        if not isinstance(value, DenseIntOrFPElementsAttr):
            parser.raise_error(f"expected a dense elements attribute, got {value}")
        op = cls(value)
        op.attributes.update(parser.parse_optional_attr_dict())
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.value)
        printer.print_op_attributes(self.attributes)


def dense_from_numpy(array: np.ndarray) -> DenseIntOrFPElementsAttr:
    """Dense attribute of an f16 / bf16 / f32 array (float64 is narrowed to f32)."""
    if array.dtype == np.float64:
        array = array.astype(np.float32)
    typ = TensorType(element_type_of(array.dtype), array.shape)
    data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
    return DenseIntOrFPElementsAttr(typ, BytesAttr(data))


def dense_to_numpy(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """NumPy copy of a dense float attribute (payload is little-endian, full length)."""
    dtype = numpy_dtype(attr.get_element_type()).newbyteorder("<")
    flat = np.frombuffer(attr.data.data, dtype=dtype)
    return flat.astype(dtype.newbyteorder("=")).reshape(attr.get_shape())


NN = Dialect(
    "nn",
    [
        AddOp, SubtractOp, MultiplyOp, DivideOp,
        ReluOp, SigmoidOp, TanhOp, GeluOp, ClipOp,
        DenseOp, MatmulOp, BatchMatmulOp, BiasAddOp, SoftmaxOp, LayerNormOp,
        Conv2DOp, BatchNormOp, MaxPool2DOp, AvgPool2DOp, GlobalAvgPool2DOp, LRNOp,
        PadOp, ReshapeOp, TransposeOp, ConcatenateOp, ConstantOp,
    ],
    [],
)
