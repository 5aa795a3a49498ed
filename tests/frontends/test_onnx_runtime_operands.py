"""Operands ONNX passes as inputs that Partita needs at import: an empty run-time ``axes``
input of a reduction has no value to wait for (it is the empty list); a run-time target
shape keeps the dims the graph fixes (ONNX's expanded AffineGrid builds ``[N, 2, 3]`` from a
``size`` input); a Squeeze without axes keeps a tensor's dynamic dims."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import partita
from partita.dialects import nn
from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError
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


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs],
        initializer=[helper.make_tensor(n, TensorProto.INT64, [len(v)], v) for n, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_a_run_time_target_shape_keeps_the_dims_the_graph_fixes():
    """``Expand`` and ``ConstantOfShape`` to ``Concat(size[:1], [2, 3])``: only the first
    dim waits for the run; the others are typed, so a Split of axis 1 imports."""
    model = _model(
        [helper.make_node("Slice", ["size", "zero", "one"], ["n"]),
         helper.make_node("Concat", ["n", "tail"], ["target"], axis=0),
         helper.make_node("Expand", ["row", "target"], ["grid"]),
         helper.make_node("Split", ["grid"], ["a", "b"], axis=1, num_outputs=2),
         helper.make_node("ConstantOfShape", ["target"], ["zeros"])],
        [("row", TensorProto.FLOAT, [1, 3]), ("size", TensorProto.INT64, [2])], ["a", "b", "zeros"],
        [("zero", [0]), ("one", [1]), ("tail", [2, 3])])
    module = import_onnx(model)
    expand, fill = [op for op in module.walk() if isinstance(op, nn.DynOp)]
    assert (expand.kind, expand.result.type.get_shape()) == ("expand", (nn.DYN, 2, 3))
    assert (fill.kind, fill.result.type.get_shape()) == ("expand", (nn.DYN, 2, 3))
    exe = partita.compile(model)
    row = np.array([[1, 2, 3]], np.float32)
    for n in (1, 4):
        a, b, zeros = exe.run(row, np.array([n, 7]))
        np.testing.assert_array_equal(a, np.broadcast_to(row, (n, 1, 3)))
        np.testing.assert_array_equal(b, np.broadcast_to(row, (n, 1, 3)))
        np.testing.assert_array_equal(zeros, np.zeros((n, 2, 3), np.float32))


def test_a_run_time_target_that_contradicts_a_static_dim_is_an_import_error():
    model = _model([helper.make_node("Concat", ["n", "four"], ["target"], axis=0),
                    helper.make_node("Expand", ["x", "target"], ["y"])],
                   [("x", TensorProto.FLOAT, [1, 3]), ("n", TensorProto.INT64, [1])], ["y"], [("four", [4])])
    with pytest.raises(PartitaError, match="cannot expand a dim of 3 to 4"):
        import_onnx(model)


def test_squeeze_without_axes_keeps_the_dynamic_dims():
    """Which dynamic dims are 1 is known only at run time: the result keeps them, and a run
    where one is 1 (a result of another rank) is a located error, not a wrong rank."""
    model = _model([helper.make_node("Squeeze", ["x"], ["y"])], [("x", TensorProto.FLOAT, ["n", 1, 3])], ["y"])
    (squeeze,) = [op for op in import_onnx(model).walk() if isinstance(op, nn.DynOp)]
    assert squeeze.result.type.get_shape() == (nn.DYN, 3)
    exe = partita.compile(model)
    x = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    np.testing.assert_array_equal(exe.run(x)[0], x.reshape(2, 3))
    with pytest.raises(PartitaError, match=r"tensor<3xf32> result where tensor<\?x3xf32> was declared"):
        exe.run(x[:1])
