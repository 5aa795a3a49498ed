"""Every GEMM form on CUTLASS tensor-core kernels: ``nn.matmul`` with batch dims and
broadcasting, ``nn.batch_matmul`` in every transpose combination, bf16, run-time N and K.

The layout a kernel reads its operands with (leading dims, batch strides) is checked by
emulating the kernel's addressing on the flat buffers and comparing with NumPy's matmul
of the original operands; NVRTC builds and their SASS show the tensor-core path."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import partita
from partita.backends.gemm_forms import batched_gemm
from partita.lowering.cutlass import (
    KernelSpec,
    UnsupportedKernel,
    choose_config,
    emit_module,
)
from partita.lowering.cutlass.emitter import gemm_layout, gemm_strides
from partita.lowering.cutlass.kernels import problem_dims


def _spec(a_shape, b_shape, ta=False, tb=False, dtype="float32", dynamic=()):
    """The spec partition_kernel builds for ``op(a) @ op(b)``; ``dynamic`` names the axes
    (``("a", i)`` / ``("b", i)``) that are run-time dims in the IR."""
    a = [(-1 if ("a", i) in dynamic else d) for i, d in enumerate(a_shape)]
    b = [(-1 if ("b", i) in dynamic else d) for i, d in enumerate(b_shape)]
    dims = batched_gemm(a, b, ta, tb)
    assert not isinstance(dims, str), dims
    return KernelSpec.batch_matmul(dims["batch"], dims["M"], dims["N"], dims["K"], dtype,
                                   transpose_a=ta, transpose_b=tb, broadcast_a=dims["broadcast_a"],
                                   broadcast_b=dims["broadcast_b"])


def _emulate(spec: KernelSpec, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """What the batched kernel computes, read the way its params address memory: element
    (m, k) of batch i of A at ``i*stride_a + m*lda + k`` (row-major) or
    ``i*stride_a + k*lda + m`` (column-major); likewise B; D row-major."""
    dims = problem_dims(spec, {"a": a.shape, "b": b.shape})
    st = gemm_strides(spec, dims)
    M, N, K, batch = dims["M"], dims["N"], dims["K"], dims["batch"]
    fa, fb = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    m, n, k = np.arange(M)[:, None], np.arange(N)[:, None], np.arange(K)[None, :]
    out = np.zeros(batch * st["stride_d"] if batch > 1 else M * N)
    for i in range(batch):
        ia = i * st["stride_a"] + (k * st["lda"] + m if spec.transpose_a else m * st["lda"] + k)
        # B as [N, K]: column-major is element (k, n) at k + n*ldb
        ib = i * st["stride_b"] + (n * st["ldb"] + k if spec.transpose_b else k * st["ldb"] + n)
        d = fa[ia] @ fb[ib].T
        out[i * st["stride_d"] + (np.arange(M)[:, None] * st["ldd"] + np.arange(N)[None, :])] = d
    return out


FORMS = [
    # (a, b, transpose_a, transpose_b, dynamic axes)
    ((2, 4, 5, 8), (2, 4, 8, 5), False, False, {("a", 0), ("a", 2), ("b", 0), ("b", 3)}),  # Q·Kᵀ
    ((2, 4, 5, 5), (2, 4, 5, 8), False, False, {("a", 0), ("a", 2), ("a", 3), ("b", 0), ("b", 2)}),  # P·V
    ((3, 7, 6), (6, 9), False, False, {("a", 0), ("a", 1)}),          # a batch folded into M
    ((7, 6), (3, 6, 9), False, False, {("b", 0)}),                    # a broadcast over b's batch
    ((3, 7, 6), (1, 6, 9), False, False, ()),                         # b of batch 1: folded
    ((3, 6, 7), (6, 9), True, False, ()),                             # Aᵀ, b broadcast
    ((3, 7, 6), (3, 9, 6), False, True, {("a", 0)}),                  # NT (the old form)
    ((3, 6, 7), (3, 6, 9), True, False, ()),                          # TN
    ((3, 6, 7), (3, 9, 6), True, True, {("a", 0), ("b", 0)}),         # TT
]


def _reference(a, b, ta, tb):
    if ta:
        a = np.swapaxes(a, -1, -2)
    if tb:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


@pytest.mark.parametrize(("a_shape", "b_shape", "ta", "tb", "dynamic"), FORMS)
def test_kernel_addressing_matches_matmul(a_shape, b_shape, ta, tb, dynamic) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape)
    b = rng.standard_normal(b_shape)
    spec = _spec(a_shape, b_shape, ta, tb, dynamic=dynamic)
    want = _reference(a, b, ta, tb)
    got = _emulate(spec, a, b)
    np.testing.assert_allclose(got, want.reshape(-1), rtol=1e-12, atol=1e-12)
    cfg = choose_config(spec, 90, f32_math="tf32")
    assert cfg.opcode_class == "tensorop" and cfg.math == "tf32"
    assert cfg.name.endswith(spec.layout_name + f"_align{cfg.alignment_a}" + (
        f"_b{cfg.alignment_b}" if cfg.alignment_b != cfg.alignment_a else ""))


def test_layout_reaches_the_emitted_params() -> None:
    """The runner spells exactly gemm_layout's leading dims and batch strides."""
    for ta, tb, ba in ((False, False, False), (True, True, False), (False, True, True)):
        spec = KernelSpec.batch_matmul(None, 64, None, None, "float16", transpose_a=ta, transpose_b=tb,
                                       broadcast_a=ba)
        code = emit_module([("e", spec, choose_config(spec, 90))]).code
        lay = gemm_layout(spec)
        lda, ldb = lay["lda"][0], lay["ldb"][0]
        stride_a = "(int64_t)0" if ba else "(int64_t)M * K"
        assert f"{{A, (int64_t){lda}}}, {stride_a}, {{B, (int64_t){ldb}}}, (int64_t)N * K" in code
        want_a = "ColumnMajor" if ta else "RowMajor"
        want_b = "ColumnMajor" if tb else "RowMajor"
        assert re.search(rf"half_t, cutlass::layout::{want_a}, \d+,\n\s+cutlass::half_t, cutlass::layout::{want_b}", code)
        # every dim an entry argument, the static M too (the record's, packed at bind)
        name = emit_module([("e", spec, choose_config(spec, 90))]).entries["e"].name
        assert f"{name}(const cutlass::half_t* __restrict__ a, const cutlass::half_t* __restrict__ b, " \
               "cutlass::half_t* out, int batch, int M, int N, int K)" in code
        assert "_run(a, b, out, batch, M, N, K);" in code


