"""``nn.attention`` in every layer below the importer: the verifier, the NumPy reference
against a plain softmax written out, and the native window kernel built for the host
(``tests/support/cuda_host.py``) against the reference on chosen inputs: NaN scores, -inf and
boolean masks, fully masked rows, odd lengths, GQA, causal with Sq != Skv, dynamic dims."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from support.cuda_host import HostKernels, have_gxx  # tests/support/cuda_host.py
from support.kernel_check import fuse, fused_functions, host_ops  # tests/support/kernel_check.py
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType, f16, f32, i1
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.test_value import create_ssa_value

from partita.dialects import nn
from partita.lowering.cuda.codegen import program_of
from partita.lowering.cuda.flash_attention import FlashConfig
from partita.lowering.cuda.records import RECORDS, fused_record
from partita.runtime.reference import run
from partita.runtime.reference.nn.attention import attention

DTYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}
TOLERANCE = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2}


def _t(shape, t=f16):
    return create_ssa_value(TensorType(t, shape))


# -- dialect -------------------------------------------------------------------------------


def test_shape_rule_and_variants():
    op = nn.AttentionOp(_t([2, 8, 5, 16]), _t([2, 2, 9, 16]), _t([2, 2, 9, 32]),
                        _t([2, 1, 1, 9], i1), scale=0.25, causal=True)
    op.verify()
    assert op.result.type == TensorType(f16, [2, 8, 5, 32])
    assert (op.mask_kind, op.groups, op.scale, op.causal, op.zero_undefined_rows) == \
        ("boolean", 4, 0.25, True, False)
    plain = nn.AttentionOp(_t([1, 2, 3, 4]), _t([1, 2, 3, 4]), _t([1, 2, 3, 4]), scale=0.5)
    assert plain.mask_kind == "none" and plain.groups == 1
    additive = nn.AttentionOp(_t([1, 2, 3, 4]), _t([1, 2, 3, 4]), _t([1, 2, 3, 4]), _t([3, 3]),
                              scale=0.5)
    assert additive.mask_kind == "additive"


@pytest.mark.parametrize("build, message", [
    (lambda: nn.AttentionOp(_t([2, 6, 5, 16]), _t([2, 4, 9, 16]), _t([2, 4, 9, 16]), scale=1.0),
     "6 query heads cannot share 4 KV heads"),
    (lambda: nn.AttentionOp(_t([2, 4, 5, 16]), _t([2, 4, 9, 8]), _t([2, 4, 9, 16]), scale=1.0),
     "head dim mismatch"),
    (lambda: nn.AttentionOp(_t([2, 4, 5, 16]), _t([2, 4, 9, 16]), _t([2, 4, 7, 16]), scale=1.0),
     "KV length mismatch"),
    (lambda: nn.AttentionOp(_t([2, 4, 5, 16]), _t([2, 4, 9, 16]), _t([2, 4, 9, 16]),
                            _t([2, 1, 5, 8]), scale=1.0), "does not broadcast"),
    (lambda: nn.AttentionOp(_t([4, 5, 16]), _t([4, 9, 16]), _t([4, 9, 16]), scale=1.0),
     "rank 4"),
])
def test_verifier_rejections(build, message):
    with pytest.raises(VerifyException, match=message):
        build().verify()


def test_mask_type_must_be_bool_or_the_query_type():
    op = nn.AttentionOp(_t([1, 1, 2, 4]), _t([1, 1, 2, 4]), _t([1, 1, 2, 4]), _t([2, 2], f32),
                        scale=1.0)
    with pytest.raises(VerifyException, match="mask element type"):
        op.verify()


def test_a_last_key_mask_is_one_i64_per_batch_row_or_one_for_all():
    for shape in ([3], [1]):
        op = nn.AttentionOp(_t([3, 2, 1, 4]), _t([3, 2, 9, 4]), _t([3, 2, 9, 4]), _t(shape, nn.LAST_KEY_TYPE),
                            scale=1.0)
        op.verify()
        assert op.mask_kind == "last_key"
    for shape in ([2], [3, 1]):
        with pytest.raises(VerifyException, match=r"last-key mask must be \[3\] \(one per batch row\) or \[1\]"):
            nn.AttentionOp(_t([3, 2, 1, 4]), _t([3, 2, 9, 4]), _t([3, 2, 9, 4]), _t(shape, nn.LAST_KEY_TYPE),
                           scale=1.0).verify()


# -- reference -----------------------------------------------------------------------------


def _softmax_attention(q, k, v, bias):
    """The decomposed form, written out: per head, with the KV head repeated."""
    groups = q.shape[1] // k.shape[1]
    out = np.zeros(q.shape[:3] + v.shape[3:], np.float64)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            s = q[b, h] @ k[b, h // groups].T + bias
            p = np.exp(s - s.max(-1, keepdims=True))
            out[b, h] = (p / p.sum(-1, keepdims=True)) @ v[b, h // groups]
    return out


def test_reference_matches_written_out_softmax_with_gqa_and_causal():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s) for s in ((2, 6, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3)))
    got = attention(q * 0.5, k, v, None, scale=1.0, causal=True, zero_undefined_rows=False)
    frontier = np.arange(5)[None, :] <= np.arange(3)[:, None] + 2  # bottom-right aligned
    want = _softmax_attention(q * 0.5, k, v, np.where(frontier, 0.0, -np.inf))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_reference_fully_masked_rows_are_nan_or_zero():
    q = k = v = np.ones((1, 1, 2, 2), np.float32)
    mask = np.array([[True, True], [False, False]])
    nan = attention(q, k, v, mask, scale=1.0, causal=False, zero_undefined_rows=False)
    zero = attention(q, k, v, mask, scale=1.0, causal=False, zero_undefined_rows=True)
    assert np.isnan(nan[0, 0, 1]).all() and (zero[0, 0, 1] == 0).all()
    np.testing.assert_allclose(zero[0, 0, 0], [1.0, 1.0])


def test_reference_mask_fill_is_masked_fill():
    """``mask_fill``: hidden keys (mask and causal frontier) score the fill, so the op is
    ``softmax(where(keep, s, fill)) @ v``; a row with every key hidden averages the values."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s) for s in ((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 3)))
    mask = rng.integers(0, 2, (1, 1, 3, 5)).astype(bool)
    mask[..., 0, :] = False
    got = attention(q, k, v, mask, scale=0.5, causal=True, zero_undefined_rows=False, mask_fill=-1e9)
    frontier = np.arange(5)[None, :] <= np.arange(3)[:, None] + 2
    scores = np.where(mask & frontier, 0.5 * q @ k.swapaxes(-1, -2), -1e9)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(got, p / p.sum(-1, keepdims=True) @ v, rtol=1e-12)
    np.testing.assert_allclose(got[:, :, 0], v.mean(axis=2), rtol=1e-12)


