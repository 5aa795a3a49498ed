"""Results sized by the values of a graph input (ONNX Reduce* with a run-time ``axes``
input): the run's shape signature holds those values, as TensorRT's shape tensors do, so
each distinct value binds the plan once and the result is sized from it."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import partita
from partita.ir import PartitaError


def _reduce_model(keepdims: int, computed_axes: bool = False):
    nodes = [helper.make_node("ReduceSum", ["x", "a"], ["y"], keepdims=keepdims)]
    if computed_axes:  # axes = axes_in + 0: a value computed at run time
        nodes.insert(0, helper.make_node("Add", ["axes", "zero"], ["a"]))
    else:
        nodes[0].input[1] = "axes"
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5]),
         helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("zero", TensorProto.INT64, [1], [0])] if computed_axes else [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture(scope="module")
def exe() -> partita.Executable:
    return partita.compile(_reduce_model(keepdims=0))


X = np.arange(60, dtype=np.float32).reshape(3, 4, 5)


def test_each_axes_value_binds_once_and_sizes_the_result(exe):
    binds = exe.runtime.stats["binds"]
    for axis in (1, -1, 1, 0):
        (y,) = exe.run(X, np.array([axis], np.int64))
        np.testing.assert_array_equal(y, X.sum(axis=axis))
    assert exe.runtime.stats["binds"] - binds == 3  # axes 1, -1 and 0; the second 1 is cached


def test_keepdims_keeps_the_reduced_axis_as_one():
    exe = partita.compile(_reduce_model(keepdims=1))
    (y,) = exe.run(X, np.array([2], np.int64))
    assert y.shape == (3, 4, 1)
    np.testing.assert_array_equal(y, X.sum(axis=2, keepdims=True))


class _CudaArray:
    """A device array as CuPy shows it (the CUDA array interface), here in the simulated
    device's memory."""

    def __init__(self, ptr: int, like: np.ndarray):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": like.shape,
                                         "typestr": like.dtype.str, "version": 3}


def test_axes_on_the_device_are_read_back_once_per_run(exe):
    device, stream = exe.runtime.device, exe.runtime.stream
    axes = np.array([0], np.int64)
    ptr = device.alloc(axes.nbytes)
    try:
        device.upload(int(ptr), axes, stream)
        device.synchronize(stream)
        reads = exe.runtime.stats["sizing_reads"]
        (y,) = exe.run(X, _CudaArray(int(ptr), axes))
        np.testing.assert_array_equal(y, X.sum(axis=0))
        assert exe.runtime.stats["sizing_reads"] - reads == 1
    finally:
        device.free(ptr)


def test_an_axis_out_of_range_is_a_located_error(exe):
    with pytest.raises(PartitaError, match=r"nn.dynamic_reduce.*reduction axis"):
        exe.run(X, np.array([3], np.int64))


def test_axes_computed_at_run_time_are_read_back():
    """Computed axes start a stage of the plan (tests/runtime/test_data_dependent_shapes.py)."""
    exe = partita.compile(_reduce_model(keepdims=0, computed_axes=True))
    for axis in (1, -1, 1):
        (y,) = exe.run(X, np.array([axis], np.int64))
        np.testing.assert_array_equal(y, X.sum(axis=axis))
    assert len(exe.runtime.plan.stages) == 2 and exe.runtime.stats["sizing_reads"] == 3


COMPUTED = """func.func @main(%x: tensor<3x4xf32>, %a: tensor<1xi64>) -> tensor<?xf32> {
  %b = nn.neg %a : (tensor<1xi64>) -> tensor<1xi64>
  %y = nn.dynamic_reduce %x, %b {keepdims = false} : (tensor<3x4xf32>, tensor<1xi64>) -> tensor<?xf32>
  func.return %y : tensor<?xf32>
}
"""


def test_a_plan_sizes_a_result_from_a_computed_value_once_it_is_computed():
    exe = partita.compile(COMPUTED, partitioner="none", fallback_device="cpu")
    (y,) = exe.run(np.arange(12, dtype=np.float32).reshape(3, 4), np.array([1], np.int64))  # axes -1
    np.testing.assert_array_equal(y, np.arange(12, dtype=np.float32).reshape(3, 4).sum(axis=-1))
    with pytest.raises(PartitaError, match="axis 2 is out of range|out of range"):
        exe.run(np.ones((3, 4), np.float32), np.array([-2], np.int64))  # axes 2 of a 2-D tensor


# -- nn.dyn: ops parameterized by run-time values (TVM's relay.dyn) -------------------------


def _model(nodes, inputs, outputs, opset=18):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


F, I64 = TensorProto.FLOAT, TensorProto.INT64


