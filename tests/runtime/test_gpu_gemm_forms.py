"""Every GEMM form on a real GPU (marker ``gpu``: skipped without a CUDA device): CUTLASS
batched GEMMs in every layout, broadcast and bf16, TF32 at odd alignments, the native
tensor-core GEMM, and a mixed-precision model, against the reference executor."""

from __future__ import annotations

import numpy as np
import pytest

import partita
from partita.dialects import make_context
from partita.dialects.nn import numpy_dtype
from partita.ir import parse_module
from partita.runtime.cuda import CudaDevice, cuda_status
from partita.runtime.plan import Runtime
from partita.runtime.reference import run

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(cuda_status() is not None, reason=f"needs a CUDA device ({cuda_status()})")]

# attention's Q·Kᵀ (4-D, run-time N), a TN batched GEMM, and an A broadcast over B's
# batch times B stored [N, K]
FORMS = """
func.func @main(%q: tensor<?x4x?x64x{T}>, %kt: tensor<?x4x64x?x{T}>, %a: tensor<?x37x70x{T}>, %b: tensor<?x37x90x{T}>, %c: tensor<1x70x37x{T}>, %d: tensor<?x90x37x{T}>) -> (tensor<?x4x?x?x{T}>, tensor<?x70x90x{T}>, tensor<?x70x90x{T}>) {{
  %0 = nn.matmul %q, %kt : (tensor<?x4x?x64x{T}>, tensor<?x4x64x?x{T}>) -> tensor<?x4x?x?x{T}>
  %1 = nn.batch_matmul %a, %b {{transpose_a = true, transpose_b = false}} : (tensor<?x37x70x{T}>, tensor<?x37x90x{T}>) -> tensor<?x70x90x{T}>
  %2 = nn.batch_matmul %c, %d : (tensor<1x70x37x{T}>, tensor<?x90x37x{T}>) -> tensor<?x70x90x{T}>
  func.return %0, %1, %2 : tensor<?x4x?x?x{T}>, tensor<?x70x90x{T}>, tensor<?x70x90x{T}>
}}
"""

TOL = {"f16": 3e-2, "bf16": 6e-2, "f32": 1e-2}  # f32 runs as TF32


@pytest.fixture(scope="module")
def device():
    return CudaDevice()


def _check(exe, text: str, device, dyns) -> None:
    reference = parse_module(text, make_context(), "m")
    runtime = Runtime(exe.module, device)
    function = exe.entry_function()
    for dyn in dyns:
        rng = np.random.default_rng(dyn)
        args = [(rng.standard_normal([dyn if d < 0 else d for d in t.get_shape()]) * 0.25).astype(numpy_dtype(t.element_type))
                for t in function.function_type.inputs.data]
        for g, w in zip(runtime.run(*args), run(reference, *args), strict=True):
            tol = TOL[{np.dtype(np.float32): "f32", np.dtype(np.float16): "f16"}.get(w.dtype, "bf16")]
            np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=tol, atol=tol)