# -- the native kernel on the host ---------------------------------------------------------


def _module(q, k, v, mask, dtype, attrs, dynamic=False):
    def ty(shape, t=dtype):
        dims = ["?" if dynamic and a in (0, 2) else str(d) for a, d in enumerate(shape)]
        return f"tensor<{'x'.join(dims)}x{t}>"
    qt, kt, vt = ty(q), ty(k), ty(v)
    out = ty((*q[:3], v[3]))
    args = f"%q: {qt}, %k: {kt}, %v: {vt}"
    operands, types = "%q, %k, %v", f"{qt}, {kt}, {vt}"
    if mask is not None:
        shape, kind = mask
        mt = f"tensor<{'x'.join(map(str, shape))}x{ {'boolean': 'i1', 'last_key': 'i64'}.get(kind, dtype)}>"
        args, operands, types = f"{args}, %m: {mt}", f"{operands}, %m", f"{types}, {mt}"
    return f"""
func.func @main({args}) -> {out} {{
  %0 = nn.attention {operands} {attrs} : ({types}) -> {out}
  func.return %0 : {out}
}}"""


def _launch(module, inputs, tmp_path):
    """Run the one fused kernel of ``module`` on the host; returns (kernel out, reference)."""
    (name, function), = fused_functions(module).items()
    program = program_of(module)
    rec = RECORDS[program.kernels[name].kind].from_attr(fused_record(program.kernels[name]))
    host = HostKernels(program.code, [rec], tmp_path)
    clone = function.clone()
    clone.sym_visibility = StringAttr("public")
    (expected,) = run(ModuleOp([clone]), *inputs, entry=name)
    out = np.full(expected.shape, 7, expected.dtype)
    grid, block = rec.geometry(out.shape)
    host.launch(rec, grid, block, [np.ascontiguousarray(a) for a in inputs], out)
    return out, expected


