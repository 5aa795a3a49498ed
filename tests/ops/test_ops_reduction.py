"""The reduction family (nn.reduce_*, argmax / argmin, topk, cumsum) in every layer: shape
rules and verifiers, ONNX converters against onnx's own reference over the opsets where
axes moved from attribute to input, native kernels built for the host against the NumPy
references (every element type the op takes; reductions over the last axes one block per
row, others one thread per output element), and end to end through ``partita.compile``
with every op in a kernel."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_check import (  # tests/support/kernel_check.py
    TOLERANCE,
    build_for_host,
    check_kernels,
    fuse,
    fused_functions,
    host_ops,
    launch_beside_reference,
    random_input,
)
from support.kernel_harness import run_host_kernels  # tests/support/kernel_harness.py
from xdsl.dialects import test as xdsl_test
from xdsl.dialects.builtin import TensorType, f32, i64
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import VerifyException

import partita
from partita.dialects import make_context, nn
from partita.frontends.onnx import import_onnx
from partita.lowering import nvrtc
from partita.lowering.cubin import kernel_symbols
from partita.lowering.cuda.codegen import program_of
from partita.lowering.cuda.records import RowwiseRecord
from partita.runtime.reference import run
from partita.transforms import get_all_passes

ONNX_OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
            "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "ArgMax",
            "ArgMin", "TopK", "CumSum", "CumProd")
"""The ONNX op types this file converts (``test_onnx_import`` checks every converter has
a test)."""
ONNX_TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16,
              np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
              np.float64: TensorProto.DOUBLE, np.uint8: TensorProto.UINT8,
              np.int8: TensorProto.INT8}


def _value(shape, dtype=np.float32):
    return rand_like(shape, dtype)


def rand_like(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-4 if np.issubdtype(dtype, np.signedinteger) else 0, 5, shape).astype(dtype)


def model(op_type, inputs: dict, outputs: int, opset: int, inits: dict | None = None, **attrs):
    """A one-node model: ``inputs`` name -> array (graph inputs), ``inits`` initializers."""
    inits = inits or {}
    node = helper.make_node(op_type, [*inputs, *inits], [f"y{k}" for k in range(outputs)], **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, ONNX_TYPES[a.dtype.type], a.shape) for n, a in inputs.items()],
        [helper.make_tensor_value_info(f"y{k}", TensorProto.UNDEFINED, None) for k in range(outputs)],
        [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check_against_onnx(m, inputs: dict, rtol=1e-5, atol=1e-6):
    want = ReferenceEvaluator(m).run(None, inputs)
    got = run(import_onnx(m), *inputs.values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# -- dialect ------------------------------------------------------------------------------


def _tensor(shape, element_type=f32):
    return xdsl_test.TestOp(result_types=[TensorType(element_type, shape)]).res[0]


def test_shape_rules():
    x = _tensor([2, -1, 4])
    assert nn.ReduceMeanOp(x, [0, 2]).result.type.get_shape() == (1, -1, 1)
    assert nn.ReduceSumOp(x, [1], keepdims=False).result.type.get_shape() == (2, 4)
    assert nn.ReduceMaxOp(x, []).result.type.get_shape() == (2, -1, 4)
    arg = nn.ArgMinOp(x, axis=-1, keepdims=False)
    assert arg.result.type == TensorType(i64, [2, -1])
    assert nn.TopKIndicesOp(x, 3, axis=2).result.type == TensorType(i64, [2, -1, 3])
    assert nn.TopKValuesOp(x, 3, axis=0 - 1).result.type == TensorType(f32, [2, -1, 3])
    assert nn.CumSumOp(x, 1).result.type == x.type


@pytest.mark.parametrize("build, message", [
    (lambda x: nn.ReduceSumOp(x, [3]), "reduction axis 3 out of range for rank 3"),
    (lambda x: nn.ReduceSumOp(x, [1, -2]), "repeat an axis"),
    (lambda x: nn.TopKValuesOp(x, 5, axis=2), "k = 5 exceeds the axis size 4"),
    (lambda x: nn.ArgMaxOp(x, axis=4), "out of range"),
    (lambda x: nn.ReduceInvStdDevOp(_tensor([2], i64), [0]), "element type must be one of"),
])
def test_verifier_rejections(build, message):
    with pytest.raises(VerifyException, match=message):
        build(_tensor([2, 3, 4])).verify()


def test_arg_reduction_result_must_be_i64():
    x = _tensor([2, 3])
    with pytest.raises(VerifyException, match="result element type must be one of i64"):
        nn.ArgMaxOp(x, result_type=TensorType(f32, [1, 3])).verify()


# -- ONNX converters -------------------------------------------------------------------------

REDUCE_TYPES = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"]


@pytest.mark.parametrize("op_type", REDUCE_TYPES)
@pytest.mark.parametrize("opset", [11, 13, 18])
def test_reductions_over_axes_attribute_or_input(op_type, opset):
    x = np.abs(_value((3, 4, 5))) + 0.5  # positive: LogSum is defined
    axes_as_input = opset >= (13 if op_type == "ReduceSum" else 18)
    for axes, keepdims in (([0, -1], 1), ([1], 0), (None, 1)):
        if axes is None:
            m = model(op_type, {"x": x}, 1, opset, keepdims=keepdims)
        elif axes_as_input:
            m = model(op_type, {"x": x}, 1, opset, {"axes": np.array(axes, np.int64)},
                      keepdims=keepdims)
        else:
            m = model(op_type, {"x": x}, 1, opset, axes=axes, keepdims=keepdims)
        check_against_onnx(m, {"x": x}, rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float64, np.float16])
def test_reductions_on_other_element_types(dtype):
    x = rand_like((3, 4), dtype)
    for op_type in ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd"):
        m = model(op_type, {"x": x}, 1, 18, {"axes": np.array([1], np.int64)})
        check_against_onnx(m, {"x": x}, rtol=1e-3)


def test_noop_with_empty_axes_is_the_identity():
    x = _value((2, 3))
    m = model("ReduceSum", {"x": x}, 1, 13, {"axes": np.zeros(0, np.int64)},
              noop_with_empty_axes=1)
    check_against_onnx(m, {"x": x})


def test_run_time_axes_of_a_graph_input_are_read_when_the_plan_binds():
    # The result is sized by the axes' values (tests/runtime/test_sizing_inputs.py).
    x = _value((2, 3))
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"])
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
        helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    assert "nn.dynamic_reduce" in {op.name for op in import_onnx(m).walk()}
    check_against_onnx(m, {"x": x, "axes": np.array([-1], np.int64)})


@pytest.mark.parametrize("op_type", ["ArgMax", "ArgMin"])
def test_arg_reductions(op_type):
    x = np.array([[1, 3, 3, 0], [2, 2, -1, 2], [0, 0, 5, 5]], np.float32)
    for attrs in ({}, {"axis": 1, "keepdims": 0}, {"axis": -1, "select_last_index": 1},
                  {"axis": 0, "select_last_index": 1, "keepdims": 0}):
        check_against_onnx(model(op_type, {"x": x}, 1, 13, **attrs), {"x": x})
    xi = x.astype(np.int32)
    check_against_onnx(model(op_type, {"x": xi}, 1, 13, axis=1), {"x": xi})


def test_topk_values_and_indices():
    x = np.array([[3, 1, 3, 2, 5], [0, 0, 0, 1, 0]], np.float32)
    for largest in (0, 1):
        check_against_onnx(model("TopK", {"x": x}, 2, 11, {"k": np.array([3], np.int64)},
                                 axis=1, largest=largest), {"x": x})
    check_against_onnx(model("TopK", {"x": x}, 2, 9, k=2, axis=-1), {"x": x})
    xi = x.T.astype(np.int64).copy()
    check_against_onnx(model("TopK", {"x": xi}, 2, 11, {"k": np.array([2], np.int64)}, axis=0),
                       {"x": xi})


def test_cumsum_variants():
    x = _value((3, 4))
    for attrs in ({}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}):
        for axis in (0, -1):
            check_against_onnx(model("CumSum", {"x": x}, 1, 14, {"a": np.array(axis, np.int64)},
                                     **attrs), {"x": x})
    xi = rand_like((5,), np.int32)
    check_against_onnx(model("CumSum", {"x": xi}, 1, 14, {"a": np.array(0, np.int32)}), {"x": xi})


def test_cumprod_variants():
    x = _value((3, 4))
    for attrs in ({}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}):
        for axis in (0, -1):
            check_against_onnx(model("CumProd", {"x": x}, 1, 26, {"a": np.array(axis, np.int64)},
                                     **attrs), {"x": x})
    xi = rand_like((5,), np.int32)
    check_against_onnx(model("CumProd", {"x": xi}, 1, 26, {"a": np.array(0, np.int32)}, exclusive=1),
                       {"x": xi})


@pytest.mark.parametrize("op_type", ["CumSum", "CumProd"])
def test_cumulative_axis_read_at_run_time(tmp_path, op_type):
    """An axis given as a graph input (the node suite's form): one running op per axis,
    the named one selected in the kernel, for every axis value a rank-3 input takes."""
    x = _value((2, 3, 4))
    graph = helper.make_graph(
        [helper.make_node(op_type, ["x", "axis"], ["y"], reverse=1)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("axis", TensorProto.INT32, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    exe = partita.compile(m, cache_dir=tmp_path)
    reference = ReferenceEvaluator(m)
    for axis in (-3, -2, -1, 0, 1, 2):
        a = np.array(axis, np.int32)
        (want,) = reference.run(None, {"x": x, "axis": a})
        np.testing.assert_allclose(exe.run(x, a)[0], want, rtol=1e-5, atol=1e-6)
    assert not exe.runtime.plan.host_ops


def test_constant_inputs_fold_with_the_project_references():
    node = helper.make_node("ReduceSum", ["c", "axes"], ["s"], keepdims=0)
    add = helper.make_node("Add", ["x", "s"], ["y"])
    graph = helper.make_graph([node, add], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
                              [onnx.numpy_helper.from_array(np.ones((2, 3), np.float32), "c"),
                               onnx.numpy_helper.from_array(np.array([0], np.int64), "axes")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    module = import_onnx(m)
    assert not [o for o in module.walk() if isinstance(o, nn.ReduceSumOp)]
    (y,) = run(module, np.zeros(3, np.float32))
    np.testing.assert_array_equal(y, [2, 2, 2])


# -- native kernels, built for the host -------------------------------------------------------

def _reductions(t: str, ops: list[str]) -> str:
    lines = [f"func.func @r_{t}(%x: tensor<?x5x7x{t}>) -> ("
             + ", ".join(f"tensor<{s}x{t}>" for _, _, s in ops) + ") {"]
    for k, (op, attrs, shape) in enumerate(ops):
        lines.append(f"  %{k} = nn.{op} %x {{{attrs}}} : (tensor<?x5x7x{t}>) -> tensor<{shape}x{t}>")
    lines.append("  func.return " + ", ".join(f"%{k}" for k in range(len(ops))) + " : "
                 + ", ".join(f"tensor<{s}x{t}>" for _, _, s in ops))
    lines.append("}")
    return "\n".join(lines)


FLOAT_REDUCTIONS = [
    ("reduce_sum", "axes = array<i64: 1>", "?x1x7"),
    ("reduce_mean", "axes = array<i64: 0, 2>, keepdims = false", "5"),
    ("reduce_max", "axes = array<i64: 2>, keepdims = false", "?x5"),
    ("reduce_min", "axes = array<i64: 0, 1, 2>", "1x1x1"),
    ("reduce_prod", "axes = array<i64: 1>", "?x1x7"),
    ("reduce_l1", "axes = array<i64: 2>", "?x5x1"),
    ("reduce_l2", "axes = array<i64: 1, 2>", "?x1x1"),
    ("reduce_sum_square", "axes = array<i64: 0>", "1x5x7"),
    ("reduce_log_sum_exp", "axes = array<i64: 2>", "?x5x1"),
    ("reduce_inv_std_dev", "axes = array<i64: 2>, epsilon = 1.0e-3 : f64", "?x5x1"),
    ("reduce_max", "axes = array<i64>", "?x5x7"),
    ("cumsum", "axis = 1 : i64", "?x5x7"),
    ("cumsum", "axis = 2 : i64, exclusive = true, reverse = true", "?x5x7"),
    ("cumprod", "axis = 1 : i64, exclusive = true", "?x5x7"),
    ("cumprod", "axis = 2 : i64, reverse = true", "?x5x7"),
]
INT_REDUCTIONS = [
    ("reduce_sum", "axes = array<i64: 1>", "?x1x7"),
    ("reduce_max", "axes = array<i64: 0, 2>, keepdims = false", "5"),
    ("reduce_min", "axes = array<i64: 2>", "?x5x1"),
    ("reduce_prod", "axes = array<i64: 2>, keepdims = false", "?x5"),
    ("reduce_l1", "axes = array<i64: 1>", "?x1x7"),
    ("reduce_sum_square", "axes = array<i64: 1>", "?x1x7"),
    ("reduce_mean", "axes = array<i64: 1>", "?x1x7"),
    ("cumsum", "axis = 1 : i64, reverse = true", "?x5x7"),
    ("cumprod", "axis = 2 : i64, exclusive = true, reverse = true", "?x5x7"),
]
INDEX_OPS = """
func.func @idx_T(%x: tensor<?x5x7xT>) -> (tensor<?x1x7xi64>, tensor<?x5xi64>, tensor<?x5x3xT>, tensor<?x5x3xi64>, tensor<2x5x7xi64>) {
  %0 = nn.argmax %x {axis = 1 : i64} : (tensor<?x5x7xT>) -> tensor<?x1x7xi64>
  %1 = nn.argmin %x {axis = 2 : i64, keepdims = false, select_last_index = true} : (tensor<?x5x7xT>) -> tensor<?x5xi64>
  %2 = nn.topk_values %x {k = 3 : i64, axis = 2 : i64} : (tensor<?x5x7xT>) -> tensor<?x5x3xT>
  %3 = nn.topk_indices %x {k = 3 : i64, axis = -1 : i64, largest = false} : (tensor<?x5x7xT>) -> tensor<?x5x3xi64>
  %4 = nn.topk_indices %x {k = 2 : i64, axis = 0 : i64} : (tensor<?x5x7xT>) -> tensor<2x5x7xi64>
  func.return %0, %1, %2, %3, %4 : tensor<?x1x7xi64>, tensor<?x5xi64>, tensor<?x5x3xT>, tensor<?x5x3xi64>, tensor<2x5x7xi64>
}
"""
BOOL_OPS = """
func.func @any_all(%x: tensor<?x5x7xi1>) -> (tensor<?x5xi1>, tensor<1x5x1xi1>) {
  %0 = nn.reduce_max %x {axes = array<i64: 2>, keepdims = false} : (tensor<?x5x7xi1>) -> tensor<?x5xi1>
  %1 = nn.reduce_min %x {axes = array<i64: 0, 2>} : (tensor<?x5x7xi1>) -> tensor<1x5x1xi1>
  func.return %0, %1 : tensor<?x5xi1>, tensor<1x5x1xi1>
}
"""


def _model_text() -> str:
    floats = [_reductions(t, FLOAT_REDUCTIONS) for t in ("f32", "f16", "bf16", "f64")]
    ints = [_reductions(t, INT_REDUCTIONS) for t in ("i64", "i32", "i8", "ui8", "ui32")]
    # TopK of distinct values (ties are tested with integers below).
    index = [INDEX_OPS.replace("T", t) for t in ("f32", "f16", "i64", "i8", "ui16")]
    return "\n".join([*floats, *ints, *index, BOOL_OPS])


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_kernels_compute_the_reference_semantics(tmp_path):
    module = fuse(_model_text())
    assert host_ops(module) == []  # every op went into a kernel
    anchors = check_kernels(module, tmp_path)
    assert len(anchors) == 4 * len(FLOAT_REDUCTIONS) + 5 * len(INT_REDUCTIONS) + 5 * 5 + 2
    assert {a.removeprefix("nn.") for a in anchors} >= {
        "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_l1",
        "reduce_l2", "reduce_sum_square", "reduce_log_sum_exp", "reduce_inv_std_dev",
        "argmax", "argmin", "topk_values", "topk_indices", "cumsum", "cumprod"}


EDGES = """
func.func @edges(%x: tensor<3x4xf32>, %z: tensor<2x0x3xf32>, %n: tensor<2x3xf32>, %c: tensor<0x2xi32>) -> (tensor<f32>, tensor<2x1x3xf32>, tensor<2x3xf32>, tensor<2xf32>, tensor<1x2xi32>) {
  %0 = nn.reduce_sum %x {axes = array<i64: 0, 1>, keepdims = false} : (tensor<3x4xf32>) -> tensor<f32>
  %1 = nn.reduce_sum %z {axes = array<i64: 1>} : (tensor<2x0x3xf32>) -> tensor<2x1x3xf32>
  %2 = nn.reduce_max %z {axes = array<i64: 1>, keepdims = false} : (tensor<2x0x3xf32>) -> tensor<2x3xf32>
  %3 = nn.reduce_max %n {axes = array<i64: 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<2xf32>
  %4 = nn.reduce_prod %c {axes = array<i64: 0>} : (tensor<0x2xi32>) -> tensor<1x2xi32>
  func.return %0, %1, %2, %3, %4 : tensor<f32>, tensor<2x1x3xf32>, tensor<2x3xf32>, tensor<2xf32>, tensor<1x2xi32>
}
"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_reductions_to_a_scalar_and_over_empty_axes(tmp_path):
    """A rank-0 result; sums, max and product over no elements are 0, -inf and 1."""
    assert check_kernels(fuse(EDGES), tmp_path) == [
        "nn.reduce_sum", "nn.reduce_sum", "nn.reduce_max", "nn.reduce_max", "nn.reduce_prod"]


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_log_sum_kernel_and_epilogue(tmp_path):
    text = """
func.func @ls(%x: tensor<4x6xf32>, %b: tensor<4x1xf32>) -> tensor<4x1xf32> {
  %0 = nn.multiply %x, %x : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %1 = nn.reduce_log_sum %0 {axes = array<i64: 1>} : (tensor<4x6xf32>) -> tensor<4x1xf32>
  %2 = nn.add %1, %b : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  func.return %2 : tensor<4x1xf32>
}
"""
    module = fuse(text)
    # The square (the reduction's prologue), the reduction and its epilogue are one kernel.
    assert check_kernels(module, tmp_path) == ["nn.reduce_log_sum"]


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_a_one_element_row_read_in_the_loop_and_the_epilogue(tmp_path):
    """A detector's transform takes the max of one image's size and subtracts the size: a
    row of one element whose input the reduction's loop and its epilogue both read. Its
    index is "0" in each (not the epilogue's "i", undefined in the loop)."""
    text = """
func.func @pad_to(%x: tensor<1xi64>) -> tensor<1xi64> {
  %0 = nn.reshape %x : (tensor<1xi64>) -> tensor<1x1xi64>
  %1 = nn.cast %0 : (tensor<1x1xi64>) -> tensor<1x1xf32>
  %2 = nn.reduce_max %1 {axes = array<i64: 1>, keepdims = false} : (tensor<1x1xf32>) -> tensor<1xf32>
  %3 = nn.cast %2 : (tensor<1xf32>) -> tensor<1xi64>
  %4 = nn.subtract %3, %x : (tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  func.return %4 : tensor<1xi64>
}
"""
    assert check_kernels(fuse(text), tmp_path) == ["nn.reduce_max"]


# -- end to end ---------------------------------------------------------------------------------


def test_compile_runs_every_reduction_in_a_kernel(tmp_path):
    nodes = [
        helper.make_node("ReduceMean", ["x", "a1"], ["m"], keepdims=1),
        helper.make_node("Sub", ["x", "m"], ["c"]),
        helper.make_node("ReduceSumSquare", ["c", "a1"], ["ss"], keepdims=0),
        helper.make_node("ArgMax", ["x"], ["am"], axis=2, keepdims=0),
        helper.make_node("TopK", ["x", "k"], ["tv", "ti"], axis=-1),
        helper.make_node("CumSum", ["x", "ax"], ["cs"], exclusive=1),
        helper.make_node("ReduceLogSumExp", ["x", "a2"], ["lse"], keepdims=0),
    ]
    inits = {"a1": np.array([1], np.int64), "a2": np.array([0, 2], np.int64),
             "k": np.array([2], np.int64), "ax": np.array(2, np.int64)}
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 4])],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None)
         for n in ("ss", "am", "tv", "ti", "cs", "lse")],
        [onnx.numpy_helper.from_array(v, n) for n, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    exe = partita.compile(m, cache_dir=tmp_path)
    assert not [r for r in exe.report().rows if r.symbol.startswith("(")], exe.report().table()
    x = _value((2, 3, 4))
    want = ReferenceEvaluator(m).run(None, {"x": x})
    for g, w in zip(exe.run(x), want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


# -- row reductions: the block schedule ----------------------------------------------------------

ROW_SPLITS = {1: (1, 1), 3: (3, 1), 31: (1, 31), 33: (3, 11), 1000: (8, 125), 4097: (17, 241)}
"""Row lengths off the block sizes, and a split of each into the last two axes."""
ROW_CASES = {"f32": tuple(ROW_SPLITS), "f16": tuple(ROW_SPLITS), "bf16": (31, 1000),
             "f64": (3, 4097), "i32": (1, 33, 4097), "i64": (33, 1000)}
"""Row lengths tested per dtype (every one in the common float types; a few elsewhere, to
keep the host builds short)."""


def _row_function(t: str, n: int) -> tuple[str, dict[str, tuple[str, int]]]:
    """Reductions over the last axis of ``x`` and the last two of ``z`` (rows of ``n``),
    and one over a middle axis; the kind and block each kernel should have, by op."""
    a, b = ROW_SPLITS[n]
    x, z = f"tensor<?x{n}x{t}>", f"tensor<?x2x{a}x{b}x{t}>"
    # The row schedule: rows of at most 256 loads (16-byte vectors when the row is a
    # multiple of 16 bytes, else elements) take a warp each, four rows a block of 128
    # threads; longer rows a block each, sized to the row (32 to 256 threads).
    width = {"f16": 8, "bf16": 8, "f32": 4}.get(t, 0)
    loads = -(-n // width) if width and n % width == 0 else n
    block = 128 if loads <= 256 else min(256, max(32, 1 << (n - 1).bit_length()))
    ops = [
        ("x", "reduce_sum", "axes = array<i64: 1>", f"?x1x{t}"),
        ("x", "reduce_mean", "axes = array<i64: 1>, keepdims = false", f"?x{t}"),
        ("x", "reduce_max", "axes = array<i64: 1>", f"?x1x{t}"),
        ("x", "reduce_min", "axes = array<i64: 1>, keepdims = false", f"?x{t}"),
        ("x", "reduce_prod", "axes = array<i64: 1>", f"?x1x{t}"),
        ("x", "reduce_l2", "axes = array<i64: 1>, keepdims = false", f"?x{t}"),
        ("x", "reduce_sum_square", "axes = array<i64: 1>", f"?x1x{t}"),
        ("x", "argmax", "axis = 1 : i64", "?x1xi64"),
        ("x", "argmin", "axis = -1 : i64, keepdims = false, select_last_index = true", "?xi64"),
        ("z", "reduce_mean", "axes = array<i64: 2, 3>", f"?x2x1x1x{t}"),
        ("z", "reduce_max", "axes = array<i64: 2, 3>, keepdims = false", f"?x2x{t}"),
        ("z", "reduce_sum", "axes = array<i64: 1>", f"?x1x{a}x{b}x{t}"),  # a middle axis
    ]
    if t.startswith(("f", "bf")):
        ops.append(("x", "reduce_log_sum_exp", "axes = array<i64: 1>", f"?x1x{t}"))
    name = f"rows_{t}_{n}"
    lines = [f"func.func @{name}(%x: {x}, %z: {z}) -> ({', '.join(f'tensor<{s}>' for *_, s in ops)}) {{"]
    want = {}
    for k, (arg, op, attrs, shape) in enumerate(ops):
        lines.append(f"  %{k} = nn.{op} %{arg} {{{attrs}}} : ({x if arg == 'x' else z}) -> tensor<{shape}>")
        middle = "axes = array<i64: 1>" in attrs and arg == "z"
        want[f"{name}_fused_{k}"] = ("window", 256) if middle else ("rowwise", block)
    lines.append(f"  func.return {', '.join(f'%{k}' for k in range(len(ops)))} : "
                 f"{', '.join(f'tensor<{s}>' for *_, s in ops)}")
    return "\n".join([*lines, "}"]), want


def _launch_all(module, built, inputs_of, tolerance_of, only=None):
    """Launch the kernels ``built`` from ``module`` (at most two blocks, so blocks stride
    over rows) on ``inputs_of(name, record)`` and compare with the reference on their
    functions (``tolerance_of(name, dtype)``: ``None`` for exact); the outputs by name."""
    _, records, host = built
    outs = {}
    for name, function in fused_functions(module).items():
        if only is not None and not only(name):
            continue
        rec = records[name]
        args = inputs_of(name, rec)
        out, expected = launch_beside_reference(function, name, rec, host, args)
        tol = tolerance_of(name, rec.output_dtype)
        if tol is None:
            np.testing.assert_array_equal(out, expected, err_msg=name)
        else:
            np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64),
                                       rtol=tol[0], atol=tol[1], err_msg=name)
        outs[name] = out
    return outs


def _row_module(dtypes, lengths):
    """The row-reduction functions of ``dtypes`` x ``lengths`` fused, the kind and block
    each kernel should have, and the row length of each."""
    texts, want, length = [], {}, {}
    for t in dtypes:
        for n in lengths:
            text, kinds = _row_function(t, n)
            texts.append(text)
            want.update(kinds)
            length.update({name: n for name in kinds})
    return fuse("\n".join(texts)), want, length


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
@pytest.mark.parametrize("t", ROW_CASES)
def test_row_reductions_run_by_their_row_schedule(tmp_path, t):
    """Reductions over the last axis and the last two, rows of 1 to 4097 elements (off the
    block size), keepdims both ways: ``rowwise`` kernels, a warp per short row or a block
    sized to a long one, agree with the reference, three rows on two blocks; a middle axis
    stays a ``window`` kernel. Float sums are reordered: the tolerance grows with the row
    (square root of its length, as the rounding error of a sum of random terms does)."""
    module, want, length = _row_module([t], ROW_CASES[t])
    assert host_ops(module) == []

    def inputs_of(name, rec):
        rng = np.random.default_rng(length[name])
        return [random_input(tuple(3 if d < 0 else d for d in shape), dt, rng)
                for shape, dt in zip(rec.inputs, rec.dtypes)]

    def tolerance_of(name, dtype):
        tol = TOLERANCE.get(dtype)
        return None if tol is None else (tol, tol * np.sqrt(length[name]))

    built = build_for_host(module, tmp_path)
    outs = _launch_all(module, built, inputs_of, tolerance_of)
    assert set(outs) == set(want)
    records = built[1]
    assert {n: (type(r).__name__, r.block) for n, r in records.items()} == {
        n: ({"rowwise": "RowwiseRecord", "window": "WindowRecord"}[kind], block)
        for n, (kind, block) in want.items()}
    # A row per output element: the rows are all the leading (kept) output axes.
    assert {r.rows for r in records.values() if isinstance(r, RowwiseRecord)} == {1, 2}


def test_row_reduction_kernels_compile_for_sm_90(tmp_path):
    """The row reductions of every dtype (the block reductions' templates and lambdas
    instantiated for each compute type) compile with NVRTC into one cubin."""
    module, _, _ = _row_module(ROW_CASES, [1000])
    program = program_of(module)
    binary = nvrtc.compile_cuda(program.code, arch="sm_90", cache_dir=tmp_path)
    assert kernel_symbols(binary.cubin) == {k.entry for k in program.kernels.values()}


ROW_EDGES = """
func.func @edges(%x: tensor<4x6xf32>, %e: tensor<3x0xf32>, %i: tensor<2x5xi1>) -> (tensor<4x1xf32>, tensor<4xf32>, tensor<4x1xi64>, tensor<4xi64>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<3x1xf32>, tensor<3xf32>, tensor<3x1xf32>, tensor<2xi1>, tensor<2x1xi1>) {
  %0 = nn.reduce_max %x {axes = array<i64: 1>} : (tensor<4x6xf32>) -> tensor<4x1xf32>
  %1 = nn.reduce_min %x {axes = array<i64: 1>, keepdims = false} : (tensor<4x6xf32>) -> tensor<4xf32>
  %2 = nn.argmax %x {axis = 1 : i64} : (tensor<4x6xf32>) -> tensor<4x1xi64>
  %3 = nn.argmin %x {axis = 1 : i64, keepdims = false, select_last_index = true} : (tensor<4x6xf32>) -> tensor<4xi64>
  %4 = nn.reduce_sum %x {axes = array<i64: 1>} : (tensor<4x6xf32>) -> tensor<4x1xf32>
  %5 = nn.reduce_log_sum_exp %x {axes = array<i64: 1>} : (tensor<4x6xf32>) -> tensor<4x1xf32>
  %6 = nn.reduce_sum %e {axes = array<i64: 1>} : (tensor<3x0xf32>) -> tensor<3x1xf32>
  %7 = nn.reduce_max %e {axes = array<i64: 1>, keepdims = false} : (tensor<3x0xf32>) -> tensor<3xf32>
  %8 = nn.reduce_prod %e {axes = array<i64: 1>} : (tensor<3x0xf32>) -> tensor<3x1xf32>
  %9 = nn.reduce_max %i {axes = array<i64: 1>, keepdims = false} : (tensor<2x5xi1>) -> tensor<2xi1>
  %10 = nn.reduce_min %i {axes = array<i64: 1>} : (tensor<2x5xi1>) -> tensor<2x1xi1>
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10 : tensor<4x1xf32>, tensor<4xf32>, tensor<4x1xi64>, tensor<4xi64>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<3x1xf32>, tensor<3xf32>, tensor<3x1xf32>, tensor<2xi1>, tensor<2x1xi1>
}
func.func @dynamic_row(%d: tensor<2x?xf64>) -> tensor<2xf64> {
  %0 = nn.reduce_sum %d {axes = array<i64: 1>, keepdims = false} : (tensor<2x?xf64>) -> tensor<2xf64>
  func.return %0 : tensor<2xf64>
}
func.func @few_long_rows(%b: tensor<2x3x3000xf32>) -> (tensor<2x1x1xf32>, tensor<f32>) {
  %0 = nn.reduce_sum %b {axes = array<i64: 1, 2>} : (tensor<2x3x3000xf32>) -> tensor<2x1x1xf32>
  %1 = nn.reduce_max %b {axes = array<i64: 0, 1, 2>, keepdims = false} : (tensor<2x3x3000xf32>) -> tensor<f32>
  func.return %0, %1 : tensor<2x1x1xf32>, tensor<f32>
}
"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_row_reductions_propagate_nan_and_reduce_empty_rows(tmp_path):
    """NaN and infinities as the reference has them: max / min / sums are NaN on a row
    with a NaN, argmax / argmin pick the first NaN (the last with select_last_index),
    ties pick the first (last) index; empty rows give 0, -inf and 1; bool any / all; a
    row length known at run time only (the full block); a few long rows (1024 threads)."""
    nan, inf = np.nan, np.inf
    x = np.array([[1, 3, 3, 0, -2, 3],        # ties
                  [2, nan, 5, nan, -1, 2],    # two NaNs
                  [-inf, -inf, -inf, -inf, -inf, -inf],
                  [inf, 1, -inf, 4, inf, -inf]], np.float32)
    i = np.array([[0, 0, 1, 0, 0], [1, 1, 1, 1, 1]], np.bool_)
    module = fuse(ROW_EDGES)

    d = np.arange(600, dtype=np.float64).reshape(2, 300) / 8  # a run-time row length
    big = (np.arange(18000, dtype=np.float32).reshape(2, 3, 3000) % 61 - 30) / 8  # exact sums

    def inputs_of(name, rec):
        return [{(4, 6): x, (3, 0): np.zeros((3, 0), np.float32), (2, 5): i, (2, -1): d,
                 (2, 3, 3000): big}[rec.inputs[0]]]

    built = build_for_host(module, tmp_path)
    with np.errstate(invalid="ignore", over="ignore"):
        outs = _launch_all(module, built, inputs_of, lambda name, dtype: None)
    records = built[1]
    assert {type(r).__name__ for r in records.values()} == {"RowwiseRecord"}
    got = [outs[f"edges_fused_{k}"].ravel() for k in range(11)]
    np.testing.assert_array_equal(got[0], [3, nan, -inf, inf])
    np.testing.assert_array_equal(got[1], [-2, nan, -inf, -inf])
    np.testing.assert_array_equal(got[2], [1, 1, 0, 0])
    np.testing.assert_array_equal(got[3], [4, 3, 5, 5])
    np.testing.assert_array_equal(got[4][[1, 2]], [nan, -inf])
    np.testing.assert_array_equal(got[5][[1, 2]], [nan, -inf])
    np.testing.assert_array_equal(got[6:9], [[0, 0, 0], [-inf] * 3, [1, 1, 1]])
    np.testing.assert_array_equal(got[9:], [[True, True], [False, True]])
    np.testing.assert_array_equal(outs["dynamic_row_fused_0"], d.sum(1))
    assert records["dynamic_row_fused_0"].block == 256
    # Few long rows: blocks of 1024 threads (32 warps through the shared array).
    np.testing.assert_array_equal(outs["few_long_rows_fused_0"].ravel(), big.sum((1, 2)))
    assert outs["few_long_rows_fused_1"] == big.max()
    assert [records[f"few_long_rows_fused_{k}"].block for k in (0, 1)] == [1024, 1024]


def test_row_reduction_fuses_its_epilogue():
    """RMSNorm's statistics: mean of squares over the hidden size, + eps, sqrt: one rowwise
    kernel, the square computed where the row is read (the anchor's prologue)."""
    module = fuse("""
func.func @rms(%x: tensor<?x4096xf16>, %eps: tensor<f16>) -> tensor<?x1xf16> {
  %0 = nn.multiply %x, %x : (tensor<?x4096xf16>, tensor<?x4096xf16>) -> tensor<?x4096xf16>
  %1 = nn.reduce_mean %0 {axes = array<i64: 1>} : (tensor<?x4096xf16>) -> tensor<?x1xf16>
  %2 = nn.add %1, %eps : (tensor<?x1xf16>, tensor<f16>) -> tensor<?x1xf16>
  %3 = nn.sqrt %2 : (tensor<?x1xf16>) -> tensor<?x1xf16>
  func.return %3 : tensor<?x1xf16>
}
""")
    kernels = program_of(module).kernels
    assert [(k.kind, k.ops, k.block, k.split) for k in kernels.values()] == [
        ("rowwise", ("nn.multiply", "nn.reduce_mean", "nn.add", "nn.sqrt"), 256, 1)]


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_rms_norm_and_global_pooling_from_onnx(tmp_path):
    """LLaMA's RMSNorm written out (``Pow, ReduceMean, Add, Sqrt, Div, Mul`` over a hidden
    size of 4096) and global average pooling as ``ReduceMean`` over H, W of NCHW: every op
    in a kernel, each kernel equal to the reference (inputs in eighths, so every sum is
    exact in any order), the reductions in one-block-per-row kernels."""
    nodes = [
        helper.make_node("Pow", ["x", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq", "last"], ["ms"], keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["mse"]),
        helper.make_node("Sqrt", ["mse"], ["rms"]),
        helper.make_node("Div", ["x", "rms"], ["xn"]),
        helper.make_node("Mul", ["xn", "w"], ["y"]),
        helper.make_node("ReduceMean", ["img", "hw"], ["pooled"], keepdims=0),
    ]
    rng = np.random.default_rng(0)
    inits = {"two": np.array(2.0, np.float32), "last": np.array([-1], np.int64),
             "eps": np.array(1e-6, np.float32), "hw": np.array([2, 3], np.int64),
             "w": (rng.integers(-16, 17, 4096) / 8).astype(np.float32)}
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4096]),
                     helper.make_tensor_value_info("img", TensorProto.FLOAT, [2, 8, 7, 7])],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in ("y", "pooled")],
        [onnx.numpy_helper.from_array(v, n) for n, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    x = (rng.integers(-16, 17, (3, 4096)) / 8).astype(np.float32)
    img = (rng.integers(-16, 17, (2, 8, 7, 7)) / 8).astype(np.float32)
    (y, pooled), left = run_host_kernels(m, [x, img], tmp_path)
    assert left == []
    np.testing.assert_allclose(y, x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * inits["w"], rtol=1e-5)
    np.testing.assert_array_equal(pooled, img.mean((2, 3)))
    module = import_onnx(m)
    PassPipeline.parse_spec(get_all_passes(), "fuse-native-kernels").apply(make_context(), module)
    kinds = {(k.anchor, k.kind) for k in program_of(module).kernels.values() if k.anchor}
    assert kinds == {("nn.reduce_mean", "rowwise")}
