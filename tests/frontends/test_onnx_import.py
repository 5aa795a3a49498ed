"""ONNX import: every supported op (single-op models) and the example models computed by
Partita's reference executor must match ``onnx.reference.ReferenceEvaluator``."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from partita.dialects import nn
from partita.frontends.onnx import SUPPORTED_OPS, import_onnx
from partita.ir import PartitaError
from partita.runtime.reference import run
from partita.tools import import_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
F32 = TensorProto.FLOAT


def make(nodes, inputs, outputs, inits=(), opset=17, elem=F32):
    """A model from nodes; ``inputs``/``outputs`` map names to shapes; ``inits`` to arrays."""
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, elem, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, elem, s) for n, s in outputs.items()],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(inits).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def random_inputs(model, batch=2, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        shape = [d.dim_value if d.HasField("dim_value") else batch
                 for d in inp.type.tensor_type.shape.dim]
        out[inp.name] = rng.standard_normal(shape).astype(dtype)
    return out


def check(model, batch=2, rtol=1e-4, atol=1e-5, dtype=np.float32):
    """Import ``model``, run both executors on the same inputs, compare; returns the module."""
    module = import_onnx(model)
    feeds = random_inputs(model, batch, dtype=dtype)
    expected = ReferenceEvaluator(model).run(None, feeds)
    got = run(module, *feeds.values())
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_allclose(g.astype(np.float32), e.astype(np.float32), rtol=rtol,
                                   atol=atol)
    return module


def op_names(module) -> list[str]:
    return [op.name for op in module.walk() if op.name.startswith("nn.")]


def rand(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), name=f"the_{op}", **attrs)


# ---------------------------------------------------------------------------------------
# Single-op models
# ---------------------------------------------------------------------------------------

X = {"x": [2, 3, 4]}
Y3 = {"y": [2, 3, 4]}

CASES = {
    "add_broadcast_init": ([node("Add", ["x", "b"])], X, Y3, {"b": rand(4)}, 17),
    "sub_two_inputs": ([node("Sub", ["x", "z"])], {**X, "z": [2, 3, 4]}, Y3, {}, 17),
    "mul_scalar": ([node("Mul", ["x", "s"])], X, Y3, {"s": np.float32(1.5)}, 17),
    "div": ([node("Div", ["x", "s"])], X, Y3, {"s": rand(3, 1) + 3}, 13),
    "sum": ([node("Sum", ["x", "z", "b"])], {**X, "z": [2, 3, 4]}, Y3, {"b": rand(4)}, 13),
    "relu": ([node("Relu", ["x"])], X, Y3, {}, 9),
    "tanh": ([node("Tanh", ["x"])], X, Y3, {}, 13),
    "sigmoid": ([node("Sigmoid", ["x"])], X, Y3, {}, 13),
    "gelu_op": ([node("Gelu", ["x"])], X, Y3, {}, 20),
    "gelu_op_tanh": ([node("Gelu", ["x"], approximate="tanh")], X, Y3, {}, 20),
    "softmax_v11_last": ([node("Softmax", ["x"], axis=-1)], X, Y3, {}, 11),
    "softmax_v11_last_pos": ([node("Softmax", ["x"], axis=2)], X, Y3, {}, 11),
    "softmax_v13_axis1": ([node("Softmax", ["x"], axis=1)], X, Y3, {}, 13),
    "layernorm": ([node("LayerNormalization", ["x", "g", "b"], epsilon=1e-3)], X, Y3,
                  {"g": rand(4), "b": rand(4, seed=2)}, 17),
    "layernorm_axis1_nobias": ([node("LayerNormalization", ["x", "g"], axis=1)], X, Y3,
                               {"g": rand(3, 4)}, 17),
    "gemm_transB": ([node("Gemm", ["a", "w", "c"], transB=1)], {"a": [5, 4]}, {"y": [5, 3]},
                    {"w": rand(3, 4), "c": rand(3)}, 13),
    "gemm_plain_alpha_beta": ([node("Gemm", ["a", "w", "c"], alpha=0.5, beta=2.0)],
                              {"a": [5, 4]}, {"y": [5, 3]},
                              {"w": rand(4, 3), "c": rand(5, 3)}, 9),
    "gemm_transA_no_c": ([node("Gemm", ["a", "w"], transA=1)], {"a": [4, 5]}, {"y": [5, 3]},
                         {"w": rand(4, 3)}, 11),
    "gemm_dynamic_b": ([node("Gemm", ["a", "w"])], {"a": [5, 4], "w": [4, 3]}, {"y": [5, 3]},
                       {}, 13),
    "matmul_const": ([node("MatMul", ["x", "w"])], X, {"y": [2, 3, 5]}, {"w": rand(4, 5)}, 13),
    "matmul_batched": ([node("MatMul", ["x", "z"])], {"x": [2, 3, 4], "z": [2, 4, 6]},
                       {"y": [2, 3, 6]}, {}, 13),
    "conv_bias_group_dilation": (
        [node("Conv", ["x", "w", "b"], group=2, dilations=[2, 1], strides=[1, 2],
              pads=[1, 0, 2, 1])],
        {"x": [1, 4, 9, 9]}, {"y": [1, 6, 8, 5]}, {"w": rand(6, 2, 3, 3), "b": rand(6)}, 11),
    "conv_same_upper": ([node("Conv", ["x", "w"], auto_pad="SAME_UPPER", strides=[2, 2])],
                        {"x": [1, 2, 7, 8]}, {"y": [1, 3, 4, 4]}, {"w": rand(3, 2, 4, 3)}, 11),
    "conv_valid": ([node("Conv", ["x", "w"], auto_pad="VALID")],
                   {"x": [2, 2, 6, 6]}, {"y": [2, 3, 4, 4]}, {"w": rand(3, 2, 3, 3)}, 9),
    "conv1d": ([node("Conv", ["x", "w"], pads=[1, 2])], {"x": [2, 2, 7]}, {"y": [2, 3, 8]},
               {"w": rand(3, 2, 3)}, 11),
    "conv3d_depthwise": ([node("Conv", ["x", "w"], group=4, strides=[1, 2, 1])],
                         {"x": [1, 4, 4, 5, 3]}, {"y": [1, 4, 3, 2, 2]},
                         {"w": rand(4, 1, 2, 2, 2)}, 11),
    "convtranspose": ([node("ConvTranspose", ["x", "w"], strides=[2, 2], pads=[1, 0, 0, 1],
                            output_padding=[1, 0])],
                      {"x": [1, 2, 3, 3]}, {"y": [1, 3, 7, 6]}, {"w": rand(2, 3, 3, 3)}, 11),
    "lppool": ([node("LpPool", ["x"], kernel_shape=[2, 2], p=3)], {"x": [1, 2, 4, 4]},
               {"y": [1, 2, 3, 3]}, {}, 11),
    "global_max_pool": ([node("GlobalMaxPool", ["x"])], {"x": [2, 3, 4, 5]}, {"y": [2, 3, 1, 1]},
                        {}, 13),
    "resize_linear": ([node("Resize", ["x", "", "s"], mode="linear")], {"x": [1, 2, 3, 4]},
                      {"y": [1, 2, 6, 6]}, {"s": np.array([1, 1, 2, 1.5], np.float32)}, 13),
    "upsample_nearest": ([node("Upsample", ["x", "s"])], {"x": [1, 2, 3, 4]},
                         {"y": [1, 2, 6, 8]}, {"s": np.array([1, 1, 2, 2], np.float32)}, 9),
    "depth_to_space_crd": ([node("DepthToSpace", ["x"], blocksize=2, mode="CRD")],
                           {"x": [1, 8, 2, 3]}, {"y": [1, 2, 4, 6]}, {}, 13),
    "space_to_depth": ([node("SpaceToDepth", ["x"], blocksize=2)], {"x": [1, 2, 4, 6]},
                       {"y": [1, 8, 2, 3]}, {}, 13),
    "batchnorm": ([node("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)],
                  {"x": [2, 3, 4, 4]}, {"y": [2, 3, 4, 4]},
                  {"s": rand(3), "b": rand(3, seed=2), "m": rand(3, seed=3),
                   "v": np.abs(rand(3, seed=4)) + 0.5}, 15),
    "maxpool": ([node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2],
                      pads=[1, 1, 1, 1], ceil_mode=1)],
                {"x": [1, 2, 8, 8]}, {"y": [1, 2, 5, 5]}, {}, 12),
    "avgpool_include_pad": ([node("AveragePool", ["x"], kernel_shape=[3, 3],
                                  pads=[1, 1, 1, 1], count_include_pad=1)],
                            {"x": [1, 2, 5, 5]}, {"y": [1, 2, 5, 5]}, {}, 11),
    "avgpool_exclude_pad": ([node("AveragePool", ["x"], kernel_shape=[2, 2], strides=[2, 2],
                                  pads=[1, 1, 1, 1])],
                            {"x": [1, 2, 5, 5]}, {"y": [1, 2, 3, 3]}, {}, 11),
    "global_avg_pool": ([node("GlobalAveragePool", ["x"])], {"x": [2, 3, 4, 5]},
                        {"y": [2, 3, 1, 1]}, {}, 13),
    "lrn": ([node("LRN", ["x"], size=3, alpha=0.01, beta=0.6, bias=1.5)],
            # onnx 1.23's reference LRN loops over range(N) instead of range(C): with
            # N == C it computes every channel (with N=1 only channel 0 is right).
            {"x": [5, 5, 3, 3]}, {"y": [5, 5, 3, 3]}, {}, 13),
    "pad_v9_attr": ([node("Pad", ["x"], pads=[0, 1, 2, 0, 0, 1], value=0.5)], X,
                    {"y": [2, 4, 7]}, {}, 9),
    "pad_v13_input": ([node("Pad", ["x", "p", "v"])], X, {"y": [3, 3, 6]},
                      {"p": np.array([1, 0, 1, 0, 0, 1], np.int64),
                       "v": np.float32(-2.0)}, 13),
    "clip_v9_attr": ([node("Clip", ["x"], min=-0.5, max=0.5)], X, Y3, {}, 9),
    "clip_v13_inputs": ([node("Clip", ["x", "lo", "hi"])], X, Y3,
                        {"lo": np.float32(-0.2), "hi": np.float32(0.7)}, 13),
    "clip_v13_min_only": ([node("Clip", ["x", "lo"])], X, Y3, {"lo": np.float32(0.1)}, 13),
    "dropout_v11": ([node("Dropout", ["x"], ratio=0.3)], X, Y3, {}, 11),
    "dropout_v13": ([node("Dropout", ["x", "r"])], X, Y3, {"r": np.float32(0.3)}, 13),
    "flatten": ([node("Flatten", ["x"], axis=2)], X, {"y": [6, 4]}, {}, 13),
    "reshape_zero_minus_one": ([node("Reshape", ["x", "s"])], X, {"y": [2, 12]},
                               {"s": np.array([0, -1], np.int64)}, 13),
    "transpose": ([node("Transpose", ["x"], perm=[2, 0, 1])], X, {"y": [4, 2, 3]}, {}, 13),
    "transpose_default": ([node("Transpose", ["x"])], X, {"y": [4, 3, 2]}, {}, 13),
    "concat": ([node("Concat", ["x", "c"], axis=1)], X, {"y": [2, 5, 4]},
               {"c": rand(2, 2, 4)}, 13),
    "unsqueeze_v11": ([node("Unsqueeze", ["x"], axes=[0, 3])], X, {"y": [1, 2, 3, 1, 4]},
                      {}, 11),
    "unsqueeze_v13": ([node("Unsqueeze", ["x", "a"])], X, {"y": [2, 3, 4, 1]},
                      {"a": np.array([-1], np.int64)}, 13),
    "squeeze_v11": ([node("Squeeze", ["x"], axes=[1])], {"x": [2, 1, 4]}, {"y": [2, 4]},
                    {}, 11),
    "squeeze_v13_noaxes": ([node("Squeeze", ["x"])], {"x": [2, 1, 4, 1]}, {"y": [2, 4]},
                           {}, 13),
    "constant_identity": ([node("Constant", [], ["c"], value=numpy_helper.from_array(
        rand(4), "c")), node("Identity", ["c"], ["ci"]), node("Add", ["x", "ci"])],
        X, Y3, {}, 13),
    "constant_of_shape_cast": (
        [node("ConstantOfShape", ["shp"], ["c"], value=numpy_helper.from_array(
            np.array([3], np.int64))),
         node("Cast", ["c"], ["cf"], to=F32), node("Mul", ["x", "cf"])],
        X, Y3, {"shp": np.array([3, 1], np.int64)}, 13),
    "constant_folded_sqrt": ([node("Sqrt", ["k"], ["r"]), node("Div", ["x", "r"])], X, Y3,
                             {"k": np.float32(16.0)}, 13),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_single_op(name):
    nodes, ins, outs, inits, opset = CASES[name]
    check(make(nodes, ins, outs, inits, opset))


def _family_test_ops() -> set[str]:
    """The op types the family test files (``tests/ops/test_ops_<family>.py``, and the
    frontend's ``tests/frontends/test_onnx_<family>.py``) convert: each lists them in
    ``ONNX_OPS``."""
    import importlib
    from pathlib import Path

    tests = Path(__file__).parents[1]
    files = [*(tests / "ops").glob("test_ops_*.py"), *(tests / "frontends").glob("test_onnx_*.py")]
    return {op for path in files
            for op in getattr(importlib.import_module(f"{path.parent.name}.{path.stem}"), "ONNX_OPS", ())}


def test_every_supported_op_has_a_case():
    covered = {n.op_type for nodes, *_ in CASES.values() for n in nodes}
    covered |= {"Erf", "Shape"}  # tested below (GELU pattern, shape folding)
    from ops.test_ops_elementwise import ONNX_OPS  # the element-wise family's own cases

    covered |= ONNX_OPS
    covered |= {  # tests/ops/test_ops_indexing.py
        "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Scatter",
        "Slice", "Split", "Expand", "Tile", "Trilu", "Range", "Size", "EyeLike", "OneHot",
        "NonZero"}
    covered |= _family_test_ops()
    covered |= {"GlobalLpPool"}  # onnx's reference has none: tests/ops/test_ops_conv.py
    # their node-suite cases (93 and 16): tests/frontends/test_onnx_node_suite.py
    covered |= {"Attention", "RotaryEmbedding"}
    # tests/runtime/test_data_dependent_shapes.py and tests/ops/test_ops_image.py
    covered |= {"Compress", "Unique", "NonMaxSuppression", "RoiAlign", "GridSample"}
    assert set(SUPPORTED_OPS) <= covered, set(SUPPORTED_OPS) - covered


def test_matmul_by_constant_becomes_dense_with_transposed_weight():
    nodes, ins, outs, inits, opset = CASES["matmul_const"]
    module = check(make(nodes, ins, outs, inits, opset))
    assert op_names(module) == ["nn.constant", "nn.dense"]
    (const,) = [op for op in module.walk() if isinstance(op, nn.ConstantOp)]
    np.testing.assert_array_equal(const.to_numpy(), inits["w"].T)
    nodes, ins, outs, inits, opset = CASES["matmul_batched"]
    assert "nn.matmul" in op_names(check(make(nodes, ins, outs, inits, opset)))


def test_float16_model():
    model = make([node("Add", ["x", "b"]), node("Relu", ["y"], ["z"])], X, {"z": [2, 3, 4]},
                 {"b": rand(4).astype(np.float16)}, elem=TensorProto.FLOAT16)
    module = check(model, dtype=np.float16, rtol=1e-3, atol=1e-3)
    assert "f16" in str(module)


# ---------------------------------------------------------------------------------------
# GELU subgraphs
# ---------------------------------------------------------------------------------------

C = {"sqrt2": np.float32(math.sqrt(2)), "inv_sqrt2": np.float32(1 / math.sqrt(2)),
     "one": np.float32(1.0), "half": np.float32(0.5)}


def _gelu_nodes(variant: str):
    scale = (node("Div", ["x", "sqrt2"], ["s"]) if variant != "mul_scale"
             else node("Mul", ["inv_sqrt2", "x"], ["s"]))
    common = [scale, node("Erf", ["s"], ["e"]), node("Add", ["one", "e"], ["p"])]
    if variant in ("pytorch", "mul_scale"):  # (x * (1 + erf)) * 0.5
        return common + [node("Mul", ["x", "p"], ["m"]), node("Mul", ["m", "half"])]
    if variant == "half_first":  # (x * 0.5) * (1 + erf)
        return [node("Mul", ["x", "half"], ["h"])] + common + [node("Mul", ["h", "p"])]
    return common + [node("Mul", ["p", "half"], ["q"]), node("Mul", ["x", "q"])]


@pytest.mark.parametrize("variant", ["pytorch", "mul_scale", "half_first", "half_inner"])
def test_erf_gelu_subgraph_becomes_one_gelu(variant):
    model = make(_gelu_nodes(variant), X, Y3, C, 13)
    assert op_names(check(model)) == ["nn.gelu"]


T = {**C, "k0": np.float32(math.sqrt(2 / math.pi)), "k1": np.float32(0.044715), "three": np.float32(3.0)}


def _tanh_gelu_nodes(variant: str, k1: str = "k1"):
    """GPT-2's ``gelu_new``: ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))``."""
    inner = [node("Pow", ["x", "three"], ["c"]), node("Mul", [k1, "c"], ["d"]),
             node("Add", ["x", "d"] if variant != "swapped" else ["d", "x"], ["a"]),
             node("Mul", ["a", "k0"], ["s"]), node("Tanh", ["s"], ["e"]), node("Add", ["e", "one"], ["p"])]
    if variant == "half_first":  # the TorchScript export: (0.5 * x) * (1 + tanh)
        return [node("Mul", ["half", "x"], ["h"])] + inner + [node("Mul", ["h", "p"])]
    return inner + [node("Mul", ["x", "p"], ["m"]), node("Mul", ["m", "half"])]


@pytest.mark.parametrize("variant", ["half_first", "half_last", "swapped"])
def test_tanh_gelu_subgraph_becomes_one_tanh_gelu(variant):
    module = check(make(_tanh_gelu_nodes(variant), X, Y3, T, 13))
    (gelu,) = [op for op in module.walk() if isinstance(op, nn.GeluOp)]
    assert op_names(module) == ["nn.gelu"] and gelu.approximate == "tanh"


def test_tanh_gelu_with_another_cubic_coefficient_stays_decomposed():
    module = import_onnx(make(_tanh_gelu_nodes("half_first", k1="half"), X, Y3, T, 13))
    assert "nn.gelu" not in op_names(module) and "nn.tanh" in op_names(module)


def test_lone_erf_is_nn_erf():
    model = make([node("Erf", ["x"])], X, Y3, {}, 13)
    assert op_names(import_onnx(model)) == ["nn.erf"]


def test_erf_gelu_with_extra_use_is_not_fused():
    # The Erf output is also a graph output: not a GELU pattern, so Erf stays on its own.
    nodes = _gelu_nodes("pytorch")
    model = make(nodes, X, {"y": [2, 3, 4], "e": [2, 3, 4]}, C, 13)
    names = op_names(import_onnx(model))
    assert "nn.erf" in names and "nn.gelu" not in names


# ---------------------------------------------------------------------------------------
# Errors, opsets, old models, shape folding
# ---------------------------------------------------------------------------------------


def test_unsupported_op_names_the_node():
    # ImageDecoder stays unconverted on purpose (registry.UNCONVERTED): its error says why.
    model = make([node("Cast", ["x"], ["r"], to=TensorProto.UINT8),
                  helper.make_node("ImageDecoder", ["r"], ["y"], name="decode", pixel_format="RGB")],
                 X, Y3, {}, 20)
    with pytest.raises(PartitaError, match=r"node 1 'decode' \(ImageDecoder\).*"
                                           "unsupported op type 'ImageDecoder': it decodes image files"):
        import_onnx(model)


@pytest.mark.parametrize("opset", [0, 1000])
def test_unsupported_opset(opset):
    model = make([node("Relu", ["x"])], X, Y3, {}, 13)
    model.opset_import[0].version = opset
    with pytest.raises(PartitaError, match=f"unsupported ONNX opset {opset}"):
        import_onnx(model)


def test_unsupported_attribute_and_element_type():
    model = make([node("Pad", ["x", "p"], mode="mirror")], X, {"y": [2, 3, 6]},
                 {"p": np.array([0, 0, 1, 0, 0, 1], np.int64)}, 13)
    with pytest.raises(PartitaError, match=r"\(Pad\).*mirror"):
        import_onnx(model)
    model = make([node("Relu", ["x"])], X, Y3, {}, 13, elem=TensorProto.COMPLEX64)
    with pytest.raises(PartitaError, match="graph input 'x'.*COMPLEX64.*INT64"):
        import_onnx(model)


def test_initializers_listed_as_inputs_old_style():
    w = rand(4, 5)
    graph = helper.make_graph(
        [node("MatMul", ["x", "w"])], "old",
        [helper.make_tensor_value_info("x", F32, [2, 4]),
         helper.make_tensor_value_info("w", F32, [4, 5])],
        [helper.make_tensor_value_info("y", F32, [2, 5])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=3)
    module = check(model)
    (fn,) = module.ops
    assert len(fn.function_type.inputs) == 1


def _shape_subgraph_model(batch):
    """x.view(x.size(0), x.size(1) * x.size(2)) as PyTorch exports it."""
    nodes = [node("Shape", ["x"], ["shp"]),
             node("Gather", ["shp", "i0"], ["d0"], axis=0),
             node("Gather", ["shp", "i1"], ["d1"], axis=0),
             node("Gather", ["shp", "i2"], ["d2"], axis=0),
             node("Mul", ["d1", "d2"], ["d12"]),
             node("Unsqueeze", ["d0", "ax"], ["u0"]),
             node("Unsqueeze", ["d12", "ax"], ["u1"]),
             node("Concat", ["u0", "u1"], ["new_shape"], axis=0),
             node("Reshape", ["x", "new_shape"])]
    inits = {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
             "i2": np.array(2, np.int64), "ax": np.array([0], np.int64)}
    return make(nodes, {"x": [batch, 3, 4]}, {"y": [batch, 12]}, inits, 13)


def test_shape_subgraph_folds_to_a_static_reshape():
    module = check(_shape_subgraph_model(2))
    assert op_names(module) == ["nn.reshape"]
    assert "tensor<2x12xf32>" in str(module)


def test_shape_subgraph_with_dynamic_batch_gives_a_dynamic_reshape():
    model = _shape_subgraph_model("batch")
    module = import_onnx(model)
    assert op_names(module) == ["nn.reshape"]
    assert "(tensor<?x3x4xf32>) -> tensor<?x12xf32>" in str(module)
    for b in (1, 3):
        x = rand(b, 3, 4)
        np.testing.assert_array_equal(run(module, x)[0],
                                      ReferenceEvaluator(model).run(None, {"x": x})[0])


def test_reshape_with_two_unknown_dims_uses_shape_references():
    model = make([node("Reshape", ["x", "s"])], {"x": ["a", "b", 4]}, {"y": ["a", "b", 2, 2]},
                 {"s": np.array([0, 0, 2, 2], np.int64)}, 13)
    module = check(model)
    (reshape,) = [op for op in module.walk() if isinstance(op, nn.ReshapeOp)]
    assert reshape.targets == (0, 1) and reshape.ref_axes == (0, 1)
    model = make([node("Reshape", ["x", "s"])], {"x": ["a", "b", 4]}, {"y": ["c", 2]},
                 {"s": np.array([-1, 2], np.int64)}, 13)
    module = check(model)


def test_a_convolutions_batch_is_its_inputs_for_a_later_reshape():
    """SegFormer / GLPN's efficient attention: tokens reshaped to an image, a strided
    convolution, and the result reshaped to ``[batch, C, -1]`` with the batch read from the
    tokens. ONNX shape inference names the convolution's batch afresh; the importer knows it
    is the input's, so the ``-1`` is the static 16 (not a run-time dim that would leave the
    layers after it with a dynamic channel count)."""
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "zero"], ["b"], axis=0),
             node("Unsqueeze", ["b", "zero1"], ["b1"]), node("Concat", ["b1", "c8", "hw"], ["t1"], axis=0),
             node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]), node("Reshape", ["xt", "t1"], ["img"]),
             node("Conv", ["img", "w", "bias"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
             node("Concat", ["b1", "c4", "minus1"], ["t2"], axis=0), node("Reshape", ["c", "t2"], ["y"])]
    inits = {"zero": np.array(0, np.int64), "zero1": np.array([0], np.int64), "c8": np.array([8], np.int64),
             "hw": np.array([4, 4], np.int64), "c4": np.array([4], np.int64), "minus1": np.array([-1], np.int64),
             "w": rand(4, 8, 3, 3), "bias": rand(4)}
    model = make(nodes, {"x": ["batch", 16, 8]}, {"y": None}, inits)
    module = check(model, batch=3)
    assert [str(op.result.type) for op in module.walk() if isinstance(op, nn.ReshapeOp)][-1] == "tensor<?x4x4xf32>"


# ---------------------------------------------------------------------------------------
# Example models
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 3])
def test_example_encoder(batch):
    model = onnx.load(str(EXAMPLES / "encoder.onnx"))
    module = check(model, batch=batch)
    names = op_names(module)
    assert names.count("nn.gelu") == 1 and "nn.erf" not in names
    assert names.count("nn.layer_norm") == 2
    assert names.count("nn.dense") == 6 and names.count("nn.matmul") == 2
    (fn,) = module.ops
    assert str(fn.function_type) == "(tensor<?x16x64xf32>) -> tensor<?x16x64xf32>"


