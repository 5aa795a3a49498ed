"""ONNX converters of the sequence ops (lists of tensors), resolved at import.

A sequence is a ``SequenceValue``: the Python tuple of its elements and their element
type, as TVM's Relay frontend makes ONNX sequences tuples. Every sequence op therefore
works on the list at import and the compiled program holds only the elements' tensors;
what that needs is known at import, and its absence is a located error:

- positions (``SequenceAt``, ``SequenceInsert``, ``SequenceErase``) count from the end when
  negative, as the ONNX spec says. A constant one picks at import; one computed at run time
  selects each element of the result with a chain of choices on the position (the
  sequence's length stays known; ``nn.where`` between elements of one shape, ``nn.choose``
  where their shapes differ); an out-of-range run-time position is not reported (the
  chain's last choice is taken);
- ``SplitToSequence`` splits a static axis by constant sizes (the count of elements is the
  sequence's length);
- ``SequenceMap`` imports its body once per element (``Importer.run_subgraph``), as Loop
  unrolls (``control_flow``); a Loop whose iterations are unrolled carries sequences the same
  way, and the ONNX function forms (``SequenceMap`` expanded into a Loop) import so too.

A sequence at the graph boundary is one argument or result per element (``Importer.run``,
``partita.ir.abi``).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from xdsl.ir import SSAValue

from partita.dialects import nn
from partita.frontends.onnx.control_flow import select, stack
from partita.frontends.onnx.dyn import dyn, run_time
from partita.frontends.onnx.importer import Importer
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.transform import drop_axis, reshape_to, slice_axis
from partita.frontends.onnx.values import (
    SequenceValue,
    Value,
    element_type,
    fail,
    is_const,
    is_symbolic,
    shape_of,
)


def _sequence(v: Value | SequenceValue, what: str) -> SequenceValue:
    if not isinstance(v, SequenceValue):
        fail(f"{what} must be a sequence, got a tensor")
    return v


def _type_name(code: int) -> str:
    return onnx.TensorProto.DataType.Name(code)


def _computed(v: Value | None) -> bool:
    """Whether a position is known only at run time (data, or computed from dynamic dims)."""
    return v is not None and (not is_const(v) or is_symbolic(v))


def _position(v: Value, what: str) -> int:
    """A constant position input's value (one computed at run time is a ``_RunTimePosition``)."""
    array = np.asarray(v)
    if array.size != 1:
        fail(f"the {what} must have one element, got shape {list(array.shape)}")
    return int(array.reshape(-1)[0])


def _index(position: int, length: int, what: str, *, end: bool = False) -> int:
    """``position`` in ``[-length, length)`` (``[-length, length]`` with ``end``: an
    insertion may append) as an index from the front."""
    last = length if end else length - 1
    if not -length <= position <= last:
        fail(f"the {what} {position} is out of range for a sequence of {length} tensors "
             f"(accepted: {-length} to {last})")
    return position + length if position < 0 else position


def _check_element(seq: SequenceValue, v: Value, what: str) -> None:
    if isinstance(v, SequenceValue):
        fail(f"{what} must be a tensor, got a sequence (sequences of sequences are not supported)")
    code = element_type(v)
    if code != seq.element_type:
        fail(f"{what} is {_type_name(code)}, but the sequence holds {_type_name(seq.element_type)} tensors")


@converter("SequenceEmpty")
def _sequence_empty(cx, ins, attrs):
    return SequenceValue((), attrs.get("dtype", onnx.TensorProto.FLOAT))


@converter("SequenceConstruct")
def _sequence_construct(cx, ins, attrs):
    seq = SequenceValue(tuple(ins), element_type(ins[0]))
    for k, v in enumerate(ins[1:], 1):
        _check_element(seq, v, f"input #{k}")
    return seq


@converter("SequenceLength")
def _sequence_length(cx, ins, attrs):
    return np.array(len(_sequence(ins[0], "the input")), dtype=np.int64)


