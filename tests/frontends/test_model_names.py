"""ONNX input and output names are the names users bind by: ``Executable.run(**{...})``,
``partita-run --inputs x.npz`` keyed by the model's names, and ``--output`` written under the
model's output names (SSA names must be sanitized; ``onnx.name`` keeps the original)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import partita
from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError
from partita.ir.abi import argument_names, result_names
from partita.tools.run import main as run_main

IN, OUT = "gpu_0/data_0", "prob/out:0"


@pytest.fixture
def model() -> onnx.ModelProto:
    node = helper.make_node("Relu", [IN], [OUT])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(IN, TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info(OUT, TensorProto.FLOAT, ["N", 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_import_records_the_model_names(model) -> None:
    (fn,) = import_onnx(model).ops
    assert argument_names(fn) == [IN] and result_names(fn) == [OUT]
    assert fn.body.block.args[0].name_hint != IN  # the SSA name is sanitized


def test_run_binds_by_the_onnx_name(model, tmp_path: Path) -> None:
    exe = partita.compile(model, cache_dir=tmp_path)
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    (y,) = exe.run(**{IN: x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    with pytest.raises(PartitaError, match="missing argument"):
        exe.run(**{"data_0": x})


def test_partita_run_reads_and_writes_model_names(model, tmp_path: Path, capsys) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    np.savez(tmp_path / "in.npz", **{IN: x})
    code = run_main([str(path), "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "out.npz"),
                     "--cache-dir", str(tmp_path / "cache"), "-q"])
    assert code == 0
    with np.load(tmp_path / "out.npz") as out:
        assert list(out) == [OUT]
        np.testing.assert_array_equal(out[OUT], np.maximum(x, 0))
    assert capsys.readouterr().out.startswith(f"{OUT}: float32[2, 3]")
