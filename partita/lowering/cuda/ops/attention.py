"""CUDA lowering rules of ``nn.attention`` and its split-KV pair. ``nn.attention`` is a
``window`` kernel with three schedules, all streaming the keys once with the online
softmax (running max ``m``, running sum ``l``, running ``sum_j p_j * v[j, c]``, rescaled
when the max grows), so the scores never reach memory:

* **flash** (``partita.lowering.cuda.flash_attention``): f16 / bf16 tensor-core tiles, for
  the op alone with no mask or a boolean key padding mask; Q, K and V kernel arguments or
  BSHD head views of a packed QKV projection (``_token_rows``);
* **rows**: the op alone otherwise (f32, any mask, any head dim up to 256): one warp per
  query row, its lanes splitting the head dim, the block's rows (same batch and head)
  sharing each tile of keys and values staged in shared memory. A key costs one product per
  head-dim element and a warp reduction, nothing recomputed per output column;
* **per element**: the portable fallback (an epilogue fused after the op, a head dim past
  256 or not static): one thread per output element ``out[b, h, i, c]``, each recomputing
  its row's scores (D multiply-adds per key); correct, not fast.

Split-KV decode (``split-kv-attention``) has two ops of its own:

* ``nn.attention_partial``: the **decode** schedule (``flash_attention.DecodeConfig``:
  16-byte K / V loads by lane groups, one block per (split, batch x head) pair, blocks
  grid-striding over the pairs) for f16 / bf16 / f32, D = Dv a multiple of 8 up to 256,
  no mask, a key padding mask or a last-key mask, Q a kernel argument or a head split of a packed QKV row
  (``_query_rows``); else a per-element kernel over the split's keys;
* ``nn.attention_combine``: per element, the splits' partials rescaled to their common
  maximum (a short tail: the partials are ``B * H * splits * (D + 2)`` floats).

The op's rule ``reads_views``: Q, K, V (and the mask) may be index views of kernel arguments
(GPT-2's ``c_attn`` output split by ``nn.strided_slice`` into Q, K and V, each reshaped into
heads), which the kernel reads where they lie instead of three kernels copying them out.

NaN and +inf scores and fully masked rows follow the reference in every schedule: the row is
NaN, or zeros with ``zero_undefined_rows``; with a finite ``mask_fill`` hidden keys score the
fill, so a fully masked row averages the values (the rows, per-element, decode and flash schedules).
A key whose probability is 0 still multiplies
its value (0 * NaN is NaN), as the reference's ``p @ v`` does. A last-key mask (a static
cache read at a position) is no key padding mask for flash; the rows, per-element and
decode schedules stop each batch row's keys after its last (``_key_stop``), so the keys
after it are never read.

``nn.rotary_embedding`` is a ``window`` kernel too: each output element reads itself and
its rotation pair, and the pair's cos and sin: table loads, or (``computes``) the injective
ops making the tables run where they are read, as FlashInfer's RoPE computes the angle from
the position: an exporter's ``cos(positions x inv_freq)`` is no kernel of its own."""

from __future__ import annotations

from xdsl.ir import BlockArgument

from partita.dialects import nn
from partita.lowering.cuda.cexpr import _c_float
from partita.lowering.cuda.flash_attention import (
    DecodeConfig,
    FlashConfig,
    flash_attention_source,
    flash_decode_source,
    head_dim_supported,
)
from partita.lowering.cuda.ops.indexing import derived_dims
from partita.lowering.cuda.ops.reduction import y_decl
from partita.lowering.cuda.rules import WholeKernel, window

_NEG_INF = "__int_as_float(0xff800000)"
_POS_INF = "__int_as_float(0x7f800000)"


def _p(d) -> str:
    return f"({d})"


