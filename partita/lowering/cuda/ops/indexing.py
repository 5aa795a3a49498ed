"""CUDA lowering rules of the ``nn.indexing`` family: one thread per output element.

Gathers read the index value first (``emitter.value(indices, ...)``), wrap a negative one
by the axis size and clamp it into the axis (an out-of-range index is an error the
reference reports; the kernel must still not read out of bounds), then read the data.
Scatters anchor a ``window`` kernel: each output element starts from ``data`` and walks
the updates that may land on it, in order (so the last write wins, as in ONNX), combining
them with the reduction. Result dims, when dynamic, come from ``op.result_dims`` (the
same rule shape functions use), with C expressions for the arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects.builtin import DYNAMIC_INDEX

from partita.dialects import nn
from partita.lowering.cuda.cexpr import _add, _c_float, _mul, _paren, _product
from partita.lowering.cuda.rules import InPlace, injective, window


class CArith:
    """Dim arithmetic on kernel dims (ints or C expressions)."""

    mul = staticmethod(_mul)
    add = staticmethod(_add)

    @staticmethod
    def floordiv(a, b):
        return a // b if isinstance(a, int) and isinstance(b, int) else \
            f"{_paren(a)} / {_paren(b)}"

    @staticmethod
    def select_ge(a, b, then, other):
        if isinstance(a, int) and isinstance(b, int):
            return then if a >= b else other
        return f"({_paren(a)} >= {_paren(b)} ? {_paren(then)} : {_paren(other)})"

    def window(self, size, kernel, stride, lo, hi, dilation, ceil_mode, op):
        """A sliding window's output extent (C division truncates: the span is at least 0,
        which the bound shapes' check makes sure of)."""
        return nn.window_extent(self, size, kernel, stride, lo, hi, dilation, ceil_mode)


def derived_dims(emitter, op) -> list:
    """``dims=`` of the rules: the op's own result-dims rule over the kernel's dims."""
    return op.result_dims(lambda v: emitter.dims[v], CArith())


def literal(value: float, ctype: str) -> str:
    """``value`` as a C literal of the compute type ``ctype``."""
    if ctype == "bool":
        return "true" if value else "false"
    if ctype in ("float",):
        return _c_float(value)
    if ctype == "double":
        return repr(float(value)) if math.isfinite(value) else f"(double){_c_float(value)}"
    return f"({ctype}){int(value)}"


def wrapped_index(emitter, raw: str, size, clamp: bool = True) -> str:
    """A C variable: index ``raw`` (any integer or float type) with a negative one
    counted from the end of an axis of ``size``, clamped into ``[0, size)``."""
    T = emitter.index_type
    k = emitter.var("k")
    emitter.lines.append(f"    {T} {k} = ({T}){raw};")
    emitter.lines.append(f"    if ({k} < 0) {k} += {_paren(size)};")
    if clamp:
        emitter.lines.append(f"    {k} = {k} < 0 ? 0 : ({k} < {_paren(size)} ? {k} : "
                             f"{_paren(size)} - 1);")
    return k


def _dynamic_ok(op) -> bool:
    return True


def take_index(emitter, op: nn.TakeOp, index: list[str]) -> list[str]:
    """The index into ``op``'s data of its element at ``index``: the gathered axis is the
    index operand read there (wrapped and clamped as ``_take`` does), so a kernel reads a
    table gathered at a run-time position in place (a decode step's rotary cos / sin rows)."""
    data = emitter.dims[op.data]
    axis = op.axis % len(data)
    rank_i = len(emitter.dims[op.indices])
    k = emitter.load(op.indices, index[axis:axis + rank_i])
    at = f"({emitter.index_type})partita_gather_index((long long){k}, {_paren(data[axis])})"
    return [*index[:axis], at, *index[axis + rank_i:]]


@injective(nn.TakeOp, dims=derived_dims, view=take_index)
def _take(emitter, op: nn.TakeOp, index: list[str]) -> str:
    data = emitter.dims[op.data]
    axis = op.axis % len(data)
    rank_i = len(emitter.dims[op.indices])
    k = emitter.value(op.indices, index[axis:axis + rank_i])
    kk = wrapped_index(emitter, k, data[axis])
    return emitter.value(op.data, [*index[:axis], kk, *index[axis + rank_i:]])


@injective(nn.GatherElementsOp, dims=derived_dims)
def _gather_elements(emitter, op: nn.GatherElementsOp, index: list[str]) -> str:
    data = emitter.dims[op.data]
    axis = op.axis % len(data)
    kk = wrapped_index(emitter, emitter.value(op.indices, index), data[axis])
    return emitter.value(op.data, [*index[:axis], kk, *index[axis + 1:]])


