"""ONNX ``Attention`` (opset 23+), decomposed into nn ops the way the operator's own function
body defines it, so that the pieces reach the kernels and patterns that already exist
(GEMM anchors, row-wise softmax, element-wise epilogues, cuDNN's attention pattern):

    Q*sqrt(scale) @ (K*sqrt(scale))^T -> softcap -> + bias -> softmax -> row guard -> @ V

- 3-D inputs ``[B, S, heads * D]`` are split into heads (``q_num_heads`` /
  ``kv_num_heads``) and merged back; ``past_key`` / ``past_value`` are concatenated on the
  sequence axis and returned as ``present_key`` / ``present_value``.
- Grouped-query attention repeats each KV head (interleaved, as ``np.repeat``) as the
  exporters' ``repeat_kv`` does (reshape, broadcast, reshape), the form ``fuse-attention``
  folds into the attention op's head grouping (no expanded K and V are materialized).
- The bias is the mask (a bool mask selects 0 / -inf, a float mask adds), padded with
  -inf to the KV length, plus the causal frontier ``j <= i + past_length`` when
  ``is_causal``.
- A row whose bias is entirely -inf has no key to attend: the softmax (NaN there) is
  replaced by 0, as ONNX specifies. With a constant bias the rows are known at import;
  with a run-time mask the guard selects on NaN.

Imported as the op's ONNX function body instead (op by op, ``UnsupportedVariant``):
``nonpad_kv_seqlen`` (external caches) and sliding windows.
"""

from __future__ import annotations

import math

import numpy as np
from xdsl.ir import SSAValue

from partita.dialects import nn
from partita.frontends.onnx.importer import Importer
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.values import fail, fail_variant, is_const, shape_of


def _input(ins: list, k: int):
    return ins[k] if len(ins) > k else None


