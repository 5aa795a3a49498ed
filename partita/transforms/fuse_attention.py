"""``fuse-attention``: scaled dot-product attention, as the exporters write it, becomes one
``nn.attention``.

PyTorch's exporters (TorchScript and dynamo, the function body of
``scaled_dot_product_attention``), Hugging Face's eager attention and ONNX's own
``Attention`` function all leave the same chain, which is matched from its end, the
``P @ V`` matmul:

    s  = (q [* c]) @ (kT [* c])   [* c | / c]      c: one-element constants; kT is
                                                    transpose(k) or any [.., D, Skv] value
    s  = cast(s, f32)                               optional: f16 / bf16 scores widened
                                                    (V widened too; the op runs in the
                                                    narrow type, its result widened), or
                                                    widened here and p narrowed back after
                                                    the softmax (to-mixed-precision's form)
    s  = s + mask                                   optional: additive, or where(m, 0, -inf)
                                                    (a boolean mask); or masked_fill:
                                                    where(m, s, c) / where(m, c, s), any
                                                    constant c (the op's mask_fill)
    p  = softmax(s, axis=-1)
    p  = where(is_nan(p), 0, p)                     optional: the guard of undefined rows
    out = p @ v

When Q, V and the output are head-split / head-merge transposes of ``[B, S, H, D]``
values (and K^T a ``[0, 2, 3, 1]`` transpose of one), the op takes and gives that layout
(``layout = "BSHD"``) and the transposes go away.

Repeat-kv expansions of K and V (``reshape -> broadcast_to | tile -> reshape`` inserting
and expanding a head-group axis) are folded into the op's GQA grouping. A ``kT`` that is not a
transpose of the last two axes gets one (``nn.transpose``, an injective kernel).

Only the chain's own intermediates are replaced, and only when each is used once
(nothing else reads the scores or the probabilities), so a partial match leaves the ops
as they were and stays correct op by op. A mask made with a finite fill (``finfo.min``)
and added stays additive; one filled in by ``where`` gives the op its ``mask_fill``:
either way its fully masked rows are uniform, not undefined, as exported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.utils.exceptions import VerifyException

from partita.dialects import nn
from partita.transforms.causal_mask import SymbolicDims, split_causal
from partita.transforms.chains import tensor_shape
from partita.transforms.dead_ops import erase_dead_chain
from partita.transforms.fuse_rotary import HEAD_SPLIT, FuseRotaryEmbedding, SinkHeadSplitPastRotary

__all__ = ["FuseAttention", "FuseScaledDotProductAttention"]

_TYPES = ("f16", "bf16", "f32")


def _scalar(value: SSAValue) -> float | None:
    """The value of a one-element ``nn.constant`` (a splat of one value counts)."""
    owner = value.owner
    if not isinstance(owner, nn.ConstantOp):
        return None
    values = np.asarray(owner.to_numpy(buffer=True))
    if values.size == 0:
        return None
    first = values.reshape(-1)[0]
    if values.size > 1 and not (values == first).all():
        return None
    return float(first)


def _owner(value: SSAValue, kind: type[Operation]) -> Operation | None:
    owner = value.owner
    return owner if isinstance(owner, kind) else None


def _scaled(value: SSAValue) -> tuple[SSAValue, float, Operation | None]:
    """``value`` as ``x * c`` or ``x / c`` (c a scalar constant): (x, factor, the op)."""
    op = value.owner
    if isinstance(op, nn.MultiplyOp | nn.DivideOp):
        c = _scalar(op.rhs)
        if c is not None and tensor_shape(op.result) == tensor_shape(op.lhs):
            return op.lhs, (c if isinstance(op, nn.MultiplyOp) else 1.0 / c), op
        c = _scalar(op.lhs)
        if isinstance(op, nn.MultiplyOp) and c is not None and tensor_shape(op.result) == tensor_shape(op.rhs):
            return op.rhs, c, op
    return value, 1.0, None


def _swaps_last_two(op: nn.TransposeOp) -> bool:
    rank = len(op.perm)
    return tuple(op.perm) == (*range(rank - 2), rank - 1, rank - 2)


def _repeat_kv(value: SSAValue) -> tuple[SSAValue, int]:
    """``value`` as ``repeat_kv(x, g)``, ``reshape(broadcast_to(reshape(x)))`` with
    ``x[B, Hkv, S, D] -> [B, Hkv, 1, S, D] -> [B, Hkv, g, S, D] -> [B, Hkv * g, S, D]``:
    (x, g); else (value, 1)."""
    merge = _owner(value, nn.ReshapeOp)
    expand = merge and (_owner(merge.input, nn.BroadcastToOp) or _owner(merge.input, nn.TileOp))
    if isinstance(expand, nn.TileOp) and [r for i, r in enumerate(expand.repeats) if i != 2] != [1] * 4:
        return value, 1
    split = expand and _owner(expand.input, nn.ReshapeOp)
    if split is None:
        return value, 1
    x = split.input
    xs, ss, es, ms = tensor_shape(x), tensor_shape(split.result), tensor_shape(expand.result), tensor_shape(merge.result)
    if len(xs) != 4 or len(ss) != 5 or len(es) != 5 or len(ms) != 4:
        return value, 1
    heads, groups = ss[1], es[2]
    static = all(d >= 0 for d in (heads, groups, xs[1], xs[3], ms[1], ms[3]))
    if (not static or xs[1] != heads or ss[2] != 1 or es[1] != heads or ms[1] != heads * groups
            or xs[3] != ss[4] or es[4] != xs[3] or ms[3] != xs[3]):
        return value, 1
    return x, groups


def _key(kt: SSAValue) -> tuple[SSAValue, float, list[Operation]]:
    """``kT[.., D, Skv]`` as the key ``[.., Skv, D]``: scalar factors and one transpose
    of the last two axes peeled (in either order), the factor, and the ops created."""
    factor = 1.0
    value = kt
    transposed = False
    while True:
        value, c, op = _scaled(value)
        factor *= c
        if op is not None:
            continue
        t = _owner(value, nn.TransposeOp)
        if t is not None and not transposed and _swaps_last_two(t):
            value, transposed = t.input, True
            continue
        swapped = _swap_through_rank3(value)
        if swapped is not None and not transposed:
            value, transposed = swapped, True
            continue
        break
    if transposed:
        return value, factor, []
    rank = len(tensor_shape(value))
    swap = nn.TransposeOp(value, [*range(rank - 2), rank - 1, rank - 2])
    return swap.result, factor, [swap]


def _widening(value: SSAValue) -> nn.CastOp | None:
    """The cast producing ``value`` when it widens f16 / bf16 to f32."""
    cast = _owner(value, nn.CastOp)
    if cast is not None and str(cast.input.type.element_type) in ("f16", "bf16") \
            and str(cast.result.type.element_type) == "f32":
        return cast
    return None


def _is_product(scores: SSAValue) -> bool:
    """Whether ``scores`` is a matmul, scaled and widened as the chain allows."""
    x = _scaled(scores)[0]
    widen = _widening(x)
    return _owner(widen.input if widen is not None else x, nn.MatmulOp) is not None


def _swap_through_rank3(value: SSAValue) -> SSAValue | None:
    """``y[B, H, S, D]`` when ``value`` is ``reshape(transpose(reshape(y, [B*H, S, D]),
    [0, 2, 1]), [B, H, D, S])`` (the dynamo exporter's K^T), else None."""
    outer = _owner(value, nn.ReshapeOp)
    t = outer and _owner(outer.input, nn.TransposeOp)
    inner = t and _owner(t.input, nn.ReshapeOp)
    if inner is None or tuple(t.perm) != (0, 2, 1):
        return None
    y, out, mid = inner.input, tensor_shape(outer.result), tensor_shape(inner.result)
    ys = tensor_shape(y)
    if len(ys) != 4 or len(out) != 4 or len(mid) != 3:
        return None
    heads, dim = ys[1], ys[3]
    if heads < 0 or dim < 0 or mid[2] != dim or out[1] != heads or out[2] != dim:
        return None
    if mid[0] >= 0 and ys[0] >= 0 and mid[0] != ys[0] * heads:
        return None
    return y


def _mask(bias: SSAValue) -> SSAValue:
    """A bias ``where(m, 0, -inf)`` (``m`` bool) as the boolean mask ``m``."""
    w = _owner(bias, nn.WhereOp)
    if (w is not None and str(w.condition.type.element_type) == "i1"
            and _scalar(w.on_true) == 0.0 and _scalar(w.on_false) == -np.inf
            and len(tensor_shape(w.condition)) <= 4):
        return w.condition
    return bias


class FuseScaledDotProductAttention(RewritePattern):
    """``matmul(softmax(scale * q @ kT [+ mask]) [guarded], v)`` -> ``nn.attention``."""

    def __init__(self):
        self._symbolic: dict[Block, SymbolicDims] = {}  # per function body, for causal masks

    def _dims(self, op: Operation) -> SymbolicDims:
        block = op.parent_block()
        assert block is not None
        if block not in self._symbolic:
            self._symbolic[block] = SymbolicDims(block)
        return self._symbolic[block]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        if not isinstance(op, nn.MatmulOp) or str(op.result.type.element_type) not in _TYPES:
            return
        chain: list[Operation] = [op]
        probs, guard = op.lhs, False
        w = _owner(probs, nn.WhereOp)
        isnan = w and _owner(w.condition, nn.IsNaNOp)
        if isnan is not None and isnan.input is w.on_false and _scalar(w.on_true) == 0.0:
            chain += [w, isnan]
            probs, guard = w.on_false, True
        narrow = _owner(probs, nn.CastOp)  # to-mixed-precision: f16 scores softmaxed in f32
        if narrow is not None and str(narrow.input.type.element_type) == "f32" \
                and narrow.result.type.element_type == op.result.type.element_type:
            chain.append(narrow)
            probs = narrow.input
        else:
            narrow = None
        softmax = _owner(probs, nn.SoftmaxOp)
        if softmax is None or softmax.axis % 4 != 3 or len(tensor_shape(probs)) != 4:
            return
        chain.append(softmax)
        scores, mask, mask_form, mask_fill = softmax.input, None, None, None
        if narrow is not None:
            back = _widening(scores)
            if back is None or back.input.type.element_type != narrow.result.type.element_type:
                return
            chain.append(back)
            scores = back.input
        add = _owner(scores, nn.AddOp)
        fill = _owner(scores, nn.WhereOp)
        if add is not None:
            for s, m in ((add.lhs, add.rhs), (add.rhs, add.lhs)):
                if _is_product(s) and tensor_shape(s) == tensor_shape(add.result):
                    scores, mask = s, m
                    chain.append(add)
                    break
            else:
                return
        elif fill is not None:  # masked_fill: where(keep, s, c) / where(masked, c, s)
            for s, other, keeps in ((fill.on_true, fill.on_false, True),
                                    (fill.on_false, fill.on_true, False)):
                if _is_product(s) and tensor_shape(s) == tensor_shape(fill.result) \
                        and (mask_fill := _scalar(other)) is not None and not np.isnan(mask_fill) \
                        and str(fill.condition.type.element_type) == "i1":
                    scores, mask, mask_form = s, fill.condition, keeps
                    chain.append(fill)
                    break
            else:
                return
        scores, scale, scale_op = _scaled(scores)
        if scale_op is not None:
            chain.append(scale_op)
        widen = _widening(scores)
        if widen is not None:  # scores of a f16 / bf16 product softmaxed in f32
            chain.append(widen)
            scores = widen.input
        qk = _owner(scores, nn.MatmulOp)
        if qk is None:
            return
        chain.append(qk)
        inside = set(map(id, chain))
        if any(id(use.operation) not in inside for o in chain[1:] for use in o.results[0].uses):
            return  # the scores or probabilities are read elsewhere: leave the ops
        q, q_scale, _ = _scaled(qk.lhs)
        k, k_scale, created = _key(qk.rhs)
        v = op.rhs
        if widen is not None:
            cast = _widening(v)
            if cast is None or cast.input.type.element_type != qk.result.type.element_type:
                return
            v = cast.input
        (k0, k_groups), (v0, v_groups) = _repeat_kv(k), _repeat_kv(v)
        if k_groups == v_groups:  # else both stay expanded (still correct, as MHA)
            k, v = k0, v0
        if len(tensor_shape(q)) != 4:
            return
        causal, mask_ops = False, []
        if mask is not None:
            split = split_causal(mask, boolean=mask_form, dims=self._dims(op).of,
                                 q_len=self._dims(op).of(qk.result)[-2])
            if split is not None:
                causal, mask, mask_ops = split.causal, split.mask, split.ops
            elif mask_form is None:
                mask = _mask(mask)
            elif not mask_form:  # attends where the condition is false
                mask_ops = [nn.NotOp(mask)]
                mask = mask_ops[0].results[0]
        bshd = None if k_groups != v_groups else _bshd_operands(qk, op, None if created else k, v)
        narrow = qk.result.type.element_type
        out_type = TensorType(narrow, tensor_shape(op.result)) if widen is not None else op.result.type
        if bshd is not None:  # the head transposes fold into the op's indexing
            for c in created:
                c.drop_all_references()
            created = []
            (q, k, v), merge = bshd
            out_type = TensorType(narrow, merge.result.type.get_shape())
        try:
            fused = nn.AttentionOp(q, k, v, mask, scale=scale * q_scale * k_scale,
                                   causal=causal, zero_undefined_rows=guard, result_type=out_type,
                                   layout="BSHD" if bshd is not None else None, mask_fill=mask_fill)
            fused.verify()
        except VerifyException:
            for c in (*created, *mask_ops):
                c.drop_all_references()
            return
        fused.location = op.location
        values = op.rhs
        # The f32 result of a widened chain: the f16 / bf16 attention, widened once.
        ops = [*created, *mask_ops, fused] + ([nn.CastOp(fused, op.result.type.element_type)] if widen else [])
        if bshd is not None:
            rewriter.replace(merge, ops)
            rewriter.erase(op)
        else:
            rewriter.replace(op, ops)
        for dead in (*chain[1:], values.owner):
            if isinstance(dead, Operation):
                erase_dead_chain(rewriter, dead)


_HEAD_SPLIT_T = (0, 2, 3, 1)


def _transposed(value: SSAValue, perm: tuple[int, ...]) -> SSAValue | None:
    """``x`` when ``value`` is ``transpose(x, perm)`` (scalar factors already peeled)."""
    t = _owner(value, nn.TransposeOp)
    return t.input if t is not None and tuple(t.perm) == perm else None


def _bshd_operands(qk: nn.MatmulOp, pv: nn.MatmulOp, key: SSAValue | None, value: SSAValue):
    """``((q, k, v), merge)`` in ``[B, S, H, D]`` when every head-split transpose of the
    chain and the head-merge one after it (``merge``, the only reader of ``pv``) can fold
    into the op; else None."""
    uses = list(pv.result.uses)
    merge = uses[0].operation if len(uses) == 1 else None
    if not isinstance(merge, nn.TransposeOp) or tuple(merge.perm) != HEAD_SPLIT:
        return None
    q = _transposed(_scaled(qk.lhs)[0], HEAD_SPLIT)
    kt = qk.rhs
    while (peeled := _scaled(kt))[2] is not None:
        kt = peeled[0]
    k = _transposed(kt, _HEAD_SPLIT_T)
    if k is None and key is not None:  # K^T = swap(k[B, H, S, D]), k a head split
        k = _transposed(key, HEAD_SPLIT)
    v = _transposed(value, HEAD_SPLIT)  # value: pv.rhs, or its KV heads before repeat-kv
    if q is None or k is None or v is None:
        return None
    return (q, k, v), merge


@dataclass(frozen=True)
class FuseAttention(ModulePass):
    """Scaled dot-product attention chains -> ``nn.attention`` (see the module docstring),
    and the exporters' rotary embeddings -> ``nn.rotary_embedding``, the head splits before
    them moved after them (``fuse_rotary``)."""

    name = "fuse-attention"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        # Rotaries first, to a fixed point: the head splits they move reach the attention
        # chains as transposes the BSHD form folds.
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FuseRotaryEmbedding(), SinkHeadSplitPastRotary()], dce_enabled=False),
        ).rewrite_module(op)
        PatternRewriteWalker(
            GreedyRewritePatternApplier([FuseScaledDotProductAttention()], dce_enabled=False),
            apply_recursively=False,
        ).rewrite_module(op)