@injective(nn.GatherNDOp, dims=derived_dims)
def _gather_nd(emitter, op: nn.GatherNDOp, index: list[str]) -> str:
    data, ind = emitter.dims[op.data], emitter.dims[op.indices]
    b, depth = op.batch_dims, tuple(op.indices.type.get_shape())[-1]
    lead = index[:len(ind) - 1]
    at = list(index[:b])
    for j in range(depth):
        k = emitter.value(op.indices, [*lead, str(j)])
        at.append(wrapped_index(emitter, k, data[b + j]))
    return emitter.value(op.data, [*at, *index[len(ind) - 1:]])


def strided_slice_index(emitter, op: nn.StridedSliceOp, index: list[str]) -> list[str]:
    """The index into ``op``'s input of its element at ``index`` (pure index arithmetic)."""
    shape = tuple(op.input.type.get_shape())
    inner = []
    for axis, (d, b, e, s) in enumerate(zip(shape, op.begin, op.end, op.strides)):
        if axis in op.targets:
            inner.append(index[axis])  # [0, ref dim)
            continue
        if d == DYNAMIC_INDEX:  # a form of nn.dynamic_slice: no clamping
            dim = emitter.dims[op.input][axis]
            start = b if b >= 0 else f"{_paren(dim)} - {-b}"
            at = index[axis] if s == 1 else _paren(f"{_paren(index[axis])} * {s}")  # s > 1: a [b::s] tail
            inner.append(_paren(_add(start, at)) if start != 0 else at)
            continue
        start = range(d)[slice(b, e, s)].start if len(range(d)[slice(b, e, s)]) else 0
        step = index[axis] if s == 1 else f"{index[axis]} * {s}" if s > 0 else \
            f"{index[axis]} * ({s})"
        # Parenthesized: the emitter multiplies index expressions by strides.
        inner.append(_paren(step if start == 0 else f"{start} + {_paren(step)}"))
    return inner


@injective(nn.StridedSliceOp, dims=derived_dims, view=strided_slice_index)
def _strided_slice(emitter, op: nn.StridedSliceOp, index: list[str]) -> str:
    return emitter.value(op.input, strided_slice_index(emitter, op, index))


def broadcast_to_index(emitter, op: nn.BroadcastToOp, index: list[str]) -> list[str]:
    """The index into ``op``'s input of its element at ``index`` (a broadcast axis reads 0)."""
    return emitter.broadcast_index(op.input, op.result, index)


@injective(nn.BroadcastToOp, dims=derived_dims, view=broadcast_to_index)
def _broadcast_to(emitter, op: nn.BroadcastToOp, index: list[str]) -> str:
    return emitter.value(op.input, broadcast_to_index(emitter, op, index))


@injective(nn.TileOp, dims=derived_dims)
def _tile(emitter, op: nn.TileOp, index: list[str]) -> str:
    dims = emitter.dims[op.input]
    inner = [ix if r == 1 else f"({_paren(ix)} % {_paren(d)})"
             for ix, d, r in zip(index, dims, op.repeats)]
    return emitter.value(op.input, inner)


@injective(nn.TriluOp, dims=derived_dims)
def _trilu(emitter, op: nn.TriluOp, index: list[str]) -> str:
    x = emitter.value(op.input, index)
    k = op.k if op.diagonal is None else \
        emitter.value(op.diagonal, ["0"] * len(op.diagonal.type.get_shape()))
    i, j = index[-2], index[-1]
    diff = f"{j} - {i}" if i != "0" else j
    cond = f"{_paren(diff)} >= {k}" if op.upper else f"{_paren(diff)} <= {k}"
    return f"({cond}) ? {x} : {literal(0, emitter.ctype(op.result))}"


@injective(nn.ArangeOp, dims=derived_dims)
def _arange(emitter, op: nn.ArangeOp, index: list[str]) -> str:
    ctype = emitter.ctype(op.result)
    if ctype in ("float", "double"):
        return f"({ctype})({float(op.start)!r} + {float(op.delta)!r} * (double){index[0]})"
    return f"({ctype})({int(op.start)}LL + {int(op.delta)}LL * (long long){index[0]})"


@injective(nn.OneHotOp, dims=derived_dims)
def _one_hot(emitter, op: nn.OneHotOp, index: list[str]) -> str:
    axis = op.axis % len(index)
    k = emitter.value(op.indices, index[:axis] + index[axis + 1:])
    kk = wrapped_index(emitter, k, op.depth, clamp=False)
    ctype = emitter.ctype(op.result)
    return f"({kk} == {index[axis]}) ? {literal(op.on_value, ctype)} : " \
           f"{literal(op.off_value, ctype)}"