def test_unsupported_broadcasts_and_checks() -> None:
    assert isinstance(batched_gemm((2, 1, 5, 8), (1, 4, 8, 5), False, False), str)
    assert isinstance(batched_gemm((5,), (5, 3), False, False), str)
    spec = _spec((2, 4, 5, 8), (2, 4, 8, 5), dynamic={("a", 0), ("b", 0)})
    with pytest.raises(UnsupportedKernel, match="batches"):
        problem_dims(spec, {"a": (2, 4, 5, 8), "b": (3, 4, 8, 5)})
    with pytest.raises(UnsupportedKernel, match="reduces over"):
        problem_dims(spec, {"a": (2, 4, 5, 8), "b": (2, 4, 7, 5)})


def test_bf16_and_odd_alignments_choose_tensor_cores() -> None:
    dense = KernelSpec.dense(None, 768, 768, "bfloat16", "bias_gelu")
    cfg = choose_config(dense, 90)
    assert (cfg.opcode_class, cfg.math, cfg.alignment_a, cfg.stages) == ("tensorop", "bf16", 8, 3)
    assert cfg.name.startswith("cutlass_tensorop_bf16_s16816gemm_bf16_")
    # a run-time contiguous extent: alignment 1, the register-staged 2-stage pipeline
    odd = KernelSpec.batch_matmul(None, None, None, 8, "bfloat16", transpose_b=False)
    cfg = choose_config(odd, 90)
    assert (cfg.opcode_class, cfg.alignment_a, cfg.alignment_b, cfg.stages) == ("tensorop", 8, 1, 2)
    # f32 at any alignment is TF32 (cp.async moves single 4-byte elements)
    f32 = KernelSpec.batch_matmul(None, None, None, None, "float32", transpose_b=False)
    cfg = choose_config(f32, 90, f32_math="tf32")
    assert (cfg.opcode_class, cfg.alignment_a, cfg.alignment_b, cfg.stages) == ("tensorop", 1, 1, 3)
    # bf16 convolutions with odd channels have no kernel
    with pytest.raises(UnsupportedKernel, match="bf16"):
        choose_config(KernelSpec.conv2d((1, 8, 8, 3), (8, 3, 3, 3), dtype="bfloat16"), 90)


def test_shapes_share_one_instantiation() -> None:
    """Partitions of one configuration share its one entry and differ only in the dims
    their records pack (the runner once read the first entry's N and K for all of them)."""
    a = KernelSpec.dense(None, 32, 32, "float32")
    b = KernelSpec.dense(None, 64, 32, "float32")
    src = emit_module([(n, s, choose_config(s, 90, f32_math="tf32")) for n, s in (("e0", a), ("e1", b))])
    assert len(re.findall(r"^__device__ __noinline__ void \w+_run", src.code, re.MULTILINE)) == 1
    assert src.code.count('extern "C" __global__') == 1 and "_run(x, w, out, M, N, K);" in src.code
    pointers = {"x": 1, "w": 2, "out": 3}
    assert src.entries["e0"].args(pointers, {"M": 5})[3:] == [("int", 5), ("int", 32), ("int", 32)]
    assert src.entries["e1"].args(pointers, {"M": 5})[3:] == [("int", 5), ("int", 64), ("int", 32)]


