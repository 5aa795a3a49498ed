"""Partita's flash attention kernel (``partita.lowering.cuda.flash_attention``):

- built for the host (``tests/support/flash_host.py``: ``mma.sync`` emulated by fragment exchange)
  and compared with the ``nn.attention`` reference: f16 / bf16, head dims 32..256, odd and
  run-time lengths, causal with Sq != Skv, key padding masks with fully masked rows, NaN
  scores, GQA and MQA;
- compiled by NVRTC for sm_90: the SASS has the expected HMMA count per key tile, K / V
  tiles double-buffered by ``cp.async`` (LDGSTS, its commit and wait barriers),
  ``ldmatrix.trans`` for V, and no local-memory spills (ptxas's own report);
- on a GPU (marker ``gpu``), against ``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.flash_host import build, build_decode, launch, launch_decode  # tests/support/flash_host.py
from support.sass import compiled_sass  # tests/support/sass.py

from partita.lowering.cubin import sass_loops
from partita.lowering.cuda.flash_attention import (
    HEAD_DIMS,
    DecodeConfig,
    FlashConfig,
    flash_attention_source,
)
from partita.runtime.reference.nn.attention import attention, attention_combine

DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
TOLERANCE = {"f16": 4e-3, "bf16": 3e-2}


def _reference(q, k, v, key_mask, scale, causal, zero, fill=-np.inf):
    mask = None if key_mask is None else key_mask.astype(bool)[:, None, None, :]
    f32 = [a.astype(np.float32) for a in (q, k, v)]
    return attention(*f32, mask, scale=scale, causal=causal, zero_undefined_rows=zero, mask_fill=fill)


def _check(lib, config, q, k, v, key_mask=None, scale=0.3):
    got = launch(lib, config, q, k, v, key_mask, scale).astype(np.float64)
    want = _reference(q, k, v, key_mask, scale, config.causal, config.zero_undefined_rows, config.mask_fill)
    want = want.astype(q.dtype).astype(np.float64)  # the kernel rounds once to the storage type
    tol = TOLERANCE[config.dtype]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    return got


def _inputs(rng, dtype, b, h, hkv, sq, skv, d):
    t = DTYPES[dtype]
    return (rng.standard_normal((b, h, sq, d)).astype(t), rng.standard_normal((b, hkv, skv, d)).astype(t),
            rng.standard_normal((b, hkv, skv, d)).astype(t))


@pytest.fixture(scope="module", params=[False, True], ids=["mma", "wgmma"])
def host(request, tmp_path_factory):
    """Every case twice: the mma.sync kernel, and the wgmma one (sm_90a: a warpgroup a block,
    Q, K and V in shared memory as core matrices read through descriptors; 32-key tiles at
    D = 256), whose wgmma the emulation computes by those descriptors."""
    if not have_gxx():
        pytest.skip("needs g++")
    wg = request.param
    configs = [FlashConfig(t, d, causal=c, zero_undefined_rows=z, wgmma=wg)
               for t, d, c, z in [("f16", 32, False, True), ("f16", 64, True, True), ("bf16", 64, False, True),
                                  ("f16", 128, True, False), ("bf16", 256, False, True), ("f16", 96, False, False),
                                  ("f16", 256, True, True)]]
    # masked_fill's finite value (DistilBERT's finfo.min) for the keys a padding mask hides;
    # with causal too (GPT-2's eager where(causal, s, finfo.min)), and a fill near the scores
    configs += [FlashConfig("f16", 40, mask_fill=float(np.finfo(np.float16).min), wgmma=wg),
                FlashConfig("bf16", 32, causal=True, mask_fill=float(np.finfo(np.float32).min), wgmma=wg),
                FlashConfig("f16", 48, causal=True, mask_fill=-1.0, wgmma=wg)]
    return build(configs, tmp_path_factory.mktemp("flash")), {(c.dtype, c.head_dim): c for c in configs}


def test_odd_lengths_gqa_and_dynamic_lengths(host):
    lib, configs = host
    rng = np.random.default_rng(0)
    config = configs["f16", 32]
    # GQA (4 query heads on 2 KV heads), lengths that fill neither a 64-row block nor a
    # 64-key tile; the same kernel then at other run-time lengths.
    for sq, skv in ((70, 75), (1, 130), (65, 3)):
        _check(lib, config, *_inputs(rng, "f16", 2, 4, 2, sq, skv, 32))


def test_bf16_multi_query_and_key_padding_with_fully_masked_rows(host):
    lib, configs = host
    rng = np.random.default_rng(1)
    q, k, v = _inputs(rng, "bf16", 2, 3, 1, 17, 40, 64)
    key_mask = rng.integers(0, 2, (2, 40)).astype(np.uint8)
    key_mask[1] = 0  # batch 1 attends to nothing: zeros (zero_undefined_rows)
    got = _check(lib, configs["bf16", 64], q, k, v, key_mask)
    assert (got[1] == 0).all() and np.abs(got[0]).sum() > 0


def test_a_finite_mask_fill_averages_rows_the_mask_hides_wholly(host):
    """Keys the padding mask hides score the fill, keys past kv_len none: batch 1, every
    key hidden, averages all its values (as masked_fill's softmax does) instead of being
    undefined; batch 0 matches the reference too. With causal the fill is refused."""
    lib, configs = host
    rng = np.random.default_rng(9)
    q, k, v = _inputs(rng, "f16", 2, 2, 2, 19, 70, 40)
    key_mask = rng.integers(0, 2, (2, 70)).astype(np.uint8)
    key_mask[1] = 0
    got = _check(lib, configs["f16", 40], q, k, v, key_mask)
    mean = v[1].astype(np.float64).mean(axis=1)  # [H, D], over the 70 keys
    np.testing.assert_allclose(got[1], np.broadcast_to(mean[:, None], got[1].shape), rtol=4e-3, atol=4e-3)


def test_causal_with_a_finite_fill_averages_rows_that_see_no_key(host):
    """Causal and finfo.min: a block whose rows all see a key skips the tiles past its
    frontier (their exp(fill - m) is 0); batch 1, which the padding mask hides wholly,
    and the rows before every key (Sq > Skv) average every value, tiles past the frontier
    included, as the exported where(causal, s, fill) + softmax does."""
    lib, configs = host
    rng = np.random.default_rng(10)
    config = configs["bf16", 32]
    q, k, v = _inputs(rng, "bf16", 2, 2, 1, 70, 150, 32)
    key_mask = np.ones((2, 150), np.uint8)
    key_mask[1] = 0
    got = _check(lib, config, q, k, v, key_mask)
    mean = v[1].astype(np.float64).mean(axis=1)  # [Hkv = 1, D], over all 150 keys
    np.testing.assert_allclose(got[1], np.broadcast_to(mean[:, None], got[1].shape), rtol=3e-2, atol=3e-2)
    got = _check(lib, config, *_inputs(rng, "bf16", 1, 1, 1, 90, 20, 32))  # rows 0..69 see no key
    assert np.isfinite(got).all()


def test_causal_with_a_fill_near_the_scores_visits_every_tile(host):
    """A fill of -1: the keys past the frontier carry weight exp(-1 - m) in every row, so
    every block visits every tile (a kernel that skipped them would miss it: the first
    64-row block's frontier is in its first of four 64-key tiles)."""
    lib, configs = host
    rng = np.random.default_rng(11)
    _check(lib, configs["f16", 48], *_inputs(rng, "f16", 1, 2, 2, 200, 200, 48))


def test_causal_with_more_keys_than_queries(host):
    """Bottom-right aligned: query i sees keys j <= i + (Skv - Sq), so the last query
    sees every key; a 64-key tile past the frontier is skipped."""
    lib, configs = host
    rng = np.random.default_rng(2)
    _check(lib, configs["f16", 64], *_inputs(rng, "f16", 1, 2, 2, 33, 150, 64))


def test_causal_rows_before_every_key_are_nan_without_the_guard(host):
    """Sq > Skv: the first Sq - Skv queries see no key. Without zero_undefined_rows they
    are NaN, as the plain softmax gives; the other rows match the reference."""
    lib, configs = host
    rng = np.random.default_rng(3)
    got = _check(lib, configs["f16", 128], *_inputs(rng, "f16", 1, 1, 1, 20, 12, 128))
    assert np.isnan(got[0, 0, :8]).all() and np.isfinite(got[0, 0, 8:]).all()


@pytest.mark.parametrize("dtype, head_dim, sq, row",
                         [("f16", 96, 9, 4), ("bf16", 64, 140, 21), ("f16", 96, 150, 120)])
def test_nan_score_makes_its_row_undefined_only(host, dtype, head_dim, sq, row):
    """The undefined row is NaN, or 0 with ``zero_undefined_rows``. Up to D = 128 a warp
    holds two m-tiles (32 rows): row 21 is in the second of warp 0's, row 120 in the second
    of warp 3's (Q from shared memory at D = 96)."""
    lib, configs = host
    rng = np.random.default_rng(4)
    q, k, v = _inputs(rng, dtype, 1, 2, 2, sq, 20, head_dim)
    q[0, 1, row, 7] = np.nan
    config = configs[dtype, head_dim]
    got = _check(lib, config, q, k, v)
    assert (got[0, 1, row] == 0).all() if config.zero_undefined_rows else np.isnan(got[0, 1, row]).all()
    assert np.isfinite(np.delete(got[0, 1], row, axis=0)).all() and np.isfinite(got[0, 0]).all()


def test_q_in_shared_memory_across_query_tiles(host):
    """D = 128 stages the block's query rows in (dynamic) shared memory and loads each
    k-step's A fragments from there: causal over three query tiles, the last partial
    (rows past q_len zero-filled by the copy), with Skv > Sq, GQA and a padding mask."""
    lib, configs = host
    config = configs["f16", 128]
    # 128 rows a block (two m-tiles a warp), or with wgmma 64 (a warpgroup's m64 tile)
    assert config.q_in_smem and config.block_m == (64 if config.wgmma else 128) and config.dynamic_smem > 48 * 1024
    rng = np.random.default_rng(12)
    q, k, v = _inputs(rng, "f16", 2, 4, 2, 260, 300, 128)
    key_mask = np.ones((2, 300), np.uint8)
    key_mask[1, 250:] = 0
    got = _check(lib, config, q, k, v, key_mask, scale=128 ** -0.5)
    assert np.isfinite(got).all()


def test_head_dim_256(host):
    """One m-tile a warp (64-row blocks; with wgmma the warpgroup's m64 tile), Q from shared
    memory: two query tiles, the second partial, and three 32-key tiles, the last partial;
    then causal with more keys than queries, GQA and a padding mask."""
    lib, configs = host
    config = configs["bf16", 256]
    assert config.q_in_smem and config.block_m == 64 and config.block_n == 32
    rng = np.random.default_rng(5)
    _check(lib, config, *_inputs(rng, "bf16", 1, 2, 1, 70, 75, 256), scale=0.0625)
    q, k, v = _inputs(rng, "f16", 2, 4, 2, 90, 130, 256)
    key_mask = np.ones((2, 130), np.uint8)
    key_mask[0, 100:] = 0
    _check(lib, configs["f16", 256], q, k, v, key_mask, scale=0.0625)


def test_whole_tiles_scale_after_the_max_only_for_a_positive_scale(tmp_path):
    """A positive scale (the usual 1 / sqrt(D)) lets the whole tiles keep their scores
    unscaled, the max scaled after and each probability one FFMA: the same results. A
    negative scale reverses the order of the scores, so its kernel (``positive_scale``
    false, the rule's choice for such an op) scales them first, as the masked tiles do."""
    if not have_gxx():
        pytest.skip("needs g++")
    configs = [FlashConfig("f16", 64, positive_scale=False), FlashConfig("f16", 64, positive_scale=False, wgmma=True),
               FlashConfig("bf16", 32, causal=True), FlashConfig("bf16", 32, causal=True, wgmma=True)]
    assert configs[0].entry.endswith("_ns") and configs[1].entry.endswith("_ns_wg")
    lib = build(configs, tmp_path)
    rng = np.random.default_rng(9)
    for config, scale in zip(configs, (-0.2, -0.2, 0.3, 0.3), strict=True):
        _check(lib, config, *_inputs(rng, config.dtype, 1, 2, 1, 150, 200, config.head_dim), scale=scale)


def test_configs_reject_what_the_kernel_does_not_take():
    with pytest.raises(ValueError, match="f16 or bf16"):
        FlashConfig("f32", 64)
    with pytest.raises(ValueError, match="head dim"):
        FlashConfig("f16", 12)
    assert HEAD_DIMS[0] == 32 and HEAD_DIMS[-1] == 256


# -- decode: one query row, split-KV ------------------------------------------------------


@pytest.mark.parametrize("dtype, head_dim, splits", [("f16", 64, 7), ("bf16", 128, 1), ("f16", 256, 3)])
def test_split_kv_decode_matches_the_reference(dtype, head_dim, splits, tmp_path):
    """One query row against a long KV (GQA, odd length), split over blocks (pass 1 on the
    host) and merged (``nn.attention_combine``'s reference); a batch with every key masked
    gives zeros, a NaN in q makes only its row undefined."""
    if not have_gxx():
        pytest.skip("needs g++")
    config = DecodeConfig(dtype, head_dim, mask="boolean")
    lib = build_decode([config], tmp_path)
    rng = np.random.default_rng(7)
    q, k, v = _inputs(rng, dtype, 2, 4, 2, 1, 1003, head_dim)
    q[0, 2, 0, 5] = np.nan
    key_mask = rng.integers(0, 2, (2, 1003)).astype(bool)
    key_mask[1] = False
    scale = head_dim ** -0.5
    part = launch_decode(lib, config, q, k, v, key_mask, scale, splits)
    want = _reference(q, k, v, key_mask, scale, False, True).astype(q.dtype).astype(np.float64)
    got = attention_combine(part, zero_undefined_rows=True).astype(q.dtype).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    assert (got[1] == 0).all() and (got[0, 2] == 0).all() and np.abs(got[0, 1]).sum() > 0
    nan = attention_combine(part, zero_undefined_rows=False)
    assert np.isnan(nan[1]).all() and np.isnan(nan[0, 2]).all() and np.isfinite(nan[0, 1]).all()


@pytest.mark.parametrize("layout", ["BHSD", "BSHD"])
def test_split_kv_decode_reads_a_static_cache_up_to_its_last_key(layout, tmp_path):
    """A static cache's decode step (``split-kv-attention``'s last-key mask): per batch row
    the keys up to its position, left out past it; equal to the boolean mask
    ``arange(Skv) <= position`` with Hugging Face's ``finfo.min`` fill for positions at the
    start, inside a split, at a split boundary and past the cache, and a negative one hides
    every key (its row averages the values, as the fill makes it). The keys past the
    position hold NaN: never read, so no row is NaN."""
    if not have_gxx():
        pytest.skip("needs g++")
    config = DecodeConfig("f16", 64, layout=layout, mask="last_key")
    lib = build_decode([config], tmp_path)
    rng = np.random.default_rng(8)
    kv_len, splits, fill = 300, 4, float(np.finfo(np.float32).min)
    q, k, v = _inputs(rng, "f16", 6, 4, 2, 1, kv_len, 64)
    positions = np.array([0, 40, 149, 74, 400, -1], np.int64)  # 75 keys a split: 74 ends the first
    for b, p in enumerate(positions):
        if 0 <= p < kv_len - 1:
            k[b, :, p + 1:], v[b, :, p + 1:] = np.nan, np.nan
    swap = (lambda a: a.swapaxes(1, 2)) if layout == "BSHD" else (lambda a: a)
    part = launch_decode(lib, config, *(swap(a) for a in (q, k, v)), positions, 0.125, splits, fill=fill)
    got = attention_combine(part, zero_undefined_rows=False).astype(np.float64)
    keep = np.arange(kv_len)[None, :] <= positions[:, None]
    clean_k, clean_v = (np.nan_to_num(a, nan=0.0) for a in (k, v))  # what the mask form reads past it
    want = _reference(q, clean_k, clean_v, keep, 0.125, False, False, fill).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=TOLERANCE["f16"], atol=TOLERANCE["f16"])
    assert np.isfinite(got).all()


# -- NVRTC, sm_90 SASS ---------------------------------------------------------------------


def test_sm90_sass_has_the_mma_schedule_and_no_spills(tmp_path):
    configs = [FlashConfig("f16", 128), FlashConfig("bf16", 128, causal=True), FlashConfig("f16", 256),
               FlashConfig("f16", 64, causal=True, mask_fill=float(np.finfo(np.float32).min)), FlashConfig("f16", 64)]
    assert [c.m_tiles for c in configs] == [2, 2, 1, 2, 2]
    assert [c.q_in_smem for c in configs] == [True, True, True, False, False]
    binary, sass = compiled_sass(flash_attention_source(configs), options=["--ptxas-options=-v"], use_cache=False)
    for c in configs:
        text = sass[c.entry]
        # the block's vote on visiting the tiles past the causal frontier: a finite fill's only
        assert ("BAR.RED.OR" in text) == (c.mask_fill != -np.inf)
        k_steps, n_tiles, d_tiles = c.head_dim // 16, c.block_n // 8, c.head_dim // 8
        # One key tile: S = Q K^T (n_tiles x k_steps MMAs) and O += P V (block_n / 16 x d_tiles)
        # for each of a warp's m-tiles, in two loops: the tiles whole for every row of the
        # block, then the masked ones.
        per_tile = c.m_tiles * (n_tiles * k_steps + (c.block_n // 16) * d_tiles)
        assert text.count("HMMA.16816.F32") == 2 * per_tile
        whole, masked = sorted((loop for loop in sass_loops(text) if any("HMMA" in x for x in loop)), key=len)
        assert sum("HMMA" in x for x in whole) == sum("HMMA" in x for x in masked) == per_tile
        # Each ldmatrix.x4 (two k-steps of K, two d-tiles of V) feeds every m-tile's MMAs;
        # Q from shared memory adds one per k-step and m-tile, loaded once a key tile.
        q_loads = c.m_tiles * k_steps if c.q_in_smem else 0
        assert sum("LDSM" in x for x in whole) == (n_tiles * k_steps + (c.block_n // 16) * d_tiles) // 2 + q_loads
        # The whole tiles read no key mask and test no score (the masked loop does both); a
        # score is one MUFU.EX2 (log2 domain): a lane's 2 rows an m-tile are tested for -inf,
        # not each score, and their two rescale factors are the other 2 EX2s.
        assert not any("LDG.E.U8" in x for x in whole) and any("LDG.E.U8" in x for x in masked)
        assert sum("FSETP" in x for x in whole) == 2 * c.m_tiles
        assert sum("MUFU.EX2" in x for x in whole) == c.m_tiles * (c.block_n // 2 + 2)
        assert ".BF16" in text if c.dtype == "bf16" else ".BF16" not in text
        assert "LDGSTS.E.BYPASS.128" in text and "LDG.E.128" not in text  # K / V tiles by cp.async, not registers
        assert "LDGDEPBAR" in text and "DEPBAR.LE SB0, 0x1" in text  # commit, wait for all but the newest tile
        assert "LDSM.16.MT88.4" in text  # V's B fragments by ldmatrix.trans
        assert "LDL" not in text and "STL" not in text  # nothing spilled to local memory
        report = binary.log.split(f"Function properties for {c.entry}")[1].split("Compile time")[0]
        assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report)
        # Q's rows and the K / V stages in dynamic shared memory (past 48 KiB), else all static
        static = re.search(r"(\d+) bytes smem", report)
        assert (int(static.group(1)) if static else 0) == (0 if c.q_in_smem else c.shared_bytes)
        assert c.dynamic_smem == (c.shared_bytes if c.q_in_smem else 0) and c.shared_bytes <= 227 * 1024


def test_sm90a_sass_has_the_wgmma_schedule_and_no_spills():
    """The wgmma form (sm_90a): per key tile and m64 tile, one HGMMA a k-step of S = Q K^T
    (N = 64 keys, 32 past D = 128) and one a 16 keys of O += P V (N = the padded head dim,
    up to wgmma's 256), each GEMM
    fenced (WARPGROUP.ARRIVE) and waited for (WARPGROUP.DEPBAR) once; no mma.sync and no
    ldmatrix left (the tensor cores read Q, K and V from shared memory), the cp.async copies
    fenced for them (FENCE.VIEW.ASYNC.S); nothing spilled, everything in dynamic shared
    memory; V's B operand transposed (MN-major), K's not."""
    configs = [FlashConfig("f16", 64, wgmma=True), FlashConfig("bf16", 128, causal=True, wgmma=True),
               FlashConfig("f16", 96, wgmma=True), FlashConfig("f16", 40, causal=True, mask_fill=-1.0, wgmma=True),
               FlashConfig("f16", 8, causal=True, layout="BSHD", wgmma=True),  # the fixtures' D = 8, at 32
               FlashConfig("f16", 160, wgmma=True), FlashConfig("bf16", 256, causal=True, wgmma=True)]
    assert [(c.warps, c.m_tiles, c.block_m, c.block_n, c.q_in_smem) for c in configs] == \
        [(4, 1, 64, 64, True)] * 5 + [(4, 1, 64, 32, True)] * 2
    source = flash_attention_source(configs)
    # S = Q K^T's A and B both K-major (SS form: trans-a 0, trans-b 0); O += P V's B
    # transposed (RS form: trans-b 1)
    functions = [c for c in source.split("static __device__ __forceinline__ void fa_wgmma_")[1:] if c[:3] in ("qk_", "pv_")]
    assert len(functions) == 14  # each config's two, behind include guards
    for chunk in functions:
        asm = chunk.split("wgmma.mma_async")[1].split("\\n")[0]
        assert asm.endswith("p, 1, 1, 0, 0;" if chunk.startswith("qk_") else "p, 1, 1, 1;"), asm
    binary, sass = compiled_sass(source, options=["--ptxas-options=-v"], use_cache=False, arch="sm_90a")
    for c in configs:
        text = sass[c.entry]
        k_steps, pv_steps = c.padded_dim // 16, c.block_n // 16
        assert f"HGMMA.64x{c.block_n}x16.F32" in text and f"HGMMA.64x{c.padded_dim}x16.F32" in text
        whole, masked = sorted((loop for loop in sass_loops(text) if any("HGMMA" in x for x in loop)), key=len)
        assert sum("HGMMA" in x for x in whole) == sum("HGMMA" in x for x in masked) == k_steps + pv_steps
        for loop in (whole, masked):
            assert sum("WARPGROUP.ARRIVE" in x for x in loop) == sum("WARPGROUP.DEPBAR" in x for x in loop) == 2
            assert sum("FENCE.VIEW.ASYNC.S" in x for x in loop) == 1
        assert sum("MUFU.EX2" in x for x in whole) == c.block_n // 2 + 2 and sum("FSETP" in x for x in whole) == 2
        assert "HMMA" not in text and "LDSM" not in text and "LDGSTS.E.BYPASS.128" in text
        assert "LDL" not in text and "STL" not in text
        report = binary.log.split(f"Function properties for {c.entry}")[1].split("Compile time")[0]
        assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report)
        assert not re.search(r"[1-9]\d* bytes smem", report)  # no static shared memory: one dynamic array
        # Q's 64 rows and two stages of K and V: two blocks an SM fit (80 KiB at D = 128, 96 at 256)
        assert c.dynamic_smem == c.shared_bytes == 2 * (4 * c.block_n + 64) * c.padded_dim <= 227 * 1024 // 2


# -- GPU -----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, causal, d, wgmma", [("f16", False, 128, False), ("f16", True, 128, False),
                                                     ("bf16", False, 128, False), ("f16", True, 64, False),
                                                     ("bf16", True, 256, False), ("f16", False, 128, True),
                                                     ("bf16", True, 128, True), ("f16", True, 64, True),
                                                     ("f16", False, 40, True), ("bf16", True, 256, True),
                                                     ("f16", False, 192, True)])
def test_gpu_matches_torch_sdpa(dtype, causal, d, wgmma):
    """Each form of the kernel on the device: Q in registers with two m-tiles (D = 64), Q in
    dynamic shared memory with two (128) and with one (256); and on an H100 / H200 the
    wgmma form (sm_90a) at 128, 64, a padded 40 and on 32-key tiles at 192 and 256."""
    from partita.runtime.cuda import CudaDevice, cuda_status

    if cuda_status() is not None:
        pytest.skip(f"needs a CUDA device ({cuda_status()})")
    torch = pytest.importorskip("torch")
    from partita.lowering.nvrtc import compile_cuda

    device = CudaDevice()
    if wgmma and device.arch not in ("sm_90", "sm_90a"):
        pytest.skip(f"the wgmma form needs an H100 / H200, not {device.arch}")
    config = FlashConfig(dtype, d, causal=causal, wgmma=wgmma)
    arch = "sm_90a" if wgmma else device.arch
    module = device.load_module(compile_cuda(flash_attention_source(config), arch=arch).cubin)
    rng = np.random.default_rng(6)
    b, h, hkv, sq, skv = 2, 8, 2, 300, 300
    q, k, v = _inputs(rng, dtype, b, h, hkv, sq, skv, d)
    bufs = [device.to_device(a) for a in (q, k, v)]
    out = device.alloc(q.nbytes)
    scale = d ** -0.5
    module.launch(config.entry, config.grid(b, h, sq), config.block,
                  [("ptr", int(bufs[0])), ("ptr", int(bufs[1])), ("ptr", int(bufs[2])), ("ptr", 0),
                   ("ptr", int(out)), ("i32", h), ("i32", hkv), ("i32", sq), ("i32", skv), ("f32", scale),
                   ("i64", 0), ("i64", 0), ("i64", 0)],  # token row strides: BSHD only
                  smem=config.dynamic_smem)  # Q in shared memory past D = 64, or wgmma's: past 48 KiB, opted in
    got = device.from_device(out, q.shape, q.dtype).astype(np.float32)
    tt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    tq, tk, tv = (torch.from_numpy(a.astype(np.float32)).to(tt) for a in (q, k, v))
    tk, tv = tk.repeat_interleave(h // hkv, dim=1), tv.repeat_interleave(h // hkv, dim=1)
    want = torch.nn.functional.scaled_dot_product_attention(tq.float(), tk.float(), tv.float(),
                                                            is_causal=causal, scale=scale).numpy()
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