CASES = {
    # name: (q, k, v shapes, mask (shape, kind) or None, attributes)
    "mha": ((2, 2, 5, 8), (2, 2, 5, 8), (2, 2, 5, 8), None, "{scale = 0.35355 : f64}"),
    "gqa_causal_odd": ((1, 4, 3, 5), (1, 2, 7, 5), (1, 2, 7, 6), None,
                       "{scale = 0.5 : f64, causal = true}"),
    "mqa_bool_mask": ((2, 3, 4, 8), (2, 1, 6, 8), (2, 1, 6, 8), ((2, 1, 1, 6), "boolean"),
                      "{scale = 0.25 : f64, zero_undefined_rows = true}"),
    "additive_mask": ((1, 2, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4), ((5, 5), "additive"),
                      "{scale = 0.5 : f64}"),
    # [B, S, H, D]: 4 query heads on 2 KV heads, causal with Sq != Skv.
    "bshd_gqa_causal": ((2, 5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 6), None,
                        '{scale = 0.5 : f64, causal = true, layout = "BSHD"}'),
}


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_matches_reference(case, dtype, tmp_path):
    q, k, v, mask, attrs = CASES[case]
    module = fuse(_module(q, k, v, mask, dtype, attrs))
    assert host_ops(module) == []
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(s).astype(DTYPES[dtype]) for s in (q, k, v)]
    if mask is not None:
        shape, kind = mask
        if kind == "boolean":
            m = rng.integers(0, 2, shape).astype(bool)
            m[0, ..., :] = False  # batch 0: every key masked (zeros, zero_undefined_rows)
        else:
            m = np.where(rng.integers(0, 3, shape) == 0, -np.inf, rng.standard_normal(shape))
            m[1, :] = -np.inf  # row 1: fully masked (NaN, the plain softmax)
            m = m.astype(DTYPES[dtype])
        inputs.append(m)
    out, want = _launch(module, inputs, tmp_path)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    if mask is not None and mask[1] == "boolean":
        assert (out[0] == 0).all()
    if mask is not None and mask[1] == "additive":
        assert np.isnan(out.astype(np.float32)[:, :, 1]).all()


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("dtype, head_dim", [("f16", 32), ("f32", 8), ("f32", 264)])
def test_kernel_mask_fill_averages_rows_with_every_key_hidden(dtype, head_dim, tmp_path):
    """A finite ``mask_fill`` (masked_fill's ``finfo.min``): the flash kernel (f16), the
    rows schedule (f32) and the per-element kernel (D = 264) give hidden keys the fill,
    under the mask and the causal frontier alike, so batch 0, every key masked, averages
    its values instead of being undefined."""
    q, k = (2, 2, 3, head_dim), (2, 2, 6, head_dim)
    fill = float(np.finfo(DTYPES[dtype]).min)
    module = fuse(_module(q, k, k, ((2, 1, 1, 6), "boolean"), dtype,
                          f"{{scale = 0.5 : f64, causal = true, mask_fill = {fill!r} : f64}}"))
    (kernel,) = program_of(module).kernels.values()
    assert ("flash_attention" in kernel.code) == (dtype == "f16")
    rng = np.random.default_rng(4)
    inputs = [rng.standard_normal(s).astype(DTYPES[dtype]) for s in (q, k, k)]
    m = rng.integers(0, 2, (2, 1, 1, 6)).astype(bool)
    m[0] = False
    m[1, ..., :2] = True
    out, want = _launch(module, [*inputs, m], tmp_path)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    mean = inputs[2][0].astype(np.float64).mean(axis=1)  # [H, D]: every key, the frontier's too
    np.testing.assert_allclose(out[0].astype(np.float64), np.broadcast_to(mean[:, None], out[0].shape),
                               rtol=tol, atol=tol)


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
def test_kernel_nan_scores_and_dynamic_lengths(tmp_path):
    """A NaN in one query row makes that row undefined (zeros with the guard) and no other;
    the batch and sequence dims are run-time dims of the kernel."""
    q, k, v = (1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)
    module = fuse(_module(q, k, v, None, "f32", "{scale = 0.5 : f64, zero_undefined_rows = true}",
                          dynamic=True))
    assert host_ops(module) == []
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in (q, k, v)]
    inputs[0][0, 1, 2, 3] = np.nan
    out, want = _launch(module, inputs, tmp_path)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    assert (out[0, 1, 2] == 0).all() and np.isfinite(out).all()
    assert np.abs(out[0, 1, :2]).sum() > 0


