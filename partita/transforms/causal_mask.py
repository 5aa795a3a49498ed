"""Causal masks as the exporters build them, recognized for ``fuse-attention``.

A mask that is the causal frontier ``j <= i`` (key ``j``, query ``i``) over a square
``[S, S]`` score block becomes ``nn.attention``'s ``causal`` property; what else the mask
says (a key padding mask and-ed with it, say) stays the op's mask. The forms seen in the
TorchScript and dynamo exporters' output (opsets 14 to 20) and in Hugging Face models:

- ``trilu(ones)`` (lower, ``k = 0``; bool or numeric, read as "nonzero attends") and its
  complement ``equal(trilu(ones), 0)`` / ``trilu(ones, upper, k = 1)`` (masked positions);
- ``less_equal(j, i)`` / ``greater_equal(i, j)`` over ``Range`` positions, and the masked
  forms ``greater(j, i)`` / ``less(i, j)``; ``and`` / ``or`` / ``not`` of such terms;
- additive biases ``where(keep, 0, -inf)``, ``where(masked, -inf, 0)`` and
  ``trilu(-inf, upper, k = 1)``, and constants holding the triangle;
- ``where(keep, s, -inf)`` / ``where(masked, -inf, s)`` on the scores themselves;
- terms that attend everywhere (a true fill, ``positions >= 0``) are dropped, so BERT's
  ``[B, 1, S, S]`` padding mask becomes the key padding mask ``[B, 1, 1, S]``.

The op's frontier is ``j <= i + Skv - Sq``; it equals ``j <= i`` only when ``Sq == Skv``.
That is proved from the mask's own dims: a square mask whose rows are the scores' query
length (the same symbolic dim, from ``partita.analysis.shape_functions``, or one static
size > 1) can only broadcast to scores with ``Skv == Sq``, or ``Sq == 1``, where both
frontiers keep every key. A mask filled with a finite minimum (``finfo.min``) is only
folded when it is causal alone: with padding, its fully masked rows are uniform, not
undefined.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from math import prod

import numpy as np
from xdsl.dialects.builtin import DYNAMIC_INDEX, IndexType, TensorType
from xdsl.ir import Block, Operation, SSAValue

from partita.analysis.shape_functions import Dim, ShapeBuilder, result_dims
from partita.dialects import nn

__all__ = ["CausalSplit", "SymbolicDims", "split_causal"]

_CAUSAL = "causal"
# A finite fill counts as "masked" at or below f32's finfo.min range; f16's -65504 does not
# (such masks stay additive: safe, only not folded).
_FINITE_FILL = -1e30


class SymbolicDims:
    """Symbolic dims of every value of one block (equal dims are the same object), as the
    shape functions derive them; a dim no rule gives is a fresh unknown."""

    def __init__(self, block: Block):
        self._scratch = Block()
        self._builder = ShapeBuilder(self._scratch)
        self._dims: dict[SSAValue, list[Dim]] = {}
        for op in block.ops:
            if len(op.results) == 1 and not op.regions and isinstance(op.results[0].type, TensorType):
                self._dims[op.results[0]] = self._derive(op)

    def _fresh(self) -> SSAValue:
        return self._scratch.insert_arg(IndexType(), len(self._scratch.args))

    def _derive(self, op: Operation) -> list[Dim]:
        shape = list(op.results[0].type.get_shape())
        if DYNAMIC_INDEX not in shape:
            return shape
        if isinstance(op, nn.ReshapeOp) and shape.count(DYNAMIC_INDEX) == 1:
            # One '?' in and out with equal static parts: the same dim (the shape rule
            # would give (d * c) / c, a new value).
            dims = self.of(op.input)
            unknown = [d for d in dims if not isinstance(d, int)]
            static_in = prod(d for d in dims if isinstance(d, int))
            static_out = prod(d for d in shape if d != DYNAMIC_INDEX)
            if len(unknown) == 1 and static_in == static_out:
                return [unknown[0] if d == DYNAMIC_INDEX else d for d in shape]
        try:
            derived = result_dims(op, self.of, self._builder)
        except Exception:  # no rule for this op: its dims are unknowns, never equal to others
            derived = [self._fresh() for _ in shape]
        if len(derived) != len(shape):
            derived = [self._fresh() for _ in shape]
        return [d if d != DYNAMIC_INDEX else s for d, s in zip(shape, derived)]

    def of(self, value: SSAValue) -> list[Dim]:
        if value not in self._dims:
            assert isinstance(value.type, TensorType)
            self._dims[value] = [self._fresh() if d == DYNAMIC_INDEX else d
                                 for d in value.type.get_shape()]
        return self._dims[value]


def _same(a: Dim, b: Dim) -> bool:
    return a is b if not isinstance(a, int) or not isinstance(b, int) else a == b


@dataclass
class CausalSplit:
    """A mask seen as the causal frontier (``causal``) and the rest: ``mask`` (bool, true
    attends) is None when nothing else is left; ``ops`` create it."""

    causal: bool
    mask: SSAValue | None
    ops: list[Operation] = field(default_factory=list)


def _always_true(op: Operation) -> bool:
    """``positions >= c`` (or ``c <= positions``) with ``c`` at most the first position:
    Hugging Face's BERT mask ands one in (its query-axis shape only broadcasts)."""
    if isinstance(op, nn.GreaterEqualOp):
        positions, bound = op.lhs, op.rhs
    elif isinstance(op, nn.LessEqualOp):
        positions, bound = op.rhs, op.lhs
    else:
        return False
    found, c = _positions(positions), _scalar(bound)
    return found is not None and c is not None and found[1] >= c


