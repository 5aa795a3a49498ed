"""A small data-flow pattern language over the ops of a single block (TVM's dataflow
pattern language, reduced to what BYOC pattern tables need).

Patterns describe SSA values. ``is_op(name, **attrs)(*args)`` matches a value produced by
an op of that name whose operands match ``args``; ``wildcard()`` matches any value (it
becomes an input of the match); ``is_constant()`` matches a value produced by
``nn.constant`` or ``arith.constant`` (also an input: constants stay outside a partition
unless the partitioner binds them); ``p1 | p2`` tries ``p1`` then ``p2``;
``p.optional(f)`` is ``f(p) | p`` (the longer alternative is tried first);
``p.has_dtype("f16")`` / ``p.has_shape((16, 8))`` / ``p.has_attr(axis=-1)`` constrain
the matched value. Using one pattern object twice (``x = wildcard(); is_op("nn.add")(x, x)``)
requires both places to see the same value.

``pattern.match(op)`` matches rooted at ``op`` (the pattern's output op) and returns a
``Match`` or ``None``. A match is rejected if a value produced inside it, other than the
root's results, is used outside it: it would have to escape the composite. Together with
rooting at the sink this makes every match convex.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    DenseArrayBase,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Operation, OpResult, SSAValue

from partita.dialects.nn import type_name

__all__ = [
    "AltPattern",
    "ConstantPattern",
    "Match",
    "OpPattern",
    "Pattern",
    "WildcardPattern",
    "is_attention",
    "is_constant",
    "is_op",
    "wildcard",
    "CONSTANT_OPS",
]

CONSTANT_OPS = frozenset({"nn.constant", "arith.constant"})
"""Ops whose results ``is_constant()`` accepts."""


# --------------------------------------------------------------------------------------
# Matches
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Match:
    """A successful match: the matched ops in block (topological) order, the values
    entering from outside (first-use order, deduplicated), and the root op."""

    ops: tuple[Operation, ...]
    inputs: tuple[SSAValue, ...]
    root: Operation
    bindings: dict[int, SSAValue] = field(compare=False, repr=False)

    @property
    def outputs(self) -> tuple[SSAValue, ...]:
        """The root's results: the only values that may leave the match."""
        return tuple(self.root.results)

    @property
    def constants(self) -> tuple[SSAValue, ...]:
        """The inputs produced by a constant op."""
        return tuple(v for v in self.inputs if _is_constant_value(v))

    def find(self, name: str) -> Operation | None:
        """The first matched op named ``name`` (e.g. ``match.find("nn.dense")``)."""
        return next((op for op in self.ops if op.name == name), None)

    def value(self, pattern: Pattern) -> SSAValue | None:
        """The value a sub-pattern object was bound to, if it took part in the match."""
        return self.bindings.get(id(pattern))

    def __contains__(self, op: object) -> bool:
        return op in self.ops


# --------------------------------------------------------------------------------------
# Helpers on types and attributes
# --------------------------------------------------------------------------------------


def element_type_name(value: SSAValue) -> str | None:
    """``"f16"``, ``"f32"``, ``"bf16"``... of a tensor (or scalar) value."""
    typ = value.type
    if isinstance(typ, TensorType):
        typ = typ.element_type
    return type_name(typ)


def shape_of(value: SSAValue) -> tuple[int, ...] | None:
    """Static shape of a tensor value (``-1`` for dynamic dims), ``None`` if not a tensor."""
    return tuple(value.type.get_shape()) if isinstance(value.type, TensorType) else None


def attr_value(attr: Attribute) -> Any:
    """A property/attribute as a Python value: int, float, str, bool, tuple."""
    if isinstance(attr, IntegerAttr):
        if isinstance(attr.type, IntegerType) and attr.type.width.data == 1:
            return bool(attr.value.data)
        return attr.value.data
    if isinstance(attr, FloatAttr):
        return attr.value.data
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, DenseArrayBase):
        return tuple(attr.get_values())
    if isinstance(attr, ArrayAttr):
        return tuple(attr_value(a) for a in attr.data)
    if isinstance(attr, BoolAttr):  # pragma: no cover - BoolAttr is an IntegerAttr alias
        return bool(attr.value.data)
    return attr


def op_attr(op: Operation, name: str) -> Any:
    """Property or attribute ``name`` of ``op`` as a Python value, defaults included
    (an unset defaulted nn property reads through the op's Python accessor)."""
    attr = op.properties.get(name, op.attributes.get(name))
    if attr is not None:
        return attr_value(attr)
    return getattr(op, name, None)


def _is_constant_value(value: SSAValue) -> bool:
    return isinstance(value, OpResult) and value.op.name in CONSTANT_OPS


# --------------------------------------------------------------------------------------
# Patterns
# --------------------------------------------------------------------------------------


@dataclass
class _State:
    ops: dict[Operation, None]
    bindings: dict[int, SSAValue]

    def copy(self) -> _State:
        return _State(dict(self.ops), dict(self.bindings))