class _RunTimePosition:
    """A position computed at run time, as a rank-0 ``i64`` index from the front, and the
    choices it makes, one per element of the result (``control_flow.select`` on a
    comparison of the index with the element's: ``nn.where`` between tensors of one
    shape, ``nn.choose`` between tensors of one rank whose shapes differ)."""

    def __init__(self, cx: Importer, position: Value, length: int, what: str):
        if len(shape_of(position)) > 1 or math.prod(shape_of(position)) != 1:
            fail(f"the {what} must have one element, got shape {list(shape_of(position))}")
        self.cx, self.what = cx, what
        at = reshape_to(cx, cx.tensor(position), [])
        if at.type.element_type != nn.element_type_of(np.dtype(np.int64)):
            at = cx.emit(nn.CastOp(at, nn.element_type_of(np.dtype(np.int64))))
        negative = self._compare(nn.LessOp, at, 0)
        self.index = cx.emit(nn.WhereOp(negative, cx.emit(nn.AddOp(at, self._constant(length))), at))

    def _constant(self, k: int) -> SSAValue:
        return self.cx.tensor(np.array(k, np.int64))

    def _compare(self, op: type, a: SSAValue, k: int) -> SSAValue:
        return self.cx.emit(op(a, self._constant(k)))

    def choose(self, op: type, k: int, a: Value, b: Value) -> Value:
        """``a`` where ``op(index, k)`` holds, else ``b``."""
        return select(self.cx, self._compare(op, self.index, k), a, b, f"the {self.what}'s element {k}")


@converter("SequenceAt")
def _sequence_at(cx, ins, attrs):
    seq = _sequence(ins[0], "the input")
    if not _computed(ins[1]):
        return seq.elements[_index(_position(ins[1], "position"), len(seq), "position")]
    if not len(seq):
        fail("cannot take an element of an empty sequence")
    at = _RunTimePosition(cx, ins[1], len(seq), "position")
    out = seq.elements[-1]
    for j in range(len(seq) - 2, -1, -1):
        out = at.choose(nn.EqualOp, j, seq.elements[j], out)
    return out


@converter("SequenceInsert")
def _sequence_insert(cx, ins, attrs):
    seq = _sequence(ins[0], "the input")
    tensor = ins[1]
    _check_element(seq, tensor, "the tensor inserted")
    if len(ins) < 3 or not _computed(ins[2]):
        at = len(seq) if len(ins) < 3 or ins[2] is None else \
            _index(_position(ins[2], "position"), len(seq), "position", end=True)
        return SequenceValue((*seq.elements[:at], tensor, *seq.elements[at:]), seq.element_type)
    # Element j of the result: the old j before the position, the tensor at it, the old
    # j - 1 after it.
    at = _RunTimePosition(cx, ins[2], len(seq), "position")
    old = seq.elements
    out = []
    for j in range(len(old) + 1):
        shifted = at.choose(nn.EqualOp, j, tensor, old[j - 1]) if j else tensor
        out.append(at.choose(nn.GreaterOp, j, old[j], shifted) if j < len(old) else shifted)
    return SequenceValue(tuple(out), seq.element_type)


@converter("SequenceErase")
def _sequence_erase(cx, ins, attrs):
    seq = _sequence(ins[0], "the input")
    if not len(seq):
        fail("cannot erase from an empty sequence")
    if len(ins) < 2 or not _computed(ins[1]):
        at = len(seq) - 1 if len(ins) < 2 or ins[1] is None else \
            _index(_position(ins[1], "position"), len(seq), "position")
        return SequenceValue(seq.elements[:at] + seq.elements[at + 1:], seq.element_type)
    # Element j of the result: the old j before the position, the old j + 1 from it on.
    at = _RunTimePosition(cx, ins[1], len(seq), "position")
    old = seq.elements
    return SequenceValue(tuple(at.choose(nn.GreaterOp, j, old[j], old[j + 1]) for j in range(len(old) - 1)),
                         seq.element_type)


@converter("ConcatFromSequence")
def _concat_from_sequence(cx, ins, attrs):
    seq = _sequence(ins[0], "the input")
    axis, new_axis = attrs["axis"], attrs.get("new_axis", 0)
    if not len(seq):
        fail("cannot concatenate an empty sequence (the result's shape is unknown)")
    if new_axis:
        return stack(cx, list(seq.elements), axis)  # numpy.stack; ``stack`` checks the axis
    rank = len(shape_of(seq.elements[0]))
    if any(len(shape_of(v)) != rank for v in seq.elements):
        fail(f"the elements have different ranks {sorted({len(shape_of(v)) for v in seq.elements})}")
    if not -rank <= axis < rank:
        fail(f"axis {axis} is out of range for rank {rank}")
    if all(is_const(v) for v in seq.elements):
        return np.concatenate([np.asarray(v) for v in seq.elements], axis=axis)
    values = cx.operands(*seq.elements)
    return values[0] if len(values) == 1 else cx.emit(nn.ConcatenateOp(values, axis=axis % rank))