@pytest.mark.parametrize("batch", [1, 3])
def test_example_cnn(batch):
    module = check(onnx.load(str(EXAMPLES / "cnn.onnx")), batch=batch)
    assert op_names(module).count("nn.conv2d") == 2


def test_example_models_are_small():
    for name in ("encoder.onnx", "cnn.onnx"):
        assert (EXAMPLES / name).stat().st_size < 1_000_000


# ---------------------------------------------------------------------------------------
# partita-import
# ---------------------------------------------------------------------------------------


def test_tool_writes_the_file(tmp_path, capsys):
    out = tmp_path / "cnn.mlir"
    assert import_model.main([str(EXAMPLES / "cnn.onnx"), "-o", str(out)]) == 0
    text = out.read_text()
    assert "func.func @main" in text and "nn.conv2d" in text
    assert not [p for p in tmp_path.iterdir() if p.name != "cnn.mlir"]  # no temp left
    # The output parses back and verifies.
    from partita.dialects import make_context
    from partita.ir import parse_module

    parse_module(text, make_context())


def test_tool_prints_to_stdout(capsys):
    assert import_model.main([str(EXAMPLES / "cnn.onnx")]) == 0
    assert "nn.global_avg_pool2d" in capsys.readouterr().out


def test_tool_refuses_to_overwrite_its_input(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    model.write_bytes((EXAMPLES / "cnn.onnx").read_bytes())
    assert import_model.main([str(model), "-o", str(model)]) == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    assert model.read_bytes() == (EXAMPLES / "cnn.onnx").read_bytes()


def test_tool_errors(tmp_path, capsys):
    assert import_model.main([str(tmp_path / "missing.onnx")]) == 1
    assert "error: cannot read" in capsys.readouterr().err
    junk = tmp_path / "junk.onnx"
    junk.write_text("func.func @main() { }")
    assert import_model.main([str(junk)]) == 1
    assert "not an ONNX model" in capsys.readouterr().err
    bad = tmp_path / "decoder.onnx"
    onnx.save(make([helper.make_node("ImageDecoder", ["x"], ["y"], name="decoder")], X, Y3, {}, 17), str(bad))
    out = tmp_path / "out.mlir"
    assert import_model.main([str(bad), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: node 0 'decoder' (ImageDecoder)") and "Traceback" not in err
    assert not out.exists()


def test_tool_console_script_exit_code(tmp_path):
    exe = Path(sys.executable).parent / "partita-import"
    proc = subprocess.run([str(exe), str(tmp_path / "nope.onnx")], capture_output=True,
                          text=True)
    assert proc.returncode == 1 and proc.stderr.startswith("error:")
    assert "Traceback" not in proc.stderr


def test_imported_ops_are_located_at_their_onnx_node(tmp_path: Path) -> None:
    from partita.ir import op_error

    path = tmp_path / "relu.onnx"
    node = helper.make_node("Relu", ["x"], ["y"], name="the_relu")
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    module = import_onnx(path)
    relu = next(op for op in module.walk() if op.name == "nn.relu")
    assert str(op_error(relu, "example")) == f"{path}: node 0 'the_relu' (Relu): error: 'nn.relu' op example"
