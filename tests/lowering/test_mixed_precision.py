"""``precision="fp16" | "bf16"``: an f32 model computed in f16 / bf16 storage on tensor
cores (``to-mixed-precision``), its inputs and outputs still f32, close to the f32 run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import partita
from partita.ir import PartitaError
from partita.tools import run as run_tool

EXPORTED = Path(__file__).resolve().parents[1] / "models" / "exported"

MLP = """
func.func @main(%x: tensor<?x32xf32>) -> tensor<?x16xf32> {
  %w = nn.constant dense<0.03125> : tensor<64x32xf32>
  %b = nn.constant dense<0.5> : tensor<64xf32>
  %v = nn.constant dense<-0.0625> : tensor<16x64xf32>
  %0 = nn.dense %x, %w : (tensor<?x32xf32>, tensor<64x32xf32>) -> tensor<?x64xf32>
  %1 = nn.add %0, %b : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %2 = nn.relu %1 : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %3 = nn.dense %2, %v : (tensor<?x64xf32>, tensor<16x64xf32>) -> tensor<?x16xf32>
  %4 = nn.softmax %3 {axis = -1 : i64} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  func.return %4 : tensor<?x16xf32>
}
"""


@pytest.mark.parametrize(("precision", "tol"), [("fp16", 1e-2), ("bf16", 4e-2)])
def test_exported_bert_in_half_precision(precision: str, tol: float) -> None:
    sample = dict(np.load(EXPORTED / "bert.npz"))
    path = EXPORTED / "bert.onnx"
    reference = partita.compile(path, partitioner="eager").run(**sample)
    exe = partita.compile(path, partitioner="eager", precision=precision)
    # first, after the norm fusions only (their chains are f32 as exported)
    steps = [s for s in exe.pipeline.split(",") if s not in ("fuse-rms-norm", "fuse-layer-norm")]
    assert steps[0] == f"to-mixed-precision{{dtype={precision.replace('fp', 'f')}}}"
    kernels = [r.kernel for r in exe.report().rows if r.target == "cutlass"]
    low = "f16" if precision == "fp16" else "bf16"
    assert kernels and all(k.startswith(f"cutlass_tensorop_{low}_s16816gemm") for k in kernels), kernels
    outputs = exe.run(**sample)
    for got, want in zip(outputs, reference):
        assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
        scale = float(np.abs(want).max())
        deviation = float(np.abs(got - want).max())
        assert 0 < deviation <= tol * scale  # rounded (not f32), yet close


def test_unknown_precision_is_an_error() -> None:
    with pytest.raises(PartitaError, match="unknown precision 'fp8'"):
        partita.compile(MLP, partitioner="eager", precision="fp8")


def test_partita_run_prints_the_deviation_from_f32(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    assert run_tool.main([str(model), "--partitioner", "eager", "--precision", "bf16", "--dynamic-size", "5", "-q"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "bf16 vs fp32" in ln)
    assert "max abs deviation" in line and "of max |fp32|" in line


def test_deviation_lines() -> None:
    lines = run_tool.precision_deviation("fp16", ["y", "k"], [np.array([1.0, 2.5]), np.array([1, 2])],
                                         [np.array([1.0, 2.0]), np.array([1, 3])])
    assert lines == ["y: fp16 vs fp32: max abs deviation 0.5 (25.00% of max |fp32|)",
                     "k: fp16 vs fp32: 1 elements differ"]


FUNNEL_MASK = """
func.func @main(%s: tensor<2x8xf32>, %m: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %inf = nn.constant dense<1.0e6> : tensor<f32>
  %one = nn.constant dense<1.0> : tensor<f32>
  %0 = nn.subtract %one, %m : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %1 = nn.multiply %0, %inf : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %2 = nn.subtract %s, %1 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %3 = nn.softmax %2 {axis = -1 : i64} : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %3 : tensor<2x8xf32>
}
"""


def test_a_mask_constant_past_f16s_range_keeps_the_visible_scores() -> None:
    """Funnel Transformer's ``score - (1 - mask) * 1e6`` in fp16: the 1e6 saturates at
    65504, so a visible score (mask 1) subtracts 0, not 0 * inf = NaN, and the hidden
    ones still weigh nothing."""
    rng = np.random.default_rng(0)
    s = rng.standard_normal((2, 8)).astype(np.float32)
    m = (rng.random((2, 8)) < 0.6).astype(np.float32)
    m[:, 0] = 1.0
    (want,) = partita.compile(FUNNEL_MASK, ["llvm"]).run(s, m)
    (got,) = partita.compile(FUNNEL_MASK, precision="fp16").run(s, m)
    assert not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-3)


RELU = """
func.func @main(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = nn.relu %x : (tensor<?x8xf32>) -> tensor<?x8xf32>
  func.return %0 : tensor<?x8xf32>
}
"""


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_kernel_rounding_through_half_precision_inside_compiles(precision: str) -> None:
    """A relu over a run-time batch in fp16 / bf16: the casts around it fuse with it, so
    the kernel takes and gives f32 and the half type lives only inside it; its rounding
    helpers are still in the program (NVRTC refused ``rn_f16`` before), and it rounds."""
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    exe = partita.compile(RELU, ["cuda -arch=sm_90", "llvm"], precision=precision)
    (got,) = exe.run(x)
    np.testing.assert_allclose(got, np.maximum(x, 0), rtol=1e-3 if precision == "fp16" else 8e-3)
    assert not np.array_equal(got, np.maximum(x, 0))  # rounded through the half type
