"""Values of the ONNX importer: what a node's input is (an IR value, a NumPy constant or
absent), dims known only at run time inside folded shape computations (``SymDim``, kept
as structured arithmetic so later shapes can cancel them), the helpers converters read
their inputs with, and the ``Unsupported`` error they raise."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from xdsl.ir import SSAValue

from partita.dialects import nn

ONNX_DTYPES = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16),
    onnx.TensorProto.BFLOAT16: nn.numpy_dtype(nn.BFloat16Type()),
    onnx.TensorProto.DOUBLE: np.dtype(np.float64),
    onnx.TensorProto.BOOL: np.dtype(np.bool_),
    onnx.TensorProto.INT8: np.dtype(np.int8),
    onnx.TensorProto.INT16: np.dtype(np.int16),
    onnx.TensorProto.INT32: np.dtype(np.int32),
    onnx.TensorProto.INT64: np.dtype(np.int64),
    onnx.TensorProto.UINT8: np.dtype(np.uint8),
    onnx.TensorProto.UINT16: np.dtype(np.uint16),
    onnx.TensorProto.UINT32: np.dtype(np.uint32),
    onnx.TensorProto.UINT64: np.dtype(np.uint64),
    onnx.TensorProto.FLOAT8E4M3FN: nn.NUMPY_DTYPES["f8E4M3FN"],
    onnx.TensorProto.FLOAT8E4M3FNUZ: nn.NUMPY_DTYPES["f8E4M3FNUZ"],
    onnx.TensorProto.FLOAT8E5M2: nn.NUMPY_DTYPES["f8E5M2"],
    onnx.TensorProto.FLOAT8E5M2FNUZ: nn.NUMPY_DTYPES["f8E5M2FNUZ"],
    onnx.TensorProto.INT4: nn.NUMPY_DTYPES["i4"],
    onnx.TensorProto.UINT4: nn.NUMPY_DTYPES["ui4"],
    onnx.TensorProto.INT2: nn.NUMPY_DTYPES["i2"],
    onnx.TensorProto.UINT2: nn.NUMPY_DTYPES["ui2"],
    onnx.TensorProto.FLOAT4E2M1: nn.NUMPY_DTYPES["f4E2M1FN"],
    onnx.TensorProto.FLOAT8E8M0: nn.NUMPY_DTYPES["f8E8M0FNU"],
}


@dataclass(frozen=True)
class SymDim:
    """A dimension known only at run time inside a folded shape computation; ``label``
    is the ONNX symbolic name (``dim_param``) when shape inference knows one."""

    label: object

    def __repr__(self) -> str:
        return f"?{self.label}"


Value = SSAValue | np.ndarray | None


@dataclass(frozen=True)
class SequenceValue:
    """An ONNX sequence, resolved at import as TVM's Relay frontend resolves it into a
    tuple: its elements (each a ``Value``; the compiled program holds only tensors) and
    their element type (a ``TensorProto`` code), which an empty sequence has too. Sequence
    ops build new ones: a value is never changed."""

    elements: tuple[Value, ...]
    element_type: int

    def __len__(self) -> int:
        return len(self.elements)

    def describe(self) -> str:
        return f"a sequence of {len(self)} {onnx.TensorProto.DataType.Name(self.element_type)} tensors"


def element_type(v: Value) -> int:
    """The ``TensorProto`` element type of a tensor value (a folded shape is INT64)."""
    if isinstance(v, SSAValue):
        dtype = nn.numpy_dtype(v.type.element_type)
    else:
        dtype = np.dtype(np.int64) if is_symbolic(v) else np.asarray(v).dtype
    for code, known in ONNX_DTYPES.items():
        if known == dtype:
            return code
    fail(f"a tensor of element type {dtype} has no ONNX element type")


@dataclass(frozen=True)
class QuantizedConstant:
    """A constant's integers and the DequantizeLinear parameters that made it float:
    ``(values - zero_point) * scale`` along ``axis`` (scale and zero point of one element,
    or one per index of ``axis``; with a ``block_size``, one per block of that many
    indices of ``axis`` and per index of the other axes)."""

    values: np.ndarray
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int
    block_size: int = 0

_SYM_ARITH = {"add", "sub", "mul", "div"}


def sym_arith(kind: str, x: SymDim | int, y: SymDim | int) -> SymDim | int:
    """``x kind y`` on dims where one side may be dynamic, as a structural ``SymDim``
    (identities simplified, so ``Shape(x)[0] * 1`` is ``Shape(x)[0]`` again)."""
    if not isinstance(x, SymDim) and not isinstance(y, SymDim):
        x, y = int(x), int(y)
        return {"add": x + y, "sub": x - y, "mul": x * y, "div": x // y if y else 0}[kind]
    if kind == "mul" and not isinstance(x, SymDim) and int(x) == 1:
        return y
    if (kind in ("mul", "div") and not isinstance(y, SymDim) and int(y) == 1) or \
            (kind in ("add", "sub") and not isinstance(y, SymDim) and int(y) == 0):
        return x
    if kind == "add" and not isinstance(x, SymDim) and int(x) == 0:
        return y
    norm = lambda d: d if isinstance(d, SymDim) else int(d)  # noqa: E731
    return SymDim((kind, norm(x), norm(y)))


def sym_linear(d: SymDim | int) -> tuple[frozenset, int]:
    """``d`` as a sum of integer multiples of dims plus a constant, so ``(past + 1) - past``
    is the constant 1 and ``seq + past`` the same dim as ``past + seq``; a product or
    quotient of two dynamic dims is one term of its own."""
    terms: dict[object, int] = {}

    def walk(x: SymDim | int, scale: int) -> int:
        if not isinstance(x, SymDim):
            return scale * int(x)
        label = x.label
        if isinstance(label, tuple) and label[:1] in (("add",), ("sub",)):
            return walk(label[1], scale) + walk(label[2], scale if label[0] == "add" else -scale)
        if isinstance(label, tuple) and label[:1] == ("mul",) and not isinstance(label[1], SymDim):
            return walk(label[2], scale * int(label[1]))
        if isinstance(label, tuple) and label[:1] == ("mul",) and not isinstance(label[2], SymDim):
            return walk(label[1], scale * int(label[2]))
        terms[x] = terms.get(x, 0) + scale
        return 0

    constant = walk(d, 1)
    return frozenset((k, v) for k, v in terms.items() if v), constant


def sym_factors(dims: list[object]) -> list[object]:
    """The factors of a product of dims: ``mul`` expressions split, ones dropped."""
    out: list[object] = []
    for d in dims:
        if isinstance(d, SymDim) and isinstance(d.label, tuple) and d.label[:1] == ("mul",):
            out += sym_factors([d.label[1], d.label[2]])
        elif isinstance(d, SymDim) or int(d) != 1:
            out.append(d)
    return out


class Unsupported(Exception):
    """Raised by converters; the importer adds the node's name."""