# -- through the compiler -------------------------------------------------------------

# attention's two products as exporters write them (Q·Kᵀ with K transposed ahead, P·V),
# kept apart (no softmax between) so fuse-attention leaves them to the GEMM backends
ATTENTION = """
func.func @main(%q: tensor<?x4x?x8x{t}>, %kt: tensor<?x4x8x?x{t}>, %p: tensor<?x4x?x?x{t}>, %v: tensor<?x4x?x8x{t}>) -> (tensor<?x4x?x?x{t}>, tensor<?x4x?x8x{t}>) {{
  %s = nn.matmul %q, %kt : (tensor<?x4x?x8x{t}>, tensor<?x4x8x?x{t}>) -> tensor<?x4x?x?x{t}>
  %o = nn.matmul %p, %v : (tensor<?x4x?x?x{t}>, tensor<?x4x?x8x{t}>) -> tensor<?x4x?x8x{t}>
  func.return %s, %o : tensor<?x4x?x?x{t}>, tensor<?x4x?x8x{t}>
}}
"""


@pytest.mark.parametrize("partitioner", ["eager", "collage"])
@pytest.mark.parametrize("t", ["f32", "bf16"])
def test_attention_matmuls_run_on_cutlass(partitioner: str, t: str) -> None:
    exe = partita.compile(ATTENTION.format(t=t), ["cuda -arch=sm_90", "cutlass", "llvm"], partitioner=partitioner)
    rows = exe.report().rows
    gemm_rows = [r for r in rows if "nn.matmul" in r.ops]
    assert len(gemm_rows) == 2 and all(r.target == "cutlass" for r in gemm_rows), exe.report()
    assert all("tensorop" in r.kernel for r in gemm_rows), exe.report()
    dtype = np.float32 if t == "f32" else np.dtype(ml_dtypes.bfloat16)
    rng = np.random.default_rng(1)
    q, kt, p, v = (rng.standard_normal(s).astype(dtype)
                   for s in ((2, 4, 5, 8), (2, 4, 8, 5), (2, 4, 5, 5), (2, 4, 5, 8)))
    scores, out = exe.run(q, kt, p, v)
    def f(x):
        return x.astype(np.float32)

    tol = 1e-5 if t == "f32" else 3e-2
    np.testing.assert_allclose(f(scores), f(q) @ f(kt), rtol=tol, atol=tol)
    np.testing.assert_allclose(f(out), f(p) @ f(v), rtol=tol, atol=tol)


# entries named by CUTLASS's layout letters (A then B; t: row-major, n: column-major)
NVRTC_FORMS = [
    ("tn_f16", KernelSpec.batch_matmul(None, None, 96, 64, "float16")),
    ("tt_f16_dynamic", KernelSpec.batch_matmul(None, None, None, 8, "float16", transpose_b=False)),
    ("nt_bf16", KernelSpec.batch_matmul(None, 64, 96, 64, "bfloat16", transpose_a=True, transpose_b=False)),
    ("nn_bf16_bias", KernelSpec.batch_matmul(None, 64, 96, 64, "bfloat16", "bias", transpose_a=True)),
    ("tt_tf32_dynamic", KernelSpec.batch_matmul(None, None, None, None, "float32", transpose_b=False,
                                                broadcast_b=True)),
    ("dense_bf16_gelu", KernelSpec.dense(None, 768, 768, "bfloat16", "bias_gelu")),
    ("dense_f16_odd", KernelSpec.dense(None, 768, 771, "float16")),
]


def test_every_form_compiles_to_hmma(tmp_path: Path) -> None:
    """One NVRTC program (cached) with every new form: each entry's SASS multiplies on
    tensor cores (HMMA) and none falls back to FFMA/HFMA2 loops."""
    from support.sass import sass_by_function, sass_of

    from partita.lowering import nvrtc

    src = emit_module([(n, s, choose_config(s, 90, f32_math="tf32")) for n, s in NVRTC_FORMS])
    binary = nvrtc.compile_cuda(src, arch="sm_90")
    # split the listing per function: entries call noinline runners, so count per runner
    per_function = sass_by_function(sass_of(binary.path))
    for name, _spec in NVRTC_FORMS:
        entry = src.entries[name]
        cfg = entry.config
        body = per_function.get(entry.name, "") + per_function.get(entry.kernel_type + "_run", "")
        hmma = len(re.findall(r"\bHMMA\.", body))
        assert hmma >= 16, f"{name} ({cfg.name}): {hmma} HMMA"
        if cfg.stages > 2:
            assert "LDGSTS" in body, name  # cp.async multistage main loop


