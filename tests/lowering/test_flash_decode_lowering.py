"""The split-KV decode kernels as ``cuda-codegen`` emits them for ``nn.attention_partial``
(pass 1: ``DecodeConfig``'s device function, blocks grid-striding over the (split,
batch x head) pairs) and ``nn.attention_combine`` (pass 2: a per-element window kernel):

- built for the host (``tests/support/cuda_host.py``) and launched with at most two
  blocks, so each block runs several pairs, against the reference executor on the same
  function: f16 / bf16 / f32, BHSD and BSHD, GQA, boolean and additive key padding masks
  (a fully masked batch row), a NaN in a key, odd KV lengths, splits with no keys, a
  dynamic KV length; the per-element fallback for a mask that is no key padding mask;
- compiled by NVRTC for sm_90: 16-byte K / V loads (LDG.E.128), no local-memory spills.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_check import build_for_host, fuse, fused_functions, host_ops  # tests/support/kernel_check.py
from support.sass import compiled_sass  # tests/support/sass.py
from xdsl.dialects.builtin import ModuleOp, StringAttr

from partita.lowering.cuda.codegen import program_of
from partita.lowering.cuda.flash_attention import DecodeConfig
from partita.runtime.reference import run

DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}
TOLERANCE = {"f16": 4e-3, "bf16": 3e-2, "f32": 2e-5}


def _ty(shape, dtype) -> str:
    return f"tensor<{'x'.join('?' if d is None else str(d) for d in shape)}x{dtype}>"


def _decode_module(q, k, v, dtype, splits, *, layout="BHSD", mask=None, zero=False, kv_dyn=False,
                   fill=None) -> str:
    """``@main``: ``nn.attention_partial`` then ``nn.attention_combine`` (shapes in the
    layout; ``mask``: (shape, "boolean" | "additive" | "last_key"), static; ``kv_dyn``: a
    ``?`` KV length)."""
    seq = 1 if layout == "BSHD" else 2
    dyn = (lambda s: tuple(None if a == seq else d for a, d in enumerate(s))) if kv_dyn else (lambda s: s)
    qt, kt, vt = _ty(q, dtype), _ty(dyn(k), dtype), _ty(dyn(v), dtype)
    heads = q[2] if layout == "BSHD" else q[1]
    pt = _ty((q[0], heads, splits, v[3] + 2), "f32")
    out = (q[0], 1, heads, v[3]) if layout == "BSHD" else (q[0], heads, 1, v[3])
    ot = _ty(out, dtype)
    args, operands, types = f"%q: {qt}, %k: {kt}, %v: {vt}", "%q, %k, %v", f"{qt}, {kt}, {vt}"
    if mask is not None:
        shape, kind = mask
        mt = _ty(shape, {"boolean": "i1", "last_key": "i64"}.get(kind, dtype))
        args, operands, types = f"{args}, %m: {mt}", f"{operands}, %m", f"{types}, {mt}"
    props = f'scale = 0.125 : f64, splits = {splits} : i64, layout = "{layout}"'
    if fill is not None:
        props += f", mask_fill = {fill!r} : f64"
    return f"""