def _flash(emitter, op: nn.AttentionOp) -> WholeKernel | None:
    """The flash attention kernel (``partita.lowering.cuda.flash_attention``) for a kernel
    that is the op alone: f16 / bf16, BHSD or BSHD (read through its strides), a head dim
    that is a multiple of 8 (below 32: zero-padded in registers), no mask or a boolean
    key padding mask ``[B | 1, 1, 1, Skv | 1]``. Its blocks stride over the (query tile,
    batch x head) pairs, and it launches one for each (``WindowRecord.block_rows``), with
    the dynamic shared memory of Q in shared memory past D = 64 (``FlashConfig.dynamic_smem``).
    Compiled for ``sm_90a`` it is the wgmma form (``FlashConfig.wgmma``)."""
    dtype = str(op.result.type.element_type)
    head_dim = op.query.type.get_shape()[3]
    if dtype not in ("f16", "bf16") or not head_dim_supported(head_dim):
        return None
    if op.value.type.get_shape()[3] != head_dim:
        return None
    strides = _mask_strides(emitter, op)
    rows = [_token_rows(emitter, v, op.layout) for v in (op.query, op.key, op.value)]
    if strides is None or op.mask_kind in ("additive", "last_key") or None in rows:
        return None
    if op.mask is not None and not isinstance(op.mask, BlockArgument):
        return None
    (q, q_row), (k, k_row), (v, v_row) = rows  # type: ignore[misc]
    mask = "0" if op.mask is None else f"(const unsigned char*)in{op.mask.index}"
    T = emitter.index_type
    # (batch, heads, seq) of query and key in the op's layout
    axes = (0, 2, 1) if op.layout == "BSHD" else (0, 1, 2)
    dq, dk = emitter.dims[op.query], emitter.dims[op.key]
    batch, heads, q_len = (_p(dq[a]) for a in axes)
    kv_heads, kv_len = _p(dk[axes[1]]), _p(dk[axes[2]])
    config = FlashConfig(dtype, head_dim, causal=op.causal, zero_undefined_rows=op.zero_undefined_rows,
                         layout=op.layout, mask_fill=op.mask_fill, positive_scale=op.scale > 0,
                         wgmma=emitter.arch == "sm_90a")  # FlashAttention-3's instruction
    lines = [
        f"  const int q_tiles = ({q_len} + {config.block_m - 1}) / {config.block_m};",
        f"  const {T} tiles = ({T})q_tiles * {batch} * {heads};",
        f"  for ({T} t = blockIdx.x; t < tiles; t += gridDim.x)  // uniform per block",
        f"    {config.entry}_tile({q}, {k}, {v}, {mask}, out, {heads}, {kv_heads}, {q_len}, {kv_len},",
        f"        {_c_float(op.scale)}, (int)(t % q_tiles), (int)(t / q_tiles), {strides}, {q_row}, {k_row}, {v_row});",
    ]
    emitter.prelude.append(flash_attention_source(config))
    # a block per query tile
    return WholeKernel(lines, config.block[0], (_query_axis(op), config.block_m), config.dynamic_smem)


def _token_rows(emitter, value, layout: str) -> tuple[str, str] | None:
    """``(pointer, token row stride)`` the flash kernel reads ``value`` through, or None:
    a kernel argument (BSHD rows ``H * D`` apart), or, in BSHD, the head split
    ``reshape([..., H * D] -> [B, S, H, D])`` of a kernel argument or of its last-axis
    slice ``[..., a:a + H * D]`` out of ``[..., W]`` (a packed QKV projection: tokens are
    the rows of W, in order whatever the leading dims, so rows ``W`` apart and the pointer
    advanced by ``a``). ``cp.async`` copies 16 bytes: ``a`` and ``W`` are multiples of 8
    elements."""
    if isinstance(value, BlockArgument):
        dims = emitter.dims[value]
        return f"in{value.index}", "0" if layout == "BHSD" else f"(long long){_p(dims[2])} * {_p(dims[3])}"
    if layout == "BSHD" and isinstance(value.owner, nn.StridedSliceOp):
        return _head_slice_rows(value.owner)
    if layout != "BSHD" or not isinstance(value.owner, nn.ReshapeOp):
        return None
    split = value.owner.input
    heads, dim = value.type.get_shape()[2:]
    if split.type.get_shape()[-1] != heads * dim or heads < 0 or dim < 0:
        return None
    packed = _packed_row(split, 8)
    return None if packed is None else (packed[0], str(packed[1]))