def _constant(value: SSAValue) -> np.ndarray | None:
    owner = value.owner
    return np.asarray(owner.to_numpy()) if isinstance(owner, nn.ConstantOp) else None


def _fill(value: SSAValue) -> float | None:
    """The one value of a splat-like tensor: a constant, or one broadcast."""
    while isinstance(value.owner, nn.BroadcastToOp | nn.CastOp):
        value = value.owner.operands[0]
    c = _constant(value)
    if c is None or c.size == 0:
        return None
    first = c.reshape(-1)[0]
    return float(first) if (c == first).all() else None


def _scalar(value: SSAValue) -> float | None:
    c = _constant(value)
    return float(c.reshape(-1)[0]) if c is not None and c.size == 1 else None


def _positions(value: SSAValue) -> tuple[int, float, float] | None:
    """``(axis from the end, start, delta)`` when ``value`` is a ``Range`` laid along one
    axis (reshapes adding unit axes, integer casts)."""
    shape = value.type.get_shape() if isinstance(value.type, TensorType) else ()
    axes = [a for a, d in enumerate(shape) if d != 1]
    if len(axes) != 1:
        return None
    axis = axes[0] - len(shape)
    while isinstance(value.owner, nn.ReshapeOp | nn.CastOp):
        value = value.owner.operands[0]
    arange = value.owner
    if not isinstance(arange, nn.ArangeOp) or arange.delta <= 0:
        return None
    return axis, arange.start, arange.delta


class _Frontier:
    """Recognizes the frontier's forms for one score block ``[.., Sq, Skv]``."""

    def __init__(self, dims: Callable[[SSAValue], list[Dim]], q_len: Dim):
        self.dims, self.q_len = dims, q_len

    def square(self, value: SSAValue) -> bool:
        """``value``'s last two dims are one dim, the query length (see the module doc)."""
        d = self.dims(value)
        if len(d) < 2 or not _same(d[-2], d[-1]):
            return False
        return _same(d[-2], self.q_len) or (isinstance(d[-2], int) and d[-2] > 1)

    def compare(self, op: Operation) -> bool | None:
        """True: ``op`` keeps ``j <= i``; False: it masks ``j > i``; None: neither."""
        if not isinstance(op, nn.CompareOp) or isinstance(op, nn.EqualOp):
            return None
        a, b = _positions(op.lhs), _positions(op.rhs)
        if a is None or b is None or a[1:] != b[1:] or {a[0], b[0]} != {-1, -2}:
            return None
        # (relation, lhs is the key position) -> keeps j <= i (True) / masks j > i (False)
        forms = {(nn.LessEqualOp, True): True, (nn.GreaterEqualOp, False): True,
                 (nn.GreaterOp, True): False, (nn.LessOp, False): False}
        return forms.get((type(op), a[0] == -1))

    def triangle(self, op: Operation) -> bool | None:
        """``trilu`` of a nonzero fill: True keeps ``j <= i`` (lower, k = 0), False is its
        complement (upper, k = 1), as nonzero-attends."""
        if not isinstance(op, nn.TriluOp) or op.diagonal is not None:
            return None
        fill = _fill(op.input)
        if fill is None or fill == 0 or np.isnan(fill):
            return None
        if (op.upper, op.k) == (0, 0):
            return True
        if (op.upper, op.k) == (1, 1):
            return False
        return None

    def constant(self, value: SSAValue, attends: Callable[[np.ndarray], np.ndarray]) -> bool | None:
        """A constant whose attending entries (``attends``) are exactly the lower or
        strictly upper triangle of each ``[S, S]`` block."""
        c = _constant(value)
        if c is None or c.ndim < 2 or c.shape[-1] != c.shape[-2] or c.shape[-1] < 2:
            return None
        keep = attends(c)
        lower = np.tril(np.ones(c.shape[-2:], bool))
        if (keep == lower).all():
            return True
        if (keep == ~lower).all():
            return False
        return None

    def keeps(self, value: SSAValue) -> bool | None:
        """Whether the bool or numeric (nonzero attends) ``value`` keeps the causal
        frontier (True), masks it (False), or is something else (None)."""
        if not self.square(value):
            return None
        op = value.owner
        for found in (self.compare(op), self.triangle(op)):
            if found is not None:
                return found
        if isinstance(op, nn.NotOp):
            inner = self.keeps(op.input)
            return None if inner is None else not inner
        if isinstance(op, nn.EqualOp):  # x == 0: the positions x does not attend
            for x, zero in ((op.lhs, op.rhs), (op.rhs, op.lhs)):
                if _scalar(zero) == 0.0 and (inner := self.keeps(x)) is not None:
                    return not inner
            return None
        if isinstance(op, nn.CastOp):
            return self.keeps(op.input)
        if isinstance(op, nn.ReshapeOp | nn.BroadcastToOp):  # unit axes added in front
            inner, outer = self.dims(op.operands[0]), self.dims(value)
            if len(inner) >= 2 and all(_same(a, b) for a, b in zip(inner[-2:], outer[-2:])):
                return self.keeps(op.operands[0])
            return None
        return self.constant(value, lambda c: c != 0)


