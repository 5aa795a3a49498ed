"""``nn`` ops: gather/scatter, slice, broadcast, tile, trilu, range, one-hot, reverse-sequence.

Index operands (``indices``) are ``i32`` or ``i64`` tensors; negative indices count from
the end of their axis, as in ONNX. Data operands and results may have any nn element type.

Dimensions known only at run time
---------------------------------
Ops whose result size depends on run-time *values* (``Range(0, Shape(x)[1])``,
``ConstantOfShape(Shape(ids))``, ``Expand(mask, Shape(x))``) do not take those values: the
ONNX importer resolves a dynamic size to the dimension of a tensor it was read from, and
the op carries that tensor as a *shape reference*: the ``refs`` operands (only their shapes
are used) with ``ref_axes`` (which dim of each ref) and ``targets`` (which result axis it
sizes); several refs of one target add up (a decoder's ``arange(past + seq)``, built before
any tensor has that length). So a result dim is always a dim of some operand, or a sum of
them, and shape functions and kernels derive it without reading device memory (TVM's
"data-independent shape functions").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import IntegerType, TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    result_def,
    var_operand_def,
)
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    ELEMENT_TYPES,
    NUMERIC_TYPES,
    Dims,
    NNOp,
    OpKind,
    Shape,
    ShapeArith,
    _bool_prop,
    _float_prop,
    _init,
    _int_prop,
    _ints_prop,
    _props,
    _shape,
    _str_prop,
    _tensor,
    _value,
    kind_trait,
    merge_dims,
    normalize_axis,
)

INDEX_TYPES = (IntegerType(32), IntegerType(64))
"""Element types of index operands."""
REDUCTIONS = ("none", "add", "mul", "max", "min")
"""How a scatter combines an update with the value already there."""
FORMAT_OPERANDS = "operands attr-dict `:` functional-type(operands, results)"

SLICE_END = 2**63 - 1
"""A slice end that means "to the end of the axis", whatever its size (ONNX's INT64_MAX)."""


def dynamic_slice(begin: int, end: int, step: int) -> str | None:
    """The slices of an axis of unknown size that need no clamping: ``tail``
    (``[begin:]``, ``begin >= 0``: size ``dim - begin``), ``inner`` (``[b:-j]``: size
    ``dim - b - j``), ``last`` (``[-k:]`` or ``[-k:-j]``: a static size, assuming the axis
    holds ``k`` elements) and ``head`` (``[b:e]``, ``0 <= b <= e``: the static size
    ``e - b``, assuming the axis holds ``e``). An assumption is checked when a plan binds
    the shapes (Longformer slices its chunks all these ways). With a step ``s > 1`` only
    ``tail`` (``[b::s]``, size ``ceil((dim - b) / s)``: every s-th box coordinate)."""
    if step != 1:
        return "tail" if step > 1 and begin >= 0 and end >= 2**62 else None
    if begin >= 0 and end >= 2**62:
        return "tail"
    if begin < 0 and (end >= 2**62 or begin < end < 0):
        return "last"
    if 0 <= begin <= end < 2**62:
        return "head"
    if begin >= 0 and -(2**62) < end < 0:
        return "inner"
    return None


def slice_length(dim: int, begin: int, end: int, step: int) -> int:
    """Elements ``range(dim)[begin:end:step]`` has (ONNX Slice clamping)."""
    return len(range(*slice(begin, end, step).indices(dim)))


class IndexingOp(NNOp):
    """Ops whose data operands and result share an element type while index operands
    are ``i32``/``i64`` and shape references may be anything."""

    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES
    INDEX_OPERANDS: ClassVar[tuple[str, ...]] = ("indices",)

    def verify_element_types(self) -> None:
        data = []
        for name, _ in self.get_irdl_definition().operands:
            value = getattr(self, name)
            if value is None:  # an absent optional operand
                continue
            if name in self.INDEX_OPERANDS:
                self.check_element_type(value.type.element_type, name, INDEX_TYPES)
            elif name != "refs":
                data.append(value)
        types = {v.type.element_type for v in (*data, *self.results)}
        if len(types) > 1:
            raise VerifyException("data operands and result must share one element type, "
                                  "got " + ", ".join(sorted(str(t) for t in types)))
        self.check_element_type(next(iter(types)), "element type")

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list[Any]:
        """The result dims from the operands' (symbolic) dims; used by shape functions
        and by kernels to size dynamic results."""
        raise NotImplementedError


class RefDimsMixin:
    """``refs`` / ``ref_axes`` / ``targets``: result axis ``targets[k]`` has the size of
    dim ``ref_axes[k]`` of ``refs[k]``; several refs of one target add up (a decoder's
    ``arange(past + seq)``, built before any tensor has that length: the past cache's
    dim plus the new tokens')."""

    def _ref_terms(self, rank: int, dim_of) -> dict[int, list[Any]]:
        """Each sized result axis and the ref dims it adds up, in ``refs`` order."""
        if len(self.ref_axes) != len(self.refs) or len(self.targets) != len(self.refs):
            raise VerifyException("refs, ref_axes and targets must have the same length")
        terms: dict[int, list[Any]] = {}
        for ref, axis, target in zip(self.refs, self.ref_axes, self.targets):
            target = normalize_axis(target, rank, "target")
            terms.setdefault(target, []).append(dim_of(ref, axis))
        return terms

    def ref_shape(self, shape: Shape) -> Shape:
        out = list(shape)

        def static(ref: SSAValue, axis: int) -> int:
            rs = _shape(ref)
            return rs[normalize_axis(axis, len(rs), "ref axis")]

        for target, dims in self._ref_terms(len(out), static).items():
            out[target] = DYN if DYN in dims else sum(dims)
        return tuple(out)

    def apply_refs(self, out: list[Any], dims: Dims, arith: ShapeArith | None = None) -> list[Any]:
        """``out`` with its ref-sized dims from ``dims`` (``arith`` adds the terms of a sum:
        symbolic dims; plain ``+`` for numbers)."""
        for target, terms in self._ref_terms(len(out), lambda ref, axis: dims(ref)[axis]).items():
            total = terms[0]
            for d in terms[1:]:
                total = arith.add(total, d) if arith is not None else total + d
            out[target] = total
        return out


def _refs_props(refs: Sequence[tuple[SSAValue, int, int]]) -> tuple[list, dict]:
    return [r for r, _, _ in refs], {"ref_axes": [a for _, a, _ in refs],
                                     "targets": [t for _, _, t in refs]}


# ---------------------------------------------------------------------------------------
# Gathers
# ---------------------------------------------------------------------------------------


@irdl_op_definition
class TakeOp(IndexingOp):
    """``numpy.take(data, indices, axis)`` (ONNX Gather): result shape
    ``data[:axis] + indices + data[axis+1:]``."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.take"
    data = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis", 0)
    axis = _value("axis")
    assembly_format = "$data `,` $indices attr-dict `:` functional-type(operands, results)"

    def __init__(self, data, indices, axis: int = 0, result_type: Attribute | None = None):
        _init(self, [data, indices], result_type, axis=axis)

    def infer_shape(self) -> Shape:
        d = _shape(self.data)
        axis = normalize_axis(self.axis, len(d))
        return d[:axis] + _shape(self.indices) + d[axis + 1:]

    def result_dims(self, dims, arith):
        d = dims(self.data)
        axis = self.axis % len(d)
        return [*d[:axis], *dims(self.indices), *d[axis + 1:]]


@irdl_op_definition
class GatherElementsOp(IndexingOp):
    """ONNX GatherElements: ``out[i] = data[i with axis replaced by indices[i]]``."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.gather_elements"
    data = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis", 0)
    axis = _value("axis")
    assembly_format = "$data `,` $indices attr-dict `:` functional-type(operands, results)"

    def __init__(self, data, indices, axis: int = 0, result_type: Attribute | None = None):
        _init(self, [data, indices], result_type, axis=axis)

    def infer_shape(self) -> Shape:
        d, i = _shape(self.data), _shape(self.indices)
        if len(d) != len(i):
            raise VerifyException(f"indices must have the rank of data ({len(d)}), got {len(i)}")
        normalize_axis(self.axis, len(d))
        return i

    def result_dims(self, dims, arith):
        return list(dims(self.indices))


@irdl_op_definition
class GatherNDOp(IndexingOp):
    """ONNX GatherND: the last axis of ``indices`` indexes the leading axes of ``data``
    after ``batch_dims`` shared batch axes."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.gather_nd"
    data = operand_def(TensorType)
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    batch_dims_attr = _int_prop("batch_dims", 0)
    batch_dims = _value("batch_dims")
    assembly_format = "$data `,` $indices attr-dict `:` functional-type(operands, results)"

    def __init__(self, data, indices, batch_dims: int = 0,
                 result_type: Attribute | None = None):
        _init(self, [data, indices], result_type, batch_dims=batch_dims)

    def infer_shape(self) -> Shape:
        d, i, b = _shape(self.data), _shape(self.indices), self.batch_dims
        if not i or i[-1] == DYN:
            raise VerifyException("the last dimension of indices must be static")
        if b < 0 or b >= min(len(d), len(i)) or b + i[-1] > len(d):
            raise VerifyException(f"indices of shape {list(i)} with batch_dims {b} do not fit "
                                  f"data of rank {len(d)}")
        for k in range(b):
            merge_dims(d[k], i[k], f"batch dimension {k} mismatch")
        return i[:-1] + d[b + i[-1]:]

    def result_dims(self, dims, arith):
        i = dims(self.indices)
        return [*i[:-1], *dims(self.data)[self.batch_dims + _shape(self.indices)[-1]:]]


# ---------------------------------------------------------------------------------------
# Scatters
# ---------------------------------------------------------------------------------------


class ScatterOp(IndexingOp):
    traits = kind_trait(OpKind.OPAQUE)
    data = operand_def(TensorType)
    indices = operand_def(TensorType)
    updates = operand_def(TensorType)
    result = result_def(TensorType)
    reduction_attr = _str_prop("reduction", "none")
    reduction = _value("reduction")
    assembly_format = ("$data `,` $indices `,` $updates attr-dict `:` "
                       "functional-type(operands, results)")

    def infer_shape(self) -> Shape:
        if self.reduction not in REDUCTIONS:
            raise VerifyException(f"reduction must be one of {', '.join(REDUCTIONS)}, "
                                  f"got '{self.reduction}'")
        return _shape(self.data)

    def result_dims(self, dims, arith):
        return list(dims(self.data))


@irdl_op_definition
class ScatterNDOp(ScatterOp):
    """ONNX ScatterND: a copy of ``data`` with ``updates`` written at the index tuples in
    the last axis of ``indices`` (KV-cache updates)."""

    name = "nn.scatter_nd"

    def __init__(self, data, indices, updates, reduction: str = "none",
                 result_type: Attribute | None = None):
        _init(self, [data, indices, updates], result_type, reduction=reduction)

    def infer_shape(self) -> Shape:
        d, i, u = _shape(self.data), _shape(self.indices), _shape(self.updates)
        if not i or i[-1] == DYN or i[-1] > len(d):
            raise VerifyException(f"the last dimension of indices ({list(i)}) must be static "
                                  f"and at most the rank of data ({len(d)})")
        expected = i[:-1] + d[i[-1]:]
        if len(u) != len(expected):
            raise VerifyException(f"updates must have shape {list(expected)}, got {list(u)}")
        for a, b in zip(u, expected):
            merge_dims(a, b, "updates shape mismatch")
        return super().infer_shape()


@irdl_op_definition
class ScatterElementsOp(ScatterOp):
    """ONNX ScatterElements: ``out[idx with axis replaced by indices[idx]] = updates[idx]``."""

    name = "nn.scatter_elements"
    axis_attr = _int_prop("axis", 0)
    axis = _value("axis")

    def __init__(self, data, indices, updates, axis: int = 0, reduction: str = "none",
                 result_type: Attribute | None = None):
        _init(self, [data, indices, updates], result_type, axis=axis, reduction=reduction)

    def infer_shape(self) -> Shape:
        d, i, u = _shape(self.data), _shape(self.indices), _shape(self.updates)
        if not len(d) == len(i) == len(u):
            raise VerifyException("data, indices and updates must have the same rank")
        for a, b in zip(i, u):
            merge_dims(a, b, "indices and updates shape mismatch")
        normalize_axis(self.axis, len(d))
        return super().infer_shape()


# ---------------------------------------------------------------------------------------
# Slices, broadcasts, tiles
# ---------------------------------------------------------------------------------------


@irdl_op_definition
class StridedSliceOp(RefDimsMixin, IndexingOp):
    """``input[begin[0]:end[0]:strides[0], ...]`` with Python / ONNX Slice semantics per
    axis (negative bounds count from the end, out-of-range bounds clamp, negative strides
    walk backwards). A ``targets`` axis ends at the size of its ref's dim (it must start
    at 0 with stride 1): ``pos_table[:seq]``. A dynamic input axis is sliced in one of
    ``dynamic_slice``'s forms; a ``head`` (``[b:e]``) on one is assumed to hold ``e``
    elements (a static ``e - b``, checked when a plan binds) unless the axis is ``clamped``:
    then its length is ``?``, ``min(dim, e) - b`` at least 0, as ONNX clamps (the first
    ``e`` boxes an NMS kept, however many it kept)."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.strided_slice"
    INDEX_OPERANDS: ClassVar = ()
    input = operand_def(TensorType)
    refs = var_operand_def(TensorType)
    result = result_def(TensorType)
    begin_attr = _ints_prop("begin")
    end_attr = _ints_prop("end")
    strides_attr = _ints_prop("strides")
    ref_axes_attr = _ints_prop("ref_axes", ())
    targets_attr = _ints_prop("targets", ())
    clamped_attr = _ints_prop("clamped", ())
    begin = _value("begin")
    end = _value("end")
    strides = _value("strides")
    ref_axes = _value("ref_axes")
    targets = _value("targets")
    clamped = _value("clamped")
    assembly_format = FORMAT_OPERANDS

    def __init__(self, input, begin: Sequence[int], end: Sequence[int],
                 strides: Sequence[int], refs: Sequence[tuple[SSAValue, int, int]] = (),
                 result_type: Attribute | None = None, clamped: Sequence[int] = ()):
        ref_values, props = _refs_props(refs)
        if clamped:
            props["clamped"] = list(clamped)
        _init(self, [input, ref_values], result_type, begin=begin, end=end, strides=strides,
              **props)

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        if not len(self.begin) == len(self.end) == len(self.strides) == len(x):
            raise VerifyException(f"begin, end and strides must have {len(x)} values")
        if 0 in self.strides:
            raise VerifyException("strides must be non-zero")
        out = []
        for axis in self.clamped:
            if not 0 <= axis < len(x) or dynamic_slice(
                    self.begin[axis], self.end[axis], self.strides[axis]) != "head" or axis in self.targets:
                raise VerifyException(f"clamped axis {axis} must be sliced [b:e] with 0 <= b <= e and stride 1")
        for axis, (d, b, e, s) in enumerate(zip(x, self.begin, self.end, self.strides)):
            if d != DYN:
                out.append(slice_length(d, b, e, s))
            elif axis in self.targets or axis in self.clamped or dynamic_slice(b, e, s) in ("tail", "inner"):
                out.append(DYN)
            elif dynamic_slice(b, e, s) == "last":
                out.append((e if e < 0 else 0) - b)
            elif dynamic_slice(b, e, s) == "head":
                out.append(e - b)
            else:
                raise VerifyException(f"dynamic axis {axis} must be sliced with stride 1 "
                                      "(nn.dynamic_slice's forms)")
        for t in self.targets:
            if (self.begin[t], self.strides[t]) != (0, 1):
                raise VerifyException(f"axis {t} ends at a ref dim: it must start at 0 "
                                      "with stride 1")
        return self.ref_shape(tuple(out))

    def keeps_whole(self, axis: int) -> bool:
        """Whether ``axis`` is read whole: from 0 with stride 1 to its end (an end at or past
        a static size, or "to the end" of any), not a ``targets`` axis ending at a ref dim."""
        d, end = _shape(self.input)[axis], self.end[axis]
        return (self.begin[axis] == 0 and self.strides[axis] == 1 and axis not in self.targets
                and (end >= 2**62 or 0 <= d <= end))

    def static_range(self, axis: int) -> range | None:
        """The input indices ``axis`` keeps, when its size is static (``None`` otherwise)."""
        d = _shape(self.input)[axis]
        return None if d == DYN else range(d)[slice(self.begin[axis], self.end[axis], self.strides[axis])]

    def result_dims(self, dims, arith):
        # A '?' that no ref sizes is a dynamic input axis sliced from begin to its end, or
        # to -j before it, or a clamped [b:e]: e - b, or d - b when d < e, or 0 when d < b.
        out = []
        for axis, (s, d, b, e, st) in enumerate(zip(_shape(self.result), dims(self.input), self.begin, self.end,
                                                    self.strides)):
            if s != DYN:
                out.append(s)
            elif axis in self.clamped:
                out.append(arith.select_ge(d, e, e - b, arith.select_ge(d, b, arith.add(d, -b), 0)))
            elif st > 1:  # [b::st]
                out.append(arith.floordiv(arith.add(d, st - 1 - b), st))
            else:
                out.append(arith.add(d, (e if -(2**62) < e < 0 else 0) - b))
        return self.apply_refs(out, dims, arith)