class Pattern:
    """Base class of patterns; see the module docstring."""

    def __or__(self, other: Pattern) -> AltPattern:
        return AltPattern(self, other)

    def optional(self, extend: Callable[[Pattern], Pattern]) -> Pattern:
        """``extend(self) | self``: match the extension if possible, else ``self``."""
        return AltPattern(extend(self), self)

    def where(self, check: Callable[[SSAValue], bool]) -> Pattern:
        """Constrain the matched value with ``check(value)``."""
        return ConstraintPattern(self, check)

    def has_dtype(self, dtype: str) -> Pattern:
        return self.where(lambda v: element_type_name(v) == dtype)

    def has_shape(self, shape: Sequence[int]) -> Pattern:
        wanted = tuple(shape)
        return self.where(lambda v: shape_of(v) == wanted)

    def has_rank(self, rank: int) -> Pattern:
        return self.where(lambda v: (s := shape_of(v)) is not None and len(s) == rank)

    def has_attr(self, **attrs: Any) -> Pattern:
        """Constrain properties/attributes of the op producing the value."""
        return self.where(
            lambda v: isinstance(v, OpResult) and all(op_attr(v.op, k) == x for k, x in attrs.items())
        )

    # -- matching ------------------------------------------------------------------

    def _match(self, value: SSAValue, state: _State) -> Iterator[_State]:
        raise NotImplementedError

    def _bind(self, value: SSAValue, state: _State) -> bool:
        """Record that this pattern object saw ``value``; False if it saw another."""
        bound = state.bindings.get(id(self))
        if bound is None:
            state.bindings[id(self)] = value
            return True
        return bound is value

    def matches(self, op: Operation) -> Iterator[Match]:
        """Every valid match rooted at ``op``, in alternative order (first = preferred)."""
        if len(op.results) != 1 or op.parent_block() is None:
            return
        seen: set[frozenset[Operation]] = set()
        for state in self._match(op.results[0], _State({}, {})):
            if op not in state.ops:
                continue  # the root pattern must match the op itself (not a wildcard)
            match = _make_match(op, state)
            if match is None:
                continue
            key = frozenset(match.ops)
            if key not in seen:
                seen.add(key)
                yield match

    def match(self, op: Operation) -> Match | None:
        """The preferred valid match rooted at ``op``, or ``None``."""
        return next(self.matches(op), None)


class WildcardPattern(Pattern):
    """Any value; an input of the match."""

    def _match(self, value: SSAValue, state: _State) -> Iterator[_State]:
        state = state.copy()
        if self._bind(value, state):
            yield state

    def __repr__(self) -> str:
        return "wildcard()"


class ConstantPattern(Pattern):
    """A value produced by ``nn.constant`` / ``arith.constant``; an input of the match."""

    def _match(self, value: SSAValue, state: _State) -> Iterator[_State]:
        if not _is_constant_value(value):
            return
        state = state.copy()
        if self._bind(value, state):
            yield state

    def __repr__(self) -> str:
        return "is_constant()"


class OpPattern(Pattern):
    """A value produced by op ``name`` (with attribute constraints) whose operands match
    ``args``; ``args=None`` (not applied yet) accepts any operands as inputs."""

    def __init__(self, name: str, attrs: dict[str, Any], args: Sequence[Pattern] | None = None):
        self.name = name
        self.attrs = attrs
        self.args = None if args is None else tuple(args)

    def __call__(self, *args: Pattern) -> OpPattern:
        if self.args is not None:
            raise TypeError(f"pattern is_op({self.name!r}) already has operand patterns")
        return OpPattern(self.name, self.attrs, args)

    def _match(self, value: SSAValue, state: _State) -> Iterator[_State]:
        if not isinstance(value, OpResult) or value.op.name != self.name:
            return
        op = value.op
        if any(op_attr(op, k) != v for k, v in self.attrs.items()):
            return
        if self.args is not None and len(self.args) != len(op.operands):
            return
        state = state.copy()
        if not self._bind(value, state):
            return
        state.ops[op] = None
        if self.args is None:
            yield state
            return
        yield from self._match_operands(op, 0, state)

    def _match_operands(self, op: Operation, index: int, state: _State) -> Iterator[_State]:
        assert self.args is not None
        if index == len(self.args):
            yield state
            return
        for next_state in self.args[index]._match(op.operands[index], state):
            yield from self._match_operands(op, index + 1, next_state)

    def __repr__(self) -> str:
        attrs = "".join(f", {k}={v!r}" for k, v in self.attrs.items())
        head = f"is_op({self.name!r}{attrs})"
        return head if self.args is None else f"{head}({', '.join(map(repr, self.args))})"


