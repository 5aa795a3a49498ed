"""Operands ONNX passes as inputs that Partita needs at import: an empty run-time ``axes``
input of a reduction has no value to wait for (it is the empty list)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from partita.dialects import nn
from partita.frontends.onnx import import_onnx
from partita.runtime.reference import run


def test_empty_axes_input_reduces_every_axis():
    graph = helper.make_graph(
        [helper.make_node("ReduceMax", ["x", "axes"], ["y"], keepdims=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 2]),
         helper.make_tensor_value_info("axes", TensorProto.INT64, [0])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    module = import_onnx(model)
    (reduce,) = [op for op in module.walk() if isinstance(op, nn.ReduceMaxOp)]
    assert list(reduce.axes) == [0, 1]
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    (got,) = run(module, x, np.zeros(0, np.int64))
    np.testing.assert_array_equal(got, [[5.0]])