class UnsupportedVariant(Unsupported):
    """A valid form of the op that its converter does not build (a sliding attention
    window, an unusual stash type): the importer takes the op's ONNX function body instead,
    where it has one. Invalid input stays an ``Unsupported`` error."""


def fail(message: str) -> None:
    raise Unsupported(message)


def fail_variant(message: str) -> None:
    raise UnsupportedVariant(message)


def is_const(v: Value) -> bool:
    return isinstance(v, np.ndarray)


def is_symbolic(v: Value) -> bool:
    return isinstance(v, np.ndarray) and v.dtype == object


def shape_of(v: Value) -> tuple[int, ...]:
    """The shape of an IR value (``nn.DYN`` for a dynamic dim) or of a constant."""
    if isinstance(v, np.ndarray):
        return v.shape
    return tuple(v.type.get_shape())


def const_ints(v: Value, what: str) -> list[int]:
    if not is_const(v) or is_symbolic(v):
        fail(f"{what} must be a constant")
    return [int(i) for i in np.asarray(v).reshape(-1)]


def const_scalar(v: Value, what: str) -> float:
    if not is_const(v) or is_symbolic(v) or np.asarray(v).size != 1:
        fail(f"{what} must be a constant scalar")
    return float(np.asarray(v).reshape(-1)[0])


def settle(v: np.ndarray) -> np.ndarray:
    """A folded shape computation: object dtype while it holds a ``SymDim``, plain NumPy
    (``int64``, ``bool``) once every entry is known (``Shape(x)[3]`` of a static dim)."""
    flat = np.asarray(v, dtype=object).reshape(-1)
    if any(isinstance(d, SymDim) for d in flat):
        return np.asarray(v, dtype=object)
    if v.dtype != object:
        return v
    kinds = {type(d) for d in flat}
    dtype = np.bool_ if kinds and all(issubclass(k, bool | np.bool_) for k in kinds) else np.int64
    return np.asarray(v.tolist() if v.ndim else v[()], dtype=dtype)


def _broadcast_labels(operands: list[list[object]], result: tuple[int, ...]) -> list[object]:
    """NumPy broadcasting on dim labels, right-aligned: a dynamic result dim is the one
    symbol its operands have there besides 1s (``None`` when they name several)."""
    out: list[object] = []
    for k, d in enumerate(result):
        if d != nn.DYN:
            out.append(d)
            continue
        at = {ls[len(ls) - len(result) + k] for ls in operands if len(ls) - len(result) + k >= 0}
        named = {x for x in at if not (not isinstance(x, SymDim) and x == 1)}
        out.append(next(iter(named)) if len(named) == 1 and isinstance(next(iter(named)), SymDim) else None)
    return out

