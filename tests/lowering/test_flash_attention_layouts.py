"""The flash attention kernel at the exported fixtures' shapes: head dims below 32 (8, 16,
24, and 40 padded to 64) computed zero-padded in registers and shared memory, and the
``[B, S, H, D]`` layout read through its strides, on the host emulation
(``tests/support/flash_host.py``) against the ``nn.attention`` reference: causal with a key
padding mask, GQA, odd lengths, fully masked rows; and the sm_90 SASS of the D = 8 BSHD
instantiation: 128-bit loads, the padded MMA count, no spills."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.flash_host import build, launch  # tests/support/flash_host.py
from support.sass import compiled_sass  # tests/support/sass.py

from partita.lowering.cuda.flash_attention import FlashConfig, flash_attention_source, head_dim_supported
from partita.runtime.reference.nn.attention import attention

CONFIGS = [FlashConfig("f16", 8, causal=True, layout="BSHD"), FlashConfig("f16", 8, causal=True),
           FlashConfig("bf16", 16, layout="BSHD", zero_undefined_rows=False), FlashConfig("f16", 24),
           FlashConfig("f16", 40, causal=True, layout="BSHD"), FlashConfig("f16", 64, layout="BSHD"),
           FlashConfig("bf16", 72, causal=True, layout="BSHD")]
TOLERANCE = {"f16": 4e-3, "bf16": 3e-2}


@pytest.fixture(scope="module", params=[False, True], ids=["mma", "wgmma"])
def built(request, tmp_path_factory):
    """The kernels and their configs: the mma.sync forms, and the wgmma ones (sm_90a; Q, K
    and V as core matrices in shared memory, padding dims zeroed there too)."""
    if not have_gxx():
        pytest.skip("needs g++")
    configs = [dataclasses.replace(c, wgmma=request.param) for c in CONFIGS]
    return build(configs, tmp_path_factory.mktemp("flash_layouts")), configs


def _run(lib, config: FlashConfig, b, h, hkv, sq, skv, key_mask=None, seed=0, scale=0.35):
    """Kernel and reference on the same inputs, in the config's layout; returns the
    kernel's output (BHSD) after checking it."""
    import ml_dtypes
    t = np.float16 if config.dtype == "f16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(seed)
    d = config.head_dim
    q, k, v = (rng.standard_normal(s).astype(t) for s in ((b, h, sq, d), (b, hkv, skv, d), (b, hkv, skv, d)))
    bshd = config.layout == "BSHD"
    args = [x.swapaxes(1, 2).copy() if bshd else x for x in (q, k, v)]
    got = launch(lib, config, *args, key_mask, scale)
    got = (got.swapaxes(1, 2) if bshd else got).astype(np.float64)
    mask = None if key_mask is None else key_mask.astype(bool)[:, None, None, :]
    want = attention(*(x.astype(np.float32) for x in (q, k, v)), mask, scale=scale, causal=config.causal,
                     zero_undefined_rows=config.zero_undefined_rows)
    want = want.astype(t).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[config.dtype], atol=TOLERANCE[config.dtype])
    return got


def test_head_dims_accepted():
    assert [d for d in range(1, 300) if head_dim_supported(d)] == list(range(8, 257, 8))
    assert FlashConfig("f16", 8).padded_dim == 32 and FlashConfig("f16", 40).padded_dim == 64
    assert FlashConfig("f16", 8, layout="BSHD").entry.endswith("_bshd")
    with pytest.raises(ValueError, match="layout"):
        FlashConfig("f16", 8, layout="SBHD")


def test_d8_bshd_causal_with_key_padding_gqa(built):
    """The exported LLaMA's attention: D = 8, causal, a key padding mask padding the end
    of the second row, 4 query heads on 2 KV heads, in BSHD."""
    lib, configs = built
    key_mask = np.ones((2, 7), np.uint8)
    key_mask[1, 4:] = 0
    _run(lib, configs[0], 2, 4, 2, 7, 7, key_mask)


def test_d8_bhsd_causal_left_padding_rows_are_zero(built):
    lib, configs = built
    key_mask = np.ones((2, 70), np.uint8)
    key_mask[1, :3] = 0  # left padding: queries 0..2 of batch 1 see no key
    got = _run(lib, configs[1], 2, 2, 2, 70, 70, key_mask, seed=1)
    assert (got[1, :, :3] == 0).all() and np.abs(got[1, :, 3:]).sum() > 0


def test_small_dims_odd_lengths(built):
    lib, configs = built
    _run(lib, configs[2], 1, 3, 1, 5, 130, seed=2)   # bf16 D = 16, MQA, BSHD, many key tiles
    _run(lib, configs[3], 2, 2, 2, 65, 9, seed=3)    # D = 24, two query tiles
    _run(lib, configs[4], 1, 4, 2, 33, 40, seed=4)   # D = 40 padded to 64, causal Sq != Skv


def test_undefined_rows_without_the_guard_are_nan(built):
    lib, configs = built
    key_mask = np.zeros((1, 6), np.uint8)
    got = _run(lib, configs[2], 1, 2, 1, 3, 6, key_mask, seed=5)
    assert np.isnan(got).all()