def _packed_row(value, vec: int) -> tuple[str, int] | None:
    """``(pointer, row width)`` when ``value`` is a kernel argument ``[..., W]`` or its
    last-axis slice ``[..., a:b]`` (the other axes whole): its rows are ``W`` elements
    apart, the pointer advanced by ``a``; both multiples of ``vec`` elements (16-byte
    loads), else None."""
    start = 0
    if isinstance(value.owner, nn.StridedSliceOp):
        sliced = value.owner
        *lead, last = range(len(sliced.input.type.get_shape()))
        cols = sliced.static_range(last)
        if not all(sliced.keeps_whole(a) for a in lead) or cols is None or cols.step != 1 or last in sliced.targets:
            return None
        start, value = cols.start, sliced.input
    width = value.type.get_shape()[-1] if isinstance(value, BlockArgument) else -1
    if width < 0 or width % vec or start % vec:
        return None
    return f"in{value.index}" + (f" + {start}" if start else ""), width


def _query_rows(emitter, op: nn.AttentionPartialOp, vec: int) -> tuple[str, str] | None:
    """``(pointer, batch stride)`` of a decode step's query (one row of ``H * D`` per batch,
    heads ``D`` apart, in either layout), or None: a kernel argument (rows ``H * D``
    apart), or reshapes of one or of its last-axis slice ``[..., a:a + H * D]`` out of
    ``[..., W]`` (Q of a packed QKV projection: rows ``W`` apart, the pointer advanced by
    ``a``). The query row moves in 16-byte loads: ``a`` and ``W`` are multiples of ``vec``
    elements."""
    value = op.query
    if isinstance(value, BlockArgument):
        _, heads, _, head_dim = _layout(op)(*emitter.dims[value])
        return f"in{value.index}", f"(long long){_p(heads)} * {head_dim}"
    source = value
    while isinstance(source.owner, nn.ReshapeOp):
        source = source.owner.input
    shape = value.type.get_shape()
    row = shape[2] * shape[3] if op.layout == "BSHD" else shape[1] * shape[3]
    if source is value or min(shape[1:]) < 0 or source.type.get_shape()[-1] != row:
        return None
    packed = _packed_row(source, vec)
    return None if packed is None else (packed[0], f"{packed[1]}LL")


def _head_slice_rows(sliced: nn.StridedSliceOp) -> tuple[str, str] | None:
    """``(pointer, token row stride)`` of heads ``[h0, h1)`` of a BSHD kernel argument
    ``[B, S, H, D]`` (Q's and K's heads of one merged rotary embedding's output): rows
    ``H * D`` apart, the pointer advanced by ``h0 * D``."""
    source = sliced.input
    shape = source.type.get_shape()
    if not isinstance(source, BlockArgument) or len(shape) != 4 or sliced.refs or shape[3] < 0:
        return None
    heads = sliced.static_range(2)
    if not all(sliced.keeps_whole(a) for a in (0, 1, 3)) or heads is None or heads.step != 1 \
            or (shape[2] * shape[3]) % 8 or (heads.start * shape[3]) % 8:
        return None
    start = heads.start * shape[3]
    return f"in{source.index}" + (f" + {start}" if start else ""), str(shape[2] * shape[3])


ROWS_MAX_HEAD_DIM = 256
"""Past this (8 values a lane), the rows schedule would hold too much in registers."""
ROWS_TILE_FLOATS = 4096
"""Shared memory per key tile, in floats (16 KB): K and V rows of the tile together."""


def _layout(op: nn.AttentionOp):
    """``at(b, h, s, d)``: the index of (batch, head, position, dim) in the op's layout."""
    if op.layout == "BSHD":
        return lambda b_, h_, s_, d_: [b_, s_, h_, d_]
    return lambda b_, h_, s_, d_: [b_, h_, s_, d_]


def _key_stop(emitter, op: nn.AttentionOp | nn.AttentionPartialOp, b: str, end: str,
              indent: str) -> tuple[list[str], str]:
    """``(lines, C expression)``: where batch row ``b``'s loop over the keys stops, ``end``
    or, with a last-key mask, right after its last key (``last``, declared here; a negative
    one cuts nothing: ``_mask_lines`` then hides every key), so the keys after it are never
    read."""
    if op.mask_kind != "last_key":
        return [], end
    T = emitter.index_type
    batch = emitter.dims[op.query][0]
    last = emitter.load(op.mask, emitter._broadcast_dims_index(emitter.dims[op.mask], [batch], [b]))
    stop = emitter.var("stop")
    return [f"{indent}const long long last = {last};",
            f"{indent}const {T} {stop} = last >= 0 && last + 1 < {end} ? ({T})(last + 1) : {end};"], stop


