"""Zero-size tensors, as ONNX defines them: a MatMul with K = 0 is all zeros, a ReduceMax
over zero rows is -inf (the identity of max), a Concat of empty tensors is empty; each
compiles and runs instead of crashing."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import partita

vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs):
    return helper.make_model(helper.make_graph(nodes, "g", inputs, outputs), opset_imports=[helper.make_opsetid("", 18)])


CASES = {
    "matmul_k0": (
        _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
               [vi("a", TensorProto.FLOAT, [3, 0]), vi("b", TensorProto.FLOAT, [0, 4])], [vi("y", TensorProto.FLOAT, [3, 4])]),
        [np.zeros((3, 0), np.float32), np.zeros((0, 4), np.float32)], np.zeros((3, 4), np.float32)),
    "reduce_max_over_zero_columns": (
        _model([helper.make_node("ReduceMax", ["a", "axes"], ["y"], keepdims=0)],
               [vi("a", TensorProto.FLOAT, [3, 0]), vi("axes", TensorProto.INT64, [1])], [vi("y", TensorProto.FLOAT, [3])]),
        [np.zeros((3, 0), np.float32), np.array([1])], np.full(3, -np.inf, np.float32)),
    "reduce_max_over_zero_rows": (
        _model([helper.make_node("ReduceMax", ["a", "axes"], ["y"], keepdims=0)],
               [vi("a", TensorProto.FLOAT, [0, 3]), vi("axes", TensorProto.INT64, [1])], [vi("y", TensorProto.FLOAT, [3])]),
        [np.zeros((0, 3), np.float32), np.array([0])], np.full(3, -np.inf, np.float32)),
    "concat_of_empties": (
        _model([helper.make_node("Concat", ["a", "b"], ["y"], axis=0)],
               [vi("a", TensorProto.FLOAT, [0, 3]), vi("b", TensorProto.FLOAT, [0, 3])], [vi("y", TensorProto.FLOAT, [0, 3])]),
        [np.zeros((0, 3), np.float32)] * 2, np.zeros((0, 3), np.float32)),
    "concat_of_empty_and_full": (
        _model([helper.make_node("Concat", ["a", "b"], ["y"], axis=0)],
               [vi("a", TensorProto.FLOAT, [0, 3]), vi("b", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, [2, 3])]),
        [np.zeros((0, 3), np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)],
        np.arange(6, dtype=np.float32).reshape(2, 3)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_zero_size_tensors_compile_and_run(name: str) -> None:
    model, inputs, expected = CASES[name]
    if name.startswith("reduce"):  # axes as a constant input (opset 18)
        axes = inputs.pop()
        model.graph.input.pop()
        model.graph.initializer.append(helper.make_tensor("axes", TensorProto.INT64, [1], axes.tolist()))
    exe = partita.compile(model)
    (got,) = exe.run(*inputs)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
