"""``last-key-mask``: the mask of a static KV cache read at a position becomes the position.

A static cache (Hugging Face's ``StaticCache``, what ``torch.export`` / TorchScript write
for compiled decoding) holds ``Skv`` key rows of which a decode step attends those up to
its position, by a mask the exporters build as ``arange(Skv) > position``, filled with
``finfo.min`` (``masked_fill``) or ``-inf``. ``fuse-attention`` makes that one
``nn.attention`` whose boolean mask is ``not(arange(Skv) > position)`` (or ``arange(Skv)
<= position``); its kernels then compute the mask, read every key row of the cache, and
weigh the hidden ones to zero.

This pass gives the attention the position itself as its mask (``mask_kind``
``"last_key"``, FlashAttention's ``seqused_k``): ``position`` an ``i64`` of one element or
``[B, 1, 1, 1]`` (one per batch row), reshaped to ``[1]`` / ``[B]``. The kernels stop at
it, so a step reads ``position + 1`` keys rather than ``Skv``, and the comparison, read
by nothing else, is erased (no kernel computes it).

When: ``mask_fill`` is ``-inf`` or at most ``HIDING_FILL`` (-1e9). A hidden key's weight
is ``exp(fill - max)``, 0 in f32 for any visible score above ``fill + 104``, so leaving it
out gives the masked rows for finite inputs; a NaN in a key or value after the position
is not read (the mask would multiply it by 0 into NaN). A negative position hides every
key, each scoring the fill, as the mask does.

Scope: the functions placed on the native target (``target``, ``cuda`` by default: its
kernels take the last-key mask), as ``split-kv-attention``'s; the driver runs it just
before that pass, after placement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.ir import SSAValue
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
from partita.ir.slices import producers
from partita.transforms.chains import tensor_shape
from partita.transforms.target_utils import lowers_on_target

__all__ = ["HIDING_FILL", "LastKeyMask", "StaticCachePosition", "cache_position"]

HIDING_FILL = -1e9
"""The largest ``mask_fill`` whose hidden keys may be left out: ``exp(fill - s)`` is 0 in
f32 for every visible score ``s`` above ``fill + 104``, and scores of -1e9 and below are
no attention's (``masked_fill(-1e9)`` and ``finfo.min`` are what exporters write)."""


def _iota(value: SSAValue, length: int) -> bool:
    """``value`` is a constant ``[1, ..., 1, length]`` holding ``0 .. length - 1``."""
    owner = value.owner
    shape = tensor_shape(value)
    if not isinstance(owner, nn.ConstantOp) or not shape or shape[-1] != length or any(d != 1 for d in shape[:-1]):
        return False
    return bool((np.asarray(constant_values(owner)).reshape(-1) == np.arange(length)).all())


def cache_position(op: nn.AttentionOp) -> SSAValue | None:
    """The position ``p`` of ``op``'s mask ``not(arange(Skv) > p)`` or ``arange(Skv) <= p``
    (``p`` an ``i64`` of one element, or ``[B, 1, 1, 1]``) when its hidden keys may be
    left out (``HIDING_FILL``); else None."""
    mask = op.mask
    if mask is None or op.mask_kind != "boolean" or op.mask_fill > HIDING_FILL:
        return None
    compare = mask.owner
    if isinstance(compare, nn.NotOp) and isinstance(compare.input.owner, nn.GreaterOp):
        compare = compare.input.owner
    elif not isinstance(compare, nn.LessEqualOp):
        return None
    iota, position = compare.lhs, compare.rhs
    if not _iota(iota, tensor_shape(op.key)[1 if op.layout == "BSHD" else 2]):
        return None
    shape = tensor_shape(position)
    if position.type.element_type != nn.LAST_KEY_TYPE or len(shape) > 4:
        return None
    padded = (1,) * (4 - len(shape)) + shape  # right-aligned to the scores [B, H, Sq, Skv]
    return position if padded[1:] == (1, 1, 1) and padded[0] != DYNAMIC_INDEX else None


@dataclass
class StaticCachePosition(RewritePattern):
    """``nn.attention`` masked up to a cache position -> its last-key mask (module
    docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.AttentionOp, rewriter: PatternRewriter) -> None:
        position = cache_position(op)
        if position is None:
            return
        assert op.mask is not None
        mask_ops = producers(op.mask)
        shape = tensor_shape(position)
        last = position
        if len(shape) != 1:  # [B, 1, 1, 1] -> [B]; one element of any other rank -> [1]
            reshape = nn.ReshapeOp(position, [shape[0] if len(shape) == 4 else 1])
            rewriter.insert_op(reshape)
            last = reshape.result
        attention = nn.AttentionOp(op.query, op.key, op.value, last, scale=op.scale, causal=op.causal,
                                   zero_undefined_rows=op.zero_undefined_rows, layout=op.layout,
                                   mask_fill=op.mask_fill, result_type=op.result.type)
        rewriter.replace_matched_op(attention)
        for dead in mask_ops:  # the comparison, once no other attention reads it
            if dead.parent is not None and all(not r.uses for r in dead.results):
                rewriter.erase_op(dead)


@dataclass(frozen=True)
class LastKeyMask(ModulePass):
    """Static-cache masks as last-key masks on the native CUDA target (module docstring)."""

    name = "last-key-mask"

    target: str = "cuda"
    """Kind name of the native target whose functions are rewritten."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for function in [f for f in op.ops if isinstance(f, FuncOp) and lowers_on_target(f, self.target)]:
            PatternRewriteWalker(GreedyRewritePatternApplier([StaticCachePosition()], dce_enabled=False),
                                 apply_recursively=False).rewrite_region(function.body)
