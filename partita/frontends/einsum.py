"""Einsum as ``nn`` ops, for every frontend: an equation over one or two operands becomes
diagonals (``ii->i``), sums, transposes and one matrix product (``nn.dense`` or
``batch_matmul`` where the operands already have a GEMM backend's layout, else
``nn.matmul`` over flattened free and contracted dims)."""

from __future__ import annotations

import math
import string
from collections.abc import Callable

import numpy as np
from xdsl.ir import Operation, SSAValue

from partita.dialects import nn

__all__ = ["EinsumError", "lower_einsum", "parse_einsum"]

Emit = Callable[[Operation], SSAValue]
Constant = Callable[[np.ndarray], SSAValue]


class EinsumError(ValueError):
    """An equation the operands do not fit, or a form not lowered."""


def shape_of(v: SSAValue) -> tuple[int, ...]:
    return tuple(v.type.get_shape())  # type: ignore[attr-defined]


Source = tuple[SSAValue, int]
"""An operand and one of its axes: where a subscript's run-time size can be read."""


def _reshape(emit: Emit, v: SSAValue, shape, sources: list[Source | None] | None = None) -> SSAValue:
    """``v`` reshaped to ``shape``, or ``v`` if it has it. A dynamic dim whose ``sources``
    entry names an operand axis is sized by it (a shape reference); one other is inferred."""
    shape = list(shape)
    if tuple(shape) == shape_of(v):  # (the operands are already in the groups' order)
        return v
    sources = sources or [None] * len(shape)
    refs = [(*src, k) for k, (d, src) in enumerate(zip(shape, sources)) if d == nn.DYN and src is not None]
    if shape.count(nn.DYN) - len(refs) > 1:
        raise EinsumError(f"reshaping {list(shape_of(v))} to {shape} needs more than one dynamic dimension "
                          "that no operand's axis sizes")
    return emit(nn.ReshapeOp(v, shape, refs=refs if shape.count(nn.DYN) > 1 else ()))


def _product(dims) -> int:
    return nn.DYN if nn.DYN in dims else math.prod(dims)


def parse_einsum(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """The subscripts of each operand and of the output (implicit output: the letters that
    occur once, sorted), checked against the operand ranks."""
    equation = equation.replace(" ", "")
    lhs, arrow, out = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise EinsumError(f"Einsum '{equation}' names {len(terms)} operands, the node has {len(ranks)}")
    # An ellipsis stands for the leading dims an operand's letters leave out, aligned from
    # the right across operands: spell them with letters the equation does not use.
    spare = [c for c in string.ascii_letters if c not in equation]
    counts = [rank - len(t.replace("...", "")) if "..." in t else 0 for t, rank in zip(terms, ranks)]
    if any(c < 0 for c in counts) or equation.replace("...", "").count("."):
        raise EinsumError(f"Einsum '{equation}': malformed ellipsis")
    dots = "".join(spare[:max(counts, default=0)])
    terms = [t.replace("...", dots[len(dots) - c:]) for t, c in zip(terms, counts)]
    if not arrow:
        letters = "".join(terms)
        out = dots + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in dots))
    out = out.replace("...", dots)
    for term, rank in zip([*terms, out], [*ranks, None]):
        if not term.isalpha() and term:
            raise EinsumError(f"Einsum '{equation}': subscripts must be letters")
        if rank is None and len(set(term)) != len(term):
            raise EinsumError(f"Einsum '{equation}': a repeated subscript in the output")
        if rank is not None and len(term) != rank:
            raise EinsumError(f"Einsum '{equation}': '{term}' does not match an operand of rank {rank}")
    if set(out) - set("".join(terms)):
        raise EinsumError(f"Einsum '{equation}': output subscripts that no operand has")
    return terms, out