func.func @main({args}) -> {ot} {{
  %p = nn.attention_partial {operands} {{{props}}} : ({types}) -> {pt}
  %o = nn.attention_combine %p {{zero_undefined_rows = {str(zero).lower()}, layout = "{layout}"}} : ({pt}) -> {ot}
  func.return %o : {ot}
}}"""


def _run_kernels(module: ModuleOp, inputs: list[np.ndarray], tmp_path, blocks: int = 2):
    """Each fused function's kernel on the host (at most ``blocks`` blocks) beside the
    reference on the same function; returns ``{anchor: (kernel out, reference out)}``."""
    program, records, host = build_for_host(module, tmp_path)
    main = next(f for f in module.ops if getattr(f, "sym_name", None) and f.sym_name.data == "main")
    functions = fused_functions(module)
    env = dict(zip(main.body.block.args, inputs))
    results = {}
    for op in main.body.block.ops:
        if op.name == "func.call":
            name = op.callee.string_value()
            args = [np.ascontiguousarray(env[a]) for a in op.operands]
            clone = functions[name].clone()
            clone.sym_visibility = StringAttr("public")
            (want,) = run(ModuleOp([clone]), *args, entry=name)
            rec = records[name]
            out = np.full(want.shape, 7, want.dtype)  # every element must be written
            grid, block = rec.geometry(out.shape)
            host.launch(rec, (min(grid[0], blocks), 1, 1), block, args, out)
            env[op.results[0]] = out
            results[program.kernels[name].anchor] = (out, want, program.kernels[name])
    return results


def _check(results, dtype):
    out, want, _ = results["nn.attention_partial"]
    # the partials in f32: the rounding of f16 / bf16 inputs is the reference's too
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    out, want, _ = results["nn.attention_combine"]
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    return results


def _inputs(rng, dtype, q, k, v):
    return [rng.standard_normal(s).astype(DTYPES[dtype]) for s in (q, k, v)]


def test_decode_config_vectors_and_blocks():
    """16-byte vectors: a key row of D = 128 halves is 16 lanes (two keys a warp); f32 at
    D = 256 needs two vectors a lane; D = 96 rounds its 12 vectors up to a group of 16.
    Blocks have at most D + 2 threads (4 warps at most, 1 at least)."""
    assert (DecodeConfig("f16", 128).group, DecodeConfig("f16", 128).vectors) == (16, 1)
    assert (DecodeConfig("f32", 256).group, DecodeConfig("f32", 256).vectors) == (32, 2)
    assert (DecodeConfig("bf16", 96).group, DecodeConfig("f16", 8).group) == (16, 1)
    assert [DecodeConfig("f16", d).warps for d in (8, 32, 64, 96, 128, 256)] == [1, 1, 2, 3, 4, 4]
    assert DecodeConfig("f16", 64, "BSHD", "additive").entry == "flash_decode_f16_d64_bshd_ma_split"
    with pytest.raises(ValueError, match="multiple of 8"):
        DecodeConfig("f16", 100)


pytestmark_gxx = pytest.mark.skipif(not have_gxx(), reason="needs g++")


@pytestmark_gxx
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_pass1_and_combine_match_the_reference_gqa_odd_length(dtype, tmp_path):
    """4 query heads on 2 KV heads, 333 keys in 5 splits of 67 (the last shorter), the
    blocks striding over 40 pairs; the pass 1 kernel is the decode schedule."""
    q, k = (2, 4, 1, 64), (2, 2, 333, 64)
    module = fuse(_decode_module(q, k, k, dtype, 5))
    assert host_ops(module) == []
    results = _check(_run_kernels(module, _inputs(np.random.default_rng(0), dtype, q, k, k), tmp_path), dtype)
    kernel = results["nn.attention_partial"][2]
    assert kernel.block == 64 and f"flash_decode_{dtype}_d64_split(" in kernel.code
    assert "flash_decode" not in results["nn.attention_combine"][2].code


@pytestmark_gxx
def test_bshd_boolean_mask_fully_masked_row_and_empty_splits(tmp_path):
    """BSHD (rows kv_heads * D apart), a boolean key padding mask [B, 1, 1, Skv] with
    batch 1 masked throughout (zeros with zero_undefined_rows), 10 keys in 8 splits of 2
    (splits 5..7 have none: m = -inf, l = 0), D = 40 (5 vectors in a group of 8)."""
    q, k = (2, 1, 4, 40), (2, 10, 2, 40)
    module = fuse(_decode_module(q, k, k, "bf16", 8, layout="BSHD", mask=((2, 1, 1, 10), "boolean"), zero=True))
    rng = np.random.default_rng(1)
    mask = rng.integers(0, 2, (2, 1, 1, 10)).astype(bool)
    mask[0, ..., 0] = True
    mask[1] = False
    results = _check(_run_kernels(module, [*_inputs(rng, "bf16", q, k, k), mask], tmp_path), "bf16")
    part, out = results["nn.attention_partial"][0], results["nn.attention_combine"][0]
    assert (part[:, :, 5:, 40] == -np.inf).all() and (part[:, :, 5:, 41] == 0).all()
    assert (out[1].astype(np.float32) == 0).all() and np.abs(out[0].astype(np.float32)).sum() > 0


@pytestmark_gxx
def test_mask_fill_hidden_keys_score_the_fill(tmp_path):
    """masked_fill's finite value (``mask_fill = -1e9``): hidden keys score it, so batch 1
    (every key hidden) averages its values over all splits instead of being undefined,
    and a split whose keys are all hidden has ``m = -1e9``, not ``-inf``."""
    q, k = (2, 2, 1, 16), (2, 2, 40, 16)
    module = fuse(_decode_module(q, k, k, "f32", 4, mask=((2, 1, 1, 40), "boolean"), fill=-1e9))
    rng = np.random.default_rng(6)
    inputs = _inputs(rng, "f32", q, k, k)
    mask = rng.integers(0, 2, (2, 1, 1, 40)).astype(bool)
    mask[0, ..., :10] = False  # split 0 of batch 0: no key attends
    mask[0, ..., 20] = True
    mask[1] = False
    results = _check(_run_kernels(module, [*inputs, mask], tmp_path), "f32")
    part, out = results["nn.attention_partial"][0], results["nn.attention_combine"][0]
    assert "flash_decode_f32_d16_mb_split(" in results["nn.attention_partial"][2].code
    assert (part[0, :, 0, 16] == np.float32(-1e9)).all() and (part[0, :, 0, 17] == 10).all()
    np.testing.assert_allclose(out[1, :, 0], inputs[2][1].mean(axis=1), rtol=1e-5, atol=1e-6)


@pytestmark_gxx
def test_additive_broadcast_mask_and_a_nan_key(tmp_path):
    """An additive mask [1, 1, 1, Skv] shared by the batch (batch stride 0) with -inf
    entries; a NaN in one key of batch 0 makes its split's partial NaN and batch 0's rows
    NaN (no zero_undefined_rows), batch 1 untouched; MQA (one KV head)."""
    q, k = (2, 3, 1, 32), (2, 1, 300, 32)
    module = fuse(_decode_module(q, k, k, "f32", 4, mask=((1, 1, 1, 300), "additive")))
    rng = np.random.default_rng(2)
    inputs = _inputs(rng, "f32", q, k, k)
    inputs[1][0, 0, 170, 3] = np.nan  # key 170: split 2 of 75-key splits
    mask = np.where(rng.integers(0, 4, (1, 1, 1, 300)) == 0, -np.inf, rng.standard_normal((1, 1, 1, 300)))
    results = _run_kernels(module, [*inputs, mask.astype(np.float32)], tmp_path)
    part, want_part, _ = results["nn.attention_partial"]
    assert np.isnan(part[0, :, 2]).all() and np.isfinite(part[0, :, [0, 1, 3]]).all()
    np.testing.assert_allclose(part, want_part, rtol=1e-4, atol=1e-4)
    out, want, _ = results["nn.attention_combine"]
    assert np.isnan(out[0]).all() and np.isfinite(out[1]).all()
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)


@pytestmark_gxx
def test_dynamic_kv_length(tmp_path):
    """The KV length a run-time dim of both kernels (here 259 keys, 6 splits of 44)."""
    q, k = (1, 2, 1, 128), (1, 2, 259, 128)
    module = fuse(_decode_module(q, k, k, "f16", 6, kv_dyn=True))
    assert host_ops(module) == []
    _check(_run_kernels(module, _inputs(np.random.default_rng(3), "f16", q, k, k), tmp_path), "f16")


def _packed_query_module(dtype: str, batch: int, heads: int, head_dim: int, kv_len: int, splits: int,
                         start: int, width: int) -> str:
    """``@main(qkv, k, v)``: Q is columns ``[start, start + H * D)`` of a packed projection
    ``[B, 1, width]``, split into heads by two reshapes (``simplify-transposes``' form of
    a decode step's head split), then attention_partial / combine over a BHSD cache."""
    row = heads * head_dim
    pt, qt = _ty((batch, 1, width), dtype), _ty((batch, heads, 1, head_dim), dtype)
    kt, ot = _ty((batch, heads, kv_len, head_dim), dtype), qt
    part = _ty((batch, heads, splits, head_dim + 2), "f32")
    big = 2 ** 62
    return f"""
func.func @main(%qkv: {pt}, %k: {kt}, %v: {kt}) -> {ot} {{
  %s = nn.strided_slice %qkv {{begin = array<i64: 0, 0, {start}>, end = array<i64: {big}, {big}, {start + row}>, strides = array<i64: 1, 1, 1>}} : ({pt}) -> {_ty((batch, 1, row), dtype)}
  %r = nn.reshape %s : ({_ty((batch, 1, row), dtype)}) -> {_ty((batch, 1, heads, head_dim), dtype)}
  %q = nn.reshape %r : ({_ty((batch, 1, heads, head_dim), dtype)}) -> {qt}
  %p = nn.attention_partial %q, %k, %v {{scale = 0.125 : f64, splits = {splits} : i64}} : ({qt}, {kt}, {kt}) -> {part}
  %o = nn.attention_combine %p {{zero_undefined_rows = false}} : ({part}) -> {ot}
  func.return %o : {ot}
}}"""


@pytestmark_gxx
@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_query_read_in_place_from_a_packed_projection(dtype, tmp_path):
    """A decode step's Q is a head split of its packed QKV row: the slice and reshapes
    join the pass 1 kernel, which reads the row in place (pointer advanced to the slice,
    batches ``3 * H * D`` apart), no kernel copying Q out; a slice that breaks the 16-byte
    alignment takes the per-element fallback, exact too."""
    batch, heads, head_dim, kv_len = 2, 4, 32, 100
    width = 3 * heads * head_dim
    rng = np.random.default_rng(5)
    k = rng.standard_normal((batch, heads, kv_len, head_dim)).astype(DTYPES[dtype])
    v = rng.standard_normal((batch, heads, kv_len, head_dim)).astype(DTYPES[dtype])
    qkv = rng.standard_normal((batch, 1, width)).astype(DTYPES[dtype])
    for start, fast in ((heads * head_dim, True), (2, False)):
        module = fuse(_packed_query_module(dtype, batch, heads, head_dim, kv_len, 3, start, width))
        assert host_ops(module) == []
        (tmp_path / str(start)).mkdir()
        results = _check(_run_kernels(module, [qkv, k, v], tmp_path / str(start)), dtype)
        kernel = results["nn.attention_partial"][2]
        assert kernel.ops.count("nn.strided_slice") == 1 and kernel.ops.count("nn.reshape") == 2
        assert (f"flash_decode_{dtype}_d{head_dim}_split(in0 + {start}" in kernel.code) == fast
        assert (f"{width}LL, " in kernel.code) == fast


@pytestmark_gxx
def test_other_masks_take_the_per_element_fallback(tmp_path):
    """A mask per (batch, head) is no key padding mask: the portable per-element kernel,
    still exact to the reference."""
    q, k = (1, 2, 1, 16), (1, 2, 20, 16)
    module = fuse(_decode_module(q, k, k, "f32", 3, mask=((1, 2, 1, 20), "boolean")))
    rng = np.random.default_rng(4)
    mask = rng.integers(0, 2, (1, 2, 1, 20)).astype(bool)
    results = _check(_run_kernels(module, [*_inputs(rng, "f32", q, k, k), mask], tmp_path), "f32")
    assert "flash_decode" not in results["nn.attention_partial"][2].code


@pytestmark_gxx
@pytest.mark.parametrize("head_dim", [64, 12], ids=["decode-kernel", "per-element"])
def test_a_last_key_mask_leaves_the_keys_after_it_out(head_dim, tmp_path):
    """``split-kv-attention``'s last-key mask (a static cache read at a position, one per
    batch row): the decode kernel (and the per-element fallback, for a head dim it does not
    take) equal the reference for positions inside the first split, at the last key, past
    the cache and negative (every key hidden, scoring the fill); the combined rows equal
    ``nn.attention`` with the boolean mask ``arange(Skv) <= position`` and the same fill."""
    from partita.runtime.reference.nn.attention import attention

    q, k = (4, 2, 1, head_dim), (4, 1, 50, head_dim)
    fill = float(np.finfo(np.float32).min)
    module = fuse(_decode_module(q, k, k, "f16", 3, mask=((4,), "last_key"), fill=fill))
    rng = np.random.default_rng(6)
    inputs = _inputs(rng, "f16", q, k, k)
    positions = np.array([7, 49, 80, -3], np.int64)
    results = _check(_run_kernels(module, [*inputs, positions], tmp_path), "f16")
    assert ("flash_decode_f16_d64_ml_split" in results["nn.attention_partial"][2].code) == (head_dim == 64)
    keep = (np.arange(50)[None, :] <= positions[:, None])[:, None, None, :]
    f32 = [a.astype(np.float32) for a in inputs]
    want = attention(*f32, keep, scale=0.125, causal=False, zero_undefined_rows=False, mask_fill=fill)
    got = results["nn.attention_combine"][0].astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=TOLERANCE["f16"], atol=TOLERANCE["f16"])


