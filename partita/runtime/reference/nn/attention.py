"""NumPy reference of ``nn.attention`` (f16 / bf16 compute in f32, the result rounded once,
as the fused kernels do), of its split-KV decode pair ``nn.attention_partial`` /
``nn.attention_combine``, and of ``nn.rotary_embedding``."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.dialects import nn
from partita.runtime.reference.nn.base import compute_type, store


def _last_keys(scores, v, last, fill):
    """``scores [B, H, Sq, Skv]`` and ``v [B, H, Skv, Dv]`` under a last-key mask: a key after
    its batch row's last scores ``fill``, and is left out (score -inf, value 0: never read)
    when the last key is not negative."""
    last = np.broadcast_to(np.asarray(last).reshape(-1), (scores.shape[0],))
    hidden = np.arange(scores.shape[-1])[None, :] > last[:, None]  # [B, Skv]
    left_out = hidden & (last >= 0)[:, None]
    scores = np.where(hidden[:, None, None, :], scores.dtype.type(fill), scores)
    scores = np.where(left_out[:, None, None, :], -np.inf, scores).astype(scores.dtype)
    return scores, np.where(left_out[:, None, :, None], v.dtype.type(0), v)


def _scores(q, k, mask, scale, fill=-np.inf):
    """``scale * q @ k^T`` with the mask applied (KV heads repeated for GQA): a boolean mask
    makes the scores it leaves out ``fill``, a float one is added (a last-key mask:
    ``_last_keys``)."""
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    scores = (q @ k.swapaxes(-1, -2)) * q.dtype.type(scale)
    if mask is None or mask.dtype == np.int64:
        return scores
    if mask.dtype == np.bool_:
        return np.where(mask, scores, fill).astype(q.dtype)
    return scores + compute_type(mask)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, *,
              scale: float, causal: bool, zero_undefined_rows: bool, mask_fill: float = -np.inf) -> np.ndarray:
    """``softmax(scale * q @ k^T [+ mask], keys) @ v`` with the variants of ``nn.attention``
    (``q``, ``k``, ``v`` in their compute type)."""
    v = np.repeat(v, q.shape[1] // v.shape[1], axis=1)  # query head h reads KV head h // groups
    with np.errstate(invalid="ignore", over="ignore"):
        scores = _scores(q, k, mask, scale, mask_fill)
        if mask is not None and mask.dtype == np.int64:
            scores, v = _last_keys(scores, v, mask, mask_fill)
        if causal:
            sq, skv = scores.shape[-2:]
            keep = np.arange(skv)[None, :] <= np.arange(sq)[:, None] + (skv - sq)
            scores = np.where(keep, scores, mask_fill).astype(q.dtype)
        peak = scores.max(axis=-1, keepdims=True)
        e = np.exp(scores - peak)
        p = e / e.sum(axis=-1, keepdims=True)
        if zero_undefined_rows:
            p = np.where(np.isnan(p), q.dtype.type(0), p)
        return p @ v


def attention_partial(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, *,
                      scale: float, splits: int, mask_fill: float = -np.inf) -> np.ndarray:
    """The per-split ``[o, m, l]`` of ``nn.attention_partial`` for ``q[B, H, 1, D]`` (BHSD,
    compute type): ``[B, H, splits, Dv + 2]`` in f32 (f64 for f64 inputs)."""
    v = np.repeat(v, q.shape[1] // v.shape[1], axis=1)
    b, h, dv = q.shape[0], q.shape[1], v.shape[3]
    out_type = np.promote_types(q.dtype, np.float32)
    out = np.empty((b, h, splits, dv + 2), out_type)
    kv_len = k.shape[2]
    chunk = -(-kv_len // splits)
    with np.errstate(invalid="ignore", over="ignore"):
        scores = _scores(q, k, mask, scale, mask_fill)
        if mask is not None and mask.dtype == np.int64:
            scores, v = _last_keys(np.broadcast_to(scores, (b, h, 1, kv_len)), v, mask, mask_fill)
        x = scores[:, :, 0, :]  # [B, H, Skv]
        x = np.broadcast_to(x, (b, h, kv_len))
        for s in range(splits):
            lo, hi = min(s * chunk, kv_len), min((s + 1) * chunk, kv_len)
            xs, vs = x[..., lo:hi], v[:, :, lo:hi, :]
            undefined = (np.isnan(xs) | (xs == np.inf)).any(axis=-1)
            m = xs.max(axis=-1, initial=-np.inf)
            e = np.where(xs == -np.inf, 0, np.exp(xs - np.where(m == -np.inf, 0, m)[..., None]))
            out[:, :, s, :dv] = (e[..., None, :] @ vs)[..., 0, :]
            out[:, :, s, dv] = m
            out[:, :, s, dv + 1] = e.sum(axis=-1)
            out[:, :, s][undefined] = np.nan
    return out


def attention_combine(partial: np.ndarray, *, zero_undefined_rows: bool) -> np.ndarray:
    """``nn.attention_combine``: the splits' partials ``[B, H, splits, Dv + 2]`` merged into
    the rows ``[B, H, 1, Dv]`` (f32 or f64, the partial's type)."""
    o, m, total = partial[..., :-2], partial[..., -2], partial[..., -1]
    with np.errstate(invalid="ignore", over="ignore"):
        peak = m.max(axis=-1, keepdims=True)  # NaN when any split's is
        w = np.where(m == -np.inf, 0, np.exp(m - peak))
        row = (w[..., None] * o).sum(axis=-2) / (w * total).sum(axis=-1, keepdims=True)
    undefined = np.isnan(peak) | (peak == -np.inf)
    fill = 0 if zero_undefined_rows else np.nan
    return np.where(undefined, fill, row)[:, :, None, :]


def rotary_embedding(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, *, interleaved: bool,
                     rotary_dim: int) -> np.ndarray:
    """RoPE of ``x[B, H, S, D]`` with ``cos`` / ``sin`` ``[B, S, R / 2]`` (see
    ``nn.rotary_embedding``), in ``x``'s compute type."""
    r = rotary_dim or x.shape[-1]
    c, s = cos[:, None], sin[:, None]  # [B, 1, S, R / 2]: shared by the heads
    rot = x[..., :r]
    if interleaved:
        first, second = rot[..., 0::2], rot[..., 1::2]
    else:
        first, second = rot[..., : r // 2], rot[..., r // 2:]
    out_first, out_second = first * c - second * s, second * c + first * s
    out = x.copy()
    if interleaved:
        out[..., 0:r:2], out[..., 1:r:2] = out_first, out_second
    else:
        out[..., : r // 2], out[..., r // 2: r] = out_first, out_second
    return out


@register_impls
class AttentionFunctions(InterpreterFunctions):
    """Reference semantics of the ``nn`` attention family."""

    @impl(nn.AttentionOp)
    def run_attention(self, interpreter: Interpreter, op: nn.AttentionOp, args: tuple[Any, ...]):
        q, k, v = (compute_type(a) for a in args[:3])
        if op.layout == "BSHD":
            q, k, v = (x.swapaxes(1, 2) for x in (q, k, v))
        mask = np.asarray(args[3]) if len(args) > 3 else None
        out = attention(q, k, v, mask, scale=op.scale, causal=op.causal,
                        zero_undefined_rows=op.zero_undefined_rows, mask_fill=op.mask_fill)
        return store(op, out.swapaxes(1, 2) if op.layout == "BSHD" else out)

    @impl(nn.AttentionPartialOp)
    def run_attention_partial(self, interpreter: Interpreter, op: nn.AttentionPartialOp,
                              args: tuple[Any, ...]):
        q, k, v = (compute_type(a) for a in args[:3])
        if op.layout == "BSHD":
            q, k, v = (x.swapaxes(1, 2) for x in (q, k, v))
        mask = np.asarray(args[3]) if len(args) > 3 else None
        return store(op, attention_partial(q, k, v, mask, scale=op.scale, splits=op.splits,
                                           mask_fill=op.mask_fill))

    @impl(nn.AttentionCombineOp)
    def run_attention_combine(self, interpreter: Interpreter, op: nn.AttentionCombineOp,
                              args: tuple[Any, ...]):
        out = attention_combine(np.asarray(args[0]), zero_undefined_rows=op.zero_undefined_rows)
        return store(op, out.swapaxes(1, 2) if op.layout == "BSHD" else out)

    @impl(nn.RotaryEmbeddingOp)
    def run_rotary_embedding(self, interpreter: Interpreter, op: nn.RotaryEmbeddingOp, args: tuple[Any, ...]):
        x, cos, sin = (compute_type(a) for a in args)
        bshd = op.layout == "BSHD"
        out = rotary_embedding(x.swapaxes(1, 2) if bshd else x, cos, sin, interleaved=op.interleaved,
                               rotary_dim=op.rotary_dim)
        return store(op, out.swapaxes(1, 2) if bshd else out)
