"""CUDA lowering rules of the ``nn.reduction`` family: reductions over any axes,
arg-reductions, top-k and cumulative sums.

Reductions and arg-reductions over the last axes of their input (LLaMA's RMSNorm mean
over the hidden size, global pooling over H, W of NCHW, softmax decompositions) are
``rowwise`` rules: one thread block per output element, whose threads fold strided,
coalesced slices of its contiguous row, then combine in a block tree reduction. Over other
axes, and top-k and cumulative sums, they are ``window`` rules: one thread per output
element loops over the input elements it reduces (correct first, simple; consecutive
threads read consecutive elements when the reduced axes are outer ones). Both schedules
run the same folds (``reduction``).

Accumulators are in the compute type (``float`` for f16 / bf16 / f32, ``double``,
``int`` / ``long long`` / unsigned for integers, wrapping like NumPy's on store); math that
leaves the integers (sqrt, log) runs in ``double`` for them.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.ir import Operation, SSAValue

from partita.dialects import nn
from partita.lowering.cuda.ops.indexing import derived_dims
from partita.lowering.cuda.rules import Fold, RowReduction, rowwise, window

__all__ = ["at", "fmath", "group_loop", "highest", "input_index", "lowest", "same_dims",
           "y_decl"]
"""Helpers the other families' window rules share."""

Dims = list  # of int | str (C expressions of the kernel's run-time dims)

_INT_LIMITS = {
    "i8": ("-128", "127"), "i16": ("-32768", "32767"),
    "i32": ("(-2147483647 - 1)", "2147483647"),
    "i64": ("(-9223372036854775807LL - 1)", "9223372036854775807LL"),
    "ui8": ("0u", "255u"), "ui16": ("0u", "65535u"), "ui32": ("0u", "4294967295u"),
    "ui64": ("0ull", "18446744073709551615ull"), "i1": ("false", "true"),
}
_NEG_INF, _POS_INF = "__int_as_float(0xff800000)", "__int_as_float(0x7f800000)"


def dtype(v: SSAValue) -> str:
    return str(v.type.element_type)


def is_float(v: SSAValue) -> bool:
    return dtype(v) in ("f16", "bf16", "f32", "f64")


def lowest(v: SSAValue) -> str:
    """The identity of ``max`` in ``v``'s compute type."""
    return _NEG_INF if is_float(v) else _INT_LIMITS[dtype(v)][0]


def highest(v: SSAValue) -> str:
    """The identity of ``min`` in ``v``'s compute type."""
    return _POS_INF if is_float(v) else _INT_LIMITS[dtype(v)][1]


def fmath(ctype: str, name: str) -> str:
    """The C math function ``name`` (sqrt, exp, log, fabs) for ``ctype``."""
    return f"{name}f" if ctype == "float" else name


def y_decl(emitter, op: Operation, expr: str) -> str:
    """``const <compute type> y = expr;`` rounded to the result's storage type."""
    result = op.results[0]
    return f"    const {emitter.ctype(result)} y = {emitter._round(expr, dtype(result))};"


def group_loop(emitter, dims: Sequence, axes: Sequence[int], fixed: Sequence[str],
               body: Sequence[str], indent: str = "    ") -> list[str]:
    """The lines of one flat loop over the ``axes`` of a tensor of ``dims``, the other
    axes ``fixed`` (one C expression per axis). ``body`` spells the index of axis ``k`` as
    the placeholder ``@k@`` (see ``at``), replaced by the loop's or the fixed expression."""
    T = emitter.index_type
    r = emitter.var("r")
    count = " * ".join(f"({d})" if isinstance(d, str) else str(d) for d in (dims[a] for a in axes)) or "1"
    lines = [f"{indent}for ({T} {r} = 0; {r} < {count}; ++{r}) {{"]
    index = list(fixed)
    stride = None
    for pos in range(len(axes) - 1, -1, -1):
        axis, d = axes[pos], dims[axes[pos]]
        name = f"{r}_{axis}"
        quotient = r if stride is None else f"{r} / ({stride})"
        expr = quotient if pos == 0 else f"({quotient}) % ({d})"
        lines.append(f"{indent}  const {T} {name} = {expr};")
        index[axis] = name
        stride = str(d) if stride is None else f"{stride} * ({d})"
    text = "\n".join(body)
    for axis in range(len(dims) - 1, -1, -1):
        text = text.replace(f"@{axis}@", index[axis])
    lines += [indent + "  " + line for line in text.split("\n")]
    lines.append(f"{indent}}}")
    return lines


