"""``fallback_device`` through partita.compile, partita-run and the passes: ``cpu`` gives
TVM's default device for ``["cuda", "llvm"]`` (TVM's RuleA_RuleF_ReplaceHost)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects.func import FuncOp

import partita
from partita.dialects import byoc
from partita.ir import PartitaError
from partita.tools.run import main

MODEL = """
func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = nn.relu %x : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = nn.tanh %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %1 : tensor<4x8xf32>
}
"""


def entry_target(exe) -> str:
    main_fn = next(op for op in exe.module.ops if isinstance(op, FuncOp) and op.sym_name.data == "main")
    return main_fn.attributes[byoc.TARGET].kind.data


def test_compile_default_is_the_gpu_and_fallback_cpu_is_tvms(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    gpu = partita.compile(MODEL, ["cuda", "llvm"], cache_dir=tmp_path)
    assert entry_target(gpu) == "cuda" and "fallback-device" not in gpu.pipeline
    cpu = partita.compile(MODEL, ["cuda", "llvm"], fallback_device="cpu", cache_dir=tmp_path)
    assert entry_target(cpu) == "llvm"
    assert "collage-partition{" in cpu.pipeline and "fallback-device=cpu" in cpu.pipeline
    assert cpu.collage is not None
    assert {g.target for g in cpu.collage.native} == {"llvm"}
    np.testing.assert_allclose(cpu.run(x)[0], np.tanh(np.maximum(x, 0)), rtol=1e-6)


def test_compile_rejects_a_bad_fallback_device(tmp_path: Path) -> None:
    with pytest.raises(PartitaError, match="invalid fallback device 'tpu'"):
        partita.compile(MODEL, ["cuda", "llvm"], fallback_device="tpu", cache_dir=tmp_path)


def test_partita_run_takes_fallback_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.mlir"
    path.write_text(MODEL)
    assert main([str(path), "--targets", "cuda,llvm", "--fallback-device", "cpu", "--report", "-q",
                 "--cache-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "(in @main)  llvm (NumPy)" in out