def test_bshd_layout_is_the_transposed_bhsd_op():
    from xdsl.dialects.builtin import ModuleOp as Module

    from partita.dialects import make_context
    from partita.ir import parse_module

    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((2, 5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 8)))
    text = _module((2, 5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 8), None, "f32",
                   '{scale = 0.5 : f64, causal = true, layout = "BSHD"}')
    module = parse_module(text, make_context(), "bshd.mlir")
    module.verify()
    assert isinstance(module, Module)
    (got,) = run(module, q, k, v)
    want = attention(*(x.swapaxes(1, 2) for x in (q, k, v)), None, scale=0.5, causal=True,
                     zero_undefined_rows=False).swapaxes(1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(VerifyException, match="layout must be BHSD or BSHD"):
        nn.AttentionOp(_t([1, 2, 3, 4]), _t([1, 2, 3, 4]), _t([1, 2, 3, 4]), scale=1.0,
                       layout="SBHD").verify()


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_f16_attention_alone_takes_the_flash_kernel(dtype, tmp_path):
    """f16 / bf16, BHSD, head dim 32 and a key padding mask: the kernel is the flash one
    (128 threads, mma fragments), launched with its record's geometry, and matches the
    reference; batch 1 has every key masked (zeros)."""
    q, k, v = (2, 3, 70, 32), (2, 1, 75, 32), (2, 1, 75, 32)
    module = fuse(_module(q, k, v, ((2, 1, 1, 75), "boolean"), dtype,
                          "{scale = 0.2 : f64, causal = true, zero_undefined_rows = true}"))
    program = program_of(module)
    (kernel,) = program.kernels.values()
    assert kernel.block == 128 and f"flash_attention_{dtype}_d32_cz_tile(" in kernel.code
    rng = np.random.default_rng(4)
    inputs = [rng.standard_normal(s).astype(DTYPES[dtype]) for s in (q, k, v)]
    mask = rng.integers(0, 2, (2, 1, 1, 75)).astype(bool)
    mask[1] = False
    out, want = _launch(module, [*inputs, mask], tmp_path)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    assert (out[1] == 0).all()


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("causal", [False, True])
def test_a_finite_mask_fill_takes_the_flash_kernel(tmp_path, causal):
    """DistilBERT's attention (masked_fill(finfo.min) on a key padding mask) and, causal,
    GPT-2's eager one. The flash kernel scores hidden keys with the fill, so batch 1 (every
    key hidden) averages its values, as the reference does."""
    q, k = (2, 2, 20, 32), (2, 2, 33, 32)
    fill = float(np.finfo(np.float16).min)
    attrs = f"{{scale = 0.2 : f64, causal = {str(causal).lower()}, mask_fill = {fill!r} : f64}}"
    module = fuse(_module(q, k, k, ((2, 1, 1, 33), "boolean"), "f16", attrs))
    (kernel,) = program_of(module).kernels.values()
    mode = "c" if causal else "n"
    assert kernel.block == 128 and f"flash_attention_f16_d32_{mode}u_fc77fe000_tile(" in kernel.code
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal(s).astype(np.float16) for s in (q, k, k)]
    mask = rng.integers(0, 2, (2, 1, 1, 33)).astype(bool)
    mask[1] = False
    out, want = _launch(module, [*inputs, mask], tmp_path)
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=4e-3, atol=4e-3)
    assert np.isfinite(out.astype(np.float32)).all()


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
def test_small_head_dim_bshd_with_a_batch_broadcast_mask_takes_the_flash_kernel(tmp_path):
    """The exported fixtures' shape: D = 8 (zero-padded to 32 in registers), BSHD read
    through its strides, GQA, causal, and a key padding mask [1, 1, 1, Skv] shared by both
    batch rows (batch stride 0)."""
    q, k = (2, 7, 4, 8), (2, 7, 2, 8)
    module = fuse(_module(q, k, k, ((1, 1, 1, 7), "boolean"), "f16",
                          '{scale = 0.35 : f64, causal = true, zero_undefined_rows = true, layout = "BSHD"}'))
    (kernel,) = program_of(module).kernels.values()
    assert kernel.block == 128 and "flash_attention_f16_d8_cz_bshd_tile(" in kernel.code
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(s).astype(np.float16) for s in (q, k, k)]
    mask = np.array([True, False, True, True, True, False, True]).reshape(1, 1, 1, 7)
    out, want = _launch(module, [*inputs, mask], tmp_path)
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=4e-3, atol=4e-3)
    assert (out[:, 0] != 0).any() and np.isfinite(out).all()


