"""Outputs go exactly where they are asked: ``-o outdir/`` is refused by every tool (not
a file named ``outdir``), a read-only file is not replaced, a missing directory is not
made; ``Executable.save`` says so with a ``PartitaError``. Invalid ONNX (two graph
inputs with one name, two nodes writing one output) is refused."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import partita
from partita.ir import PartitaError
from partita.tools import opt
from partita.tools import run as run_tool

MODEL = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.mlir"
    path.write_text(MODEL)
    return path


def test_opt_refuses_an_output_spelled_as_a_directory(tmp_path: Path, model: Path, capsys) -> None:
    out = tmp_path / "outdir"
    assert opt.main([str(model), "-o", f"{out}/"]) == 1
    assert not out.exists()
    assert "is a directory" in capsys.readouterr().err


@pytest.mark.parametrize("tool", ["opt", "run", "save"])
def test_a_read_only_output_is_not_replaced(tmp_path: Path, model: Path, tool: str, capsys) -> None:
    out = tmp_path / ("out.npz" if tool == "run" else "out.partita" if tool == "save" else "out.mlir")
    out.write_text("keep me")
    out.chmod(0o444)
    if tool == "opt":
        assert opt.main([str(model), "-o", str(out)]) == 1
    elif tool == "run":
        assert run_tool.main([str(model), "--output", str(out), "-q"]) == 1
    else:
        with pytest.raises(PartitaError, match="read-only"):
            partita.compile(model).save(out)
    assert out.read_text() == "keep me"


@pytest.mark.parametrize("tool", ["opt", "run", "save"])
def test_a_missing_directory_is_not_made(tmp_path: Path, model: Path, tool: str) -> None:
    out = tmp_path / "missing" / "deeper" / "out"
    if tool == "opt":
        assert opt.main([str(model), "-o", str(out)]) == 1
    elif tool == "run":
        assert run_tool.main([str(model), "--output", str(out), "-q"]) == 1
    else:
        with pytest.raises(PartitaError, match="directory does not exist"):
            partita.compile(model).save(out)
    assert not (tmp_path / "missing").exists()


def test_writing_into_an_existing_directory_still_works(tmp_path: Path, model: Path) -> None:
    out = tmp_path / "out.partita"
    partita.compile(model).save(out)
    np.testing.assert_array_equal(partita.load(out).run(np.array([-1, 1, -2, 2], np.float32))[0], [0, 1, 0, 2])
    os.chmod(out, 0o644)


def _relu_graph(inputs, nodes):
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])
    graph = helper.make_graph(nodes, "g", inputs, [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_two_graph_inputs_with_one_name_are_refused() -> None:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])
    model = _relu_graph([x, x], [helper.make_node("Relu", ["x"], ["y"])])
    with pytest.raises(PartitaError, match="two graph inputs are named 'x'"):
        partita.compile(model)


def test_two_nodes_writing_one_output_are_refused() -> None:
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])
    model = _relu_graph([x], [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])])
    with pytest.raises(PartitaError, match=r"node 1 'y' \(Neg\) writes 'y', which node 0 'y' \(Relu\) already defines"):
        partita.compile(model)
