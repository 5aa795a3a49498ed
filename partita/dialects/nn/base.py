"""Shared core of the ``nn`` dialect: element types, shape helpers, property helpers and the
``NNOp`` base class. The operators live in one module per family beside this one.

Shape rules are plain functions over ``tuple[int, ...]`` with ``-1`` (``DYN``) for a dynamic
dimension, so importers and shape functions can reuse them without building IR. They raise
``VerifyException`` on invalid input.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    I64,
    BFloat16Type,
    BoolAttr,
    BytesAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    Float4E2M1FNType,
    Float8E4M3FNType,
    Float8E4M3FNUZType,
    Float8E5M2FNUZType,
    Float8E5M2Type,
    Float8E8M0FNUType,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    Signedness,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.traits import OpTrait, Pure
from xdsl.utils.exceptions import VerifyException

from partita.ir.constants import dense_values, splat_attr

DYN = DYNAMIC_INDEX
Shape = tuple[int, ...]
FLOAT_TYPES = (Float16Type, BFloat16Type, Float32Type, Float64Type)
"""Floating-point element types (f64 computes in double; the others in float)."""

# ---------------------------------------------------------------------------------------
# Element types <-> NumPy dtypes
# ---------------------------------------------------------------------------------------

_UNSIGNED = Signedness.UNSIGNED
_DTYPES: tuple[tuple[Attribute, np.dtype], ...] = (
    (Float16Type(), np.dtype(np.float16)),
    (BFloat16Type(), np.dtype(ml_dtypes.bfloat16)),
    (Float32Type(), np.dtype(np.float32)),
    (Float64Type(), np.dtype(np.float64)),
    (IntegerType(1), np.dtype(np.bool_)),
    (IntegerType(8), np.dtype(np.int8)),
    (IntegerType(16), np.dtype(np.int16)),
    (IntegerType(32), np.dtype(np.int32)),
    (IntegerType(64), np.dtype(np.int64)),
    (IntegerType(8, _UNSIGNED), np.dtype(np.uint8)),
    (IntegerType(16, _UNSIGNED), np.dtype(np.uint16)),
    (IntegerType(32, _UNSIGNED), np.dtype(np.uint32)),
    (IntegerType(64, _UNSIGNED), np.dtype(np.uint64)),
    (Float8E4M3FNType(), np.dtype(ml_dtypes.float8_e4m3fn)),
    (Float8E4M3FNUZType(), np.dtype(ml_dtypes.float8_e4m3fnuz)),
    (Float8E5M2Type(), np.dtype(ml_dtypes.float8_e5m2)),
    (Float8E5M2FNUZType(), np.dtype(ml_dtypes.float8_e5m2fnuz)),
    (IntegerType(4), np.dtype(ml_dtypes.int4)),
    (IntegerType(4, _UNSIGNED), np.dtype(ml_dtypes.uint4)),
    (IntegerType(2), np.dtype(ml_dtypes.int2)),
    (IntegerType(2, _UNSIGNED), np.dtype(ml_dtypes.uint2)),
    (Float4E2M1FNType(), np.dtype(ml_dtypes.float4_e2m1fn)),
    (Float8E8M0FNUType(), np.dtype(ml_dtypes.float8_e8m0fnu)),
)
"""Every nn element type with its NumPy storage dtype. Signless integers are signed (as in
MLIR's ``arith``); ``ui8``..``ui64`` carry ONNX's unsigned types; ``i1`` is bool."""
_TO_DTYPE = {t: d for t, d in _DTYPES}
_TO_TYPE = {d: t for t, d in _DTYPES}
ELEMENT_TYPES = tuple(t for t, _ in _DTYPES)
NUMPY_DTYPES: dict[str, np.dtype] = {str(t): d for t, d in _DTYPES}
"""The same table by element type name (``"f16"``, ``"ui8"``): the project's one dtype table."""
FLOATS = ELEMENT_TYPES[:4]
"""f16, bf16, f32, f64 (instances, for ``ALLOWED_TYPES``)."""
INTEGERS = ELEMENT_TYPES[5:13]
"""Signed and unsigned integer types (not ``i1``)."""
FLOAT8_TYPES = ELEMENT_TYPES[13:17]
"""The float8 storage types (f8E4M3FN, f8E4M3FNUZ, f8E5M2, f8E5M2FNUZ): what casts and
quantization read and write, and data movement carries; no arithmetic takes them."""
SUB_BYTE_INTEGERS = ELEMENT_TYPES[17:21]
"""i4, ui4, i2, ui2: ONNX's INT4 / UINT4 / INT2 / UINT2, one element per byte in memory (the
value in the low bits, as ``ml_dtypes`` lays them out; files pack them, the importer unpacks)."""
NARROW_TYPES = ELEMENT_TYPES[17:]
"""The sub-byte integers, f4E2M1FN (FP4: values 0 to 6 and their negatives) and f8E8M0FNU
(an MX block scale: a power of two or NaN): storage types, one element per byte, that
casts and quantization read and write and data movement carries. No arithmetic takes them;
native kernels store them as bytes (``lowering/cuda/cexpr.py``)."""


_NAMES = {t: str(t) for t in ELEMENT_TYPES}


def type_name(element_type: Attribute) -> str:
    """The MLIR spelling of an element type (``"f16"``, ``"ui8"``): the nn types' from a
    table, any other printed (xDSL's printer is slow, and kernel rules ask for it per
    operand)."""
    name = _NAMES.get(element_type)
    return str(element_type) if name is None else name


def numpy_dtype(element_type: Attribute) -> np.dtype:
    """NumPy storage dtype of an nn element type (bf16 uses ``ml_dtypes.bfloat16``)."""
    try:
        return _TO_DTYPE[element_type]
    except KeyError:
        raise ValueError(f"nn does not support element type {element_type}") from None


def element_type_of(dtype: np.dtype | type) -> Attribute:
    """The nn element type storing NumPy ``dtype``."""
    dtype = np.dtype(dtype)
    try:
        return _TO_TYPE[dtype]
    except KeyError:
        raise ValueError(f"nn has no element type for dtype {dtype}") from None


def is_float(element_type: Attribute) -> bool:
    return isinstance(element_type, FLOAT_TYPES)


def is_bool(element_type: Attribute) -> bool:
    return element_type == IntegerType(1)


def is_integer(element_type: Attribute) -> bool:
    """Integer types other than ``i1`` (bool)."""
    return isinstance(element_type, IntegerType) and not is_bool(element_type)


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

def check_channel_vector(x: Shape, vec: Shape, axis: int, what: str) -> None:
    """``vec`` must be rank 1 with the size of ``x[axis]``."""
    if len(vec) != 1:
        raise VerifyException(f"{what} must have rank 1, got rank {len(vec)}")
    merge_dims(x[axis], vec[0], f"{what} size does not match input dimension {axis}")



def _check_ints(values: Sequence[int], length: int, what: str, minimum: int) -> None:
    if len(values) != length:
        raise VerifyException(f"{what} must have {length} values, got {len(values)}")
    if any(v < minimum for v in values):
        raise VerifyException(f"{what} values must be >= {minimum}, got {list(values)}")



def check_compatible_shapes(declared: Shape, inferred: Shape) -> None:
    """Declared result shape must have the inferred rank and agree on static dims."""
    if len(declared) != len(inferred) or any(
        a != b and DYN not in (a, b) for a, b in zip(declared, inferred)
    ):
        raise VerifyException(
            f"result shape {_fmt(declared)} is incompatible with inferred shape {_fmt(inferred)}"
        )


MAX_DIM = 2**63 - 1
"""MLIR's dims are int64; so are the strides and element counts kernels compute from them."""


def check_dims_fit(shape: Shape, itemsize: int, what: str) -> None:
    """Every dim, and the bytes the dims span (zero dims aside: a 0x2^62 tensor holds
    nothing, yet its strides still span the others), must fit in int64, as byte offsets,
    strides and NumPy's array sizes do."""
    span = itemsize
    for d in shape:
        if d > MAX_DIM or d < DYN:
            raise VerifyException(f"{what} {_fmt(shape)}: dimension {d} does not fit in int64")
        if d > 0:
            span *= d
    if span > MAX_DIM:
        raise VerifyException(f"{what} {_fmt(shape)}: {span} bytes of {itemsize}-byte elements do not fit in int64")


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


_OPERAND_SHAPES: ContextVar[Mapping[SSAValue, Shape] | None] = ContextVar("operand_shapes", default=None)


@contextmanager
def operand_shapes(shapes: Mapping[SSAValue, Shape]) -> Iterator[None]:
    """Within it, shape rules read ``shapes[v]`` for these values instead of their types'
    dims (MLIR's ``ValueShapeRange``): an op's own ``infer_shape`` checks it at the shapes a
    launch plan bound, with no copy of the op built for them."""
    token = _OPERAND_SHAPES.set(shapes)
    try:
        yield
    finally:
        _OPERAND_SHAPES.reset(token)


def _shape(value: SSAValue) -> Shape:
    bound = _OPERAND_SHAPES.get()
    if bound is not None and (shape := bound.get(value)) is not None:  # type: ignore[call-overload]
        return shape
    return tuple(_tensor(value).get_shape())


# ---------------------------------------------------------------------------------------
# Operations
# ---------------------------------------------------------------------------------------

FORMAT_UNARY = "$input attr-dict `:` functional-type(operands, results)"
FORMAT_BINARY = "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)"
_FORMAT_1, _FORMAT_2 = FORMAT_UNARY, FORMAT_BINARY

NUMERIC_TYPES = tuple(t for t in ELEMENT_TYPES if not is_bool(t) and t not in FLOAT8_TYPES + NARROW_TYPES)
"""Floats and integers (no bool)."""


def _type_names(types: Sequence[Attribute]) -> str:
    return ", ".join(str(t) for t in types)


Dims = Callable[[SSAValue], list[Any]]
"""The dims of a value: ints or symbolic dims of a shape function or a kernel."""


class ShapeArith:
    """The arithmetic a ``result_dims`` rule may use on symbolic dims, as the CUDA
    emitter's C-expression one has it. ``ShapeBuilder`` (shape functions) has more
    (``sub``, ``window``, ``broadcast``): a rule that uses it serves shape functions only."""

    def mul(self, a: Any, b: Any) -> Any: ...  # pragma: no cover - protocol

    def add(self, a: Any, b: Any) -> Any: ...  # pragma: no cover - protocol

    def floordiv(self, a: Any, b: Any) -> Any: ...  # pragma: no cover - protocol

    def select_ge(self, a: Any, b: Any, then: Any, other: Any) -> Any: ...  # pragma: no cover - protocol


class OpKind(IntEnum):
    """An operator's pattern kind (TVM's ``OpPatternKind``). Kinds are ordered: a group of
    ops has the largest kind of its members, and fusion rules compare kinds with ``<=``."""

    ELEMWISE = 0
    """Every output element from the same-index input elements (relu, add of equal shapes)."""
    BROADCAST = 1
    """Element-wise with broadcasting operands (bias add)."""
    INJECTIVE = 2
    """An index remapping (transpose, reshape, pad, concatenate)."""
    COMM_REDUCE = 3
    """A commutative reduction (sum, softmax's row reduction)."""
    OUT_EWISE_FUSABLE = 4
    """A complex op whose output takes an element-wise epilogue (dense, conv2d)."""
    TUPLE = 7
    """Gathers values into one (TVM's tuple); never an index computation."""
    PROJECTION = 8
    """Takes one field of a multi-result value (TVM's ``TupleGetItem``)."""
    OPAQUE = 9
    """Anything no rule may fuse."""


@dataclass(frozen=True)
class OpPattern(OpTrait):
    """The op's pattern kind, read by the native fuser, Collage's rules and its cost model
    (TVM's ``TOpPattern`` attribute). Set once on a family base class or an op."""

    kind: OpKind


def op_kind(op: Operation | type[Operation]) -> OpKind:
    """The pattern kind of an op or op class; ``OPAQUE`` for an op that declares none."""
    trait = op.get_trait(OpPattern)
    return OpKind.OPAQUE if trait is None else trait.kind


def kind_trait(kind: OpKind, *more: OpTrait):
    """``traits`` of an op class (or family base) of pattern ``kind``, and ``more``."""
    return traits_def(OpPattern(kind), *more)


class NNOp(IRDLOperation):
    """Base of all nn ops: ranked tensors, a checked element type and result shape.

    By default every operand and the result share one element type from
    ``ALLOWED_TYPES``; ops mixing types (comparisons, ``cast``, index operands) override
    ``verify_element_types`` and ``infer_element_type``.

    An op whose dynamic result dims no generic rule of
    :mod:`partita.analysis.shape_functions` covers carries its own,
    ``result_dims(self, dims: Dims, arith: ShapeArith) -> list``: the result's dims from
    ``dims(value)`` of its operands (ints or symbolic), computed with ``arith``. Shape
    functions and the CUDA kernels that size dynamic results both call it."""

    irdl_options = (ParsePropInAttrDict(),)
    traits = traits_def(Pure())
    ALLOWED_TYPES: ClassVar[tuple[Attribute, ...]] = FLOATS[:3]
    """Element types the op accepts (f16, bf16 and f32 unless an op says more)."""

    def infer_shape(self) -> Shape:
        """Result shape implied by operands and properties; raises VerifyException."""
        raise NotImplementedError

    def infer_element_type(self) -> Attribute:
        """Result element type implied by the operands (default: the first operand's)."""
        return _tensor(self.operands[0]).element_type

    def verify_element_types(self) -> None:
        element_types = {v.type.element_type for v in (*self.operands, *self.results)}
        if len(element_types) > 1:
            raise VerifyException(
                "operands and results must share one element type, got "
                + ", ".join(sorted(str(t) for t in element_types))
            )
        self.check_element_type(next(iter(element_types)), "element type")

    def check_element_type(self, element_type: Attribute, what: str,
                           allowed: Sequence[Attribute] | None = None) -> None:
        allowed = self.ALLOWED_TYPES if allowed is None else allowed
        if element_type not in allowed:
            raise VerifyException(f"{what} must be one of {_type_names(allowed)}, "
                                  f"got {element_type}")

    def verify_tensors(self) -> None:
        """Every operand and result is a ranked tensor of an nn element type that fits in
        memory (the checks every nn op shares)."""
        for v in (*self.operands, *self.results):
            if not isinstance(v.type, TensorType) or v.type.element_type not in ELEMENT_TYPES:
                raise VerifyException(f"expected a ranked tensor of an nn element type, got "
                                      f"{v.type}")
        for v in (*self.operands, *self.results):
            check_dims_fit(_shape(v), numpy_dtype(v.type.element_type).itemsize, "shape")

    def verify_(self) -> None:
        self.verify_tensors()
        self.verify_element_types()
        check_compatible_shapes(_shape(self.results[0]), self.infer_shape())


def _init(op: NNOp, operands: Sequence, result_type: Attribute | None, **props: object) -> None:
    """Shared builder: wrap properties; without ``result_type``, infer it from a scratch
    op carrying the same operands and properties (``infer_shape`` and
    ``infer_element_type`` read both)."""
    properties = _props(**props)
    if result_type is None:
        first = operands[0][0] if isinstance(operands[0], list | tuple) else operands[0]
        scratch = type(op).__new__(type(op))
        IRDLOperation.__init__(scratch, operands=operands, result_types=[_tensor(first)],
                               properties=properties)
        result_type = TensorType(scratch.infer_element_type(), scratch.infer_shape())
        scratch.drop_all_references()
    IRDLOperation.__init__(op, operands=operands, result_types=[result_type],
                           properties=properties)


class UnaryOp(NNOp):
    """Single-input op whose result has the input's shape."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = FORMAT_UNARY

    def __init__(self, input: SSAValue | Operation, result_type: Attribute | None = None,
                 **props: object):
        _init(self, [input], result_type, **props)

    def infer_shape(self) -> Shape:
        return _shape(self.input)


def dense_from_numpy(array: np.ndarray) -> DenseIntOrFPElementsAttr:
    """Dense attribute holding ``array`` in its own element type (bool as i1). A broadcast
    view of one value (``np.broadcast_to``, all strides zero) becomes a splat."""
    typ = TensorType(element_type_of(array.dtype), array.shape)
    owner = array.base
    while isinstance(owner, np.ndarray):
        owner = owner.base
    if isinstance(owner, bytes) and array.dtype != np.bool_ and typ.element_type not in SUB_BYTE_INTEGERS \
            and array.dtype == array.dtype.newbyteorder("<") \
            and array.flags.c_contiguous and array.nbytes == len(owner):
        # A read-only view over whole little-endian bytes (a weight read from a file):
        # the attribute keeps those bytes rather than a copy of them.
        return DenseIntOrFPElementsAttr(typ, BytesAttr(owner))
    splat = array.size > 1 and not any(array.strides)
    # tobytes lays out a strided view (a transposed weight) in C order: one copy, no temporary.
    array = np.ascontiguousarray(array[(0,) * array.ndim]) if splat else np.asarray(array)
    if array.dtype == np.bool_:
        array = array.astype(np.int8) * np.int8(-1)  # xDSL stores i1 true as 0xff
    elif typ.element_type in SUB_BYTE_INTEGERS:
        # A byte each, sign-extended (ml_dtypes keeps only the low bits): MLIR's values.
        array = array.astype(np.uint8 if array.dtype.name.startswith("u") else np.int8)
    data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
    return splat_attr(typ, data) if splat else DenseIntOrFPElementsAttr(typ, BytesAttr(data))


def dense_to_numpy(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The values of a dense attribute; a splat is a read-only broadcast view (see
    ``partita.ir.constants.dense_values``)."""
    return dense_values(attr)

