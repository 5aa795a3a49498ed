"""partita.compile as a library user meets it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

import partita
from partita.dialects import make_context
from partita.ir import PartitaError, parse_module
from partita.runtime.reference import run

MLP = """
func.func @main(%x: tensor<?x64xf16>, %w1: tensor<256x64xf16>, %b1: tensor<256xf16>, %w2: tensor<64x256xf16>, %b2: tensor<64xf16>) -> tensor<?x64xf16> {
  %0 = nn.dense %x, %w1 : (tensor<?x64xf16>, tensor<256x64xf16>) -> tensor<?x256xf16>
  %1 = nn.bias_add %0, %b1 : (tensor<?x256xf16>, tensor<256xf16>) -> tensor<?x256xf16>
  %2 = nn.gelu %1 : (tensor<?x256xf16>) -> tensor<?x256xf16>
  %3 = nn.dense %2, %w2 : (tensor<?x256xf16>, tensor<64x256xf16>) -> tensor<?x64xf16>
  %4 = nn.bias_add %3, %b2 : (tensor<?x64xf16>, tensor<64xf16>) -> tensor<?x64xf16>
  %5 = nn.add %4, %x : (tensor<?x64xf16>, tensor<?x64xf16>) -> tensor<?x64xf16>
  func.return %5 : tensor<?x64xf16>
}
"""
TARGETS = ["cuda -arch=sm_80", "cutlass", "llvm"]


def _args(batch: int) -> list[np.ndarray]:
    rng = np.random.default_rng(batch)
    return [(rng.standard_normal(s) * 0.1).astype(np.float16) for s in [(batch, 64), (256, 64), (256,), (64, 256), (64,)]]


@pytest.fixture(scope="module")
def cache(kernel_cache: Path) -> Path:
    return kernel_cache


@pytest.mark.parametrize("partitioner", ["eager", "none"])
def test_compiled_program_computes_what_the_model_does(partitioner: str, cache: Path) -> None:
    exe = partita.compile(MLP, TARGETS, partitioner=partitioner, cache_dir=cache)
    reference = parse_module(MLP, make_context(), "mlp.mlir")
    for batch in (1, 6):
        args = _args(batch)
        (out,) = exe.run(*args)
        (want,) = run(reference, *args)
        np.testing.assert_allclose(out.astype(np.float32), want.astype(np.float32), rtol=1e-2, atol=1e-2)
    report = exe.report()
    byoc_rows = [r for r in report.rows if r.target == "cutlass"]
    fused = [r for r in report.rows if r.target == "cuda"]
    if partitioner == "none":
        assert byoc_rows == [] and "cutlass-codegen" in exe.pipeline
        # Without partitions, every op becomes a native CUDA kernel: each dense is a GEMM
        # kernel with its element-wise ops as the epilogue.
        assert [r.ops for r in fused] == [("nn.dense", "nn.bias_add", "nn.gelu"), ("nn.dense", "nn.bias_add", "nn.add")]
        assert all("(gemm," in r.kernel for r in fused)
    else:
        # the second GEMM takes its bias and the residual add (the broadcast epilogue)
        assert [(r.target, r.composite) for r in byoc_rows] == [("cutlass", "cutlass.dense_bias_gelu"),
                                                                ("cutlass", "cutlass.dense_bias_residual")]
        assert all(r.kernel and r.kernel.startswith("cutlass_tensorop_f16_s16816gemm") for r in byoc_rows)
        assert byoc_rows[1].kernel.endswith("_bias_residual")
        assert all(r.cost and r.cost > 0 for r in byoc_rows)
        assert fused == []
    # Every op of the model is placed exactly once.
    placed = sorted(op for row in report.rows for op in row.ops)
    assert placed == sorted(["nn.dense", "nn.bias_add", "nn.gelu", "nn.dense", "nn.bias_add", "nn.add"])


def test_pipeline_string_is_reproduced_by_partita_opt(tmp_path: Path, cache: Path) -> None:
    exe = partita.compile(MLP, TARGETS, partitioner="eager", cache_dir=cache)
    src = tmp_path / "mlp.mlir"
    src.write_text(MLP)
    proc = subprocess.run(
        [sys.executable, "-m", "partita.tools.opt", str(src), "-p", exe.pipeline], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    again = parse_module(proc.stdout, make_context(), "out.mlir")
    assert again.is_structurally_equivalent(parse_module(str(exe), make_context(), "exe.mlir"))


def test_inputs_are_never_changed(cache: Path) -> None:
    module = parse_module(MLP, make_context(), "mlp.mlir")
    before = str(module)
    exe = partita.compile(module, TARGETS, partitioner="eager", cache_dir=cache)
    assert str(module) == before and exe.module is not module


def test_runs_from_a_dict_by_argument_name(cache: Path) -> None:
    exe = partita.compile(MLP, TARGETS, partitioner="eager", cache_dir=cache)
    args = _args(2)
    named = dict(zip(["x", "w1", "b1", "w2", "b2"], args))
    np.testing.assert_array_equal(exe.run(named)[0], exe.run(*args)[0])


def test_user_errors_are_partita_errors(cache: Path) -> None:
    with pytest.raises(PartitaError, match="unknown partitioner 'greedy'"):
        partita.compile(MLP, TARGETS, partitioner="greedy")
    with pytest.raises(PartitaError, match="duplicate target kind 'cuda'"):
        partita.compile(MLP, ["cuda", "cuda -arch=sm_90"])
    with pytest.raises(PartitaError, match="cannot read"):
        partita.compile("missing.mlir", TARGETS)
    with pytest.raises(PartitaError, match=r"<string>:1:\d+: error"):
        partita.compile("func.func @main( {", TARGETS)
    exe = partita.compile(MLP, TARGETS, partitioner="none")
    with pytest.raises(PartitaError, match="argument"):
        exe.run(np.zeros((2, 63), np.float16), *_args(2)[1:])


def test_layout_conversion_is_in_the_pipeline_for_nchw_convolutions(cache: Path) -> None:
    exe = partita.compile(Path(__file__).parents[2] / "examples" / "cnn.onnx", TARGETS, partitioner="eager", cache_dir=cache)
    assert exe.pipeline.startswith("simplify-inference,convert-layout{conv2d=NHWC}")
    # The batch norm folds into the first convolution, so both go to CUTLASS with their
    # bias and relu, and nothing is left to the host program.
    rows = exe.report().rows
    assert [r.composite for r in rows if r.target == "cutlass"][:2] == ["cutlass.conv2d_bias_relu"] * 2
    assert not [r for r in rows if r.symbol.startswith("(in @")]


def test_executable_prints_its_module(cache: Path) -> None:
    exe = partita.compile(MLP, TARGETS, partitioner="eager", cache_dir=cache)
    assert isinstance(exe.module, ModuleOp)
    text = str(exe)
    assert "byoc.call_extern @tvmgen_default_cutlass_main_0" in text and "byoc.binary @cutlass_sm80" in text


def test_collage_report_places_every_op_and_beats_or_ties_eager(cache: Path) -> None:
    exe = partita.compile(MLP, TARGETS, partitioner="collage", cache_dir=cache)
    report = exe.report()
    placed = [op for row in report.rows for op in row.ops]
    assert sorted(placed) == sorted(["nn.dense", "nn.bias_add", "nn.gelu", "nn.dense", "nn.bias_add", "nn.add"])
    assert report.collage_total is not None and report.eager_total is not None
    assert report.collage_total <= report.eager_total
    assert "collage estimate for the whole graph" in str(report)
