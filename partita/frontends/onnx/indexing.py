"""ONNX converters: gather/scatter, slice, split, expand, tile, trilu, range, one-hot,
ReverseSequence and the shape-producing ops (ConstantOfShape, Size, EyeLike).

Sizes that ONNX computes at run time from ``Shape`` (``Range(0, Shape(x)[1])``,
``Expand(m, Shape(x))``) reach these converters as ``SymDim``s; each becomes a shape
reference to the tensor dim it was read from (``Importer.dim_source``), so the ops stay
data-independent (see ``partita.dialects.nn.indexing``).
"""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper
from xdsl.ir import Operation, SSAValue

from partita.dialects import nn
from partita.frontends.onnx.dyn import dyn, known_entries, run_time, static_length
from partita.frontends.onnx.elementwise import _text
from partita.frontends.onnx.folding import FOLD_LIMIT_BYTES, _sym_slice
from partita.frontends.onnx.importer import Importer
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.values import (
    ONNX_DTYPES,
    SymDim,
    Unsupported,
    Value,
    const_ints,
    const_scalar,
    fail,
    is_const,
    is_symbolic,
    settle,
    shape_of,
    sym_arith,
    sym_linear,
)

INT64_MAX = 2**63 - 1


def _present(ins: list[Value], k: int) -> bool:
    return len(ins) > k and ins[k] is not None


def _indices(cx: Importer, v: Value) -> SSAValue:
    """An index operand: constants become i64 tensors."""
    if is_const(v):
        if is_symbolic(v):
            fail("indices depending on a dynamic dimension are not supported")
        return cx.tensor(np.asarray(v, dtype=np.int64))
    if str(v.type.element_type) not in ("i32", "i64"):
        fail(f"indices must be int32 or int64, got {v.type.element_type}")
    return v


def _shape_entries(v: Value, what: str) -> list[object]:
    """A shape input: ints and ``SymDim``s."""
    if not is_const(v):
        fail(f"{what} must be a constant or a shape computation the importer can fold")
    return [d if isinstance(d, SymDim) else int(d) for d in np.asarray(v).reshape(-1)]


@converter("Gather")
def _gather(cx, ins, attrs):
    data = cx.tensor(ins[0])
    axis = attrs.get("axis", 0)
    return cx.emit(nn.TakeOp(data, _indices(cx, ins[1]), axis))


@converter("GatherElements")
def _gather_elements(cx, ins, attrs):
    return cx.emit(nn.GatherElementsOp(cx.tensor(ins[0]), _indices(cx, ins[1]),
                                       attrs.get("axis", 0)))


@converter("GatherND")
def _gather_nd(cx, ins, attrs):
    return cx.emit(nn.GatherNDOp(cx.tensor(ins[0]), _indices(cx, ins[1]),
                                 attrs.get("batch_dims", 0)))


@converter("ReverseSequence")
def _reverse_sequence(cx, ins, attrs):
    x = cx.tensor(ins[0])
    rank = len(shape_of(x))
    if rank < 2:
        fail(f"ReverseSequence needs an input of rank 2 or more, got rank {rank}")
    axes = [attrs.get("batch_axis", 1), attrs.get("time_axis", 0)]
    batch_axis, time_axis = (a + rank if a < 0 else a for a in axes)
    return cx.emit(nn.ReverseSequenceOp(x, _indices(cx, ins[1]), batch_axis=batch_axis, time_axis=time_axis))


@converter("TensorScatter")
def _tensor_scatter(cx, ins, attrs):
    """A KV cache's update (opset 24); absent write indices write every entry from 0."""
    cache, update = cx.tensor(ins[0]), cx.tensor(ins[1])
    mode = _text(attrs.get("mode", "linear"))
    if mode not in ("linear", "circular"):
        fail(f"TensorScatter mode '{mode}' is not one of linear, circular")
    write = ins[2] if len(ins) > 2 and ins[2] is not None else None
    if write is None:
        batch = shape_of(cache)[0]
        if isinstance(batch, SymDim) or batch < 0:
            fail("TensorScatter without write_indices needs a static batch dim")
        write = np.zeros(int(batch), np.int64)
    axis = attrs.get("axis", -2)
    if shape_of(update)[axis % len(shape_of(cache))] == 0:
        return cache  # no rows to write
    return cx.emit(nn.TensorScatterOp(cache, update, _indices(cx, write), axis=axis,
                                      circular=mode == "circular"))