@irdl_op_definition
class BroadcastToOp(RefDimsMixin, IndexingOp):
    """``input`` broadcast (NumPy rules) to the result type's shape (ONNX Expand, which
    also lets ``input`` enlarge the target); ``?`` dims come from the input or the refs."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.broadcast_to"
    INDEX_OPERANDS: ClassVar = ()
    input = operand_def(TensorType)
    refs = var_operand_def(TensorType)
    result = result_def(TensorType)
    ref_axes_attr = _ints_prop("ref_axes", ())
    targets_attr = _ints_prop("targets", ())
    ref_axes = _value("ref_axes")
    targets = _value("targets")
    assembly_format = FORMAT_OPERANDS

    def __init__(self, input, shape: Sequence[int],
                 refs: Sequence[tuple[SSAValue, int, int]] = ()):
        ref_values, props = _refs_props(refs)
        result_type = TensorType(_tensor(input).element_type, tuple(shape))
        _init(self, [input, ref_values], result_type, **props)

    def infer_shape(self) -> Shape:
        out = self.ref_shape(_shape(self.result))
        x = _shape(self.input)
        if len(x) > len(out):
            raise VerifyException(f"cannot broadcast rank {len(x)} to rank {len(out)}")
        lead = len(out) - len(x)
        for a, b in zip(x, out[lead:]):
            if a not in (1, DYN) and b not in (a, DYN):
                raise VerifyException(f"cannot broadcast {list(x)} to {list(out)}")
        return out

    def result_dims(self, dims, arith):
        x = dims(self.input)
        shape = _shape(self.result)
        lead = len(shape) - len(x)
        out = [s if s != DYN else (x[k - lead] if k >= lead else s) for k, s in enumerate(shape)]
        return self.apply_refs(out, dims, arith)


@irdl_op_definition
class TileOp(IndexingOp):
    """``numpy.tile`` with one repeat count per axis."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.tile"
    INDEX_OPERANDS: ClassVar = ()
    input = operand_def(TensorType)
    result = result_def(TensorType)
    repeats_attr = _ints_prop("repeats")
    repeats = _value("repeats")
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input, repeats: Sequence[int], result_type: Attribute | None = None):
        _init(self, [input], result_type, repeats=repeats)

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        if len(self.repeats) != len(x) or any(r < 0 for r in self.repeats):
            raise VerifyException(f"repeats must be {len(x)} non-negative values")
        return tuple(DYN if d == DYN else d * r for d, r in zip(x, self.repeats))

    def result_dims(self, dims, arith):
        return [arith.mul(d, r) for d, r in zip(dims(self.input), self.repeats)]