def test_sm90_sass_has_128_bit_loads_and_no_spills():
    """The program cuda-codegen emits for decode, compiled by NVRTC for sm_90: the pass 1
    kernels load K and V (and q) 16 bytes at a time and spill nothing."""
    text = "\n".join([
        _decode_module((1, 32, 1, 128), (1, 8, 4096, 128), (1, 8, 4096, 128), "f16", 9),
        _decode_module((1, 1, 16, 64), (1, 4096, 4, 64), (1, 4096, 4, 64), "bf16", 16, layout="BSHD",
                       mask=((1, 1, 1, 4096), "boolean")).replace("@main", "@main2"),
        _decode_module((1, 8, 1, 256), (1, 8, 512, 256), (1, 8, 512, 256), "f32", 4,
                       mask=((1, 1, 1, 512), "additive")).replace("@main", "@main3"),
        _decode_module((2, 32, 1, 128), (2, 8, 4096, 128), (2, 8, 4096, 128), "f16", 5,
                       mask=((2,), "last_key")).replace("@main", "@main4"),
    ])
    module = fuse(text)
    program = program_of(module)
    binary, sass = compiled_sass(program.code, options=["--ptxas-options=-v"], use_cache=False)
    passes = {name: k for name, k in program.kernels.items() if k.anchor == "nn.attention_partial"}
    assert len(passes) == 4
    for name, kernel in passes.items():
        body = sass[kernel.entry]
        assert "LDG.E.128" in body and "LDL" not in body and "STL" not in body, name
        report = binary.log.split(f"Function properties for {kernel.entry}")[1]
        assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report.split("Compile time")[0])