def _diagonal(emit: Emit, constant: Constant, x: SSAValue, term: str, equation: str) -> tuple[SSAValue, str]:
    """``x`` with each subscript repeated in ``term`` read once, along its diagonal
    (``ii->i``): the two axes moved last, flattened, and every ``n + 1``-th element taken."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        p, q = [k for k, t in enumerate(term) if t == c][:2]
        shape = shape_of(x)
        n = shape[p]
        if nn.DYN in (n, shape[q]) or n != shape[q]:
            raise EinsumError(f"Einsum '{equation}': the diagonal of '{c}' needs two equal static dims, got {n} and {shape[q]}")
        rest = [k for k in range(len(term)) if k not in (p, q)]
        x = emit(nn.TransposeOp(x, [*rest, p, q]))
        x = _reshape(emit, x, [*(shape[k] for k in rest), n * n])
        x = emit(nn.TakeOp(x, constant(np.arange(n, dtype=np.int64) * (n + 1)), len(rest)))
        term = "".join(term[k] for k in rest) + c
    return x, term


def _prepare(emit: Emit, x: SSAValue, term: str, keep: str, order: str) -> SSAValue:
    """Sum ``x`` over its subscripts not in ``keep``, then transpose to ``order``."""
    summed = [k for k, c in enumerate(term) if c not in keep]
    if summed:
        x = emit(nn.ReduceSumOp(x, summed, keepdims=False))
        term = "".join(c for c in term if c in keep)
    perm = [term.index(c) for c in order]
    if perm != list(range(len(perm))):
        x = emit(nn.TransposeOp(x, perm))
    return x


def lower_einsum(equation: str, xs: list[SSAValue], emit: Emit, constant: Constant) -> SSAValue:
    """``einsum(equation, *xs)`` as transposes, sums and one matmul (batch dims, then the
    free dims of each operand flattened to M and N, the contracted ones to K); ``emit``
    inserts an op and gives its result, ``constant`` makes an array a value. An
    :class:`EinsumError` says what the equation cannot be."""
    if len(xs) > 2:
        raise EinsumError("Einsum with more than two operands is not supported")
    terms, out = parse_einsum(equation, [len(shape_of(x)) for x in xs])
    for k, (x, term) in enumerate(zip(xs, terms)):
        xs[k], terms[k] = _diagonal(emit, constant, x, term, equation)
    if len(xs) == 1:
        return _prepare(emit, xs[0], terms[0], out, out)
    (a, b), (ta, tb) = xs, terms
    sizes: dict[str, int] = {}
    sources: dict[str, Source] = {}  # a dynamic subscript: an operand axis holding it
    for x, term in ((a, ta), (b, tb)):
        for axis, (c, d) in enumerate(zip(term, shape_of(x))):
            if c in sizes and d != sizes[c] and nn.DYN not in (d, sizes[c]):
                raise EinsumError(f"Einsum '{equation}': subscript '{c}' has sizes {sizes[c]} and {d} "
                                  "(broadcasting is not supported)")
            sizes[c] = d if c not in sizes or sizes[c] == nn.DYN else sizes[c]
            if d == nn.DYN:
                sources.setdefault(c, (x, axis))

    def group(letters: str) -> Source | None:  # a flattened group sized by one operand axis
        return sources.get(letters) if len(letters) == 1 else None

    batch = "".join(c for c in out if c in ta and c in tb)
    contracted = "".join(c for c in ta if c in tb and c not in out)
    m = "".join(c for c in out if c in ta and c not in tb)
    n = "".join(c for c in out if c in tb and c not in ta)
    keep = out + contracted
    kept_b = "".join(c for c in tb if c in keep)
    order = batch + m + n
    single = len(n) == len(contracted) == 1
    if single and kept_b == batch + n + contracted and (not batch and m or len(batch) == len(m) == 1):
        # The forms the GEMM backends take as they are: x[..., K] . w[N, K] (nn.dense) and
        # [B, M, K] . [B, N, K] (batch_matmul with transpose_b).
        a = _prepare(emit, a, ta, keep, batch + m + contracted)
        b = _prepare(emit, b, tb, keep, kept_b)
        y = emit(nn.BatchMatmulOp(a, b, transpose_a=False, transpose_b=True) if batch else nn.DenseOp(a, b))
        perm = [order.index(c) for c in out]
        return y if perm == list(range(len(perm))) else emit(nn.TransposeOp(y, perm))
    a = _prepare(emit, a, ta, keep, batch + m + contracted)
    b = _prepare(emit, b, tb, keep, batch + contracted + n)
    bs = [sizes[c] for c in batch]
    flat_m, flat_n, flat_k = (_product([sizes[c] for c in g]) for g in (m, n, contracted))
    batch_sources = [sources.get(c) for c in batch]
    a = _reshape(emit, a, [*bs, flat_m, flat_k], [*batch_sources, group(m), group(contracted)])
    b = _reshape(emit, b, [*bs, flat_k, flat_n], [*batch_sources, group(contracted), group(n)])
    y = emit(nn.MatmulOp(a, b))
    y = _reshape(emit, y, [*bs, *(sizes[c] for c in m + n)], [*batch_sources, *(sources.get(c) for c in m + n)])
    perm = [order.index(c) for c in out]
    return y if perm == list(range(len(perm))) else emit(nn.TransposeOp(y, perm))
