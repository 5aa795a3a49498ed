"""CUDA lowering rule of ``nn.attention``: a ``window`` kernel, one thread per output
element ``out[b, h, i, c]``, streaming the keys once with the online softmax
(running max ``m``, running sum ``l``, running ``sum_j p_j * v[j, c]``, rescaled when the
max grows), so the scores never reach memory.

This is the portable rule every shape, mask kind, GQA grouping and dynamic length takes
(each thread recomputes its row's scores, D multiply-adds per key); it is correct, not
fast. NaN and +inf scores and fully masked rows follow the reference: the row is NaN, or
zeros with ``zero_undefined_rows``. A key whose probability is 0 still multiplies its
value (0 * NaN is NaN), as the reference's ``p @ v`` does."""

from __future__ import annotations

from partita.dialects import nn
from partita.lowering.cuda.cexpr import _c_float
from partita.lowering.cuda.flash_attention import (
    HEAD_DIMS,
    FlashConfig,
    flash_attention_source,
)
from partita.lowering.cuda.ops.reduction import y_decl
from partita.lowering.cuda.rules import window

_NEG_INF = "__int_as_float(0xff800000)"
_POS_INF = "__int_as_float(0x7f800000)"


def _p(d) -> str:
    return f"({d})"


def _dims(emitter, op: nn.AttentionOp) -> list:
    q, v = emitter.dims[op.query], emitter.dims[op.value]
    return [q[0], q[1], q[2], v[3]]


def _flash(emitter, op: nn.AttentionOp) -> tuple[list[str], int] | None:
    """The flash attention kernel (``partita.lowering.cuda.flash_attention``) for a kernel
    that is the op alone: f16 / bf16, BHSD, a head dim it is built for, no mask or a
    boolean key padding mask ``[B, 1, 1, Skv]``. Its blocks stride over the
    (query tile, batch x head) pairs."""
    dtype = str(op.result.type.element_type)
    head_dim = op.query.type.get_shape()[3]
    if dtype not in ("f16", "bf16") or op.layout != "BHSD" or head_dim not in HEAD_DIMS:
        return None
    if op.value.type.get_shape()[3] != head_dim:
        return None
    mask = "0"
    if op.mask is not None:
        shape = op.mask.type.get_shape()
        if op.mask_kind != "boolean" or len(shape) != 4 or tuple(shape[1:3]) != (1, 1):
            return None
        mask = "(const unsigned char*)in3"
    config = FlashConfig(dtype, head_dim, causal=op.causal, zero_undefined_rows=op.zero_undefined_rows)
    dq, dk = emitter.dims[op.query], emitter.dims[op.key]
    batch, heads, q_len, kv_heads, kv_len = (_p(d) for d in (dq[0], dq[1], dq[2], dk[1], dk[2]))
    T = emitter.index_type
    lines = [
        f"  const int q_tiles = ({q_len} + {config.block_m - 1}) / {config.block_m};",
        f"  const {T} tiles = ({T})q_tiles * {batch} * {heads};",
        f"  for ({T} t = blockIdx.x; t < tiles; t += gridDim.x)  // uniform per block",
        f"    {config.entry}_tile(in0, in1, in2, {mask}, out, {heads}, {kv_heads}, {q_len}, {kv_len},",
        f"        {_c_float(op.scale)}, (int)(t % q_tiles), (int)(t / q_tiles));",
    ]
    emitter.prelude.append(flash_attention_source(config))
    return lines, config.block[0]


@window(nn.AttentionOp, dims=_dims, kernel=_flash)
def _attention(emitter, op: nn.AttentionOp) -> list[str]:
    T = emitter.index_type
    bshd = op.layout == "BSHD"
    # The index of (batch, head, position, dim) in the op's layout.
    at = (lambda b_, h_, s_, d_: [b_, s_, h_, d_]) if bshd else (lambda b_, h_, s_, d_: [b_, h_, s_, d_])
    b, h, i, c = at(*emitter.out_index)  # the same swap maps the output index back
    dq, dk = emitter.dims[op.query], emitter.dims[op.key]
    _, heads, q_len, head_dim = at(*dq)
    _, kv_heads, kv_len, _ = at(*dk)
    hk, j, d = emitter.var("hk"), emitter.var("j"), emitter.var("d")
    lines = [
        # Query head h reads KV head h / (H / Hkv) (repeat_kv's interleaved expansion).
        f"    const {T} {hk} = {h} / ({_p(heads)} / {_p(kv_heads)});",
        f"    float m = {_NEG_INF}, l = 0.0f, acc = 0.0f;",
        "    bool undefined = false;",
        f"    for ({T} {j} = 0; {j} < {_p(kv_len)}; ++{j}) {{",
        "      float s = 0.0f;",
        f"      for ({T} {d} = 0; {d} < {_p(head_dim)}; ++{d})",
        f"        s += {emitter.load(op.query, at(b, h, i, d))} * {emitter.load(op.key, at(b, hk, j, d))};",
        f"      s *= {_c_float(op.scale)};",
    ]
    if op.mask is not None:
        scores = [dq[0], heads, q_len, kv_len]
        rank = len(op.mask.type.get_shape())
        index = emitter._broadcast_dims_index(emitter.dims[op.mask], scores[4 - rank:], [b, h, i, j][4 - rank:])
        value = emitter.load(op.mask, index)
        lines.append(f"      if (!{value}) s = {_NEG_INF};" if op.mask_kind == "boolean"
                     else f"      s += {value};")
    if op.causal:
        lines.append(f"      if ({j} > {i} + {_p(kv_len)} - {_p(q_len)}) s = {_NEG_INF};")
    lines += [
        f"      if (s != s || s == {_POS_INF}) undefined = true;",
        "      if (s > m) { const float r = expf(m - s); l *= r; acc *= r; m = s; }",
        f"      const float p = s == {_NEG_INF} ? 0.0f : expf(s - m);",
        "      l += p;",
        f"      acc += p * {emitter.load(op.value, at(b, hk, j, c))};",
        "    }",
        f"    const bool dead = undefined || m == {_NEG_INF};",
    ]
    rows = "0.0f" if op.zero_undefined_rows else "__int_as_float(0x7fc00000)"
    return [*lines, y_decl(emitter, op, f"dead ? {rows} : acc / l")]