def _mask_lines(emitter, op: nn.AttentionOp, b: str, h: str, i: str, j: str, indent: str) -> list[str]:
    """The mask and causal rules on the score ``s`` of query ``i`` and key ``j``."""
    at = _layout(op)
    dq, dk = emitter.dims[op.query], emitter.dims[op.key]
    _, heads, q_len, _ = at(*dq)
    _, _, kv_len, _ = at(*dk)
    lines, hidden = [], _c_float(op.mask_fill)  # a hidden key's score: -inf unless masked_fill's
    causal = isinstance(op, nn.AttentionOp) and op.causal  # nn.attention_partial: one row, no frontier
    if op.mask_kind == "last_key":  # declared by _key_stop
        lines.append(f"{indent}if ({j} > last) s = {hidden};")
    elif op.mask is not None:
        scores = [dq[0], heads, q_len, kv_len]
        rank = len(op.mask.type.get_shape())
        index = emitter._broadcast_dims_index(emitter.dims[op.mask], scores[4 - rank:], [b, h, i, j][4 - rank:])
        value = emitter.load(op.mask, index)
        lines.append(f"{indent}if (!{value}) s = {hidden};" if op.mask_kind == "boolean"
                     else f"{indent}s += {value};")
    if causal:
        lines.append(f"{indent}if ({j} > {i} + {_p(kv_len)} - {_p(q_len)}) s = {hidden};")
    return lines