def input_index(emitter, op: Operation, axes: Sequence[int], keepdims: bool) -> list[str]:
    """The input index of the output element (reduced axes ``"0"``, replaced by loops)."""
    rank = len(op.operands[0].type.get_shape())
    out = list(emitter.out_index)
    if keepdims:
        return [("0" if a in axes else out[a]) for a in range(rank)]
    kept = iter(out)
    return [("0" if a in axes else next(kept)) for a in range(rank)]


def at(emitter, arg: SSAValue, rank: int) -> str:
    """``arg`` loaded at the placeholder index ``@0@, @1@, ...``."""
    return emitter.load(arg, [f"@{a}@" for a in range(rank)])


def same_dims(emitter, op) -> Dims:
    return list(emitter.dims[op.operands[0]])


def _reduced_axes(op: nn.ReduceOp | nn.ArgReduceOp) -> list[int]:
    if isinstance(op, nn.ArgReduceOp):
        return [op.axis % len(op.input.type.get_shape())]
    return list(op.axes)


def _trailing(op: nn.ReduceOp | nn.ArgReduceOp) -> bool:
    """Whether ``op`` reduces the last axes of its input (at least one), so that each
    output element reduces one contiguous row."""
    rank = len(op.input.type.get_shape())
    axes = _reduced_axes(op)
    return bool(axes) and axes == list(range(rank - len(axes), rank))


def reduction(emitter, op: nn.ReduceOp | nn.ArgReduceOp) -> RowReduction:
    """The folds of ``op`` over its reduced axes and its value ``y`` from them, which the
    ``window`` and ``rowwise`` schedules both run."""
    x = op.input
    axes = _reduced_axes(op)
    dims = emitter.dims[x]
    A = emitter.ctype(x)
    real = A if is_float(x) else "double"  # sqrt / log of integer sums
    count = " * ".join(f"({dims[a]})" for a in axes) or "1"
    match op:
        case nn.ArgMaxOp() | nn.ArgMinOp():
            arg_max = isinstance(op, nn.ArgMaxOp)
            folds = [Fold("best", A, lowest(x) if arg_max else highest(x),
                          "argmax" if arg_max else "argmin", last=bool(op.select_last_index))]
            y = "best_at"
        case nn.ReduceMaxOp() | nn.ReduceMinOp():
            arg_max = isinstance(op, nn.ReduceMaxOp)
            folds = [Fold("acc", A, lowest(x) if arg_max else highest(x), "max" if arg_max else "min")]
            y = "acc"
        case nn.ReduceProdOp():
            folds, y = [Fold("acc", A, "1", "*")], "acc"
        case nn.ReduceLogSumExpOp():
            folds = [
                # Shift by a finite maximum only (all -inf, +inf or NaN: no shift).
                Fold("mx", real, _NEG_INF, "max", f"({real})v",
                     then=(f"const {real} shift = (mx - mx == 0) ? mx : 0;",)),
                Fold("acc", real, "0", "+", f"{fmath(real, 'exp')}(({real})v - shift)"),
            ]
            y = f"{fmath(real, 'log')}(acc) + shift"
        case nn.ReduceInvStdDevOp():
            folds = [Fold("mean", A, "0", "+", then=(f"mean /= ({A})({count});",)),
                     Fold("var", A, "0", "+", "(v - mean) * (v - mean)", then=(f"var /= ({A})({count});",))]
            y = f"({A})1 / {fmath(A, 'sqrt')}(var + ({A}){op.epsilon!r})"
        case _:
            term = {
                nn.ReduceSumOp: "v", nn.ReduceMeanOp: "v", nn.ReduceL1Op: "(v < 0 ? -v : v)",
                nn.ReduceL2Op: "v * v", nn.ReduceSumSquareOp: "v * v", nn.ReduceLogSumOp: "v",
            }[type(op)]
            folds = [Fold("acc", A, "0", "+", term)]
            y = {
                nn.ReduceSumOp: "acc", nn.ReduceSumSquareOp: "acc", nn.ReduceL1Op: "acc",
                nn.ReduceMeanOp: f"({A})(({real})acc / ({real})({count}))",
                nn.ReduceL2Op: f"({A}){fmath(real, 'sqrt')}(({real})acc)",
                nn.ReduceLogSumOp: f"({A}){fmath(real, 'log')}(({real})acc)",
            }[type(op)]
    return RowReduction(x, tuple(axes), tuple(folds), y)


