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
- no mask, a key padding mask ``[B | 1, 1, 1, Skv | 1]`` (boolean or additive), or a
  last-key mask (``last-key-mask``: a static cache read at a position; each split stops
  after it, so a step reads the keys up to the position only);
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

from xdsl.context import Context
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from partita.dialects import nn
from partita.transforms.chains import tensor_shape
from partita.transforms.target_utils import lowers_on_target

__all__ = ["MAX_SPLITS", "SplitKVAttention", "SplitKVDecode", "choose_splits"]

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


def _key_padding_mask(op: nn.AttentionOp) -> bool:
    """No mask, one of ``[B | 1, 1, 1, Skv | 1]`` (one value per batch row and key), or the
    last key of each batch row."""
    if op.mask is None or op.mask_kind == "last_key":
        return True
    shape = tensor_shape(op.mask)
    return len(shape) == 4 and shape[1:3] == (1, 1)


@dataclass
class SplitKVDecode(RewritePattern):
    """One-row ``nn.attention`` -> ``nn.attention_partial`` + ``nn.attention_combine``
    (see the module docstring for when)."""

    sms: int
    min_kv_len: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.AttentionOp, rewriter: PatternRewriter) -> None:
        swap = op.layout == "BSHD"
        q, k, v = tensor_shape(op.query), tensor_shape(op.key), tensor_shape(op.value)
        batch, heads, rows, head_dim = (q[0], q[2], q[1], q[3]) if swap else q
        kv_len = k[1] if swap else k[2]
        if rows != 1 or heads == DYNAMIC_INDEX or head_dim == DYNAMIC_INDEX or v[3] != head_dim:
            return
        if head_dim % 8 or not 8 <= head_dim <= 256 or not _key_padding_mask(op):
            return
        if kv_len != DYNAMIC_INDEX and kv_len < self.min_kv_len:
            return
        bh = (1 if batch == DYNAMIC_INDEX else batch) * heads
        splits = choose_splits(bh, None if kv_len == DYNAMIC_INDEX else kv_len, self.sms)
        if splits < 2:
            return
        mask = [] if op.mask is None else [op.mask]
        partial = nn.AttentionPartialOp(op.query, op.key, op.value, *mask, scale=op.scale,
                                        splits=splits, layout=op.layout, mask_fill=op.mask_fill)
        combine = nn.AttentionCombineOp(partial, result_type=op.result.type,
                                        zero_undefined_rows=op.zero_undefined_rows, layout=op.layout)
        rewriter.replace(op, [partial, combine])


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