def _terms(frontier: _Frontier, cond: SSAValue, negated: bool) -> list:
    """``cond`` (or ``not cond``) as the ``and`` of terms: ``_CAUSAL``, ``(value, True)``
    (attends where true) or ``(value, False)`` (attends where false)."""
    op = cond.owner
    joins = nn.OrOp if negated else nn.AndOp  # not (a or b) = not a and not b
    if isinstance(op, joins):
        return _terms(frontier, op.lhs, negated) + _terms(frontier, op.rhs, negated)
    if isinstance(op, nn.NotOp):
        return _terms(frontier, op.input, not negated)
    fill = _fill(cond)
    if (fill is not None and bool(fill) != negated) or (not negated and _always_true(op)):
        return []  # attends everywhere
    found = frontier.keeps(cond)
    if found is not None and found != negated:
        return [_CAUSAL]
    return [(cond, not negated)]


def _bias_terms(frontier: _Frontier, bias: SSAValue) -> tuple[list, bool] | None:
    """An additive bias as terms (see ``_terms``) and whether its fill is finite; None
    when it is not a 0 / -inf selection of a condition."""
    op = bias.owner
    if isinstance(op, nn.WhereOp):
        on, off = _scalar(op.on_true), _scalar(op.on_false)
        if on == 0.0 and off is not None and off <= _FINITE_FILL:
            return _terms(frontier, op.condition, False), off != -np.inf
        if off == 0.0 and on is not None and on <= _FINITE_FILL:
            return _terms(frontier, op.condition, True), on != -np.inf
        return None
    if isinstance(op, nn.TriluOp) and op.diagonal is None and (op.upper, op.k) == (1, 1) \
            and frontier.square(bias):
        fill = _fill(op.input)
        if fill is not None and fill <= _FINITE_FILL:
            return [_CAUSAL], fill != -np.inf
        return None
    if frontier.square(bias):
        c = _constant(bias)
        if c is not None and ((c == 0) | (c <= _FINITE_FILL)).all():
            if frontier.constant(bias, lambda x: x == 0):
                return [_CAUSAL], bool((c[c != 0] != -np.inf).any())
    return None


def split_causal(mask: SSAValue, *, boolean: bool | None, dims: Callable[[SSAValue], list[Dim]],
                 q_len: Dim) -> CausalSplit | None:
    """``mask`` (the scores' mask: ``boolean`` True for a bool keep mask, False for a bool
    mask of masked positions, None for an additive bias) as the causal frontier and the
    rest (terms that attend everywhere dropped), or None when neither simplifies it."""
    frontier = _Frontier(dims, q_len)
    if boolean is None:
        found = _bias_terms(frontier, mask)
        if found is None:
            return None
        terms, finite = found
    else:
        terms, finite = _terms(frontier, mask, not boolean), False
    causal = _CAUSAL in terms
    rest = [t for t in terms if t != _CAUSAL]
    if finite and (rest or not causal):
        return None  # finite fills with padding: fully masked rows are not undefined
    if not causal and rest == [(mask, True)]:
        return None  # nothing to simplify
    ops: list[Operation] = []
    keep: SSAValue | None = None
    for value, attends in rest:
        if not attends:
            ops.append(nn.NotOp(value))
            value = ops[-1].results[0]
        if keep is not None:
            ops.append(nn.AndOp(keep, value))
            value = ops[-1].results[0]
        keep = value
    return CausalSplit(causal, keep, ops)
