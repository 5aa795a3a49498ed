"""``split-kv-attention``: decode attention (one query row, a long KV cache) on the native
CUDA target becomes ``nn.attention_partial`` + ``nn.attention_combine`` (split-KV,
FlashDecoding's schedule).

One query row per (batch, head) is a bandwidth-bound pass over the keys and values: as
one ``nn.attention`` it runs ``B * H`` thread blocks (32 for B = 1, H = 32 on a GPU of
132 SMs) and most of the memory system idles. Split over ``splits`` key ranges, pass 1
runs ``B * H * splits`` blocks, each writing its partial softmax statistics and output
(an f32 tensor the memory planner places like any other), and pass 2 merges them.

An ``nn.attention`` is rewritten when the decode kernels take it:

- one query row (static ``Sq = 1``); ``causal`` is then a no-op (bottom-right aligned, the
  row sees every key) and is dropped;
- f16, bf16 or f32, ``D == Dv`` a static multiple of 8 up to 256, either layout;
- no mask, or a key padding mask ``[B | 1, 1, 1, Skv | 1]``, boolean or additive;
  a static cache's ``not(arange(Skv) > position)`` (or ``arange(Skv) <= position``,
  ``position`` an ``i64`` per batch row or one for all, ``mask_fill`` ``-inf`` or at most
  ``-1e30``) becomes the partial's last-key mask ``position`` (``last_key_mask``), so the
  keys after the position are never read: a step reads ``position + 1`` keys of the
  cache, not all of them. Their weights ``exp(fill - max)`` are 0 in f32 for every visible
  score above ``fill + 104``, so the rows equal the masked form's for finite inputs (a NaN
  in a key or value after the position is not read, as FlashAttention's ``seqused_k``);
  a negative position hides every key, as the mask does;
- a long enough KV: static ``Skv >= min-kv-len``, or dynamic (a KV cache that grows);
- more than one split is worth it (below).

``splits`` fills about two waves of the GPU: ``ceil(2 * sms / (B * H))`` blocks per
(batch, head), at most ``ceil(Skv / 128)`` (a split keeps 128 keys or more) for a static
``Skv`` and ``MAX_SPLITS`` for a dynamic one (a dynamic batch counts as 1). ``sms`` is a
pass option: no target option says how many SMs the device has, so it defaults to an
H100 SXM's 132.

Scope: the functions placed on the native target (``target``, ``cuda`` by default) that
``fuse-native-kernels`` will lower, i.e. function bodies whose ``byoc.target`` kind is
``target`` and public functions without a target; partitions of external codegens
(cuDNN, TensorRT: ``byoc.compiler``), primitive (already fused) and reference functions
are left alone. The driver runs it after placement, just before ``fuse-native-kernels``,
so Collage and the partitioners see one ``nn.attention`` and a cuDNN / TensorRT / host
placement keeps it whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from partita.dialects import nn
from partita.ir.constants import constant_values
from partita.transforms.target_utils import lowers_on_target

__all__ = ["HIDING_FILL", "MAX_SPLITS", "SplitKVAttention", "SplitKVDecode", "choose_splits", "last_key_mask"]

MAX_SPLITS = 64
"""Splits of a dynamic KV length: from 8K keys up, each still takes 128 or more."""
KEYS_PER_SPLIT = 128
"""The fewest keys worth a split of a static KV length."""


def choose_splits(batch_heads: int, kv_len: int | None, sms: int) -> int:
    """Splits per (batch, head): about two waves of ``sms`` blocks over ``batch_heads``
    rows, at most one per ``KEYS_PER_SPLIT`` keys (``kv_len`` None: dynamic, at most
    ``MAX_SPLITS``), at least 1."""
    want = -(-2 * sms // max(1, batch_heads))
    cap = MAX_SPLITS if kv_len is None else -(-kv_len // KEYS_PER_SPLIT)
    return max(1, min(want, cap))


def _shape(value) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def _key_padding_mask(op: nn.AttentionOp) -> bool:
    """No mask, or one of ``[B | 1, 1, 1, Skv | 1]`` (one value per batch row and key)."""
    if op.mask is None:
        return True
    shape = _shape(op.mask)
    return len(shape) == 4 and shape[1:3] == (1, 1)


HIDING_FILL = -1e30
"""The largest ``mask_fill`` whose hidden keys may be left out (``exp`` of it less any
score above ``fill + 104`` is 0 in f32)."""


def _iota(value) -> bool:
    """``value`` is a constant ``[1, ..., 1, S]`` holding ``0 .. S - 1``."""
    owner = value.owner
    if not isinstance(owner, nn.ConstantOp):
        return False
    shape = _shape(value)
    if not shape or any(d != 1 for d in shape[:-1]):
        return False
    values = np.asarray(constant_values(owner)).reshape(-1)
    return values.size == shape[-1] and bool((values == np.arange(shape[-1])).all())


def last_key_mask(op: nn.AttentionOp) -> SSAValue | None:
    """The position ``p`` of a static cache's mask ``not(arange(Skv) > p)`` or
    ``arange(Skv) <= p`` on ``op`` (``p`` an ``i64`` ``[B | 1, 1, 1, 1]`` or a single
    element, right-aligned to the scores), when its hidden keys may be left out
    (``HIDING_FILL``); else None."""
    mask = op.mask
    if mask is None or not isinstance(mask.owner, Operation) or op.mask_fill > HIDING_FILL:
        return None
    compare = mask.owner
    if isinstance(compare, nn.NotOp) and isinstance(compare.input.owner, nn.GreaterOp):
        compare = compare.input.owner
    elif not isinstance(compare, nn.LessEqualOp):
        return None
    iota, position = compare.lhs, compare.rhs
    if not _iota(iota) or _shape(iota)[-1] != _shape(op.key)[1 if op.layout == "BSHD" else 2]:
        return None
    shape = _shape(position)
    if position.type.element_type != nn.LAST_KEY_TYPE or len(shape) > 4:
        return None
    padded = (1,) * (4 - len(shape)) + shape
    return position if padded[1:] == (1, 1, 1) and padded[0] != DYNAMIC_INDEX else None


def _producers_in_order(value: SSAValue) -> list[Operation]:
    """``value``'s op, then the ops of its operands, depth first (consumers before producers)."""
    ops: list[Operation] = []
    pending = [value]
    while pending:
        v = pending.pop()
        if isinstance(v.owner, Operation) and v.owner not in ops:
            ops.append(v.owner)
            pending.extend(v.owner.operands)
    return ops