@irdl_op_definition
class TriluOp(IndexingOp):
    """The upper (``j - i >= k``) or lower (``j - i <= k``) triangle of the last two axes;
    other elements are zero. ``k`` is the property, or the run-time scalar ``diagonal``
    when given (ONNX passes it as an input)."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.trilu"
    INDEX_OPERANDS: ClassVar = ("diagonal",)
    input = operand_def(TensorType)
    diagonal = opt_operand_def(TensorType)
    result = result_def(TensorType)
    k_attr = _int_prop("k", 0)
    upper_attr = _int_prop("upper", 1)
    k = _value("k")
    upper = _value("upper")
    assembly_format = FORMAT_OPERANDS

    def __init__(self, input, k: int = 0, upper: bool = True,
                 result_type: Attribute | None = None, diagonal: SSAValue | None = None):
        _init(self, [input, [] if diagonal is None else [diagonal]], result_type, k=k,
              upper=int(upper))

    def verify_element_types(self) -> None:
        if self.diagonal is not None and _shape(self.diagonal) not in ((), (1,)):
            raise VerifyException("diagonal must be a scalar")
        super().verify_element_types()

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        if len(x) < 2:
            raise VerifyException("trilu needs rank >= 2")
        return x

    def result_dims(self, dims, arith):
        return list(dims(self.input))


@irdl_op_definition
class ArangeOp(RefDimsMixin, NNOp):
    """``start + delta * i`` for ``i`` in ``range(n)`` (ONNX Range); ``n`` is the static
    result size or the size of its ref's dim."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.arange"
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES[:4] + ELEMENT_TYPES[5:]
    refs = var_operand_def(TensorType)
    result = result_def(TensorType)
    start_attr = _float_prop("start")
    delta_attr = _float_prop("delta")
    ref_axes_attr = _ints_prop("ref_axes", ())
    targets_attr = _ints_prop("targets", ())
    start = _value("start")
    delta = _value("delta")
    ref_axes = _value("ref_axes")
    targets = _value("targets")
    assembly_format = FORMAT_OPERANDS

    def __init__(self, start: float, delta: float, size: int, element_type: Attribute,
                 refs: Sequence[tuple[SSAValue, int, int]] = ()):
        ref_values, props = _refs_props(refs)
        IRDLOperation.__init__(self, operands=[ref_values],
                               result_types=[TensorType(element_type, (size,))],
                               properties=_props(start=float(start), delta=float(delta),
                                                 **props))

    def verify_element_types(self) -> None:
        self.check_element_type(self.result.type.element_type, "element type")

    def infer_shape(self) -> Shape:
        out = self.ref_shape(_shape(self.result))
        if len(out) != 1:
            raise VerifyException("arange results have rank 1")
        return out

    def result_dims(self, dims, arith):
        return self.apply_refs(list(_shape(self.result)), dims, arith)