def test_reshape_to_a_run_time_shape():
    exe = partita.compile(_model([helper.make_node("Reshape", ["x", "s"], ["y"])],
                                 [("x", F, [2, 3, 4]), ("s", I64, [2])], [("y", F)]))
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for shape, want in (([4, -1], (4, 6)), ([0, 12], (2, 12)), ([24, 1], (24, 1))):
        (y,) = exe.run(x, np.array(shape, np.int64))
        assert y.shape == want
        np.testing.assert_array_equal(y, x.reshape(want))
    with pytest.raises(PartitaError, match=r"nn.dyn.*cannot reshape \[2, 3, 4\] into \[5, -1\]"):
        exe.run(x, np.array([5, -1], np.int64))


def test_split_and_topk_by_run_time_sizes():
    exe = partita.compile(_model(
        [helper.make_node("Split", ["x", "parts"], ["a", "b"], axis=1),
         helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1)],
        [("x", F, [2, 6]), ("parts", I64, [2]), ("k", I64, [1])], [("a", F), ("b", F), ("v", F), ("i", I64)]))
    x = np.array([[5, 1, 4, 2, 6, 3], [0, 9, 8, 7, 1, 2]], np.float32)
    a, b, v, i = exe.run(x, np.array([2, 4], np.int64), np.array([3], np.int64))
    np.testing.assert_array_equal(a, x[:, :2])
    np.testing.assert_array_equal(b, x[:, 2:])
    np.testing.assert_array_equal(v, [[6, 5, 4], [9, 8, 7]])
    np.testing.assert_array_equal(i, [[4, 0, 2], [1, 2, 3]])


def test_pad_and_slice_by_run_time_values():
    exe = partita.compile(_model(
        [helper.make_node("Pad", ["x", "pads", "value"], ["p"], mode="constant"),
         helper.make_node("Slice", ["x", "starts", "ends"], ["s"])],
        [("x", F, [2, 3]), ("pads", I64, [4]), ("value", F, []), ("starts", I64, [2]), ("ends", I64, [2])],
        [("p", F), ("s", F)]))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    p, s = exe.run(x, np.array([0, 1, 1, 0], np.int64), np.array(7, np.float32),
                   np.array([1, -2], np.int64), np.array([2, 100], np.int64))
    np.testing.assert_array_equal(p, np.pad(x, [(0, 1), (1, 0)], constant_values=7))
    np.testing.assert_array_equal(s, x[1:2, -2:100])


def test_dyn_prints_and_parses_back():
    from partita.dialects import make_context
    from partita.ir import parse_module

    text = """func.func @main(%x: tensor<2x3xf32>, %s: tensor<2xi64>) -> tensor<?x?xf32> {
  %y = nn.dyn(%x : tensor<2x3xf32>) params(%s : tensor<2xi64>) {kind = "reshape", param_names = "shape", options = {allowzero = false}} -> tensor<?x?xf32>
  func.return %y : tensor<?x?xf32>
}
"""
    module = parse_module(text, make_context())
    again = parse_module(str(module), make_context())
    assert str(again) == str(module)
    (op,) = [o for o in module.walk() if o.name == "nn.dyn"]
    assert op.kind == "reshape" and op.param_names == ["shape"] and op.options == {"allowzero": False}


def test_range_one_hot_and_constant_of_shape_by_run_time_values():
    exe = partita.compile(_model(
        [helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
         helper.make_node("OneHot", ["idx", "depth", "values"], ["o"], axis=-1),
         helper.make_node("ConstantOfShape", ["shape"], ["c"],
                          value=helper.make_tensor("v", TensorProto.FLOAT, [1], [2.5]))],
        [("start", F, []), ("limit", F, []), ("delta", F, []), ("idx", I64, [3]), ("depth", I64, []),
         ("values", F, [2]), ("shape", I64, [2])],
        [("r", F), ("o", F), ("c", F)]))
    for limit, depth in ((3.0, 4), (10.0, 2)):
        r, o, c = exe.run(np.array(1, np.float32), np.array(limit, np.float32), np.array(2, np.float32),
                          np.array([0, 1, 3], np.int64),
                          np.array(depth, np.int64), np.array([-1, 5], np.float32), np.array([2, depth], np.int64))
        np.testing.assert_array_equal(r, np.arange(1, limit, 2, dtype=np.float32))
        want = np.where(np.arange(depth)[None, :] == np.array([0, 1, 3])[:, None], 5, -1).astype(np.float32)
        np.testing.assert_array_equal(o, want)
        np.testing.assert_array_equal(c, np.full((2, depth), 2.5, np.float32))