def test_3xtf32_big_tiles_do_not_spill() -> None:
    """3xTF32 keeps two TF32 parts of every fragment: the 128x128 tile (64x64 per warp)
    spilled (227 STL / 224 LDL on sm_90); big problems now take 128x64 (64x32 per warp)."""
    from support.sass import sass_of

    from partita.lowering import nvrtc

    spec = KernelSpec.dense(4096, 4096, 4096, "float32")
    cfg = choose_config(spec, 90, f32_math="3xtf32")
    assert cfg.threadblock == (128, 64, 16) and cfg.warp_shape == (64, 32, 16)
    assert choose_config(spec, 90, f32_math="tf32").threadblock == (128, 128, 16)
    binary = nvrtc.compile_cuda(emit_module([("e", spec, cfg)]), arch="sm_90")
    sass = sass_of(binary.path)
    assert sass.count("HMMA") >= 3 * 32  # 3 MMAs x (4x4 m16n8k8 per warp) x 2 K steps of 8
    assert not re.search(r"\b(STL|LDL)\b", sass)


DENSE = """
func.func @main(%x: tensor<4x8xf16>, %w: tensor<16x8xf16>) -> tensor<4x16xf16> {
  %0 = nn.dense %x, %w : (tensor<4x8xf16>, tensor<16x8xf16>) -> tensor<4x16xf16>
  func.return %0 : tensor<4x16xf16>
}
"""


# K = 7: no 16-byte TMA rows, so sm_90a keeps this one on the Sm80 kernels
DENSE_ODD_K = """
func.func @main(%x: tensor<4x7xf16>, %w: tensor<16x7xf16>) -> tensor<4x16xf16> {
  %0 = nn.dense %x, %w : (tensor<4x7xf16>, tensor<16x7xf16>) -> tensor<4x16xf16>
  func.return %0 : tensor<4x16xf16>
}
"""


def test_sm90a_is_accepted() -> None:
    """``cutlass-codegen{sm=90a}`` builds the arch-specific cubin (kernels TMA cannot take
    chosen as for sm_90); a malformed sm is a located option error, not a traceback."""
    from xdsl.passes import PassPipeline

    from partita.dialects import byoc, make_context
    from partita.ir import PartitaError, parse_module
    from partita.transforms import get_all_passes

    ctx = make_context()
    module = parse_module(DENSE_ODD_K, ctx, "dense.mlir")
    PassPipeline.parse_spec(get_all_passes(), "partition-eager{backends=cutlass},cutlass-codegen{sm=90a}").apply(ctx, module)
    (binary,) = [op for op in module.ops if isinstance(op, byoc.BinaryOp)]
    assert binary.sym_name.data == "cutlass_sm90a"
    assert binary.attributes["arch"].data == "sm_90a"
    module = parse_module(DENSE, ctx, "dense.mlir")
    with pytest.raises(PartitaError, match="option 'sm' of pass 'cutlass-codegen' takes a compute capability .* not '9x'"):
        PassPipeline.parse_spec(get_all_passes(), "partition-eager{backends=cutlass},cutlass-codegen{sm=9x}").apply(ctx, module)


def test_convolutions_share_one_instantiation() -> None:
    """Convolutions of one configuration but different shapes share a runner too (it
    used to spell the first entry's problem for all of them)."""
    a = KernelSpec.conv2d((None, 8, 8, 16), (16, 3, 3, 16), padding=1)
    b = KernelSpec.conv2d((2, 16, 12, 16), (16, 3, 3, 16), strides=2, padding=(1, 0, 1, 0))
    ca, cb = choose_config(a, 90), choose_config(b, 90)
    cb = type(cb)(**{**cb.__dict__, "threadblock": ca.threadblock, "name": ca.name})  # same kernel type
    src = emit_module([("c0", a, ca), ("c1", b, cb)])
    assert len(re.findall(r"^__device__ __noinline__ void \w+_run", src.code, re.MULTILINE)) == 1
    assert src.code.count('extern "C" __global__') == 1 and src.entries["c0"].name == src.entries["c1"].name
    pointers = {"x": 1, "w": 2, "out": 3}
    assert [v for _, v in src.entries["c0"].args(pointers, {"N": 4})[3:]] == [
        4, 8, 8, 16, 16, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1]
    assert [v for _, v in src.entries["c1"].args(pointers)[3:]] == [2, 16, 12, 16, 16, 3, 3, 8, 5, 1, 0, 2, 2, 1, 1]