@pytest.mark.parametrize("t", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("targets", ["cutlass", "native"])
def test_gemm_forms(device, tmp_path, t: str, targets: str) -> None:
    text = FORMS.format(T=t)
    chosen = [f"cuda -arch={device.arch}", "cutlass", "llvm"] if targets == "cutlass" else [f"cuda -arch={device.arch}", "llvm"]
    exe = partita.compile(text, chosen, partitioner="eager", cache_dir=tmp_path)
    _check(exe, text, device, [1, 3, 17])


# a dense's epilogues: bias + GELU (tanh), a residual, and a bias then a residual in both
# orders of the outer add (CUTLASS's broadcast epilogue: bias vector, residual C)
EPILOGUES = """
func.func @main(%x: tensor<?x72x{T}>, %h: tensor<?x40x{T}>, %w: tensor<96x72x{T}>, %b: tensor<96x{T}>, %w2: tensor<40x96x{T}>, %b2: tensor<40x{T}>) -> (tensor<?x40x{T}>, tensor<?x40x{T}>, tensor<?x40x{T}>) {{
  %0 = nn.dense %x, %w : (tensor<?x72x{T}>, tensor<96x72x{T}>) -> tensor<?x96x{T}>
  %1 = nn.add %0, %b : (tensor<?x96x{T}>, tensor<96x{T}>) -> tensor<?x96x{T}>
  %2 = nn.gelu %1 {{approximate = "tanh"}} : (tensor<?x96x{T}>) -> tensor<?x96x{T}>
  %3 = nn.dense %2, %w2 : (tensor<?x96x{T}>, tensor<40x96x{T}>) -> tensor<?x40x{T}>
  %4 = nn.add %3, %b2 : (tensor<?x40x{T}>, tensor<40x{T}>) -> tensor<?x40x{T}>
  %5 = nn.add %h, %4 : (tensor<?x40x{T}>, tensor<?x40x{T}>) -> tensor<?x40x{T}>
  %6 = nn.dense %2, %w2 : (tensor<?x96x{T}>, tensor<40x96x{T}>) -> tensor<?x40x{T}>
  %7 = nn.add %6, %b2 : (tensor<?x40x{T}>, tensor<40x{T}>) -> tensor<?x40x{T}>
  %8 = nn.add %7, %5 : (tensor<?x40x{T}>, tensor<?x40x{T}>) -> tensor<?x40x{T}>
  %9 = nn.dense %2, %w2 : (tensor<?x96x{T}>, tensor<40x96x{T}>) -> tensor<?x40x{T}>
  %10 = nn.add %9, %h : (tensor<?x40x{T}>, tensor<?x40x{T}>) -> tensor<?x40x{T}>
  func.return %5, %8, %10 : tensor<?x40x{T}>, tensor<?x40x{T}>, tensor<?x40x{T}>
}}
"""


@pytest.mark.parametrize("t", ["f16", "bf16", "f32"])
def test_dense_epilogues(device, tmp_path, t: str) -> None:
    text = EPILOGUES.format(T=t)
    exe = partita.compile(text, [f"cuda -arch={device.arch}", "cutlass", "llvm"], partitioner="eager",
                          cache_dir=tmp_path)
    kernels = [row.kernel or "" for row in exe.report().partitions]
    assert sum(k.endswith("_bias_residual") for k in kernels) == 2 and sum(k.endswith("_residual") for k in kernels) == 3
    _check(exe, text, device, [1, 3, 130])


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_resnet_blocks(device, tmp_path, dtype) -> None:
    """ResNet blocks whose shortcuts are broadcast-convolution epilogues, against onnxruntime."""
    import onnxruntime as ort
    from support import model_zoo  # tests/support/model_zoo.py

    model = model_zoo.resnet(dtype)
    exe = partita.compile(model, [f"cuda -arch={device.arch}", "cutlass", "llvm"], partitioner="eager",
                          cache_dir=tmp_path)
    assert sum(r.calls for r in exe.report().rows if (r.kernel or "").endswith("_bias_residual_relu")) == 3
    for batch in (1, 5):
        inputs = model_zoo.inputs_for("resnet", model, batch, 0, seed=batch)
        (got,) = exe.run(**inputs)
        (want,) = ort.InferenceSession(model.SerializeToString()).run(None, inputs)
        tol = 1e-2 if dtype == np.float32 else 3e-2  # f32 convolutions run as TF32
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_encoder(device, tmp_path, precision: str) -> None:
    from pathlib import Path

    path = Path(__file__).parents[1] / "models" / "exported" / "bert.onnx"
    sample = dict(np.load(path.with_suffix(".npz")))
    want = partita.compile(path, [f"cuda -arch={device.arch}", "cutlass", "llvm"], cache_dir=tmp_path).run(**sample)
    got = partita.compile(path, [f"cuda -arch={device.arch}", "cutlass", "llvm"], cache_dir=tmp_path,
                          precision=precision).run(**sample)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=5e-2, atol=5e-2 * float(np.abs(w).max()))


# the native tiles' other forms: integer products (u8 x s8 with zero points, an s8 [K, N]
# activation) and few tiles of a long K (split-K: two launches through a workspace)
NATIVE = """
func.func @main(%a: tensor<?x300xui8>, %w: tensor<70x300xi8>, %za: tensor<ui8>, %zb: tensor<i8>, %c: tensor<?x3x40x96xi8>, %d: tensor<?x3x96x24xi8>, %z: tensor<i8>, %x: tensor<?x2048xf16>, %v: tensor<96x2048xf16>) -> (tensor<?x70xi32>, tensor<?x3x40x24xi32>, tensor<?x96xf16>) {
  %0 = nn.matmul_integer %a, %w, %za, %zb {transpose_b = true} : (tensor<?x300xui8>, tensor<70x300xi8>, tensor<ui8>, tensor<i8>) -> tensor<?x70xi32>
  %1 = nn.matmul_integer %c, %d, %z, %z : (tensor<?x3x40x96xi8>, tensor<?x3x96x24xi8>, tensor<i8>, tensor<i8>) -> tensor<?x3x40x24xi32>
  %2 = nn.dense %x, %v : (tensor<?x2048xf16>, tensor<96x2048xf16>) -> tensor<?x96xf16>
  func.return %0, %1, %2 : tensor<?x70xi32>, tensor<?x3x40x24xi32>, tensor<?x96xf16>
}
"""


def test_native_integer_and_split_k_tiles(device, tmp_path) -> None:
    """The IMMA tiles equal the reference exactly (s32 sums, full-range operands and
    zero points); the split-K dense (40 rows, K = 2048: 8 slices) within f16 rounding."""
    exe = partita.compile(NATIVE, [f"cuda -arch={device.arch}", "llvm"], partitioner="eager", cache_dir=tmp_path)
    reference = parse_module(NATIVE, make_context(), "m")
    runtime = Runtime(exe.module, device)
    function = exe.entry_function()
    rng = np.random.default_rng(4)
    args = []
    for t in function.function_type.inputs.data:
        shape, dtype = [40 if d < 0 else d for d in t.get_shape()], numpy_dtype(t.element_type)
        if np.issubdtype(dtype, np.integer):
            info = np.iinfo(dtype)
            args.append(rng.integers(info.min, info.max + 1, shape).astype(dtype))
        else:
            args.append((rng.standard_normal(shape) * 0.25).astype(dtype))
    got, want = runtime.run(*args), run(reference, *args)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(got[2].astype(np.float32), want[2].astype(np.float32), rtol=3e-2, atol=3e-2)
