"""Every kernel kind on a real GPU through the launch plan, against the reference executor
(marker ``gpu``: skipped without a usable CUDA device). Kernels are compiled for the
device's own arch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import partita
from partita.dialects import make_context
from partita.dialects.nn import numpy_dtype
from partita.driver import load_module
from partita.ir import parse_module
from partita.runtime.cuda import CudaDevice, cuda_status
from partita.runtime.plan import Runtime
from partita.runtime.reference import run

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(cuda_status() is not None, reason=f"needs a CUDA device ({cuda_status()})")]

EXAMPLES = Path(__file__).parents[2] / "examples"

DENSE = """
func.func @main(%x: tensor<?x{K}x{T}>, %w: tensor<{N}x{K}x{T}>, %b: tensor<{N}x{T}>) -> tensor<?x{N}x{T}> {{
  %0 = nn.dense %x, %w : (tensor<?x{K}x{T}>, tensor<{N}x{K}x{T}>) -> tensor<?x{N}x{T}>
  %1 = nn.bias_add %0, %b : (tensor<?x{N}x{T}>, tensor<{N}x{T}>) -> tensor<?x{N}x{T}>
  %2 = nn.{act} %1 : (tensor<?x{N}x{T}>) -> tensor<?x{N}x{T}>
  func.return %2 : tensor<?x{N}x{T}>
}}
"""

SPLIT_K = """
func.func @main(%x: tensor<32x4096xf16>, %w: tensor<32x4096xf16>, %b: tensor<32xf16>) -> tensor<32x32xf16> {{
  %0 = nn.dense %x, %w : (tensor<32x4096xf16>, tensor<32x4096xf16>) -> tensor<32x32xf16>
  %1 = nn.bias_add %0, %b : (tensor<32x32xf16>, tensor<32xf16>) -> tensor<32x32xf16>
  %2 = nn.{act} %1 : (tensor<32x32xf16>) -> tensor<32x32xf16>
  func.return %2 : tensor<32x32xf16>
}}
"""

BATCH_MATMUL = """
func.func @main(%a: tensor<?x40x64xf16>, %b: tensor<?x48x64xf16>) -> tensor<?x40x48xf16> {
  %0 = nn.batch_matmul %a, %b : (tensor<?x40x64xf16>, tensor<?x48x64xf16>) -> tensor<?x40x48xf16>
  func.return %0 : tensor<?x40x48xf16>
}
"""

CONV = """
func.func @main(%x: tensor<?x8x8x16xf16>, %w: tensor<32x3x3x16xf16>) -> tensor<?x8x8x32xf16> {
  %0 = nn.conv2d %x, %w {data_layout = "NHWC", kernel_layout = "OHWI", padding = array<i64: 1, 1, 1, 1>} : (tensor<?x8x8x16xf16>, tensor<32x3x3x16xf16>) -> tensor<?x8x8x32xf16>
  %1 = nn.relu %0 : (tensor<?x8x8x32xf16>) -> tensor<?x8x8x32xf16>
  func.return %1 : tensor<?x8x8x32xf16>
}
"""

# Reductions over the last axes (rowwise kernels): RMSNorm's statistics with an epilogue,
# and rows past the 65535-block grid (the blocks stride over them).
ROW_REDUCTIONS = """
func.func @main(%x: tensor<8x4096xf16>, %e: tensor<1xf16>, %y: tensor<?x33xf32>) -> (tensor<8x1xf16>, tensor<?xi64>, tensor<?x1xf32>) {
  %0 = nn.reduce_mean %x {axes = array<i64: 1>} : (tensor<8x4096xf16>) -> tensor<8x1xf16>
  %1 = nn.add %0, %e : (tensor<8x1xf16>, tensor<1xf16>) -> tensor<8x1xf16>
  %2 = nn.argmax %y {axis = 1 : i64, keepdims = false} : (tensor<?x33xf32>) -> tensor<?xi64>
  %3 = nn.reduce_sum %y {axes = array<i64: 1>} : (tensor<?x33xf32>) -> tensor<?x1xf32>
  func.return %1, %2, %3 : tensor<8x1xf16>, tensor<?xi64>, tensor<?x1xf32>
}
"""


@pytest.fixture(scope="module")
def device():
    return CudaDevice()


def _compile(model, device, cache: Path):
    return partita.compile(model, [f"cuda -arch={device.arch}", "cutlass", "llvm"], partitioner="eager", cache_dir=cache)


def _inputs(function, dyn: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal([dyn if d < 0 else d for d in t.get_shape()]) * 0.25).astype(numpy_dtype(t.element_type))
            for t in function.function_type.inputs.data]


def _check(exe, reference, device, dyns, graphs: bool = True) -> Runtime:
    runtime = Runtime(exe.module, device, graphs=graphs)
    for dyn in dyns:
        args = _inputs(exe.entry_function(), dyn, seed=dyn)
        got = runtime.run(*args)
        want = run(reference, *args)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            # f32 GEMMs are TF32 by default (10-bit mantissas): the bundled encoder's worst
            # element is 1.1e-3 off on an H200
            tol = 3e-2 if w.dtype == np.float16 else 5e-3
            np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=tol, atol=tol)
    return runtime


@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_dense_with_dynamic_m(device, tmp_path, act: str) -> None:
    text = DENSE.format(K=64, N=256, T="f16", act=act)
    exe = _compile(text, device, tmp_path)
    _check(exe, parse_module(text, make_context(), "m"), device, [1, 100, 129, 0, 1])


@pytest.mark.parametrize("act", ["relu", "gelu"])
def test_split_k_with_epilogues(device, tmp_path, act: str) -> None:
    text = SPLIT_K.format(act=act)
    exe = _compile(text, device, tmp_path)
    runtime = _check(exe, parse_module(text, make_context(), "m"), device, [0, 0])  # static: run twice
    assert any(h.entry.config.split_k > 1 for h in runtime.handles.values() if h.kind == "cutlass")


def test_f32_and_odd_k_simt(device, tmp_path) -> None:
    text = DENSE.format(K=63, N=24, T="f32", act="relu")
    # exact f32 asks for the SIMT kernel (by default f32 GEMMs are TF32 at any alignment)
    exe = partita.compile(text, [f"cuda -arch={device.arch}", "cutlass -use_tf32=0", "llvm"], partitioner="eager",
                          cache_dir=tmp_path)
    _check(exe, parse_module(text, make_context(), "m"), device, [1, 7, 300])


def test_batch_matmul(device, tmp_path) -> None:
    exe = _compile(BATCH_MATMUL, device, tmp_path)
    _check(exe, parse_module(BATCH_MATMUL, make_context(), "m"), device, [1, 3, 17])


def test_conv_with_dynamic_n(device, tmp_path) -> None:
    exe = _compile(CONV, device, tmp_path)
    _check(exe, parse_module(CONV, make_context(), "m"), device, [1, 4, 0, 9])


def test_row_reductions(device, tmp_path) -> None:
    exe = _compile(ROW_REDUCTIONS, device, tmp_path)
    runtime = _check(exe, parse_module(ROW_REDUCTIONS, make_context(), "m"), device, [1, 3, 70000])
    assert {h.kind for h in runtime.handles.values()} == {"rowwise"}


@pytest.mark.parametrize("name", ["encoder", "cnn"])
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graph"])
def test_bundled_models_and_graph_replay(device, tmp_path, name: str, graphs: bool) -> None:
    path = EXAMPLES / f"{name}.onnx"
    exe = partita.compile(path, [f"cuda -arch={device.arch}", "cutlass", "llvm"], cache_dir=tmp_path)
    runtime = _check(exe, load_module(path), device, [1, 8, 8, 3], graphs=graphs)
    assert runtime.stats["captures"] == (3 if graphs else 0)  # one per shape signature
