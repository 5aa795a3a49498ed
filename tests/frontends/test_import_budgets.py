"""Tiny inputs never force gigabytes: import-time folding keeps what it cannot afford as
ops of the graph (run-time work, a small ``.mlir``), a loaded plan never expands more
splats than its total budget, and unused constants are not built."""

from __future__ import annotations

import tracemalloc
from contextlib import contextmanager

import numpy as np
import onnx
import pytest
from onnx import helper

import partita
from partita.dialects import make_context
from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError, parse_module
from partita.runtime.device import SimulatedDevice
from partita.runtime.plan import LaunchPlan


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@contextmanager
def _peak():
    """The peak of traced allocations (NumPy's included) inside the block, in MiB."""
    tracemalloc.start()
    result = [0.0]
    try:
        yield result
    finally:
        result[0] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()


def _i64(name, values):
    return helper.make_tensor(name, onnx.TensorProto.INT64, [len(values)], values)


@pytest.mark.parametrize("case", ["expand", "range", "tile", "pad"])
def test_huge_folds_stay_ops_of_the_graph(case) -> None:
    n = 10**8  # 400-800 MB if folded
    out = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT if case != "range" else onnx.TensorProto.INT64, None)
    if case == "expand":
        nodes = [helper.make_node("Expand", ["c", "s"], ["y"])]
        inits = [helper.make_tensor("c", onnx.TensorProto.FLOAT, [1], [1.5]), _i64("s", [n])]
    elif case == "range":
        nodes = [helper.make_node("Range", ["a", "b", "d"], ["y"])]
        inits = [helper.make_tensor(k, onnx.TensorProto.INT64, [], [v]) for k, v in (("a", 0), ("b", n), ("d", 1))]
    elif case == "tile":
        nodes = [helper.make_node("Tile", ["c", "r"], ["y"])]
        inits = [helper.make_tensor("c", onnx.TensorProto.FLOAT, [2], [1.0, 2.0]), _i64("r", [n // 2])]
    else:
        nodes = [helper.make_node("Pad", ["c", "p"], ["y"])]
        inits = [helper.make_tensor("c", onnx.TensorProto.FLOAT, [1], [1.0]), _i64("p", [0, n])]
    with _peak() as peak:
        module = import_onnx(_model(nodes, [], [out], inits))
    text = str(module)
    assert len(text) < 10_000, "the result was folded into the IR"
    assert peak[0] < 100, "the import built the folded value"
    names = {op.name for op in module.walk()}
    assert names & {"nn.broadcast_to", "nn.arange", "nn.tile", "nn.pad"}


def test_small_folds_still_fold() -> None:
    nodes = [helper.make_node("Range", ["a", "b", "d"], ["r"]), helper.make_node("Add", ["x", "r"], ["y"])]
    inits = [helper.make_tensor(k, onnx.TensorProto.INT64, [], [v]) for k, v in (("a", 0), ("b", 4), ("d", 1))]
    x = helper.make_tensor_value_info("x", onnx.TensorProto.INT64, [4])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.INT64, [4])
    module = import_onnx(_model(nodes, [x], [y], inits))
    assert "nn.arange" not in str(module) and "nn.constant" in str(module)
    exe = partita.compile(_model(nodes, [x], [y], inits))
    np.testing.assert_array_equal(exe.run(np.ones(4, np.int64))[0], np.arange(4) + 1)


SPLATS = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
%s
  func.return %x : tensor<4xf32>
}
"""


def test_a_plan_never_expands_more_splats_than_its_total_budget() -> None:
    # 12 splats of 128 MiB each, each under the per-splat limit, 1.5 GiB together.
    lines = [f"  %c{i} = nn.constant dense<1.0> : tensor<33554432xf32>" for i in range(12)]
    body = "\n".join(lines)
    text = SPLATS.replace("%s", body).replace("func.return %x", "func.return %x")
    module = parse_module(text, make_context(), "splats.mlir")
    with _peak() as peak:
        LaunchPlan(module, SimulatedDevice()).close()  # unused: none is built
    assert peak[0] < 100
    # Used (returned), they would be uploaded: refused before any is built.
    used = text.replace("-> tensor<4xf32> {", "-> (tensor<4xf32>, " + ", ".join(["tensor<33554432xf32>"] * 12) + ") {")
    used = used.replace("func.return %x : tensor<4xf32>",
                        "func.return %x, " + ", ".join(f"%c{i}" for i in range(12)) + " : tensor<4xf32>, "
                        + ", ".join(["tensor<33554432xf32>"] * 12))
    module = parse_module(used, make_context(), "splats.mlir")
    with _peak() as peak, pytest.raises(PartitaError, match="splat constants would take"):
        LaunchPlan(module, SimulatedDevice())
    assert peak[0] < 100
