"""One host-memory budget per model, charged by import folding, constant
materialization in the compile passes and the simulated device's allocations at load and
run (``partita.ir.budget``): a budget each stage fits alone but not all together is a
located error at the stage that goes over."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import partita
from partita.dialects import make_context
from partita.ir import PartitaError, parse_module
from partita.ir.budget import ENV, MemoryBudget, active_budget
from partita.ir.constants import constant_values
from partita.tools import compile as compile_tool
from partita.tools import import_model as import_tool
from partita.tools import run as run_tool

MIB = 1 << 20
N = 1 << 20  # 4 MiB of f32


def _range_model() -> onnx.ModelProto:
    """y = x + Range(0, N): the Range (4 MiB) is folded at import."""
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Add", ["x", "r"], ["y"])]
    inits = [helper.make_tensor(name, TensorProto.FLOAT, [], [v]) for name, v in
             (("start", 0.0), ("limit", float(N)), ("delta", 1.0))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [N])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# A batch norm whose variance is a splat: simplify-inference materializes it (4 MiB).
SPLAT_BN = f"""
func.func @main(%x: tensor<1x{N}xf32>) -> tensor<1x{N}xf32> {{
  %v = nn.constant dense<1.0> : tensor<{N}xf32>
  %g = nn.constant dense<2.0> : tensor<{N}xf32>
  %b = nn.constant dense<0.5> : tensor<{N}xf32>
  %m = nn.constant dense<0.0> : tensor<{N}xf32>
  %y = nn.batch_norm %x, %g, %b, %m, %v {{axis = 1 : i64, epsilon = 0.0 : f64}} : (tensor<1x{N}xf32>, tensor<{N}xf32>, tensor<{N}xf32>, tensor<{N}xf32>, tensor<{N}xf32>) -> tensor<1x{N}xf32>
  func.return %y : tensor<1x{N}xf32>
}}
"""


def test_sizes_options_and_the_environment(monkeypatch) -> None:
    assert MemoryBudget.create("512M").limit == 512 * MIB
    assert MemoryBudget.create("1.5GiB").limit == 3 * (1 << 29)
    assert MemoryBudget.create(4096).limit == 4096
    monkeypatch.setenv(ENV, "3G")
    assert MemoryBudget.create().limit == 3 << 30
    monkeypatch.delenv(ENV)
    assert 0 < MemoryBudget.create().limit  # half the RAM
    for bad in ("lots", "-1", "0"):
        with pytest.raises(PartitaError, match="memory budget"):
            MemoryBudget.create(bad)
    shared = MemoryBudget(10)
    assert MemoryBudget.create(shared) is shared


def test_small_budgets_read_in_their_own_units() -> None:
    budget = MemoryBudget(20 << 10)
    budget.charge(300, "a")
    with pytest.raises(PartitaError, match=r"b needs 29.3 KiB, over the memory budget: 300 B of 20.0 KiB already spent"):
        budget.charge(30000, "b")
    assert repr(budget) == "MemoryBudget(300 B of 20.0 KiB)"


def test_import_folding_is_charged_and_located_at_the_node(tmp_path) -> None:
    with pytest.raises(PartitaError, match=r"node 0 'r' \(Range\): folding it at import needs 4.0 MiB, over the "
                                           r"memory budget: 0 B of 2.0 MiB already spent"):
        partita.compile(_range_model(), targets="llvm", partitioner="none", cache_dir=tmp_path, memory_budget="2M")


def test_import_and_run_share_one_budget(tmp_path) -> None:
    # Import folds 4 MiB; the run's arena (x, the folded constant's copy aside, y) needs
    # 8 MiB more: 10 MiB fits the import alone, not the import and the run.
    exe = partita.compile(_range_model(), targets="llvm", partitioner="none", cache_dir=tmp_path,
                          memory_budget="10M")
    assert exe.budget is not None and exe.budget.spent == 4 * MIB
    x = np.ones(N, np.float32)
    with pytest.raises(PartitaError, match=r"over the memory budget: .* of 10.0 MiB already spent"):
        exe.run(x)
    roomy = partita.compile(_range_model(), targets="llvm", partitioner="none", cache_dir=tmp_path,
                            memory_budget="64M")
    np.testing.assert_array_equal(roomy.run(x)[0], x + np.arange(N, dtype=np.float32))
    spent = roomy.budget.spent
    assert spent > 4 * MIB  # import, plus the loaded plan's device memory
    roomy.close()
    assert roomy.budget.spent < spent  # the device memory went back to it


def test_constant_materialization_is_charged_to_the_active_budget() -> None:
    module = parse_module(SPLAT_BN, make_context())
    constant = next(op for op in module.walk() if op.name == "nn.constant")
    budget = MemoryBudget(6 * MIB)
    with budget.active():
        assert active_budget() is budget
        constant_values(constant, buffer=True)
        assert budget.spent == 4 * MIB
        with pytest.raises(PartitaError, match=r"'nn.constant' op materializing splat constant of type "
                                               r"tensor<1048576xf32> needs 4.0 MiB, over the memory budget"):
            constant_values(constant, buffer=True)
    assert active_budget() is None and budget.spent == 4 * MIB


def test_compile_passes_are_charged(tmp_path) -> None:
    # simplify-inference materializes the 4 MiB variance, then builds 4 MiB scale / shift
    # constants of its own; 2 MiB is not enough for the compile, 64 MiB is.
    with pytest.raises(PartitaError, match=r"<string>:\d+:\d+: error: 'nn.constant' op materializing splat constant"):
        partita.compile(SPLAT_BN, targets="llvm", partitioner="none", cache_dir=tmp_path, memory_budget="2M")
    exe = partita.compile(SPLAT_BN, targets="llvm", partitioner="none", cache_dir=tmp_path, memory_budget="64M")
    assert exe.budget.spent >= 4 * MIB


def test_the_tools_take_a_memory_budget(tmp_path, capsys) -> None:
    model = tmp_path / "range.onnx"
    onnx.save(_range_model(), model)
    assert import_tool.main([str(model), "-o", str(tmp_path / "m.mlir"), "--memory-budget", "2M"]) == 1
    assert "(Range): folding it at import needs 4.0 MiB" in capsys.readouterr().err
    assert compile_tool.main([str(model), "-o", str(tmp_path / "m.partita"), "--targets", "llvm",
                              "--partitioner", "none", "--memory-budget", "2M"]) == 1
    assert "(Range): folding it at import needs 4.0 MiB" in capsys.readouterr().err
    assert compile_tool.main([str(model), "-o", str(tmp_path / "m.partita"), "--targets", "llvm",
                              "--partitioner", "none", "--memory-budget", "64M"]) == 0
    np.savez(tmp_path / "in.npz", x=np.ones(N, np.float32))
    # 3 MiB: the 4 MiB --inputs file is refused before it is read.
    assert run_tool.main([str(tmp_path / "m.partita"), "--inputs", str(tmp_path / "in.npz"),
                          "--output", str(tmp_path / "out.npz"), "--memory-budget", "3M"]) == 1
    assert "in.npz' would expand to 4194" in capsys.readouterr().err
    # 6 MiB: the inputs fit, the inputs and the run's buffers do not.
    assert run_tool.main([str(tmp_path / "m.partita"), "--inputs", str(tmp_path / "in.npz"),
                          "--output", str(tmp_path / "out.npz"), "--memory-budget", "6M"]) == 1
    assert "over the memory budget: 4.0 MiB of 6.0 MiB already spent" in capsys.readouterr().err
    assert run_tool.main([str(tmp_path / "m.partita"), "--inputs", str(tmp_path / "in.npz"),
                          "--output", str(tmp_path / "out.npz"), "--memory-budget", "64M"]) == 0


def test_a_static_arena_over_the_budget_names_its_largest_buffer() -> None:
    """The arena plan-memory laid out is allocated at load: over the budget, the error is
    located at the op whose buffer is the largest (the 8 MiB product here)."""
    text = """
func.func @main(%x: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %0 = nn.relu %x : (tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %1 = nn.matmul %0, %x : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %2 = nn.exp %1 : (tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  func.return %2 : tensor<1024x1024xf32>
}"""
    exe = partita.compile(text, targets="cuda -arch=sm_90,llvm", partitioner="eager", memory_budget="6M")
    with pytest.raises(PartitaError, match=r"^<string>:\d+:\d+: error: 'byoc.alloc_tensor' op allocating \d+ bytes .* "
                                           r"needs 8.0 MiB, over the memory budget: 0 B of 6.0 MiB already spent .*for "
                                           r"the static arena \(the largest buffer is this op's\)"):
        exe.run(np.zeros((1024, 1024), np.float32))