@injective(nn.ReverseSequenceOp, dims=derived_dims)
def _reverse_sequence(emitter, op: nn.ReverseSequenceOp, index: list[str]) -> str:
    """The time index reflected inside the entry's length (clamped into ``[0, T]``: a
    length outside is an error the reference reports; the kernel must not read out of
    bounds)."""
    T = emitter.index_type
    steps = emitter.dims[op.input][op.time_axis]
    t = index[op.time_axis]
    length = emitter.var("len")
    emitter.lines += [f"    {T} {length} = ({T}){emitter.value(op.sequence_lens, [index[op.batch_axis]])};",
                      f"    {length} = {length} < 0 ? 0 : ({length} > {_paren(steps)} ? {_paren(steps)} : {length});"]
    source = emitter.var("t")
    emitter.lines.append(f"    const {T} {source} = {t} < {length} ? {length} - 1 - {t} : {t};")
    at = list(index)
    at[op.time_axis] = source
    return emitter.value(op.input, at)


def _tensor_scatter_store(emitter, op: nn.TensorScatterOp, index: list[str]) -> tuple[list[str], str]:
    """In place (the result tied to the cache): the update's element at ``index`` lands at
    its row plus the entry's write position (modulo the extent when circular); a row past
    either end is dropped, as the reference drops it. The row is a 64-bit sum: a position
    past the int range is dropped too, never wrapped into the cache."""
    axis = op.axis % len(index)
    extent = _paren(emitter.dims[op.cache][axis])
    row = emitter.var("row")
    emitter.lines.append(f"    long long {row} = (long long){emitter.value(op.write_indices, [index[0]])} + {index[axis]};")
    if op.circular:
        emitter.lines.append(f"    {row} = (({row} % {extent}) + {extent}) % {extent};")
    at = list(index)
    at[axis] = row
    return at, f"{row} >= 0 && {row} < {extent}"


@injective(nn.TensorScatterOp, dims=derived_dims,
           in_place=InPlace(destination=lambda op: op.cache, source=lambda op: op.update, store=_tensor_scatter_store))
def _tensor_scatter(emitter, op: nn.TensorScatterOp, index: list[str]) -> str:
    """A gather form of the scatter (no atomics, one thread per cache element): the
    element's row along ``axis``, less the entry's write position (modulo the extent when
    circular), is the update row it takes when inside ``[0, S)``; else the cache's. The
    update is read only there (an update of zero rows is never read); one computed by a
    fused producer is computed at a row clamped into ``[0, S)``, which needs ``S >= 1``
    (the converter drops a static update of no rows)."""
    T = emitter.index_type
    axis = op.axis % len(index)
    extent = _paren(emitter.dims[op.cache][axis])
    rows = _paren(emitter.dims[op.update][axis])
    start = emitter.var("start")
    row = emitter.var("row")
    emitter.lines += [f"    const {T} {start} = ({T}){emitter.value(op.write_indices, [index[0]])};",
                      f"    {T} {row} = {index[axis]} - {start};"]
    if op.circular:  # a non-negative remainder: positions wrap around the ring
        emitter.lines.append(f"    {row} = (({row} % {extent}) + {extent}) % {extent};")
    take = f"({row} >= 0 && {row} < {rows})"
    cache = emitter.value(op.cache, index)
    at = list(index)
    if emitter.is_argument(op.update):  # read under the condition: never out of bounds
        at[axis] = row
        return f"{take} ? {emitter.load(op.update, at)} : {cache}"
    # A fused producer is computed before the select, at a row clamped into the update.
    at[axis] = emitter.var("src")
    emitter.lines.append(f"    const {T} {at[axis]} = {take} ? {row} : 0;")
    return f"{take} ? {emitter.value(op.update, at)} : {cache}"

def _combine(emitter, op, y: str, u: str) -> str:
    dtype = str(op.result.type.element_type)
    expr = {"none": u, "add": f"{y} + {u}", "mul": f"{y} * {u}",
            "max": f"({u} > {y} ? {u} : {y})", "min": f"({u} < {y} ? {u} : {y})"}[op.reduction]
    return emitter._round(expr, dtype)


def _decompose(linear: str, dims: Sequence) -> list[str]:
    """Row-major index of element ``linear`` of a tensor of ``dims``."""
    out, stride = [], 1
    for axis in range(len(dims) - 1, -1, -1):
        q = linear if stride == 1 else f"{linear} / {_paren(stride)}"
        out.append(q if axis == 0 else f"{_paren(q)} % {_paren(dims[axis])}")
        stride = _mul(stride, dims[axis])
    return out[::-1]