@converter("SplitToSequence")
def _split_to_sequence(cx, ins, attrs):
    x = ins[0]
    dims = shape_of(x)
    axis = attrs.get("axis", 0)
    if not -len(dims) <= axis < len(dims):
        fail(f"axis {axis} is out of range for rank {len(dims)}")
    axis %= len(dims)
    size = dims[axis]
    given = len(ins) > 1 and ins[1] is not None
    split = np.asarray(1) if not given else ins[1]
    if run_time(split) and len(shape_of(split)) == 1 and shape_of(split)[0] != nn.DYN:
        # Sizes given at run time, as many as the split has: the elements' lengths on the
        # axis are run-time dims (``nn.dyn`` split, as Split takes them).
        x = cx.tensor(x)
        return SequenceValue(tuple(dyn(cx, "split", [x], {"split": split}, len(dims), x.type.element_type, "split",
                                       axis=axis, index=k) for k in range(shape_of(split)[0])), element_type(x))
    if run_time(split) or is_symbolic(split):
        fail("the split is computed at run time and is not 1-D of a static length: the sequence's length "
             "would be known only at run time (Partita resolves sequences at import)")
    if size == nn.DYN:
        fail(f"splitting axis {axis} of dynamic size into a sequence by constant sizes is not supported")
    split = np.asarray(split)
    if split.ndim > 1:
        fail(f"the split must be a scalar or 1-D, got shape {list(split.shape)}")
    if split.ndim == 0:  # chunks of that size, the last one the rest
        chunk = int(split)
        if chunk <= 0:
            fail(f"the split {chunk} must be positive")
        sizes = [chunk] * (size // chunk) + ([size % chunk] if size % chunk else [])
    else:
        sizes = [int(s) for s in split]
        if any(s < 0 for s in sizes) or sum(sizes) != size:
            fail(f"split sizes {sizes} do not add up to the size {size} of axis {axis}")
    squeeze = not given and not attrs.get("keepdims", 1)
    parts, offset = [], 0
    for s in sizes:
        if is_const(x):
            part = np.take(x, range(offset, offset + s), axis=axis)
            part = np.squeeze(part, axis) if squeeze else part
        else:
            piece = slice_axis(cx, x, axis, offset, offset + s)
            part = drop_axis(cx, piece, axis) if squeeze else piece
            # An element no one reads (erased, never taken) is dropped at the end of the import.
            cx.orphans += [piece.owner] + ([part.owner] if part is not piece else [])
        parts.append(part)
        offset += s
    return SequenceValue(tuple(parts), element_type(x))


@converter("SequenceMap")
def _sequence_map(cx, ins, attrs):
    body: onnx.GraphProto = attrs["body"]
    seq = _sequence(ins[0], "the input sequence")
    for k, v in enumerate(ins[1:], 1):
        if isinstance(v, SequenceValue) and len(v) != len(seq):
            fail(f"input #{k} is a sequence of {len(v)} tensors, the input sequence has {len(seq)}")
    per_element: list[list[Value]] = [[] for _ in body.output]
    for k in range(len(seq)):
        args = [v.elements[k] if isinstance(v, SequenceValue) else v for v in ins]
        outs = cx.run_subgraph(body, args, f"body (element {k})")
        for values, v in zip(per_element, outs):
            if isinstance(v, SequenceValue):
                fail(f"its body (element {k}) gives a sequence; its outputs must be tensors")
            values.append(v)
    return [SequenceValue(tuple(values), element_type(values[0]) if values else _body_element_type(out))
            for values, out in zip(per_element, body.output)]


def _body_element_type(out: onnx.ValueInfoProto) -> int:
    """The element type of a body output, as the graph declares it (an empty sequence's)."""
    code = out.type.tensor_type.elem_type if out.type.HasField("tensor_type") else 0
    if not code:
        fail(f"the body output '{out.name}' declares no tensor element type (the empty sequence's)")
    return code


@converter("OptionalGetElement")
def _optional_get_element(cx, ins, attrs):
    # Optional values are not imported: a plain tensor or sequence is its own element.
    return ins[0]