def _erase_unused(rewriter: PatternRewriter, ops: list[Operation]) -> None:
    """Erases each of ``ops`` (consumers first) whose results nothing reads any more."""
    for op in ops:
        if op.parent is not None and all(not r.uses for r in op.results):
            rewriter.erase_op(op)


@dataclass
class SplitKVDecode(RewritePattern):
    """One-row ``nn.attention`` -> ``nn.attention_partial`` + ``nn.attention_combine``
    (see the module docstring for when)."""

    sms: int
    min_kv_len: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.AttentionOp, rewriter: PatternRewriter) -> None:
        swap = op.layout == "BSHD"
        q, k, v = _shape(op.query), _shape(op.key), _shape(op.value)
        batch, heads, rows, head_dim = (q[0], q[2], q[1], q[3]) if swap else q
        kv_len = k[1] if swap else k[2]
        if rows != 1 or heads == DYNAMIC_INDEX or head_dim == DYNAMIC_INDEX or v[3] != head_dim:
            return
        position = last_key_mask(op)
        if head_dim % 8 or not 8 <= head_dim <= 256 or not (_key_padding_mask(op) or position is not None):
            return
        if kv_len != DYNAMIC_INDEX and kv_len < self.min_kv_len:
            return
        bh = (1 if batch == DYNAMIC_INDEX else batch) * heads
        splits = choose_splits(bh, None if kv_len == DYNAMIC_INDEX else kv_len, self.sms)
        if splits < 2:
            return
        new: list[Operation] = []
        mask = [] if op.mask is None else [op.mask]
        mask_ops = [] if op.mask is None else _producers_in_order(op.mask)
        if position is not None:
            shape = _shape(position)
            mask = [position]
            if len(shape) != 1:  # [B, 1, 1, 1] -> [B]; one element of any rank -> [1]
                new.append(last := nn.ReshapeOp(position, [shape[0] if len(shape) == 4 else 1]))
                mask = [last.result]
        partial = nn.AttentionPartialOp(op.query, op.key, op.value, *mask, scale=op.scale,
                                        splits=splits, layout=op.layout, mask_fill=op.mask_fill)
        combine = nn.AttentionCombineOp(partial, result_type=op.result.type,
                                        zero_undefined_rows=op.zero_undefined_rows, layout=op.layout)
        rewriter.replace(op, [*new, partial, combine])
        if position is not None:  # the mask's ops, once no other attention reads them
            _erase_unused(rewriter, mask_ops)


@dataclass(frozen=True)
class SplitKVAttention(ModulePass):
    """Split-KV decode attention on the native CUDA target (module docstring)."""

    name = "split-kv-attention"

    target: str = "cuda"
    """Kind name of the native target whose functions are rewritten."""
    sms: int = 132
    """Streaming multiprocessors of the device (an H100 SXM's by default)."""
    min_kv_len: int = 256
    """The shortest static KV length worth splitting."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pattern = SplitKVDecode(self.sms, self.min_kv_len)
        for function in [f for f in op.ops if isinstance(f, FuncOp) and lowers_on_target(f, self.target)]:
            PatternRewriteWalker(GreedyRewritePatternApplier([pattern], dce_enabled=False),
                                 apply_recursively=False).rewrite_region(function.body)

