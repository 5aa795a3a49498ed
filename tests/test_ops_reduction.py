"""The reduction family (nn.reduce_*, argmax / argmin, topk, cumsum) in every layer: shape
rules and verifiers, ONNX converters against onnx's own reference over the opsets where
axes moved from attribute to input, native window kernels built for the host against the
NumPy references (every element type the op takes), and end to end through
``partita.compile`` with every op in a kernel."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from xdsl.dialects.builtin import TensorType, f32, i64
from xdsl.dialects import test as xdsl_test
from xdsl.utils.exceptions import VerifyException

import partita
from partita.dialects import nn
from partita.frontends.onnx import import_onnx
from partita.ir.diagnostics import PartitaError
from partita.runtime.reference import run

from cuda_host import have_gxx  # tests/cuda_host.py
from kernel_check import check_kernels, fuse, host_ops  # tests/kernel_check.py

ONNX_OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
            "ReduceL2", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp", "ArgMax",
            "ArgMin", "TopK", "CumSum")
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


def test_run_time_axes_are_a_partita_error():
    x = _value((2, 3))
    node = helper.make_node("ReduceMean", ["x", "axes"], ["y"])
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
        helper.make_tensor_value_info("axes", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(PartitaError, match=r"\(ReduceMean\): reduction axes computed at run time"):
        import_onnx(m)
    del x


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
        "argmax", "argmin", "topk_values", "topk_indices", "cumsum"}


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
    # The square is a kernel of its own; the reduction and its epilogue are one.
    assert check_kernels(module, tmp_path) == ["", "nn.reduce_log_sum"]


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