def _heads(cx: Importer, x: SSAValue, heads: int) -> SSAValue:
    """``x[B, S, H * D]`` as ``[B, S, H, D]``."""
    b, s, hidden = shape_of(x)
    if hidden % heads:
        fail(f"hidden size {hidden} is not a multiple of {heads} heads")
    return cx.emit(nn.ReshapeOp(x, [b, s, heads, hidden // heads]))


def _split_heads(cx: Importer, x: SSAValue, heads: int) -> SSAValue:
    """``x[B, S, H * D]`` as ``[B, H, S, D]``."""
    return cx.emit(nn.TransposeOp(_heads(cx, x, heads), [0, 2, 1, 3]))


def _repeat_heads(cx: Importer, x: SSAValue, groups: int) -> SSAValue:
    """``np.repeat(x, groups, axis=1)`` for ``x[B, H, S, D]``."""
    b, h, s, d = shape_of(x)
    x = cx.emit(nn.ReshapeOp(x, [b, h, 1, s, d]))
    x = cx.emit(nn.BroadcastToOp(x, [b, h, groups, s, d]))
    return cx.emit(nn.ReshapeOp(x, [b, h * groups, s, d]))


def _scalar(cx: Importer, value: float, like: SSAValue) -> SSAValue:
    return cx.tensor(np.asarray(value, dtype=np.float64), like)


@converter("Attention")
def _attention(cx: Importer, ins, attrs):
    if _input(ins, 6) is not None:
        fail_variant("nonpad_kv_seqlen (an external KV cache) is not supported")
    if attrs.get("left_window_size", -1) >= 0 or attrs.get("right_window_size", -1) >= 0:
        fail_variant("sliding-window attention is not supported")
    q, k, v = (cx.tensor(x) for x in ins[:3])
    mask, past_k, past_v = _input(ins, 3), _input(ins, 4), _input(ins, 5)
    if (past_k is None) != (past_v is None):
        fail("past_key and past_value must be given together")
    rank = len(shape_of(q))
    if rank == 3:
        if "q_num_heads" not in attrs or "kv_num_heads" not in attrs:
            fail("3-D inputs need q_num_heads and kv_num_heads")
        q = _split_heads(cx, q, attrs["q_num_heads"])
        k = _split_heads(cx, k, attrs["kv_num_heads"])
        v = _split_heads(cx, v, attrs["kv_num_heads"])
    elif rank != 4:
        fail(f"Q must have rank 3 or 4, got {rank}")
    if nn.DYN in (*shape_of(q), *shape_of(k), *shape_of(v)):
        fail("dynamic dimensions are not supported")
    if past_k is not None:
        k = cx.emit(nn.ConcatenateOp([cx.tensor(past_k, k), k], axis=2))
        v = cx.emit(nn.ConcatenateOp([cx.tensor(past_v, v), v], axis=2))
    present_k, present_v = k, v
    past_len = shape_of(cx.tensor(past_k, k))[2] if past_k is not None else 0
    q_heads, kv_heads = shape_of(q)[1], shape_of(k)[1]
    if q_heads != kv_heads:
        if q_heads % kv_heads:
            fail(f"{q_heads} query heads cannot share {kv_heads} KV heads")
        k = _repeat_heads(cx, k, q_heads // kv_heads)
        v = _repeat_heads(cx, v, q_heads // kv_heads)

    q_len, kv_len = shape_of(q)[2], shape_of(k)[2]
    scale = attrs.get("scale", 1 / math.sqrt(shape_of(q)[3]))
    root = np.sqrt(np.float64(scale))
    qs = cx.emit(nn.MultiplyOp(q, _scalar(cx, root, q)))
    ks = cx.emit(nn.MultiplyOp(k, _scalar(cx, root, q)))
    qk = cx.emit(nn.MatmulOp(qs, cx.emit(nn.TransposeOp(ks, [0, 1, 3, 2]))))
    softcap = attrs.get("softcap", 0.0)
    if softcap > 0:
        capped = cx.emit(nn.TanhOp(cx.emit(nn.DivideOp(qk, _scalar(cx, softcap, q)))))
        qk = cx.emit(nn.MultiplyOp(capped, _scalar(cx, softcap, q)))

    bias, constant_bias = _bias(cx, q, mask, q_len, kv_len, past_len, bool(attrs.get("is_causal", 0)))
    scores = cx.emit(nn.AddOp(qk, bias)) if bias is not None else qk
    probs = cx.emit(nn.SoftmaxOp(scores, axis=-1))
    zero = _scalar(cx, 0.0, q)
    if constant_bias is not None:
        masked_rows = np.isneginf(constant_bias.max(axis=-1, keepdims=True))
        if masked_rows.any():
            probs = cx.emit(nn.WhereOp(cx.tensor(masked_rows), zero, probs))
    elif bias is not None:
        probs = cx.emit(nn.WhereOp(cx.emit(nn.IsNaNOp(probs)), zero, probs))

    mode = attrs.get("qk_matmul_output_mode", 0)
    qk_out = {0: qk, 1: qk, 2: scores, 3: probs}.get(mode)
    if qk_out is None:
        fail(f"qk_matmul_output_mode {mode} is not one of 0, 1, 2, 3")
    y = cx.emit(nn.MatmulOp(probs, v))
    if rank == 3:
        b, heads, s, d = shape_of(y)
        y = cx.emit(nn.ReshapeOp(cx.emit(nn.TransposeOp(y, [0, 2, 1, 3])), [b, s, heads * d]))
    return [y, present_k, present_v, qk_out]


def _bias(cx: Importer, q: SSAValue, mask, q_len: int, kv_len: int, past_len: int,
          causal: bool) -> tuple[SSAValue | None, np.ndarray | None]:
    """The additive bias (broadcastable to the scores) and, when it is a constant, its
    value (for the fully-masked-row guard)."""
    dtype = nn.numpy_dtype(q.type.element_type)
    causal_bias = None
    if causal:
        i = np.arange(q_len)[:, None]
        j = np.arange(kv_len)[None, :]
        causal_bias = np.where(j <= i + past_len, 0.0, -np.inf).astype(dtype)
    if mask is None:
        if causal_bias is None:
            return None, None
        return cx.tensor(causal_bias), causal_bias
    if is_const(mask):
        mask = np.asarray(mask)
        pad = kv_len - mask.shape[-1]
        if mask.dtype == np.bool_:
            mask = np.where(mask, 0.0, -np.inf)
        if pad > 0:
            mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)], constant_values=-np.inf)
        total = mask.astype(dtype) + (causal_bias if causal_bias is not None else dtype.type(0))
        return cx.tensor(total.astype(dtype)), total.astype(dtype)
    m = cx.tensor(mask)
    shape = shape_of(m)
    if nn.DYN in shape:
        fail("a mask with dynamic dimensions is not supported")
    if str(m.type.element_type) == "i1":
        m = cx.emit(nn.WhereOp(m, _scalar(cx, 0.0, q), _scalar(cx, -np.inf, q)))
    pad = kv_len - shape[-1]
    if pad > 0:
        m = cx.emit(nn.PadOp(m, [0] * len(shape), [0] * (len(shape) - 1) + [pad], pad_value=-math.inf))
    if causal_bias is not None:
        m = cx.emit(nn.AddOp(m, cx.tensor(causal_bias)))
    return m, None


@converter("RotaryEmbedding")
def _rotary_embedding(cx: Importer, ins, attrs):
    """ONNX ``RotaryEmbedding`` (opset 23) as ``nn.rotary_embedding`` on ``[B, H, S, D]``:
    the caches gathered at ``position_ids`` when given (else already ``[B, S, R / 2]``),
    a 3-D input ``[B, S, H * D]`` rotated as ``[B, S, H, D]`` (``layout = "BSHD"``: its
    heads split and merged by reshapes, no transpose)."""
    x, cos, sin = (cx.tensor(v) for v in ins[:3])
    positions = _input(ins, 3)
    if positions is not None:
        ids = cx.tensor(positions)
        cos, sin = cx.emit(nn.TakeOp(cos, ids, 0)), cx.emit(nn.TakeOp(sin, ids, 0))
    rank = len(shape_of(x))
    if rank == 3:
        if not attrs.get("num_heads"):
            fail("a 3-D input needs num_heads")
        b, s, hidden = shape_of(x)
        x = _heads(cx, x, attrs["num_heads"])
    elif rank != 4:
        fail(f"input must have rank 3 or 4, got {rank}")
    if len(shape_of(cos)) != 3 or len(shape_of(sin)) != 3:
        fail("cos_cache and sin_cache must be [batch, sequence, rotary_dim / 2] (or 2-D with position_ids)")
    y = cx.emit(nn.RotaryEmbeddingOp(x, cos, sin, interleaved=bool(attrs.get("interleaved", 0)),
                                     rotary_dim=int(attrs.get("rotary_embedding_dim", 0)),
                                     layout="BSHD" if rank == 3 else None))
    if rank == 3:
        y = cx.emit(nn.ReshapeOp(y, [b, s, hidden]))
    return [y]