def _reduction(attrs) -> str:
    r = attrs.get("reduction", b"none")
    return r.decode() if isinstance(r, bytes) else r


@converter("ScatterND")
def _scatter_nd(cx, ins, attrs):
    data = cx.tensor(ins[0])
    return cx.emit(nn.ScatterNDOp(data, _indices(cx, ins[1]), cx.tensor(ins[2], like=data),
                                  _reduction(attrs)))


@converter("ScatterElements", "Scatter")
def _scatter_elements(cx, ins, attrs):
    data = cx.tensor(ins[0])
    return cx.emit(nn.ScatterElementsOp(data, _indices(cx, ins[1]),
                                        cx.tensor(ins[2], like=data), attrs.get("axis", 0),
                                        _reduction(attrs)))


@converter("Slice", symbolic=True)
def _slice(cx, ins, attrs):
    if is_symbolic(ins[0]):  # slicing a shape vector: fold over its SymDims

        return settle(_sym_slice(cx, ins, attrs))
    x = cx.tensor(ins[0])
    rank = len(shape_of(x))
    # Bounds computed at run time, or starts from run-time dims (an RPN's per-level offsets
    # into its concatenated anchors: sums of H * W * A), sized once the plan reads them.
    if cx.opset >= 10 and (any(run_time(v) for v in ins[1:]) or any(
            is_symbolic(v) for v in (ins[1:2] + ins[3:]))):
        params = {k: cx.tensor(v) if is_symbolic(v) else v
                  for k, v in zip(("starts", "ends", "axes", "steps"), ins[1:])}
        return dyn(cx, "slice", [x], params, rank, x.type.element_type, "the slice bounds")
    if cx.opset < 10:
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes = list(attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = const_ints(ins[1], "starts")
        ends = _shape_entries(ins[2], "ends")
        axes = const_ints(ins[3], "axes") if _present(ins, 3) else list(range(len(starts)))
        steps = const_ints(ins[4], "steps") if _present(ins, 4) else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        fail("starts, ends, axes and steps must have the same length")
    begin, end, strides = [0] * rank, [INT64_MAX] * rank, [1] * rank
    refs = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        if not -rank <= a < rank:
            fail(f"axis {a} out of range for rank {rank}")
        a %= rank
        if st == 0:
            fail("slice steps must be non-zero")
        begin[a], strides[a] = s, st
        if isinstance(e, SymDim):
            if (s, st) != (0, 1):
                fail("a slice ending at a dynamic size must start at 0 with step 1")
            ref, axis = cx.dim_source(e, "the slice end")
            refs.append((ref, axis, a))
            end[a] = INT64_MAX
        else:
            end[a] = e
    clamped = []
    for a, d in enumerate(shape_of(x)):
        if d != nn.DYN or any(t == a for _, _, t in refs):
            continue
        form = nn.dynamic_slice(begin[a], end[a], strides[a])
        if form is None:
            fail(f"slicing dynamic dimension {a} with start {begin[a]}, end {end[a]}, step "
                 f"{strides[a]} is not supported (supported: [b:] and [b:-j] with b >= 0, [-k:], "
                 "[-k:-j], [b:e] with 0 <= b <= e, or up to a dynamic size; step 1)")
        if form == "head" and data_sized(x):
            clamped.append(a)  # the first e of however many a run kept: no size to assume
    if not refs and all((b, e, s) == (0, INT64_MAX, 1) for b, e, s in zip(begin, end, strides)):
        return x
    return cx.emit(nn.StridedSliceOp(x, begin, end, strides, refs, clamped=clamped))


def data_sized(v: SSAValue) -> bool:
    """Whether ``v``'s dynamic dims may have any size a run computes: it is computed from
    a data-dependent op's result (the boxes a NonMaxSuppression kept, a NonZero's hits,
    the branch a run-time If took, a host loop's carried values) or an ``nn.dyn``'s, not
    only from the graph inputs' dims."""
    seen: set[Operation] = set()
    stack = [v.owner] if isinstance(v.owner, Operation) else []
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        if getattr(op, "DATA_DEPENDENT", False) or isinstance(op, nn.DynOp):
            return True
        stack.extend(o.owner for o in op.operands if isinstance(o.owner, Operation) and o.owner not in seen)
    return False


@converter("Split")
def _split(cx, ins, attrs):
    x = cx.tensor(ins[0])
    dims = shape_of(x)
    axis = attrs.get("axis", 0)
    if not -len(dims) <= axis < len(dims):
        fail(f"axis {axis} out of range for rank {len(dims)}")
    axis %= len(dims)
    given = ins[1] if cx.opset >= 13 and _present(ins, 1) else None
    if given is not None and (run_time(given) or is_symbolic(given) or dims[axis] == nn.DYN):
        # sizes the plan reads: computed, or run-time dims (an RPN's anchors per level)
        split = cx.tensor(given) if is_symbolic(given) else given
        return [dyn(cx, "split", [x], {"split": split}, len(dims), x.type.element_type, "split",
                    axis=axis, index=k) for k in range(len(cx.node.output))]
    if dims[axis] == nn.DYN:
        fail("splitting a dynamic dimension into equal parts is not supported (give the split sizes)")
    size = dims[axis]
    if cx.opset < 13 and "split" in attrs:
        split = list(attrs["split"])
    elif cx.opset >= 13 and _present(ins, 1):
        split = const_ints(ins[1], "split")
    else:
        count = attrs.get("num_outputs", len(cx.node.output))
        chunk = -(-size // count)
        split = [min(chunk, size - k * chunk) for k in range(count)]
    if sum(split) != size or any(s < 0 for s in split):
        fail(f"split sizes {split} do not add up to the size {size} of axis {axis}")
    outs, offset = [], 0
    for s in split:
        begin, end, strides = [0] * len(dims), [INT64_MAX] * len(dims), [1] * len(dims)
        begin[axis], end[axis] = offset, offset + s
        outs.append(cx.emit(nn.StridedSliceOp(x, begin, end, strides)))
        offset += s
    return outs


def broadcast_to(cx: Importer, x: SSAValue, target: list[object], what: str) -> SSAValue:
    """``x`` broadcast to ``target`` (ints and ``SymDim``s; NumPy rules both ways)."""
    labels = cx.labels(x)
    rank = max(len(labels), len(target))
    labels = [1] * (rank - len(labels)) + labels
    target = [1] * (rank - len(target)) + target
    shape, refs = [], []
    for k, (a, b) in enumerate(zip(labels, target)):
        if isinstance(b, SymDim):
            if a == b or isinstance(a, SymDim):
                shape.append(nn.DYN)  # the input's own dim (equal, or it must be)
            elif a == 1:
                ref, axis = cx.dim_source(b, what)
                refs.append((ref, axis, k))
                shape.append(nn.DYN)
            else:
                shape.append(a)
        elif b == 1:
            shape.append(nn.DYN if isinstance(a, SymDim) else a)
        elif isinstance(a, SymDim) or a in (1, b):
            shape.append(b)
        else:
            fail(f"{what}: cannot broadcast {labels} to {target}")
    if shape == list(shape_of(x)) and not refs:
        return x
    result = cx.emit(nn.BroadcastToOp(x, shape, refs))
    # The result's dims are the target's where it names them: shapes read from it later
    # resolve to the tensors those dims came from, not to this op.
    cx.sym_labels[result] = [b if b != 1 else a for a, b in zip(labels, target)]
    return result


def _expanded_dims(shape: list[int], target: list[int | None] | None, rank: int) -> list[int]:
    """The dims an Expand of ``shape`` to a run-time ``target`` (its entries the graph
    fixes, ``None`` for the others; ``None``: none known) has whatever the run gives: a
    fixed entry other than 1, or the input's own dim where the entry is 1, unknown, or the
    input's dim is not 1."""
    shape = [1] * (rank - len(shape)) + shape
    target = [None] * rank if target is None else [1] * (rank - len(target)) + target
    dims = []
    for a, b in zip(shape, target):
        if b is not None and b != 1:
            if a not in (1, b, nn.DYN):
                fail(f"cannot expand a dim of {a} to {b}")
            dims.append(b)
        elif b == 1 or a not in (1, nn.DYN):
            dims.append(a)
        else:
            dims.append(nn.DYN)
    return dims


@converter("Expand", symbolic=True)
def _expand(cx, ins, attrs):
    if run_time(ins[1]) and not is_symbolic(ins[0]):
        x = cx.tensor(ins[0])
        rank = max(len(shape_of(x)), static_length(ins[1], "the shape"))
        return dyn(cx, "expand", [x], {"shape": ins[1]}, rank, x.type.element_type, "the shape",
                   known=_expanded_dims(list(shape_of(x)), known_entries(ins[1]), rank))
    target = _shape_entries(ins[1], "the shape")
    return broadcast_to(cx, cx.tensor(ins[0]), target, "the expanded shape")


@converter("ConstantOfShape", symbolic=True)
def _constant_of_shape(cx, ins, attrs):
    value = numpy_helper.to_array(attrs["value"]).reshape(-1) if "value" in attrs else \
        np.zeros(1, np.float32)
    if run_time(ins[0]) and not is_symbolic(ins[0]):  # a shape given at run time: expand the value
        scalar = cx.emit(nn.ConstantOp(value.reshape(())))
        rank = static_length(ins[0], "the shape")
        return dyn(cx, "expand", [scalar], {"shape": ins[0]}, rank, scalar.type.element_type, "the shape",
                   known=[nn.DYN if d is None else d for d in known_entries(ins[0]) or [None] * rank])
    target = _shape_entries(ins[0], "the shape")
    if not any(isinstance(d, SymDim) for d in target):
        return np.broadcast_to(value[0], target)  # stays a splat, however large
    scalar = cx.tensor(value.reshape([1] * len(target)))
    return broadcast_to(cx, scalar, target, "the shape")


@converter("Tile")
def _tile(cx, ins, attrs):
    x = cx.tensor(ins[0])
    if run_time(ins[1]):
        return dyn(cx, "tile", [x], {"repeats": ins[1]}, len(shape_of(x)), x.type.element_type, "repeats")
    repeats = const_ints(ins[1], "repeats")
    if len(repeats) != len(shape_of(x)):
        fail(f"repeats must have {len(shape_of(x))} values")
    return cx.emit(nn.TileOp(x, repeats))


@converter("Trilu")
def _trilu(cx, ins, attrs):
    upper = bool(attrs.get("upper", 1))
    if _present(ins, 1) and not is_const(ins[1]):  # a run-time diagonal
        return cx.emit(nn.TriluOp(cx.tensor(ins[0]), 0, upper, diagonal=_indices(cx, ins[1])))
    k = int(const_scalar(ins[1], "k")) if _present(ins, 1) else 0
    x = cx.tensor(ins[0])
    # Any k past the matrix's extent means the same as the extent; clamping keeps k a
    # value every backend's integer type holds (-2^63 is no C literal).
    rows, cols = list(shape_of(x))[-2:] if len(shape_of(x)) >= 2 else (nn.DYN, nn.DYN)
    low = -rows if rows != nn.DYN else -(2**62)
    high = cols if cols != nn.DYN else 2**62
    return cx.emit(nn.TriluOp(x, min(max(k, low), high), upper))


@converter("Range", symbolic=True)
def _range(cx, ins, attrs):
    if any(run_time(v) for v in ins) and not any(is_symbolic(v) for v in ins):
        element = next(v.type.element_type for v in ins if not is_const(v))
        return dyn(cx, "range", [], dict(zip(("start", "limit", "delta"), ins)), 1, element,
                   "start, limit and delta")
    if any(not is_const(v) for v in ins):
        fail("start, limit and delta must be constants or shape computations")
    start, limit, delta = (np.asarray(v).reshape(-1)[0] for v in ins)
    dtype = next((np.asarray(v).dtype for v in ins if not is_symbolic(v)), np.dtype(np.int64))
    if isinstance(delta, SymDim):
        fail("the delta of a Range must be a constant")
    element = nn.element_type_of(dtype)
    if isinstance(start, SymDim) or isinstance(limit, SymDim):
        return _dynamic_range(cx, start, limit, delta, element)
    if delta == 0:
        fail("delta must be non-zero")
    size = max(int(np.ceil((float(limit) - float(start)) / float(delta))), 0)
    if size * dtype.itemsize > FOLD_LIMIT_BYTES:  # a run-time op, not gigabytes at import
        return cx.emit(nn.ArangeOp(float(start), float(delta), size, element))
    return np.asarray(start + delta * np.arange(size), dtype=dtype) if not \
        np.issubdtype(dtype, np.integer) else \
        np.asarray(int(start) + int(delta) * np.arange(size, dtype=np.int64), dtype=dtype)


def _dynamic_range(cx, start, limit, delta, element):
    """A Range whose bounds are shape computations (a decoder step's positions
    ``Range(past, past + seq)``): its size ``limit - start`` is static when the dims cancel
    (``past + 1 - past``), else the size of a tensor dim equal to it, and a dynamic start is
    added to ``arange(0, size)`` at run time."""
    if int(delta) != 1:
        fail("a Range with dynamic bounds must have delta 1")
    size = sym_arith("sub", limit, start)
    linear, constant = sym_linear(size)
    if not linear:  # the dims cancel: a static size
        result = cx.emit(nn.ArangeOp(0, 1, max(constant, 0), element))
    else:
        if not constant and len(linear) == 1 and next(iter(linear))[1] == 1:
            size = next(iter(linear))[0]  # (past + seq) - past is seq, the dim x has
        result = cx.emit(nn.ArangeOp(0, 1, nn.DYN, element, _size_refs(cx, size)))
        cx.sym_labels[result] = [size]
    if isinstance(start, SymDim) or int(start) != 0:
        labels = cx.sym_labels.get(result)
        result = cx.emit(nn.AddOp(result, cx.materialize(np.asarray(start, dtype=object), like=result)))
        if labels is not None:
            cx.sym_labels[result] = labels
    return result


SIZE_TERM_LIMIT = 1 << 16
"""The largest constant term of a summed size (``past + 1``) that a small constant tensor's
dim stands for (its bytes are that many; it is read for its shape alone)."""


def _size_refs(cx, size: SymDim) -> list[tuple[SSAValue, int, int]]:
    """Shape references of a 1-D result whose length is ``size``: the tensor dim equal to
    it, or, where no tensor has that length yet, one reference per dim of the sum, which
    add up (``nn.RefDimsMixin``): a decoder's ``arange(past + seq)`` for its mask, built
    before any layer concatenates its cache. A constant term (``past + 1``: a step of one
    token, the ids' length static) is the dim of a constant of that length."""
    try:
        ref, axis = cx.dim_source(size, "the range size")
        return [(ref, axis, 0)]
    except Unsupported:
        linear, constant = sym_linear(size)
        if not 0 <= constant <= SIZE_TERM_LIMIT or any(scale != 1 for _, scale in linear) \
                or len(linear) + bool(constant) < 2:
            raise
    refs = [(*cx.dim_source(term, "the range size"), 0) for term, _ in sorted(linear, key=lambda t: repr(t[0]))]
    if constant:
        refs.append((cx.emit(nn.ConstantOp(np.zeros(constant, np.int8))), 0, 0))
    return refs


@converter("Size")
def _size(cx, ins, attrs):
    v = ins[0]
    dims = shape_of(v)
    if nn.DYN in dims:
        fail("Size of a tensor with dynamic dimensions is not supported")
    return np.asarray(int(np.prod(dims)), dtype=np.int64)


@converter("EyeLike")
def _eye_like(cx, ins, attrs):
    v = ins[0]
    dims = shape_of(v)
    if len(dims) != 2 or nn.DYN in dims:
        fail("EyeLike needs a rank-2 input with static dimensions")
    dtype = ONNX_DTYPES.get(attrs["dtype"]) if "dtype" in attrs else (
        np.asarray(v).dtype if is_const(v) else nn.numpy_dtype(v.type.element_type))
    if dtype is None:
        fail("unsupported dtype")
    return np.eye(dims[0], dims[1], k=attrs.get("k", 0), dtype=dtype)


@converter("OneHot")
def _one_hot(cx, ins, attrs):
    if run_time(ins[1]) or run_time(ins[2]):
        if not is_const(ins[2]) and len(shape_of(ins[2])) != 1:
            fail("values must be [off_value, on_value]")
        indices = cx.tensor(ins[0])
        element = ins[2].type.element_type if not is_const(ins[2]) else nn.element_type_of(np.asarray(ins[2]).dtype)
        return dyn(cx, "one_hot", [indices], {"depth": ins[1], "values": ins[2]}, len(shape_of(indices)) + 1,
                   element, "depth", axis=attrs.get("axis", -1))
    depth = const_scalar(ins[1], "depth")
    if not is_const(ins[2]) or is_symbolic(ins[2]) or np.asarray(ins[2]).size != 2:
        fail("values must be a constant [off_value, on_value]")
    values = np.asarray(ins[2])
    indices = ins[0]
    if is_const(indices):
        indices = cx.tensor(np.asarray(indices).astype(np.int64))
    return cx.emit(nn.OneHotOp(indices, int(depth), attrs.get("axis", -1), float(values[1]),
                               float(values[0]), nn.element_type_of(values.dtype)))