@rowwise(*nn.REDUCE_OPS, nn.ArgMaxOp, nn.ArgMinOp, supports=_trailing, dims=derived_dims)
def _row_reduce(emitter, op) -> RowReduction:
    return reduction(emitter, op)


@window(*nn.REDUCE_OPS, nn.ArgMaxOp, nn.ArgMinOp, dims=derived_dims)
def _reduce(emitter, op: nn.ReduceOp | nn.ArgReduceOp) -> list[str]:
    """Each fold as a serial loop over the output element's reduced elements."""
    red = reduction(emitter, op)
    x = red.input
    rank = len(x.type.get_shape())
    fixed = input_index(emitter, op, list(red.axes), op.keepdims)
    lines: list[str] = []
    for fold in red.folds:
        lines.append(f"    {fold.ctype} {fold.acc} = {fold.init};")
        if fold.is_arg:
            lines.append(f"    long long {fold.acc}_at = -1;")
        index = f"@{red.axes[-1]}@" if fold.is_arg else ""  # arg folds reduce one axis
        body = [f"const {emitter.ctype(x)} v = {at(emitter, x, rank)};", *fold.step(index)]
        lines += group_loop(emitter, emitter.dims[x], list(red.axes), fixed, body)
        lines += [f"    {line}" for line in fold.then]
    return [*lines, y_decl(emitter, op, red.y)]


@window(nn.TopKValuesOp, nn.TopKIndicesOp, dims=derived_dims)
def _topk(emitter, op) -> list[str]:
    """The element of rank ``out_index[axis]`` along the axis: the one with exactly that
    many better elements (greater, or equal at a lower index)."""
    x = op.input
    rank = len(x.type.get_shape())
    axis = op.axis % rank
    A = emitter.ctype(x)
    T = emitter.index_type
    dims = emitter.dims[x]
    want = emitter.out_index[axis]
    fixed = list(emitter.out_index)
    better = ">" if op.largest else "<"
    j = emitter.var("j")
    # Row of candidates: j runs along the axis; for each, count the elements ahead of it.
    inner = group_loop(emitter, dims, [axis], fixed, [
        f"const {A} u = {at(emitter, x, rank)};",
        f"if (u {better} v || (u == v && @{axis}@ < {j})) ++rank;",
    ], indent="      ")
    candidate = list(fixed)
    candidate[axis] = j
    return [
        f"    {A} found = 0;",
        f"    {T} where = 0;",
        f"    for ({T} {j} = 0; {j} < {dims[axis]}; ++{j}) {{",
        f"      const {A} v = {emitter.load(x, candidate)};",
        f"      {T} rank = 0;",
        *inner,
        f"      if (rank == {want}) {{ found = v; where = {j}; }}",
        "    }",
        y_decl(emitter, op, "found") if isinstance(op, nn.TopKValuesOp)
        else "    const long long y = where;",
    ]


@window(nn.CumSumOp, nn.CumProdOp, dims=same_dims)
def _cumulative(emitter, op: nn.CumulativeOp) -> list[str]:
    x = op.input
    rank = len(x.type.get_shape())
    axis = op.axis % rank
    A = emitter.ctype(x)
    T = emitter.index_type
    o = emitter.out_index[axis]
    dims = emitter.dims[x]
    first, last = (f"{o}{' + 1' if op.exclusive else ''}", f"{dims[axis]}") if op.reverse \
        else ("0", f"{o}{'' if op.exclusive else ' + 1'}")
    index = list(emitter.out_index)
    k = emitter.var("k")
    index[axis] = k
    product = isinstance(op, nn.CumProdOp)
    return [
        f"    {A} acc = {1 if product else 0};",
        f"    for ({T} {k} = {first}; {k} < {last}; ++{k}) acc {'*' if product else '+'}= {emitter.load(x, index)};",
        y_decl(emitter, op, "acc"),
    ]
