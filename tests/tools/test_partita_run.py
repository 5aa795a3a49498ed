"""partita-run: compile and run a model from the command line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from partita.tools.run import main

EXAMPLES = Path(__file__).parents[2] / "examples"
MLP = """
func.func @main(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>, %b: tensor<32xf32>) -> tensor<?x32xf32> {
  %0 = nn.dense %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %1 = nn.bias_add %0, %b : (tensor<?x32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
  func.return %1 : tensor<?x32xf32>
}
"""


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.mlir"
    path.write_text(MLP)
    return path


def _run(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "partita.tools.run", *args, "--cache-dir", str(cache)], capture_output=True, text=True
    )


def test_runs_with_given_inputs_and_writes_outputs(model: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((3, 64)), rng.standard_normal((32, 64)), rng.standard_normal(32)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=x.astype(np.float32), w=w.astype(np.float32), b=b.astype(np.float32))
    out = tmp_path / "out.npz"
    proc = _run(str(model), "--partitioner", "eager", "--inputs", str(inputs), "--output", str(out), "--report", cache=tmp_path)
    assert proc.returncode == 0, proc.stderr
    with np.load(out) as data:
        np.testing.assert_allclose(data["output0"], x @ w.T + b, rtol=1e-4, atol=1e-4)
    assert "tvmgen_default_cutlass_main_0  cutlass  dense, bias_add" in proc.stdout
    assert "running on simulated device (CPU)" in proc.stdout
    # Progress, pass by pass, with a word while the kernels compile.
    assert re.search(r"^\[\d+/\d+\] cutlass-codegen \(cold CUTLASS compiles", proc.stderr, re.M)


def test_random_inputs_of_the_declared_shapes(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(model), "--partitioner", "none", "--dynamic-size", "5", "-q", "--cache-dir", str(tmp_path)]) == 0
    assert "output0: float32[5, 32]" in capsys.readouterr().out


def test_emit_ir_and_cpp(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(model), "--partitioner", "eager", "--emit", "ir", "-q", "--cache-dir", str(tmp_path)]) == 0
    assert "byoc.call_extern @tvmgen_default_cutlass_main_0" in capsys.readouterr().out
    assert main([str(model), "--partitioner", "eager", "--emit", "cpp", "-q", "--cache-dir", str(tmp_path)]) == 0
    assert 'extern "C" __global__' in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.onnx"], "cannot read"),
        (["{model}", "--targets", "cuda,cuda"], "duplicate target kind 'cuda'"),
        (["{model}", "--inputs", "{model}"], "cannot read inputs"),
        (["{model}", "--output", "{model}"], "refusing to write the outputs over an input file"),
    ],
    ids=["missing-model", "bad-targets", "bad-inputs", "output-over-input"],
)
def test_user_errors_exit_1_without_traceback(model: Path, tmp_path: Path, args: list[str], message: str) -> None:
    before = model.read_text()
    proc = _run(*[a.format(model=model) for a in args], "--partitioner", "none", cache=tmp_path)
    assert proc.returncode == 1 and message in proc.stderr and "Traceback" not in proc.stderr
    assert model.read_text() == before


def test_bad_model_text_is_located(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mlir"
    bad.write_text(MLP.replace("nn.bias_add", "nn.bias_ad"))
    proc = _run(str(bad), cache=tmp_path)
    assert proc.returncode == 1 and proc.stderr.startswith(f"{bad}:4:") and "Traceback" not in proc.stderr


def test_runs_the_bundled_cnn(tmp_path: Path) -> None:
    proc = _run(str(EXAMPLES / "cnn.onnx"), "--partitioner", "eager", "--dynamic-size", "2", "-q", cache=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "output: float32[2, " in proc.stdout  # the ONNX output name