def _rows(emitter, op: nn.AttentionOp) -> WholeKernel | None:
    """The rows schedule (see the module docstring): ``warps`` query rows of one (batch,
    head) a block, keys staged ``tile`` at a time. Every thread of the block runs every
    loop (rows past the sequence compute on a clamped row and store nothing), so the
    barriers and warp shuffles are uniform."""
    at = _layout(op)
    T = emitter.index_type
    dq, dk, dv = emitter.dims[op.query], emitter.dims[op.key], emitter.dims[op.value]
    batch, heads, q_len, head_dim = at(*dq)
    _, kv_heads, kv_len, _ = at(*dk)
    value_dim = at(*dv)[3]
    if not isinstance(head_dim, int) or not isinstance(value_dim, int):
        return None
    if max(head_dim, value_dim) > ROWS_MAX_HEAD_DIM:
        return None
    warps = 8 if isinstance(q_len, int) and q_len >= 64 else 4
    tile = 32
    while tile > 1 and tile * (head_dim + value_dim) > ROWS_TILE_FLOATS:
        tile //= 2
    qpl, vpl = -(-head_dim // 32), -(-value_dim // 32)  # values a lane holds
    v = emitter.var
    ks, vs, lane, warp = v("ks"), v("vs"), v("lane"), v("warp")
    q_tiles, tiles, t = v("q_tiles"), v("tiles"), v("t")
    b, h, hk, i, raw, active = v("b"), v("h"), v("hk"), v("i"), v("i_raw"), v("active")
    qv, acc, j0, n, jj, j, e, c = v("qv"), v("acc"), v("kstart"), v("n"), v("jj"), v("j"), v("e"), v("c")
    undefined, rows = v("undefined"), "0.0f" if op.zero_undefined_rows else "__int_as_float(0x7fc00000)"
    stop_lines, stop = _key_stop(emitter, op, b, _p(kv_len), "    ")  # uniform per block: one (batch, head)
    out_t = str(op.result.type.element_type)
    store = lambda x: emitter.stored(x, out_t)  # noqa: E731
    lines = [
        f"  __shared__ float {ks}[{tile}][{head_dim}], {vs}[{tile}][{value_dim}];",
        f"  const int {lane} = threadIdx.x % 32, {warp} = threadIdx.x / 32;",
        f"  const {T} {q_tiles} = ({_p(q_len)} + {warps - 1}) / {warps};",
        f"  const {T} {tiles} = {q_tiles} * {_p(batch)} * {_p(heads)};",
        f"  for ({T} {t} = blockIdx.x; {t} < {tiles}; {t} += gridDim.x) {{  // uniform per block",
        f"    const {T} {b} = {t} / {q_tiles} / {_p(heads)};",
        f"    const {T} {h} = {t} / {q_tiles} % {_p(heads)};",
        # Query head h reads KV head h / (H / Hkv) (repeat_kv's interleaved expansion).
        f"    const {T} {hk} = {h} / ({_p(heads)} / {_p(kv_heads)});",
        *stop_lines,
        f"    const {T} {raw} = {t} % {q_tiles} * {warps} + {warp};",
        f"    const bool {active} = {raw} < {_p(q_len)};",
        f"    const {T} {i} = {active} ? {raw} : {_p(q_len)} - 1;",
        f"    float {qv}[{qpl}], {acc}[{vpl}];",
        "    #pragma unroll",
        f"    for (int u = 0; u < {qpl}; ++u) {{",
        f"      const {T} {c} = {lane} + 32 * u;",
        f"      {qv}[u] = {c} < {head_dim} ? {emitter.load(op.query, at(b, h, i, c))} : 0.0f;",
        "    }",
        "    #pragma unroll",
        f"    for (int u = 0; u < {vpl}; ++u) {acc}[u] = 0.0f;",
        f"    float m = {_NEG_INF}, l = 0.0f;",
        f"    bool {undefined} = false;",
        f"    for ({T} {j0} = 0; {j0} < {stop}; {j0} += {tile}) {{",
        f"      const int {n} = (int)({stop} - {j0} < {tile} ? {stop} - {j0} : {tile});",
        "      __syncthreads();  // the previous tile is read by every warp",
    ]
    for buf, operand, dim in ((ks, op.key, head_dim), (vs, op.value, value_dim)):
        lines += [
            f"      for (int {e} = threadIdx.x; {e} < {tile * dim}; {e} += blockDim.x) {{",
            f"        const {T} {j} = {j0} + {e} / {dim}, {c} = {e} % {dim};",
            f"        {buf}[{e} / {dim}][{c}] = {e} / {dim} < {n} ? {emitter.load(operand, at(b, hk, j, c))} : 0.0f;",
            "      }",
        ]
    lines += [
        "      __syncthreads();",
        f"      for (int {jj} = 0; {jj} < {n}; ++{jj}) {{",
        f"        const {T} {j} = {j0} + {jj};",
        "        float s = 0.0f;",
        "        #pragma unroll",
        f"        for (int u = 0; u < {qpl}; ++u)",
        f"          if ({lane} + 32 * u < {head_dim}) s += {qv}[u] * {ks}[{jj}][{lane} + 32 * u];",
        "        #pragma unroll",
        "        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);",
        f"        s *= {_c_float(op.scale)};",
        *_mask_lines(emitter, op, b, h, i, j, "        "),
        f"        if (s != s || s == {_POS_INF}) {undefined} = true;",
        "        if (s > m) {",
        "          const float r = expf(m - s);",
        "          l *= r;",
        "          #pragma unroll",
        f"          for (int u = 0; u < {vpl}; ++u) {acc}[u] *= r;",
        "          m = s;",
        "        }",
        f"        const float p = s == {_NEG_INF} ? 0.0f : expf(s - m);",
        "        l += p;",
        "        #pragma unroll",
        f"        for (int u = 0; u < {vpl}; ++u)",
        f"          if ({lane} + 32 * u < {value_dim}) {acc}[u] += p * {vs}[{jj}][{lane} + 32 * u];",
        "      }",
        "    }",
        f"    const bool dead = {undefined} || m == {_NEG_INF};",
        f"    if ({active}) {{",
        "      #pragma unroll",
        f"      for (int u = 0; u < {vpl}; ++u) {{",
        f"        const {T} {c} = {lane} + 32 * u;",
        f"        if ({c} < {value_dim}) out[{emitter._linear(emitter.out_dims, at(b, h, i, c))}] = "
        f"{store(f'dead ? {rows} : {acc}[u] / l')};",
        "      }",
        "    }",
        "  }",
    ]
    return WholeKernel(lines, 32 * warps, (_query_axis(op), warps))  # a block per group of rows


def _query_axis(op: nn.AttentionOp) -> int:
    """The query rows' axis of the result: ``[B, H, Sq, Dv]`` or, BSHD, ``[B, Sq, H, Dv]``."""
    return 1 if op.layout == "BSHD" else 2


def _schedule(emitter, op: nn.AttentionOp) -> WholeKernel | None:
    """The op alone in its kernel: flash where it applies, else the rows schedule."""
    return _flash(emitter, op) or _rows(emitter, op)


@window(nn.AttentionOp, dims=derived_dims, kernel=_schedule, reads_views=True)
def _attention(emitter, op: nn.AttentionOp) -> list[str]:
    T = emitter.index_type
    at = _layout(op)
    b, h, i, c = at(*emitter.out_index)  # the same swap maps the output index back
    dq, dk = emitter.dims[op.query], emitter.dims[op.key]
    _, heads, q_len, head_dim = at(*dq)
    _, kv_heads, kv_len, _ = at(*dk)
    hk, j, d = emitter.var("hk"), emitter.var("j"), emitter.var("d")
    stop_lines, stop = _key_stop(emitter, op, b, _p(kv_len), "    ")
    lines = [
        # Query head h reads KV head h / (H / Hkv) (repeat_kv's interleaved expansion).
        f"    const {T} {hk} = {h} / ({_p(heads)} / {_p(kv_heads)});",
        *stop_lines,
        f"    float m = {_NEG_INF}, l = 0.0f, acc = 0.0f;",
        "    bool undefined = false;",
        f"    for ({T} {j} = 0; {j} < {stop}; ++{j}) {{",
        "      float s = 0.0f;",
        f"      for ({T} {d} = 0; {d} < {_p(head_dim)}; ++{d})",
        f"        s += {emitter.load(op.query, at(b, h, i, d))} * {emitter.load(op.key, at(b, hk, j, d))};",
        f"      s *= {_c_float(op.scale)};",
    ]
    lines += _mask_lines(emitter, op, b, h, i, j, "      ")
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


def _mask_strides(emitter, op) -> str | None:
    """``batch stride, key stride`` of a mask the flash and decode kernels take: a key
    padding mask ``[B | 1, 1, 1, Skv | 1]`` or a last-key mask ``[B | 1]`` (0 on a
    broadcast axis); ``"0, 0"`` without a mask, None for any other mask."""
    if op.mask is None:
        return "0, 0"
    shape = op.mask.type.get_shape()
    if op.mask_kind == "last_key":  # [B | 1]: one last key per batch row
        return f"({_p(emitter.dims[op.mask][0])} == 1 ? 0LL : 1LL), 0"
    if len(shape) != 4 or tuple(shape[1:3]) != (1, 1):
        return None
    mb, mk = (_p(d) for d in (emitter.dims[op.mask][0], emitter.dims[op.mask][3]))
    return f"({mb} == 1 ? 0LL : (long long){mk}), ({mk} == 1 ? 0 : 1)"


def _decode(emitter, op: nn.AttentionPartialOp) -> WholeKernel | None:
    """Split-KV pass 1 (``partita.lowering.cuda.flash_attention.DecodeConfig``) for a
    kernel that is the op alone: f16 / bf16 / f32, either layout, ``D == Dv`` a multiple
    of 8 up to 256, no mask, a key padding mask (boolean or additive) ``[B | 1, 1, 1,
    Skv | 1]`` or a last-key mask ``[B | 1]``. Its blocks stride over the (split, batch x head) pairs; a block has at most
    ``D + 2`` threads, so the window launch gives each pair a block."""
    dtype = str(op.query.type.element_type)
    head_dim = op.query.type.get_shape()[3]
    if not head_dim_supported(head_dim) or op.value.type.get_shape()[3] != head_dim:
        return None
    strides = _mask_strides(emitter, op)
    rows = _query_rows(emitter, op, 4 if dtype == "f32" else 8)
    # K, V and the mask are kernel arguments; Q may be a head split read in place.
    operands = (op.key, op.value) + (() if op.mask is None else (op.mask,))
    if strides is None or rows is None or not all(isinstance(x, BlockArgument) for x in operands):
        return None
    config = DecodeConfig(dtype, head_dim, layout=op.layout, mask=op.mask_kind)
    T = emitter.index_type
    at = _layout(op)
    batch, heads, _, _ = at(*emitter.dims[op.query])
    _, kv_heads, kv_len, _ = at(*emitter.dims[op.key])
    (q, q_stride), k, v = rows, f"in{op.key.index}", f"in{op.value.index}"
    m = f"in{op.mask.index}" if op.mask is not None else ""
    mask = {"none": "(const unsigned char*)0", "boolean": f"(const unsigned char*){m}", "additive": m,
            "last_key": m}[op.mask_kind]
    lines = [
        f"  const {T} pairs = ({T}){op.splits} * {_p(batch)} * {_p(heads)};",
        f"  for ({T} t = blockIdx.x; t < pairs; t += gridDim.x)  // uniform per block",
        f"    {config.entry}({q}, {k}, {v}, {mask}, out, {_p(heads)}, {_p(kv_heads)}, {_p(kv_len)},",
        f"        {_c_float(op.scale)}, {op.splits}, (int)(t % {op.splits}), (int)(t / {op.splits}), {strides},",
        f"        {q_stride}, {_c_float(op.mask_fill)});",
    ]
    emitter.prelude.append(flash_decode_source(config))
    return WholeKernel(lines, config.block[0])


@window(nn.AttentionPartialOp, dims=derived_dims, kernel=_decode, reads_views=True)
def _attention_partial(emitter, op: nn.AttentionPartialOp) -> list[str]:
    """The portable fallback: one thread per partial value ``[b, h, split, c]``, looping
    over its split's keys (any mask, any head dim)."""
    T = emitter.index_type
    at = _layout(op)
    b, h, split, c = emitter.out_index
    dq, dk, dv = emitter.dims[op.query], emitter.dims[op.key], emitter.dims[op.value]
    _, heads, _, head_dim = at(*dq)
    _, kv_heads, kv_len, _ = at(*dk)
    value_dim = _p(dv[3])
    hk, j, d, chunk, lo, hi = (emitter.var(n) for n in ("hk", "j", "d", "chunk", "lo", "hi"))
    stop_lines, stop = _key_stop(emitter, op, b, hi, "    ")
    lines = [
        f"    const {T} {hk} = {h} / ({_p(heads)} / {_p(kv_heads)});",
        f"    const {T} {chunk} = ({_p(kv_len)} + {op.splits - 1}) / {op.splits};",
        f"    const {T} {lo} = {split} * {chunk} < {_p(kv_len)} ? {split} * {chunk} : {_p(kv_len)};",
        f"    const {T} {hi} = {lo} + {chunk} < {_p(kv_len)} ? {lo} + {chunk} : {_p(kv_len)};",
        *stop_lines,
        f"    float m = {_NEG_INF}, l = 0.0f, acc = 0.0f;",
        "    bool undefined = false;",
        f"    for ({T} {j} = {lo}; {j} < {stop}; ++{j}) {{",
        "      float s = 0.0f;",
        f"      for ({T} {d} = 0; {d} < {_p(head_dim)}; ++{d})",
        f"        s += {emitter.load(op.query, at(b, h, '0', d))} * {emitter.load(op.key, at(b, hk, j, d))};",
        f"      s *= {_c_float(op.scale)};",
        *_mask_lines(emitter, op, b, h, "0", j, "      "),
        f"      if (s != s || s == {_POS_INF}) undefined = true;",
        "      if (s > m) { const float r = expf(m - s); l *= r; acc *= r; m = s; }",
        f"      const float p = s == {_NEG_INF} ? 0.0f : expf(s - m);",
        "      l += p;",
        f"      if ({c} < {value_dim}) acc += p * {emitter.load(op.value, at(b, hk, j, c))};",
        "    }",
    ]
    value = f"{c} < {value_dim} ? acc : ({c} == {value_dim} ? m : l)"
    return [*lines, y_decl(emitter, op, f"undefined ? __int_as_float(0x7fc00000) : ({value})")]


@window(nn.AttentionCombineOp, dims=derived_dims)
def _attention_combine(emitter, op: nn.AttentionCombineOp) -> list[str]:
    """Split-KV pass 2: one thread per output element reads its (batch, head)'s splits'
    ``m`` (twice: the maximum, then the weights) and its column of ``o`` and ``l``; the
    partials are small and stay in L1 / L2, the kernel is a short tail after pass 1."""
    T = emitter.index_type
    b, h, _, c = _layout(op)(*emitter.out_index)
    splits, row = emitter.dims[op.partial][2], op.value_dim
    s, ms, w = emitter.var("split"), emitter.var("ms"), emitter.var("w")
    m_at = emitter.load(op.partial, [b, h, s, str(row)])
    rows = "0.0f" if op.zero_undefined_rows else "__int_as_float(0x7fc00000)"
    lines = [
        f"    float top = {_NEG_INF}, num = 0.0f, den = 0.0f;",
        "    bool undefined = false;",
        f"    for ({T} {s} = 0; {s} < {_p(splits)}; ++{s}) {{",
        f"      const float {ms} = {m_at};",
        f"      undefined = undefined || {ms} != {ms};",
        f"      top = fmaxf(top, {ms});",
        "    }",
        f"    undefined = undefined || top == {_NEG_INF};",
        f"    for ({T} {s} = 0; {s} < {_p(splits)}; ++{s}) {{",
        f"      const float {ms} = {m_at};",
        # exp(-inf - top) is 0 unless top is -inf too (then NaN, and the row is undefined);
        # an empty split's 0 * o still propagates a NaN of o, as the reference's.
        f"      const float {w} = {ms} == {_NEG_INF} ? 0.0f : expf({ms} - top);",
        f"      num += {w} * {emitter.load(op.partial, [b, h, s, c])};",
        f"      den += {w} * {emitter.load(op.partial, [b, h, s, str(row + 1)])};",
        "    }",
    ]
    return [*lines, y_decl(emitter, op, f"undefined ? {rows} : num / den")]


@window(nn.RotaryEmbeddingOp, dims=derived_dims, reads_views=True, computes=(1, 2))
def _rotary_embedding(emitter, op: nn.RotaryEmbeddingOp) -> list[str]:
    """One thread per output element ``out[b, h, s, d]`` (``out[b, s, h, d]`` in BSHD): its
    own value and its pair's (``d +- R / 2``, or ``d +- 1`` interleaved), the pair's cos /
    sin at ``[b, s, i]``."""
    T = emitter.index_type
    b, *rows, d = emitter.out_index
    s = rows[op.seq_axis - 1]
    rotated = str(op.rotary_dim) if op.rotary_dim else _p(emitter.dims[op.input][3])
    x = lambda at: emitter.load(op.input, [b, *rows, at])  # noqa: E731
    cache_batch = emitter.dims[op.cos][0]  # 1: one cache row shared by every batch row
    cb = "0" if cache_batch == 1 else b if isinstance(cache_batch, int) else f"({cache_batch} == 1 ? 0 : {b})"
    half, i, v = emitter.var("half"), emitter.var("i"), emitter.var("v")
    lines = [
        f"    const {T} {half} = {rotated} / 2;",
        f"    float {v} = {x(d)};",
        f"    if ({d} < 2 * {half}) {{",
        f"      const {T} {i} = {f'{d} / 2' if op.interleaved else f'{d} < {half} ? {d} : {d} - {half}'};",
    ]
    # cos / sin at the pair's index: loads of the tables, or their producers run here
    # (``computes``: the angle's cos and sin from the position and frequency).
    for table, name in ((op.cos, "c"), (op.sin, "sn")):
        computed, at = emitter.computed(table, [cb, s, i])
        lines += [*(f"  {line}" for line in computed), f"      const float {name} = {at};"]
    if op.interleaved:
        lines.append(f"      {v} = ({d} % 2 == 0) ? {v} * c - {x(f'{d} + 1')} * sn : {v} * c + {x(f'{d} - 1')} * sn;")
    else:
        lines += [
            f"      if ({d} < {half}) {v} = {v} * c - {x(f'{d} + {half}')} * sn;",
            f"      else {v} = {v} * c + {x(f'{d} - {half}')} * sn;",
        ]
    return [*lines, "    }", y_decl(emitter, op, v)]