@irdl_op_definition
class OneHotOp(IndexingOp):
    """ONNX OneHot: a new axis of size ``depth`` holding ``on_value`` where its index
    equals ``indices`` (negative indices count from ``depth``) and ``off_value`` elsewhere."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.one_hot"
    indices = operand_def(TensorType)
    result = result_def(TensorType)
    depth_attr = _int_prop("depth")
    axis_attr = _int_prop("axis", -1)
    on_value_attr = _float_prop("on_value", 1.0)
    off_value_attr = _float_prop("off_value", 0.0)
    depth = _value("depth")
    axis = _value("axis")
    on_value = _value("on_value")
    off_value = _value("off_value")
    assembly_format = "$indices attr-dict `:` functional-type(operands, results)"

    def __init__(self, indices, depth: int, axis: int, on_value: float, off_value: float,
                 element_type: Attribute):
        shape = list(_shape(SSAValue.get(indices)))
        axis_n = axis % (len(shape) + 1)
        shape.insert(axis_n, depth)
        _init(self, [indices], TensorType(element_type, shape), depth=depth, axis=axis,
              on_value=float(on_value), off_value=float(off_value))

    def verify_element_types(self) -> None:
        # ONNX allows any numeric indices (cast to integers).
        self.check_element_type(self.indices.type.element_type, "indices", NUMERIC_TYPES)
        self.check_element_type(self.result.type.element_type, "element type")

    def infer_shape(self) -> Shape:
        i = list(_shape(self.indices))
        if self.depth < 0:
            raise VerifyException("depth must be non-negative")
        i.insert(normalize_axis(self.axis, len(i) + 1), self.depth)
        return tuple(i)

    def result_dims(self, dims, arith):
        i = list(dims(self.indices))
        i.insert(self.axis % (len(i) + 1), self.depth)
        return i


def static_numel(shape: Shape) -> int | None:
    return None if DYN in shape else math.prod(shape)


@irdl_op_definition
class ReverseSequenceOp(IndexingOp):
    """ONNX ReverseSequence (Relay's ``reverse_sequence``): along ``time_axis``, the first
    ``sequence_lens[b]`` elements of each batch entry ``b`` (an index along ``batch_axis``)
    in reverse order, the rest as they are: ``out[.., t, ..] = input[.., L - 1 - t, ..]``
    for ``t < L``. The lengths are a run-time ``i32`` / ``i64`` tensor of one value per
    batch entry, each in ``[0, T]`` (the reference reports one outside; a length of 0 or 1
    keeps the entry)."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.reverse_sequence"
    INDEX_OPERANDS: ClassVar[tuple[str, ...]] = ("sequence_lens",)
    input = operand_def(TensorType)
    sequence_lens = operand_def(TensorType)
    result = result_def(TensorType)
    batch_axis_attr = _int_prop("batch_axis", 1)
    time_axis_attr = _int_prop("time_axis", 0)
    batch_axis = _value("batch_axis")
    time_axis = _value("time_axis")
    assembly_format = "$input `,` $sequence_lens attr-dict `:` functional-type(operands, results)"

    def __init__(self, input, sequence_lens, *, batch_axis: int = 1, time_axis: int = 0):
        _init(self, [input, sequence_lens], None, batch_axis=batch_axis, time_axis=time_axis)

    def infer_shape(self) -> Shape:
        x, lens = _shape(self.input), _shape(self.sequence_lens)
        if len(x) < 2:
            raise VerifyException(f"the input must have rank 2 or more, got rank {len(x)}")
        if sorted((self.batch_axis, self.time_axis)) != [0, 1]:
            raise VerifyException(f"batch_axis and time_axis must be 0 and 1 in some order, got "
                                  f"{self.batch_axis} and {self.time_axis}")
        if len(lens) != 1:
            raise VerifyException(f"sequence_lens must have rank 1, got rank {len(lens)}")
        merge_dims(x[self.batch_axis], lens[0], "sequence_lens must hold one length per batch entry")
        return x

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list[Any]:
        return list(dims(self.input))


@irdl_op_definition
class TensorScatterOp(IndexingOp):
    """ONNX TensorScatter (opset 24), a KV cache's update: ``cache`` with, for each batch
    entry ``b`` (axis 0), the ``S`` rows of ``update`` along ``axis`` written from position
    ``write_indices[b]`` on (``circular``: modulo the cache's extent along ``axis``, a
    ring buffer). Every other dim of ``update`` is the cache's, and ``S`` is at most the
    cache's extent. The result is a new tensor: a row written past the end (``linear``) is
    dropped, as no kernel may write out of bounds."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.tensor_scatter"
    INDEX_OPERANDS: ClassVar[tuple[str, ...]] = ("write_indices",)
    cache = operand_def(TensorType)
    update = operand_def(TensorType)
    write_indices = operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis", -2)
    circular_attr = _bool_prop("circular", False)
    axis = _value("axis")
    circular = _value("circular")
    assembly_format = "$cache `,` $update `,` $write_indices attr-dict `:` functional-type(operands, results)"

    def __init__(self, cache, update, write_indices, *, axis: int = -2, circular: bool = False):
        _init(self, [cache, update, write_indices], None, axis=axis, circular=circular)

    def infer_shape(self) -> Shape:
        cache, update, index = _shape(self.cache), _shape(self.update), _shape(self.write_indices)
        if len(update) != len(cache):
            raise VerifyException(f"the update must have the cache's rank {len(cache)}, got rank {len(update)}")
        axis = normalize_axis(self.axis, len(cache))
        if axis == 0:
            raise VerifyException("axis must not be the batch axis 0")
        for k, (c, u) in enumerate(zip(cache, update)):
            if k != axis:
                merge_dims(c, u, f"the update must match the cache in dim {k}")
            elif DYN not in (c, u) and u > c:
                raise VerifyException(f"the update holds {u} rows along axis {axis}, more than the cache's {c}")
        if len(index) != 1:
            raise VerifyException(f"write_indices must have rank 1, got rank {len(index)}")
        merge_dims(cache[0], index[0], "write_indices must hold one position per batch entry")
        return cache

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list[Any]:
        return list(dims(self.cache))

