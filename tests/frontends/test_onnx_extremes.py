"""Issue 23, item 9 (ONNX): extreme but well-formed models end in a correct result or a
``PartitaError`` (exit 1 from the tools), never an internal error."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import partita
from partita.ir import PartitaError
from partita.tools import run


def _model(nodes, inputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _x(shape):
    return helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)


def _i64(name, values):
    return helper.make_tensor(name, TensorProto.INT64, [len(values)], values)


@pytest.mark.parametrize("k, upper", [(-2**63, 1), (-2**63, 0), (2**63 - 1, 1), (2**63 - 1, 0), (-4, 0), (3, 1)])
def test_trilu_with_extreme_k_is_exact(tmp_path, k, upper) -> None:
    model = _model([helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)], [_x([3, 3])],
                   [helper.make_tensor("k", TensorProto.INT64, [], [k])])
    x = np.arange(1, 10, dtype=np.float32).reshape(3, 3)
    (y,) = partita.compile(model, targets="llvm", cache_dir=tmp_path).run(x)
    expected = np.triu(x, max(min(k, 3), -3)) if upper else np.tril(x, max(min(k, 3), -3))
    np.testing.assert_array_equal(y, expected)


def test_trilu_with_extreme_k_runs_on_the_device_path(tmp_path) -> None:
    model = _model([helper.make_node("Trilu", ["x", "k"], ["y"], upper=0)], [_x([4, 4])],
                   [helper.make_tensor("k", TensorProto.INT64, [], [-2**63])])
    x = np.ones((4, 4), np.float32)
    exe = partita.compile(model, targets="cuda -arch=sm_90,llvm", partitioner="none", cache_dir=tmp_path)
    np.testing.assert_array_equal(exe.run(x)[0], np.zeros((4, 4), np.float32))


def test_rank_1000_input_is_refused(tmp_path) -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_x([1] * 1000)])
    with pytest.raises(PartitaError, match="rank 1000: tensors of more than 64 dimensions"):
        partita.compile(model, targets="llvm", cache_dir=tmp_path)


HUGE = {
    "pad": ([helper.make_node("Pad", ["x", "p"], ["y"])], [2], [_i64("p", [0, 2**40])]),
    "tile": ([helper.make_node("Tile", ["x", "r"], ["y"])], [2], [_i64("r", [2**40])]),
    "resize_scales": ([helper.make_node("Resize", ["x", "", "s"], ["y"])], [1, 1, 2, 2],
                      [helper.make_tensor("s", TensorProto.FLOAT, [4], [1, 1, 1e9, 1e9])]),
    "resize_sizes": ([helper.make_node("Resize", ["x", "", "", "s"], ["y"])], [1, 1, 2, 2],
                     [_i64("s", [1, 1, 2**31, 2**31])]),
}


@pytest.mark.parametrize("name", sorted(HUGE))
def test_huge_results_are_partita_errors(tmp_path, name) -> None:
    nodes, shape, inits = HUGE[name]
    # Past int64 bytes the verifier refuses the type; below it, the memory budget (or the
    # device) refuses the run's buffers.
    with pytest.raises(PartitaError, match="out of device memory|exceeds|over the memory budget|do not fit in int64"):
        exe = partita.compile(_model(nodes, [_x(shape)], inits), targets="llvm", cache_dir=tmp_path)
        exe.run(np.ones(shape, np.float32))


@pytest.mark.parametrize("name", sorted(HUGE))
def test_huge_results_exit_1_from_partita_run(tmp_path, capsys, name) -> None:
    nodes, shape, inits = HUGE[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(_model(nodes, [_x(shape)], inits), path)
    code = run.main([str(path), "-q", "--cache-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert "error:" in err and "internal error" not in err, err