def test_attention_launches_a_block_per_query_tile():
    """The flash and rows schedules stride their blocks over (query tile, batch x head)
    pairs, and their record sizes the grid by those tiles (``block_rows``): 128 rows a
    flash block up to D = 128, 8 or 4 a rows block. By output elements it would launch 64
    times as many blocks as flash tiles, the rest exiting at once. At D = 128 the flash
    block stages Q in dynamic shared memory, which the record asks for (``smem``). A
    record written before ``block_rows`` reads as the window geometry, one written before
    ``smem`` as none."""
    from xdsl.dialects.builtin import DictionaryAttr

    d128 = FlashConfig("bf16", 128, layout="BSHD").dynamic_smem
    assert d128 > 48 * 1024
    for q, k, dtype, attrs, rows, blocks, smem in [
        ((2, 3, 300, 64), (2, 3, 300, 64), "f16", "{scale = 0.1 : f64}", (2, 128), 2 * 3 * 3, 0),
        ((2, 300, 3, 128), (2, 300, 3, 128), "bf16", '{scale = 0.1 : f64, layout = "BSHD"}', (1, 128), 2 * 3 * 3,
         d128),
        ((1, 2, 70, 32), (1, 2, 70, 32), "f32", "{scale = 0.5 : f64}", (2, 8), 2 * 9, 0),
    ]:
        (kernel,) = program_of(fuse(_module(q, k, k, None, dtype, attrs))).kernels.values()
        record = RECORDS[kernel.kind].from_attr(fused_record(kernel))
        assert record.block_rows == rows and record.dynamic_smem == smem
        grid, block = record.geometry(q)
        assert grid == (blocks, 1, 1) and block == (kernel.block, 1, 1)
        older = DictionaryAttr({k: v for k, v in fused_record(kernel).data.items() if k not in ("block_rows", "smem")})
        old = RECORDS[kernel.kind].from_attr(older)
        assert old.block_rows == () and old.geometry(q)[0][0] == min(65535, -(-int(np.prod(q)) // kernel.block))
        assert old.dynamic_smem == 0


def test_other_forms_take_the_rows_schedule():
    """f32, a full [B, 1, Sq, Skv] mask, or a head dim that is not a multiple of 8: a warp
    per query row, the block's rows sharing each key tile in shared memory (no score is
    recomputed per output column); past a head dim of 256, the per-element kernel."""
    for q, k, mask, dtype, attrs in [
        ((1, 2, 8, 32), (1, 2, 8, 32), None, "f32", "{scale = 0.5 : f64}"),
        ((1, 2, 8, 32), (1, 2, 8, 32), ((1, 1, 8, 8), "boolean"), "f16", "{scale = 0.5 : f64}"),
        ((1, 8, 2, 20), (1, 8, 2, 20), None, "f16", '{scale = 0.5 : f64, layout = "BSHD"}'),
    ]:
        (kernel,) = program_of(fuse(_module(q, k, k, mask, dtype, attrs))).kernels.values()
        assert "flash_attention" not in kernel.code and kernel.block == 128
        assert "__shfl_xor_sync(0xffffffffu, s, o)" in kernel.code and "__shared__ float ks" in kernel.code
    (kernel,) = program_of(fuse(_module((1, 1, 2, 264), (1, 1, 3, 264), (1, 1, 3, 264), None, "f32",
                                        "{scale = 0.5 : f64}"))).kernels.values()
    assert "__shfl_xor_sync" not in kernel.code and "expf(m - s)" in kernel.code


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_rows_schedule_with_several_key_tiles_and_lanes(dtype, tmp_path):
    """Head dims past one warp (40 and 72: two and three values a lane), 8 warps a block
    (Sq = 66: the last block's rows are mostly past the sequence), three key tiles of 32
    (the last partial), GQA and a full additive [B, H, Sq, Skv] mask with masked-out rows."""
    q, k, v = (2, 4, 66, 40), (2, 2, 70, 40), (2, 2, 70, 72)
    mask = ((2, 4, 66, 70), "additive")
    module = fuse(_module(q, k, v, mask, dtype, "{scale = 0.15 : f64}"))
    (kernel,) = program_of(module).kernels.values()
    assert kernel.block == 256 and "__shared__ float ks0[32][40], vs0[32][72];" in kernel.code
    rng = np.random.default_rng(6)
    inputs = [rng.standard_normal(s).astype(DTYPES[dtype]) for s in (q, k, v)]
    m = np.where(rng.integers(0, 4, mask[0]) == 0, -np.inf, rng.standard_normal(mask[0]))
    m[1, 2, 5] = -np.inf  # one fully masked row: NaN, as the plain softmax
    inputs.append(m.astype(DTYPES[dtype]))
    out, want = _launch(module, inputs, tmp_path)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    assert np.isnan(out.astype(np.float32)[1, 2, 5]).all() and np.isfinite(out.astype(np.float32)[0]).all()


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
def test_per_element_kernel_past_the_rows_head_dims(tmp_path):
    """A head dim of 264 keeps the portable per-element kernel; it still matches."""
    q, k = (1, 2, 3, 264), (1, 2, 5, 264)
    module = fuse(_module(q, k, k, None, "f32", "{scale = 0.05 : f64, causal = true}"))
    rng = np.random.default_rng(7)
    out, want = _launch(module, [rng.standard_normal(s).astype(np.float32) for s in (q, k, k)], tmp_path)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("head_dim", [16, 264], ids=["rows", "per-element"])
def test_a_last_key_mask_stops_at_each_rows_last_key(head_dim, tmp_path):
    """A static cache read at a position per batch row (``last-key-mask``) in the rows
    schedule (and the per-element kernel past its head dims): the keys after a row's last
    are never read (NaN there leaves the rows finite), past the cache every key is read,
    and a negative last hides every key (the fill: the values averaged); equal to the
    reference, and to the boolean mask it replaces on the keys it reads."""
    q, k = (4, 2, 1, head_dim), (4, 1, 70, head_dim)
    fill = float(np.finfo(np.float32).min)
    module = fuse(_module(q, k, k, ((4,), "last_key"), "f32", f"{{scale = 0.1 : f64, mask_fill = {fill!r} : f64}}"))
    (kernel,) = program_of(module).kernels.values()
    assert ("__shared__ float ks" in kernel.code) == (head_dim == 16)
    rng = np.random.default_rng(9)
    query, key, value = (rng.standard_normal(s).astype(np.float32) for s in (q, k, k))
    last = np.array([3, 40, 90, -1], np.int64)
    for b, p in enumerate(last[:2]):
        key[b, :, p + 1:], value[b, :, p + 1:] = np.nan, np.nan
    out, want = _launch(module, [query, key, value, last], tmp_path)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    keep = (np.arange(70)[None, :] <= last[:, None])[:, None, None, :]
    clean = [np.nan_to_num(a) for a in (key, value)]
    masked = attention(query, *clean, keep, scale=0.1, causal=False, zero_undefined_rows=False, mask_fill=fill)
    np.testing.assert_allclose(out, masked, rtol=2e-5, atol=2e-5)
    assert np.isfinite(out).all()


def _packed(dtype, b, s, h, d, epilogue=False, dynamic=False):
    """GPT-2's attention: Q, K and V are head splits of one packed ``[B, S, 3 * H * D]``
    projection (``nn.strided_slice`` + ``nn.reshape`` each), causal BSHD with a key
    padding mask; ``epilogue`` adds a residual after it (the per-element schedule);
    ``dynamic`` makes B and S run-time dims (the exported fixture's form: the reshapes
    take them from a shape reference ``%r``)."""
    w = h * d
    bs = "?x?" if dynamic else f"{b}x{s}"
    big = 2**63 - 1
    out = f"tensor<{bs}x{h}x{d}x{dtype}>"
    args = f"%x: tensor<{bs}x{3 * w}x{dtype}>, %m: tensor<{'?' if dynamic else b}x1x1x{'?' if dynamic else s}xi1>"
    refs = ""
    if dynamic:
        args += ", %r: tensor<?x?xi64>"
        refs = ", %r, %r {ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 1>}"
    if epilogue:
        args += f", %res: {out}"
    lines = [f"func.func @main({args}) -> {out} {{"]
    for n in range(3):
        lines += [
            f"  %s{n} = nn.strided_slice %x {{begin = array<i64: 0, 0, {n * w}>, end = array<i64: {big}, {big}, "
            f"{(n + 1) * w}>, strides = array<i64: 1, 1, 1>}} : (tensor<{bs}x{3 * w}x{dtype}>) -> tensor<{bs}x{w}x{dtype}>",
            f"  %h{n} = nn.reshape %s{n}{refs} : (tensor<{bs}x{w}x{dtype}>{', tensor<?x?xi64>, tensor<?x?xi64>' if dynamic else ''})"
            f" -> {out}",
        ]
    mt = f"tensor<{'?' if dynamic else b}x1x1x{'?' if dynamic else s}xi1>"
    lines.append(f'  %a = nn.attention %h0, %h1, %h2, %m {{scale = 0.35 : f64, causal = true, zero_undefined_rows = true, '
                 f'layout = "BSHD"}} : ({out}, {out}, {out}, {mt}) -> {out}')
    result = "%a"
    if epilogue:
        lines.append(f"  %y = nn.add %a, %res : ({out}, {out}) -> {out}")
        result = "%y"
    lines += [f"  func.return {result} : {out}", "}"]
    return "\n".join(lines)


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("dtype, epilogue, dynamic, schedule", [
    ("f32", False, True, "rows"),  # the exported GPT-2 fixture's form
    ("f32", False, False, "rows"),
    ("f16", False, False, "flash"),
    ("bf16", False, True, "flash"),
    ("f16", True, False, "per element"),
])
def test_packed_qkv_heads_are_read_in_place(dtype, epilogue, dynamic, schedule, tmp_path):
    """The three strided slices and reshapes of a packed QKV projection join the attention's
    kernel (one kernel, the packed tensor its one data input) in every schedule: flash
    reads the heads through the token stride ``3 * H * D`` from the pointer advanced to the
    slice, the rows and per-element schedules through the views' index arithmetic."""
    b, s, h, d = 2, 9, 3, 8
    module = fuse(_packed(dtype, b, s, h, d, epilogue, dynamic))
    assert host_ops(module) == []
    (kernel,) = program_of(module).kernels.values()
    assert kernel.ops.count("nn.strided_slice") == 3 and kernel.ops.count("nn.reshape") == 3
    assert kernel.inputs[0][-1] == 3 * h * d
    # The kernel's arguments in order of first use: x, the shape reference, the mask, the residual.
    flash = f"flash_attention_{dtype}_d{d}_cz_bshd_tile(in0, in0 + {h * d}, in0 + {2 * h * d}, " \
            f"(const unsigned char*)in{2 if dynamic else 1}"
    assert (flash in kernel.code) == (schedule == "flash")
    assert ("__shared__ float ks" in kernel.code) == (schedule == "rows")
    rng = np.random.default_rng(8)
    mask = np.ones((b, 1, 1, s), bool)
    mask[1, ..., 6:] = False
    inputs = [rng.standard_normal((b, s, 3 * h * d)).astype(DTYPES[dtype]), mask]
    if dynamic:
        inputs.insert(1, np.zeros((b, s), np.int64))
    if epilogue:
        inputs.append(rng.standard_normal((b, s, h, d)).astype(DTYPES[dtype]))
    out, want = _launch(module, inputs, tmp_path)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    q, k, v = (inputs[0].reshape(b, s, 3, h, d)[:, :, n].astype(np.float32) for n in range(3))
    again = attention(*(x.swapaxes(1, 2) for x in (q, k, v)), mask, scale=0.35, causal=True,
                      zero_undefined_rows=True).swapaxes(1, 2)
    if epilogue:
        again = again + inputs[-1].astype(np.float32)
    np.testing.assert_allclose(out.astype(np.float64), again, rtol=tol, atol=tol)


def test_collage_counts_the_flops_of_attention():
    """Q·Kᵀ and P·V: 2·B·H·Sq·Skv·(D + Dv), plus 5 per score for the softmax, in both
    layouts."""
    from partita.collage.cost import node_flops
    from partita.collage.ir_graph import graph_from_ops
    from partita.dialects import make_context
    from partita.ir import parse_module

    for q, k, v, attrs in [((2, 4, 5, 8), (2, 2, 7, 8), (2, 2, 7, 6), "{scale = 0.5 : f64}"),
                           ((2, 5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 6), '{scale = 0.5 : f64, layout = "BSHD"}')]:
        module = parse_module(_module(q, k, v, None, "f16", attrs), make_context(), "a.mlir")
        op = next(o for o in module.walk() if isinstance(o, nn.AttentionOp))
        (node,) = graph_from_ops([op]).graph.nodes
        scores = 2 * 4 * 5 * 7
        assert node_flops(node) == scores * (2 * 8 + 2 * 6 + 5)


SDPA = """
func.func @main(%q: tensor<1x2x5x8xf32>, %k: tensor<1x2x5x8xf32>, %v: tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32> {
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x5x8xf32>) -> tensor<1x2x8x5xf32>
  %s = nn.matmul %q, %kt : (tensor<1x2x5x8xf32>, tensor<1x2x8x5xf32>) -> tensor<1x2x5x5xf32>
  %p = nn.softmax %s {axis = 3 : i64} : (tensor<1x2x5x5xf32>) -> tensor<1x2x5x5xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x5x5xf32>, tensor<1x2x5x8xf32>) -> tensor<1x2x5x8xf32>
  func.return %o : tensor<1x2x5x8xf32>
}
"""


def test_compile_fuses_attention_unless_cudnn_or_tensorrt_may_take_it(tmp_path):
    import partita

    exe = partita.compile(SDPA, ["cuda -arch=sm_90", "llvm"], cache_dir=tmp_path)
    assert "fuse-attention" in exe.pipeline
    assert [row.ops for row in exe.report().rows] == [("nn.attention",)]
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((1, 2, 5, 8)).astype(np.float32) for _ in range(3))
    (got,) = exe.run(q, k, v)
    want = attention(q, k, v, None, scale=1.0, causal=False, zero_undefined_rows=False)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for library in ("cudnn", "tensorrt"):
        from partita.dialects import make_context
        from partita.driver import build_pipeline
        from partita.ir import parse_module
        from partita.target import CompilationConfig

        module = parse_module(SDPA, make_context(), "sdpa.mlir")
        steps = build_pipeline(module, CompilationConfig.parse(["cuda -arch=sm_90", library, "llvm"]),
                               partitioner="collage", cost="roofline", device="h100", max_depth=4,
                               cache_dir=None, layout="auto")
        assert "fuse-attention" not in steps


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_q_and_k_as_head_slices_of_one_rotation(dtype, tmp_path):
    """After merge-rotary-embeddings, Q (4 heads) and K (2) are head slices of one [B, S, 6,
    D] tensor: the slices join the attention's kernel; flash reads them with a pointer
    advanced by h0 * D and tokens 6 * D apart, the rows schedule through the views."""
    r, v, out = (f"tensor<2x9x{h}x8x{dtype}>" for h in (6, 2, 4))
    text = f"""
func.func @main(%r: {r}, %v: {v}) -> {out} {{
  %q = nn.strided_slice %r {{begin = array<i64: 0, 0, 0, 0>, end = array<i64: 2, 9, 4, 8>, strides = array<i64: 1, 1, 1, 1>}} : ({r}) -> {out}
  %k = nn.strided_slice %r {{begin = array<i64: 0, 0, 4, 0>, end = array<i64: 2, 9, 6, 8>, strides = array<i64: 1, 1, 1, 1>}} : ({r}) -> {v}
  %a = nn.attention %q, %k, %v {{scale = 0.35 : f64, causal = true, zero_undefined_rows = true, layout = "BSHD"}} : ({out}, {v}, {v}) -> {out}
  func.return %a : {out}
}}"""
    module = fuse(text)
    assert host_ops(module) == []
    (kernel,) = program_of(module).kernels.values()
    flash = f"flash_attention_{dtype}_d8_cz_bshd_tile(in0, in0 + 32, in1, 0, out"
    assert (flash in kernel.code) == (dtype == "f16") and kernel.ops.count("nn.strided_slice") == 2
    rng = np.random.default_rng(9)
    inputs = [rng.standard_normal(s).astype(DTYPES[dtype]) for s in ((2, 9, 6, 8), (2, 9, 2, 8))]
    got, want = _launch(module, inputs, tmp_path)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
def test_head_dim_128_flash_stages_q_in_dynamic_shared_memory(tmp_path):
    """At D = 128 the flash block's 128 query rows wait in shared memory beside the K / V
    stages, 68 KiB, past the 48 KiB static shared memory holds: the fused kernel declares
    it dynamic and its record asks for it. On the host the kernel matches the reference
    (two query tiles, the second partial; causal with more keys than queries; GQA).
    Compiled for sm_90 and run on the recording driver (which refuses a launch past 48 KiB
    not opted in), the kernel is opted in at load and launched with those bytes."""
    from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py

    import partita
    from partita.dialects import byoc
    from partita.lowering.binaries import cubin_file
    from partita.runtime.cuda import CudaDevice
    from partita.runtime.plan import Runtime

    q, k = (1, 2, 150, 128), (1, 1, 170, 128)
    text = _module(q, k, k, None, "f16", "{scale = 0.088 : f64, causal = true}")
    module = fuse(text)
    (kernel,) = program_of(module).kernels.values()
    config = FlashConfig("f16", 128, causal=True, zero_undefined_rows=False)
    assert kernel.smem == config.dynamic_smem > 48 * 1024
    assert f"FA_DYNAMIC_SHARED({config.entry}_smem" in kernel.code
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal(s).astype(np.float16) for s in (q, k, k)]
    out, want = _launch(module, inputs, tmp_path)
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=4e-3, atol=4e-3)

    exe = partita.compile(text, ["cuda -arch=sm_90", "llvm"], cache_dir=tmp_path)
    images = {op.sym_name.data: cubin_file(op, tmp_path).read_bytes() for op in exe.module.walk()
              if isinstance(op, byoc.BinaryOp) and not op.is_inline}
    drv = RecordingDriver()
    runtime = Runtime(exe.module, CudaDevice(driver=drv), graphs=False, embedded=images)
    runtime.run(*inputs)
    runtime.close()
    (launch,) = drv.launches
    assert launch["smem"] == config.dynamic_smem and launch["grid"] == (2 * 2, 1, 1)
    opt_in = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert drv.func_attributes[(launch["name"], opt_in)] == config.dynamic_smem