def _scatter_elements_store(emitter, op: nn.ScatterElementsOp, index: list[str]) -> tuple[list[str], str]:
    """In place (the result tied to ``data``; no reduction): the update's element at
    ``index`` lands at ``index`` with its ``axis`` entry replaced by the index there (a
    negative one counts from the end; outside ``data``, dropped: the reference refuses it).
    How ``index_copy`` exports a static KV cache. Duplicate indices have no defined order
    in ONNX, so parallel stores are as correct as any."""
    data = emitter.dims[op.data]
    axis = op.axis % len(data)
    k = emitter.var("k")  # 64-bit: an index past the int range is dropped, never wrapped in
    emitter.lines += [f"    long long {k} = (long long){emitter.load(op.indices, index)};",
                      f"    if ({k} < 0) {k} += {_paren(data[axis])};"]
    return [*index[:axis], k, *index[axis + 1:]], f"{k} >= 0 && {k} < {_paren(data[axis])}"


@window(nn.ScatterElementsOp, dims=derived_dims, reads_views=True,
        in_place=InPlace(destination=lambda op: op.data, source=lambda op: op.updates, store=_scatter_elements_store,
                         applies=lambda op: op.reduction == "none"))
def _scatter_elements(emitter, op: nn.ScatterElementsOp) -> list[str]:
    T, o = emitter.index_type, emitter.out_index
    ind, data = emitter.dims[op.indices], emitter.dims[op.data]
    axis = op.axis % len(data)
    at = [*o[:axis], "t", *o[axis + 1:]]
    inside = [f"{o[d]} < {_paren(ind[d])}" for d in range(len(ind)) if d != axis]
    k = f"({T}){emitter.load(op.indices, at)}"
    lines = [f"    {emitter.ctype(op.result)} y = {emitter.load(op.data, o)};",
             f"    if ({' && '.join(inside) or 'true'}) {{",
             f"      for ({T} t = 0; t < {ind[axis]}; ++t) {{",
             f"        {T} k = {k};",
             f"        if (k < 0) k += {_paren(data[axis])};",
             f"        if (k == {o[axis]}) y = {_combine(emitter, op, 'y', emitter.load(op.updates, at))};",
             "      }",
             "    }"]
    return lines


def _scatter_nd_store(emitter, op: nn.ScatterNDOp, index: list[str]) -> tuple[list[str], str]:
    """In place (the result tied to ``data``; no reduction): the update's element at
    ``index`` lands at its row's index tuple (a negative entry counts from the end), then
    the rest of ``index``; a tuple outside ``data`` is dropped (the reference refuses it).
    The indices hold no duplicate tuples (ONNX's rule), so no two threads store one place."""
    data = emitter.dims[op.data]
    depth = tuple(op.indices.type.get_shape())[-1]
    lead = index[: len(index) - (len(data) - depth)]
    at, inside = [], []
    for j in range(depth):  # 64-bit: an index past the int range is dropped, never wrapped in
        k = emitter.var("k")
        emitter.lines += [f"    long long {k} = (long long){emitter.load(op.indices, [*lead, str(j)])};",
                          f"    if ({k} < 0) {k} += {_paren(data[j])};"]
        at.append(k)
        inside.append(f"{k} >= 0 && {k} < {_paren(data[j])}")
    return [*at, *index[len(lead):]], " && ".join(inside) or "true"


@window(nn.ScatterNDOp, dims=derived_dims,
        in_place=InPlace(destination=lambda op: op.data, source=lambda op: op.updates, store=_scatter_nd_store,
                         applies=lambda op: op.reduction == "none"))
def _scatter_nd(emitter, op: nn.ScatterNDOp) -> list[str]:
    T, o = emitter.index_type, emitter.out_index
    ind, data = emitter.dims[op.indices], emitter.dims[op.data]
    depth = tuple(op.indices.type.get_shape())[-1]
    rows = _product(ind[:-1])
    lead = _decompose("t", ind[:-1])
    match = []
    lines = [f"    {emitter.ctype(op.result)} y = {emitter.load(op.data, o)};",
             f"    for ({T} t = 0; t < {rows}; ++t) {{",
             "      bool hit = true;"]
    for j in range(depth):
        lines += [f"      {{ {T} k = ({T}){emitter.load(op.indices, [*lead, str(j)])};",
                  f"        if (k < 0) k += {_paren(data[j])};",
                  f"        hit = hit && k == {o[j]}; }}"]
    update = emitter.load(op.updates, [*lead, *o[depth:]])
    lines += [f"      if (hit) y = {_combine(emitter, op, 'y', update)};", "    }"]
    del match
    return lines
