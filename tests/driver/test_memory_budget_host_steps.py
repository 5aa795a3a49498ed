"""The memory budget charges a run's host steps (``partita.ir.budget``): each step's
NumPy copies of its operands and results while it runs, given back at the end of the run;
a step that goes over is an error located at its op, and ``partita-run`` exits 1."""

from __future__ import annotations

import re

import numpy as np
import pytest

import partita
from partita.ir import PartitaError
from partita.tools import compile as compile_tool
from partita.tools import run as run_tool

MIB = 1 << 20
N = 1 << 20  # 4 MiB of f32

# With partitioner "none" on llvm the relu is a host step: 4 MiB downloaded, 4 MiB computed.
HOST_RELU = f"""
func.func @main(%x: tensor<{N}xf32>) -> tensor<{N}xf32> {{
  %y = nn.relu %x : (tensor<{N}xf32>) -> tensor<{N}xf32>
  func.return %y : tensor<{N}xf32>
}}
"""

OVER = r"<string>:3:3: error: 'nn.relu' op its host step \(NumPy copies of its operands and results\) needs 8.0 MiB"


def test_a_host_step_is_charged_while_it_runs_and_given_back_after(tmp_path) -> None:
    x = np.linspace(-1, 1, N, dtype=np.float32)
    # The arena (x's slot and y: 8 MiB) fits 12 MiB; the host step's 8 MiB more does not.
    exe = partita.compile(HOST_RELU, targets="llvm", partitioner="none", cache_dir=tmp_path, memory_budget="12M")
    runtime = exe.load("simulated")
    assert exe.budget.spent == 0  # nothing bound yet
    with pytest.raises(PartitaError, match=OVER + r", over the memory budget: 8.0 MiB of 12.0 MiB already spent"):
        exe.run(x)
    assert exe.budget.spent == 8 * MIB  # the bound arena only: the failed run took nothing more
    assert runtime.stats["host_steps"] == 0
    exe.budget.limit = 16 * MIB  # exactly the arena and the step
    for _ in range(3):  # each run gives the step's buffers back
        np.testing.assert_array_equal(exe.run(x)[0], np.maximum(x, 0))
        assert exe.budget.spent == 8 * MIB
    assert runtime.stats["host_steps"] == 3
    (bound,) = runtime._bound.values()
    assert all(not step.charged and not step.keep for step in bound.host_steps)
    exe.close()
    assert exe.budget.spent == 0


def test_partita_run_exits_1_naming_the_host_steps_op(tmp_path, capsys) -> None:
    model, inputs, out = tmp_path / "relu.partita", tmp_path / "in.npz", tmp_path / "out.npz"
    (tmp_path / "relu.mlir").write_text(HOST_RELU)
    assert compile_tool.main([str(tmp_path / "relu.mlir"), "-o", str(model), "--targets", "llvm",
                              "--partitioner", "none"]) == 0
    x = np.linspace(-1, 1, N, dtype=np.float32)
    np.savez(inputs, x=x)
    # 16 MiB: the inputs (4 MiB) and the arena (8 MiB) fit, the host step's 8 MiB do not.
    assert run_tool.main([str(model), "--inputs", str(inputs), "--output", str(out), "--memory-budget", "16M"]) == 1
    err = capsys.readouterr().err
    assert re.search(r"relu.partita:module.mlir:\d+:\d+: error: 'nn.relu' op its host step", err) and "12.0 MiB of 16.0 MiB already spent" in err
    assert "Traceback" not in err and not out.exists()
    assert run_tool.main([str(model), "--inputs", str(inputs), "--output", str(out), "--memory-budget", "20M"]) == 0
    with np.load(out) as result:
        np.testing.assert_array_equal(next(iter(result.values())), np.maximum(x, 0))