def test_sm90a_takes_the_wgmma_flash_kernel(tmp_path):
    """Compiled for sm_90a (an H100 / H200), the flash kernel is its wgmma form: a
    warpgroup of 64 query rows a block (128 threads), Q, K and V in dynamic shared memory as
    core matrices (80 KiB at D = 128, opted in at load), HGMMA in its SASS, a D = 256
    attention's too (32-key tiles). On the recording driver it is launched with that
    geometry."""
    import re

    from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py
    from support.sass import sass_of

    import partita
    from partita.dialects import byoc
    from partita.lowering.binaries import cubin_file
    from partita.runtime.cuda import CudaDevice
    from partita.runtime.plan import Runtime

    q, k = (1, 2, 150, 128), (1, 1, 170, 128)
    text = _module(q, k, k, None, "f16", "{scale = 0.088 : f64, causal = true}")
    exe = partita.compile(text, ["cuda -arch=sm_90a", "llvm"], cache_dir=tmp_path)
    (binary,) = [op for op in exe.module.walk() if isinstance(op, byoc.BinaryOp) and not op.is_inline]
    image = cubin_file(binary, tmp_path).read_bytes()
    config = FlashConfig("f16", 128, causal=True, zero_undefined_rows=False, wgmma=True)
    assert config.dynamic_smem == 80 * 1024
    sass = sass_of(image)
    assert re.search(r"HGMMA\.64x64x16\.F32", sass) and re.search(r"HGMMA\.64x128x16\.F32", sass) and "HMMA" not in sass
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal(s).astype(np.float16) for s in (q, k, k)]
    drv = RecordingDriver(arch=(9, 0))
    runtime = Runtime(exe.module, CudaDevice(driver=drv), graphs=False, embedded={binary.sym_name.data: image})
    runtime.run(*inputs)
    runtime.close()
    (launch,) = drv.launches
    # a block per 64-row query tile: 3 of 150 rows, 2 heads
    assert launch["block"] == (128, 1, 1) and launch["smem"] == config.dynamic_smem and launch["grid"] == (3 * 2, 1, 1)
    # past D = 128 on 32-key tiles: S = Q K^T 64x32x16, O += P V 64x256x16
    wide = partita.compile(_module((1, 2, 70, 256), (1, 1, 70, 256), (1, 1, 70, 256), None, "bf16",
                                   "{scale = 0.0625 : f64}"), ["cuda -arch=sm_90a", "llvm"], cache_dir=tmp_path)
    (binary,) = [op for op in wide.module.walk() if isinstance(op, byoc.BinaryOp) and not op.is_inline]
    sass = sass_of(cubin_file(binary, tmp_path).read_bytes())
    assert re.search(r"HGMMA\.64x32x16\.F32\.BF16", sass) and re.search(r"HGMMA\.64x256x16\.F32\.BF16", sass)
    assert "HMMA" not in sass


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
def test_a_negative_scale_takes_the_flash_kernel_that_scales_first(tmp_path):
    """The flash kernel's whole tiles scale the row max after it (a positive scale keeps
    the order); an op whose scale is negative reverses it, so the rule builds the form that
    scales each score first (``_ns``), and it matches the reference."""
    q, k = (1, 2, 70, 32), (1, 2, 75, 32)
    module = fuse(_module(q, k, k, None, "f16", "{scale = -0.2 : f64}"))
    (kernel,) = program_of(module).kernels.values()
    assert "flash_attention_f16_d32_nu_ns_tile(" in kernel.code
    rng = np.random.default_rng(8)
    inputs = [rng.standard_normal(s).astype(np.float16) for s in (q, k, k)]
    out, want = _launch(module, inputs, tmp_path)
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=4e-3, atol=4e-3)
