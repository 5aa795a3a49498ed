"""Reading decomposed op chains: what the norm fusions (``fuse-rms-norm``,
``fuse-layer-norm``) ask of the ops an exporter wrote out.

Each helper answers one question about a value or an op and returns ``None`` when the
answer is no, so a matcher reads as the chain it looks for.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue

from partita.dialects import nn

__all__ = ["normalized_by", "other_operand", "over_last_axis", "plus_epsilon", "scaled_over_last_axis", "sole_user",
           "splat_value", "squared", "tensor_shape"]


def splat_value(value: SSAValue) -> float | None:
    """The value of a one-element (or splat) ``nn.constant``."""
    owner = value.owner
    if not isinstance(owner, nn.ConstantOp):
        return None
    values = np.asarray(owner.to_numpy(buffer=True)).reshape(-1)
    if values.size == 0 or (values.size > 1 and not (values == values[0]).all()):
        return None
    return float(str(values[0]))  # the shortest spelling in the constant's type (1e-06, not 9.99e-07)


def tensor_shape(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def over_last_axis(mean: nn.ReduceMeanOp) -> bool:
    """A ``reduce_mean`` over the last axis alone, keeping it (every mean of a norm chain)."""
    rank = len(tensor_shape(mean.input))
    return rank > 0 and [a % rank for a in mean.axes] == [rank - 1] and bool(mean.keepdims)


def sole_user(value: SSAValue) -> Operation | None:
    uses = list(value.uses)
    return uses[0].operation if len(uses) == 1 else None


def other_operand(op: Operation, value: SSAValue) -> SSAValue | None:
    """The operand of binary ``op`` that is not ``value`` (``None`` if both are)."""
    lhs, rhs = op.operands
    if lhs is value and rhs is not value:
        return rhs
    if rhs is value and lhs is not value:
        return lhs
    return None


def squared(value: SSAValue) -> SSAValue | None:
    """``x`` when ``value`` is ``pow(x, 2)`` or ``x * x``."""
    op = value.owner
    if isinstance(op, nn.PowOp) and splat_value(op.rhs) == 2.0 and tensor_shape(op.result) == tensor_shape(op.lhs):
        return op.lhs
    if isinstance(op, nn.MultiplyOp) and op.lhs is op.rhs:
        return op.lhs
    return None


def plus_epsilon(value: SSAValue) -> tuple[Operation, float] | None:
    """``(add, eps)`` when the only user of ``value`` adds a one-element constant ``eps`` to
    it, keeping its type (a variance made safe to take the root of)."""
    add = sole_user(value)
    if not isinstance(add, nn.AddOp) or add.result.type != value.type:
        return None
    other = other_operand(add, value)
    eps = None if other is None else splat_value(other)
    return None if eps is None else (add, eps)


def normalized_by(s: SSAValue, x: SSAValue) -> Operation | None:
    """The op computing ``x / s``: ``x * (1 / s)``, ``x * reciprocal(s)`` or ``x / s``
    (each intermediate used once)."""
    user = sole_user(s)
    if isinstance(user, nn.DivideOp) and user.lhs is x and user.rhs is s:
        return user
    if isinstance(user, nn.ReciprocalOp) or (isinstance(user, nn.DivideOp) and user.rhs is s
                                              and splat_value(user.lhs) == 1.0):
        scaled = sole_user(user.results[0])
        if isinstance(scaled, nn.MultiplyOp) and other_operand(scaled, user.results[0]) is x:
            return scaled
    return None


def scaled_over_last_axis(op: Operation, kind: type[Operation]) -> tuple[Operation, SSAValue] | None:
    """``(user, w)`` when the only user of ``op``'s result is a ``kind`` op (a multiply by a
    scale, an add of a shift) of it and a ``w`` over its last axis, keeping its type."""
    result = op.results[0]
    user = sole_user(result)
    if not isinstance(user, kind) or user.results[0].type != result.type:
        return None
    w = other_operand(user, result)
    if w is None or not isinstance(w.type, TensorType) or w.type.element_type != user.results[0].type.element_type:
        return None
    shape = tensor_shape(w)
    return (user, w) if len(shape) == 1 and shape[0] == tensor_shape(result)[-1] else None