def test_bshd_at_a_native_head_dim(built):
    lib, configs = built
    _run(lib, configs[5], 2, 2, 2, 17, 80, seed=6)


def test_bshd_heads_read_in_place_from_a_packed_qkv_projection(built):
    """GPT-2's attention: Q, K and V are head views of one ``[B, S, 3 * H * D]``
    projection, tokens ``3 * H * D`` apart; the kernel reads them in place (the harness
    passes the views' pointers and row strides, no copies) and matches the reference."""
    lib, configs = built
    import ml_dtypes  # noqa: F401  (bf16 arrays for the bf16 config)
    for config in (configs[0], configs[2]):
        t = np.float16 if config.dtype == "f16" else np.dtype("bfloat16")
        b, s, h, d = 2, 13, 3, config.head_dim
        packed = np.random.default_rng(4).standard_normal((b, s, 3, h, d)).astype(t)
        q, k, v = (packed[:, :, n] for n in range(3))
        assert all(x.base is not None and x.strides[1] == 3 * h * d * x.itemsize for x in (q, k, v))
        got = launch(lib, config, q, k, v, None, 0.35).astype(np.float64)
        want = attention(*(x.swapaxes(1, 2).astype(np.float32) for x in (q, k, v)), None, scale=0.35,
                         causal=config.causal, zero_undefined_rows=config.zero_undefined_rows)
        want = want.swapaxes(1, 2).astype(t).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=TOLERANCE[config.dtype], atol=TOLERANCE[config.dtype])


def test_q_in_shared_memory_padded_and_read_in_place(built):
    """D = 72 runs at 96 with Q in shared memory: its 24 padding dims zeroed there, its
    rows read in place from a packed QKV projection (tokens 3 * H * D apart), two query
    tiles (the second partial), causal with more keys than queries, GQA."""
    lib, configs = built
    config = configs[6]
    assert config.q_in_smem and config.padded_dim == 96
    b, s, h, d = 1, 150, 2, config.head_dim
    packed = np.random.default_rng(7).standard_normal((b, s, 3, h, d)).astype(np.dtype("bfloat16"))
    q, k, v = (packed[:, :, n] for n in range(3))
    got = launch(lib, config, q[:, 20:], k, v, None, 0.35).astype(np.float64)
    want = attention(*(x.swapaxes(1, 2).astype(np.float32) for x in (q[:, 20:], k, v)), None, scale=0.35,
                     causal=True, zero_undefined_rows=True)
    want = want.swapaxes(1, 2).astype(np.dtype("bfloat16")).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=TOLERANCE["bf16"], atol=TOLERANCE["bf16"])
    _run(lib, config, 2, 4, 2, 131, 131, seed=8)


def test_bshd_q_and_k_read_as_head_slices_of_one_merged_rotation(built):
    """LLaMA after merge-rotary-embeddings: Q (4 heads) and K (2) are head slices of one
    [B, S, 6, D] rotation, tokens 6 * D apart; V is contiguous (GQA)."""
    lib, configs = built
    config = configs[0]
    b, s, hq, hk, d = 2, 11, 4, 2, config.head_dim
    rng = np.random.default_rng(5)
    rotated = rng.standard_normal((b, s, hq + hk, d)).astype(np.float16)
    q, k = rotated[:, :, :hq], rotated[:, :, hq:]
    v = rng.standard_normal((b, s, hk, d)).astype(np.float16)
    assert q.strides[1] == k.strides[1] == (hq + hk) * d * 2 and k.base is not None
    got = launch(lib, config, q, k, v, None, 0.35).astype(np.float64)
    want = attention(*(x.swapaxes(1, 2).astype(np.float32) for x in (q, k, v)), None, scale=0.35, causal=True,
                     zero_undefined_rows=True)
    want = want.swapaxes(1, 2).astype(np.float16).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=TOLERANCE["f16"], atol=TOLERANCE["f16"])


def test_sm90_sass_of_the_small_bshd_kernel(tmp_path):
    config = CONFIGS[0]
    binary, sass = compiled_sass(flash_attention_source(config), options=["--ptxas-options=-v"], use_cache=False)
    text = sass[config.entry]
    # S at the padded dim (2 k-steps); P V only into the n8 d-tile holding the 8 real dims
    # (ptxas drops the MMAs whose accumulators are never stored).
    k_steps, n_tiles, d_tiles = config.padded_dim // 16, config.block_n // 8, config.head_dim // 8
    # for each of a warp's m-tiles (two at D = 8), twice: the loop over the tiles whole for
    # the block, then the masked one
    assert config.m_tiles == 2
    assert text.count("HMMA.16816.F32") == 2 * config.m_tiles * (n_tiles * k_steps + (config.block_n // 16) * d_tiles)
    assert "LDGSTS.E.BYPASS.128" in text  # one 16-byte K / V row per cp.async at D = 8
    assert "LDL" not in text and "STL" not in text
    report = binary.log.split(f"Function properties for {config.entry}")[1]
    assert re.search(r"0 bytes spill stores, 0 bytes spill loads", report.split("Compile time")[0])
