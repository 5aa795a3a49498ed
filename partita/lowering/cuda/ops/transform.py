"""CUDA lowering rules of the ``nn.transform`` family ops beyond the built-in emitter.

``nn.pad`` in every mode: an output index maps to an input index per padded axis
(``constant`` clamps the index, so the load stays in bounds, and selects the pad value
outside the input; ``edge`` clamps; ``reflect`` mirrors without repeating the edge;
``wrap`` is periodic). ``nn.shape_of`` selects among the input's kernel dims (ints or C
expressions of the run-time sizes); it never reads the input's elements.
"""

from __future__ import annotations

from partita.dialects import nn
from partita.lowering.cuda.cexpr import _paren
from partita.lowering.cuda.ops.indexing import literal
from partita.lowering.cuda.rules import injective


def _pad_dims(emitter, op: nn.PadOp) -> list:
    return [d if (b, a) == (0, 0) else f"{_paren(d)} + {b + a}"
            for d, b, a in zip(emitter.dims[op.input], op.pad_before, op.pad_after)]


@injective(nn.PadOp, dims=_pad_dims)
def _pad(emitter, op: nn.PadOp, index: list[str]) -> str:
    T = emitter.index_type
    inner, inside = list(index), []
    for axis, (b, a) in enumerate(zip(op.pad_before, op.pad_after)):
        if (b, a) == (0, 0):
            continue
        d = _paren(emitter.dims[op.input][axis])
        s, c = emitter.var("s"), emitter.var("c")
        emitter.lines.append(f"    const {T} {s} = {index[axis]}{f' - {b}' if b else ''};")
        if op.mode == "reflect":
            mapped = f"{s} < 0 ? -{s} : ({s} >= {d} ? 2 * ({d} - 1) - {s} : {s})"
        elif op.mode == "wrap":
            mapped = f"(({s} % {d}) + {d}) % {d}"
        else:  # constant and edge: clamp (constant then selects the pad value)
            mapped = f"{s} < 0 ? 0 : ({s} < {d} ? {s} : {d} - 1)"
            if op.mode == "constant":
                inside.append(f"{s} == {c}")
        emitter.lines.append(f"    const {T} {c} = {mapped};")
        inner[axis] = c
    x = emitter.value(op.input, inner)
    if not inside:
        return x
    return f"({' && '.join(inside)}) ? {x} : {literal(op.pad_value, emitter.ctype(op.result))}"


@injective(nn.ShapeOfOp)
def _shape_of(emitter, op: nn.ShapeOfOp, index: list[str]) -> str:
    dims = emitter.dims[op.input]
    if not dims:  # a scalar's shape has no elements: nothing is ever stored
        return "0LL"
    expr = f"(long long){_paren(dims[-1])}"
    for axis in range(len(dims) - 2, -1, -1):
        expr = f"{index[0]} == {axis} ? (long long){_paren(dims[axis])} : ({expr})"
    return expr
