"""``fuse-rms-norm``: RMSNorm as the exporters write it becomes one ``nn.rms_norm``.

PyTorch's exporters (Hugging Face's ``LlamaRMSNorm``, T5's layer norm) leave, over the
last axis of ``x``:

    m = reduce_mean(pow(x, 2) | x * x, axes = [-1], keepdims)
    s = sqrt(m + eps)                                eps: a one-element constant
    n = x * (1 / s) | x * reciprocal(s) | x / s
    y = n * w | w * n                                optional: w over the last axis

which is ``nn.rms_norm(x, w, axis = -1, epsilon = eps)`` (a scale of ones when there is
no ``w``, or when a cast stands between ``n`` and ``w``: the cast and the multiply then
stay, as the kernel's epilogue). As one op it is one ``rowwise`` kernel reading the row
once for its mean square and once for the output, where the chain took three kernels (the
square, the mean, the scaling). Only the chain's own intermediates are replaced, and only
when each is used once, so a partial match leaves the ops as they were.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from partita.dialects import nn
from partita.transforms.dead_ops import erase_dead_chain

__all__ = ["FuseRMSNorm", "FuseRMSNormChain"]


def _scalar(value: SSAValue) -> float | None:
    """The value of a one-element (or splat) ``nn.constant``."""
    owner = value.owner
    if not isinstance(owner, nn.ConstantOp):
        return None
    values = np.asarray(owner.to_numpy(buffer=True)).reshape(-1)
    if values.size == 0 or (values.size > 1 and not (values == values[0]).all()):
        return None
    return float(str(values[0]))  # the shortest spelling in the constant's type (1e-06, not 9.99e-07)


def _shape(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def _sole_user(value: SSAValue) -> Operation | None:
    uses = list(value.uses)
    return uses[0].operation if len(uses) == 1 else None


def _other(op: Operation, value: SSAValue) -> SSAValue | None:
    """The operand of binary ``op`` that is not ``value`` (``None`` if both are)."""
    lhs, rhs = op.operands
    if lhs is value and rhs is not value:
        return rhs
    if rhs is value and lhs is not value:
        return lhs
    return None


def _squared(value: SSAValue) -> SSAValue | None:
    """``x`` when ``value`` is ``pow(x, 2)`` or ``x * x``."""
    op = value.owner
    if isinstance(op, nn.PowOp) and _scalar(op.rhs) == 2.0 and _shape(op.result) == _shape(op.lhs):
        return op.lhs
    if isinstance(op, nn.MultiplyOp) and op.lhs is op.rhs:
        return op.lhs
    return None


def _normalized(s: SSAValue, x: SSAValue) -> Operation | None:
    """The op computing ``x / s`` from ``s = sqrt(...)``: ``x * (1 / s)``,
    ``x * reciprocal(s)`` or ``x / s`` (each intermediate used once)."""
    user = _sole_user(s)
    if isinstance(user, nn.DivideOp) and user.lhs is x and user.rhs is s:
        return user
    if isinstance(user, nn.ReciprocalOp) or (isinstance(user, nn.DivideOp) and user.rhs is s
                                              and _scalar(user.lhs) == 1.0):
        scaled = _sole_user(user.results[0])
        if isinstance(scaled, nn.MultiplyOp) and _other(scaled, user.results[0]) is x:
            return scaled
    return None


def _weight(n: Operation) -> tuple[Operation, SSAValue] | None:
    """``(op, w)`` when ``n``'s only user multiplies it by ``w`` over the last axis."""
    user = _sole_user(n.results[0])
    if not isinstance(user, nn.MultiplyOp) or user.results[0].type != n.results[0].type:
        return None
    w = _other(user, n.results[0])
    if w is None or not isinstance(w.type, TensorType) or w.type.element_type != user.results[0].type.element_type:
        return None
    shape = _shape(w)
    return (user, w) if len(shape) == 1 and shape[0] == _shape(n.results[0])[-1] else None


class FuseRMSNormChain(RewritePattern):
    """Matched from its ``reduce_mean`` (see the module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, mean: nn.ReduceMeanOp, rewriter: PatternRewriter) -> None:
        rank = len(_shape(mean.input))
        if rank == 0 or [a % rank for a in mean.axes] != [rank - 1] or not mean.keepdims:
            return
        x = _squared(mean.input)
        if x is None or len(list(mean.input.uses)) != 1:
            return
        add = _sole_user(mean.result)
        eps = _scalar(_other(add, mean.result)) if isinstance(add, nn.AddOp) and _other(add, mean.result) else None
        if eps is None or add.result.type != mean.result.type:  # type: ignore[union-attr]
            return
        sqrt = _sole_user(add.result)  # type: ignore[union-attr]
        if not isinstance(sqrt, nn.SqrtOp):
            return
        n = _normalized(sqrt.result, x)
        if n is None or n.results[0].type != x.type:
            return
        weighted = _weight(n)
        if weighted is not None:
            last, scale = weighted
        else:
            ones = nn.ConstantOp(np.ones(1, dtype=nn.NUMPY_DTYPES[str(x.type.element_type)]))  # type: ignore[attr-defined]
            rewriter.insert(ones, InsertPoint.before(n))
            last, scale = n, ones.result
        norm = nn.RMSNormOp(x, scale, axis=rank - 1, epsilon=eps, result_type=last.results[0].type)
        rewriter.insert(norm, InsertPoint.before(last))
        rewriter.replace_all_uses_with(last.results[0], norm.result)
        erase_dead_chain(rewriter, last)


@dataclass(frozen=True)
class FuseRMSNorm(ModulePass):
    """Decomposed RMSNorm chains -> ``nn.rms_norm`` (see the module docstring)."""

    name = "fuse-rms-norm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FuseRMSNormChain()], dce_enabled=False),
            apply_recursively=False,
        ).rewrite_module(op)