class AltPattern(Pattern):
    """``left | right``: the matches of ``left``, then those of ``right``. Calling an
    alternative of unapplied op patterns applies the operands to each side, so
    ``(is_op("nn.add") | is_op("nn.bias_add"))(x, b)`` works as in TVM."""

    def __init__(self, left: Pattern, right: Pattern):
        self.left = left
        self.right = right

    def __call__(self, *args: Pattern) -> AltPattern:
        sides = []
        for side in (self.left, self.right):
            if not isinstance(side, OpPattern | AltPattern):
                raise TypeError(f"cannot apply operands to {side!r}")
            sides.append(side(*args))
        return AltPattern(*sides)

    def _match(self, value: SSAValue, state: _State) -> Iterator[_State]:
        yield from self.left._match(value, state)
        yield from self.right._match(value, state)

    def __repr__(self) -> str:
        return f"({self.left!r} | {self.right!r})"


class ConstraintPattern(Pattern):
    """``inner`` with an extra check on the matched value."""

    def __init__(self, inner: Pattern, check: Callable[[SSAValue], bool]):
        self.inner = inner
        self.check = check

    def __call__(self, *args: Pattern) -> ConstraintPattern:
        if not isinstance(self.inner, OpPattern | AltPattern):
            raise TypeError(f"cannot apply operands to {self.inner!r}")
        return ConstraintPattern(self.inner(*args), self.check)

    def _match(self, value: SSAValue, state: _State) -> Iterator[_State]:
        if self.check(value):
            yield from self.inner._match(value, state)

    def __repr__(self) -> str:
        return f"{self.inner!r}.where(...)"


def is_op(name: str, **attrs: Any) -> OpPattern:
    """Pattern for a value produced by op ``name``; call it with operand patterns."""
    return OpPattern(name, attrs)


def wildcard() -> WildcardPattern:
    return WildcardPattern()


def is_constant() -> ConstantPattern:
    return ConstantPattern()


def is_attention(mask: bool = True) -> Pattern:
    """Scaled dot-product attention as PyTorch and Hugging Face models export it:
    ``softmax(scale(Q·Kᵀ) [+ mask]) · V``. Q·Kᵀ is ``nn.matmul(q, kᵀ)`` (K stored
    transposed, 4-D) or ``nn.batch_matmul(q, k)`` (``transpose_b``); the scale is a
    constant multiplied or divided into the scores (Hugging Face), or split as two
    constants multiplied into Q and Kᵀ (PyTorch's exported ``scaled_dot_product_attention``);
    the mask (``mask=True``) is an optional additive tensor. The ``nn.transpose`` that
    makes Kᵀ is taken into the match when there is one (so K is read as stored). The
    first input of a match is Q."""

    def scores(q: Pattern, k: Pattern) -> Pattern:
        return is_op("nn.matmul")(q, k) | is_op("nn.batch_matmul", transpose_a=False, transpose_b=True)(q, k)

    def k_side() -> Pattern:
        return wildcard().optional(lambda k: is_op("nn.transpose")(k))

    scale_after = (is_op("nn.multiply") | is_op("nn.divide"))(scores(wildcard(), k_side()), is_constant())
    scale_before = scores(is_op("nn.multiply")(wildcard(), is_constant()), is_op("nn.multiply")(k_side(), is_constant()))
    scaled = scale_after | scale_before
    if mask:
        scaled = scaled.optional(lambda s: is_op("nn.add")(s, wildcard()))
    probs = is_op("nn.softmax")(scaled)
    v = wildcard()
    return is_op("nn.matmul")(probs, v) | is_op("nn.batch_matmul", transpose_a=False, transpose_b=False)(probs, v)


# --------------------------------------------------------------------------------------


def _make_match(root: Operation, state: _State) -> Match | None:
    block = root.parent_block()
    assert block is not None
    ops = state.ops
    if any(op.parent_block() is not block for op in ops):
        return None
    # Intermediate values may only be used inside the match.
    for op in ops:
        if op is root:
            continue
        for result in op.results:
            if any(use.operation not in ops for use in result.uses):
                return None
    ordered = _topological(root, ops)
    inputs: dict[SSAValue, None] = {}
    for op in ordered:
        for operand in op.operands:
            if not (isinstance(operand, OpResult) and operand.op in ops):
                inputs[operand] = None
    return Match(ordered, tuple(inputs), root, dict(state.bindings))


def _topological(root: Operation, ops: dict[Operation, None]) -> tuple[Operation, ...]:
    """The matched ops in a topological order (operands first, in operand order):
    deterministic and independent of the block's size."""
    order: list[Operation] = []
    done: set[Operation] = set()
    stack: list[tuple[Operation, bool]] = [(root, False)]
    while stack:
        op, expanded = stack.pop()
        if op in done:
            continue
        if expanded:
            done.add(op)
            order.append(op)
            continue
        stack.append((op, True))
        for operand in reversed(op.operands):
            if isinstance(operand, OpResult) and operand.op in ops and operand.op not in done:
                stack.append((operand.op, False))
    return tuple(order)
