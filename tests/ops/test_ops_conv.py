"""Convolutions, transposed convolutions, pools and LRN: shape rules, NumPy references,
ONNX converters and native ``window`` kernels (grouped / depthwise / 1-d / 3-d included).

The kernels are checked without a GPU: the generated CUDA C is built for the host
(tests/support/cuda_host.py) and compared with the reference executor; NVRTC compiles the same
program to a cubin; end to end, ``partita.compile`` places every op in a kernel."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from support.cuda_host import HostKernels, have_gxx  # tests/support/cuda_host.py
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Block, Region
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import VerifyException

import partita
from partita.dialects import make_context, nn
from partita.ir import PartitaError
from partita.lowering.cuda.codegen import program_of
from partita.runtime.extern import kernel_handles
from partita.runtime.reference import run
from partita.transforms import get_all_passes

NP = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64,
      "i8": np.int8, "ui8": np.uint8}
TOL = {"f32": 1e-4, "f16": 4e-3, "bf16": 3e-2, "f64": 1e-10, "i8": 0, "ui8": 0}
DYN = nn.DYN


def _function(name: str, shapes, dtype: str, build) -> FuncOp:
    """``func.func @name`` over tensors of ``shapes`` whose body ``build(args)`` emits
    (it returns the ops; the last one's result is returned)."""
    element = nn.element_type_of(NP[dtype])
    block = Block(arg_types=[TensorType(element, s) for s in shapes])
    ops = build(*block.args)
    block.add_ops([*ops, ReturnOp(ops[-1].results[0])])
    return FuncOp(name, (block.arg_types, [ops[-1].results[0].type]), Region(block))


# Each case: (shapes, builder); ``?`` batches are run with batch 2.
CASES = {
    "conv1d_pad_stride": ([(DYN, 4, 11), (6, 4, 3)], lambda x, w: [
        nn.Conv1DOp(x, w, strides=(2,), padding=(1, 2), dilation=(2,))]),
    "conv2d_grouped": ([(2, 6, 9, 8), (4, 3, 3, 2)], lambda x, w: [
        nn.Conv2DOp(x, w, strides=(2, 1), padding=(1, 0, 2, 1), dilation=(1, 2), groups=2)]),
    "conv2d_depthwise_nhwc": ([(DYN, 7, 7, 5), (10, 3, 3, 1)], lambda x, w: [
        c := nn.Conv2DOp(x, w, padding=(1, 1, 1, 1), groups=5, data_layout="NHWC"),
        nn.AddOp(c, c)]),  # an element-wise epilogue
    "conv3d": ([(1, 2, 5, 6, 4), (3, 2, 2, 3, 2)], lambda x, w: [
        nn.Conv3DOp(x, w, strides=(1, 2, 1), padding=(0, 1, 1, 1, 0, 0))]),
    "conv2d_transpose_grouped": ([(DYN, 4, 3, 4), (4, 3, 3, 2)], lambda x, w: [
        nn.Conv2DTransposeOp(x, w, strides=(2, 3), padding=(1, 0, 0, 1), output_padding=(1, 0),
                             dilation=(1, 2), groups=2)]),
    "conv1d_transpose": ([(2, 3, 5), (3, 2, 4)], lambda x, w: [
        nn.Conv1DTransposeOp(x, w, strides=(3,), padding=(1, 1))]),
    "conv3d_transpose": ([(1, 2, 3, 2, 3), (2, 2, 2, 2, 2)], lambda x, w: [
        nn.Conv3DTransposeOp(x, w, strides=(2, 1, 2))]),
    "max_pool1d_ceil": ([(DYN, 3, 10)], lambda x: [
        nn.MaxPool1DOp(x, (3,), strides=(2,), padding=(1, 0), ceil_mode=True)]),
    "max_pool3d_dilated": ([(1, 2, 6, 5, 7)], lambda x: [
        nn.MaxPool3DOp(x, (2, 2, 3), strides=(2, 1, 2), dilation=(2, 1, 1),
                       padding=(1, 0, 1, 0, 1, 1))]),
    "max_pool2d_indices_nhwc": ([(DYN, 5, 6, 3)], lambda x: [
        nn.MaxPool2DIndicesOp(x, (2, 3), strides=(2, 2), padding=(1, 1, 0, 1), layout="NHWC")]),
    "max_pool3d_indices_column_major": ([(1, 2, 4, 5, 3)], lambda x: [
        nn.MaxPool3DIndicesOp(x, (2, 2, 2), dilation=(1, 2, 1), column_major=True)]),
    "avg_pool3d_include_pad_ceil": ([(1, 2, 5, 6, 5)], lambda x: [
        nn.AvgPool3DOp(x, (3, 2, 3), strides=(2, 2, 2), padding=(1, 1, 1, 1, 0, 1),
                       ceil_mode=True, count_include_pad=True)]),
    "avg_pool1d_exclude_pad": ([(2, 3, 8)], lambda x: [
        nn.AvgPool1DOp(x, (3,), padding=(1, 1))]),
    "lp_pool2d_p3_nhwc": ([(2, 6, 5, 3)], lambda x: [
        nn.LpPool2DOp(x, (2, 3), p=3.0, strides=(2, 1), padding=(1, 1, 0, 0), layout="NHWC")]),
    "lp_pool1d_p2": ([(2, 3, 7)], lambda x: [nn.LpPool1DOp(x, (3,), p=2.0)]),
    "lrn": ([(DYN, 7, 3, 2)], lambda x: [nn.LRNOp(x, size=4, alpha=0.02, beta=0.7, bias=1.3)]),
}


# Max pooling also takes integers (its padding is the type's lowest value).
INT_CASES = {name: CASES[name] for name in ("max_pool1d_ceil", "max_pool3d_dilated",
                                            "max_pool2d_indices_nhwc")}


def _module(dtype: str, cases=CASES) -> ModuleOp:
    return ModuleOp([_function(f"{name}_{dtype}", shapes, dtype, build)
                     for name, (shapes, build) in cases.items()])


def _inputs(function: FuncOp, dtype: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    shapes = [tuple(2 if d == DYN else d for d in t.get_shape()) for t in function.function_type.inputs]
    if np.issubdtype(NP[dtype], np.integer):
        info = np.iinfo(NP[dtype])
        return [rng.integers(info.min, info.max, s, endpoint=True).astype(NP[dtype]) for s in shapes]
    return [rng.standard_normal(s).astype(NP[dtype]) for s in shapes]


@pytest.fixture(scope="module", params=["f32", "f16", "f64", "i8", "ui8"])
def lowered(request, kernel_cache):
    dtype = request.param
    cases = INT_CASES if dtype in ("i8", "ui8") else CASES
    cache = kernel_cache
    ctx = make_context()
    fused = _module(dtype, cases)
    PassPipeline.parse_spec(get_all_passes(), "fuse-native-kernels").apply(ctx, fused)
    module = _module(dtype, cases)
    pipeline = f'fuse-native-kernels,cuda-codegen{{arch=sm_90 cache-dir="{cache}"}},lower-extern-calls'
    PassPipeline.parse_spec(get_all_passes(), pipeline).apply(ctx, module)
    return dtype, module, fused, cases


def test_every_case_becomes_one_window_kernel(lowered) -> None:
    dtype, module, _, cases = lowered
    handles = kernel_handles(module)
    assert sorted(handles) == sorted(f"{name}_{dtype}_fused_0" for name in cases)
    for handle in handles.values():
        assert type(handle.record).__name__ == "WindowRecord"


def test_kernels_compute_the_reference_semantics(lowered, tmp_path) -> None:
    """Every kernel, built for the host, against the reference executor."""
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    dtype, module, fused, cases = lowered
    handles = kernel_handles(module)
    records = [h.record for h in handles.values()]
    host = HostKernels(program_of(fused).code, records, tmp_path)
    originals = {f.sym_name.data: f for f in _module(dtype, cases).ops}
    for k, name in enumerate(cases):
        entry = f"{name}_{dtype}"
        args = _inputs(originals[entry], dtype, k)
        (expected,) = run(ModuleOp([originals[entry].clone()]), *args, entry=entry)
        rec = handles[f"{entry}_fused_0"].record
        out = np.zeros(expected.shape, expected.dtype)
        grid, block = rec.geometry(out.shape)
        host.launch(rec, (min(grid[0], 2), 1, 1), block, args, out)
        np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64),
                                   rtol=TOL[dtype], atol=TOL[dtype], err_msg=name)


# -- references against onnx's ---------------------------------------------------------

def _onnx_model(node, inputs, output, inits=(), opset=17, elem=TensorProto.FLOAT):
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, elem, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", elem, output)], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _weight(name, shape, seed=3):
    rng = np.random.default_rng(seed)
    return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


MODELS = {
    "conv1d_depthwise_same_lower": (
        helper.make_node("Conv", ["x", "w", "b"], ["y"], group=4, auto_pad="SAME_LOWER",
                         strides=[2]),
        [("x", ["N", 4, 9])], ["N", 8, 5], [_weight("w", (8, 1, 4)), _weight("b", (8,))]),
    "conv2d_mobilenet_depthwise": (
        helper.make_node("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1], strides=[2, 2]),
        [("x", ["N", 8, 10, 10])], ["N", 8, 5, 5], [_weight("w", (8, 1, 3, 3))]),
    "conv3d_grouped_dilated": (
        helper.make_node("Conv", ["x", "w"], ["y"], group=2, dilations=[1, 2, 1],
                         pads=[0, 1, 0, 1, 2, 1]),
        [("x", [1, 4, 4, 6, 5])], [1, 6, 3, 5, 7], [_weight("w", (6, 2, 2, 2, 2))]),
    "convtranspose_pads_dilations": (
        helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[3, 2],
                         pads=[1, 0, 0, 1], dilations=[1, 2]),
        [("x", [1, 4, 3, 4])], [1, 3, 8, 10], [_weight("w", (4, 3, 3, 3))]),
    "convtranspose1d_same_upper": (
        helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2], auto_pad="SAME_UPPER"),
        [("x", ["N", 2, 5])], ["N", 3, 10], [_weight("w", (2, 3, 3))]),
    "maxpool3d_same_upper": (
        helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 3, 2], strides=[2, 2, 2],
                         auto_pad="SAME_UPPER"),
        [("x", ["N", 2, 5, 6, 3])], ["N", 2, 3, 3, 2], []),
    "averagepool1d_ceil": (
        helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3], strides=[2],
                         ceil_mode=1, pads=[1, 1]),
        [("x", [2, 3, 8])], [2, 3, 5], []),
    "lppool3d": (
        helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2, 2], p=3),
        [("x", [1, 2, 3, 4, 3])], [1, 2, 2, 3, 2], []),
    "globalmaxpool3d": (helper.make_node("GlobalMaxPool", ["x"], ["y"]),
                        [("x", ["N", 3, 2, 4, 3])], ["N", 3, 1, 1, 1], []),
    "globalaveragepool1d": (helper.make_node("GlobalAveragePool", ["x"], ["y"]),
                            [("x", [2, 3, 7])], [2, 3, 1], []),
    "lrn": (helper.make_node("LRN", ["x"], ["y"], size=3, alpha=0.01, beta=0.6, bias=1.5),
            [("x", ["N", 5, 3, 3])], ["N", 5, 3, 3], []),
}


def _feeds(model, batch=2, seed=0):
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    return {i.name: rng.standard_normal([d.dim_value if d.HasField("dim_value") else batch
                                         for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input if i.name not in inits}


def _expected(name, model, feeds):
    if name == "lrn":  # onnx's reference LRN is only right for N == C (see test_onnx_import)
        x = feeds["x"]
        sq = np.pad(x * x, [(0, 0), (1, 1), (0, 0), (0, 0)])
        total = sq[:, :-2] + sq[:, 1:-1] + sq[:, 2:]
        return [x / (1.5 + 0.01 / 3 * total) ** 0.6]
    if name == "globalmaxpool3d":  # onnx's reference keeps a wrong rank beyond 2-d
        return [feeds["x"].max(axis=(2, 3, 4), keepdims=True)]
    return ReferenceEvaluator(model).run(None, feeds)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_compiles_into_kernels_and_matches_onnx(name: str, kernel_cache) -> None:
    node, inputs, output, inits = MODELS[name]
    model = _onnx_model(node, inputs, output, inits)
    exe = partita.compile(model, cache_dir=kernel_cache)
    host = [r for r in exe.report().rows if r.symbol.startswith("(")]
    assert not host, f"ops left in the host program: {host}"
    for batch in (1, 3) if any(isinstance(d, str) for _, s in inputs for d in s) else (2,):
        feeds = _feeds(model, batch)
        (got,) = exe.run(**feeds)
        (want,) = _expected(name, model, feeds)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_global_lp_pool_matches_numpy() -> None:
    model = _onnx_model(helper.make_node("GlobalLpPool", ["x"], ["y"], p=3),
                        [("x", [2, 3, 4, 5])], [2, 3, 1, 1])
    exe = partita.compile(model, targets=("llvm",))
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
    (got,) = exe.run(x)
    want = (np.abs(x) ** 3).sum(axis=(2, 3), keepdims=True) ** (1 / 3)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_plain_conv_still_goes_to_cutlass(kernel_cache) -> None:
    """The bundled CNN compiles completely, with its convolutions on CUTLASS."""
    from pathlib import Path

    model = onnx.load(Path(__file__).parents[2] / "examples" / "cnn.onnx")
    report = partita.compile(model, cache_dir=kernel_cache).report()
    assert not [r for r in report.rows if r.symbol.startswith("(in @")]  # no host step (views are aliases)
    assert any(r.target == "cutlass" and "nn.conv2d" in r.ops for r in report.rows)


# -- verifier and converter errors -------------------------------------------------------

def test_shape_rules() -> None:
    assert nn.infer_conv_shape((1, 4, 9, 9, 9), (8, 2, 3, 3, 3), (2, 2, 2), (1,) * 6, (1, 1, 1),
                               2, "NCDHW", "OIDHW", 3) == (1, 8, 5, 5, 5)
    assert nn.infer_conv_transpose_shape((1, 4, 3, 3), (4, 3, 3, 3), (2, 2), (1, 0, 0, 1),
                                         (1, 0), (1, 1), 2, 2) == (1, 6, 7, 6)
    assert nn.infer_pool_shape((DYN, 3, 10), (3,), (2,), (1, 0), (1,), "NCW", True, 1) == (DYN, 3, 5)
    with pytest.raises(VerifyException, match="groups 3 does not divide input channels 4"):
        nn.infer_conv_shape((1, 4, 9), (6, 1, 3), (1,), (0, 0), (1,), 3, "NCW", "OIW", 1)
    with pytest.raises(VerifyException, match="padding .* must be smaller than the window"):
        nn.infer_pool_shape((1, 3, 10), (2,), (1,), (2, 0), (1,), "NCW", False, 1)


@pytest.mark.parametrize("node, inputs, message", [
    (helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], auto_pad="SAME"),
     [("x", [1, 1, 4, 4])], "unsupported auto_pad 'SAME'"),
    (helper.make_node("Conv", ["x", "w"], ["y"]), [("x", [1, 1, 4, 4, 4, 4]), ("w", [1, 1, 2, 2, 2, 2])],
     "Conv over 4 spatial dimensions is not supported"),
    (helper.make_node("GlobalMaxPool", ["x"], ["y"]), [("x", [1, 2, "H", 3])],
     "GlobalMaxPool needs static spatial dimensions"),
])
def test_unsupported_nodes_are_located_errors(node, inputs, message) -> None:
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                            for n, s in inputs],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                               for o in node.output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(PartitaError, match=message):
        partita.compile(model)


def _mobilenet_block(elem=TensorProto.FLOAT, dtype=np.float32) -> onnx.ModelProto:
    """Stem conv, a depthwise-separable block (depthwise 3x3 + ReLU6, pointwise 1x1), a
    grouped conv, global pooling and a classifier; dynamic batch."""
    rng = np.random.default_rng(7)

    def w(name, *shape):
        return onnx.numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(dtype), name)

    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c0"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1", "b1"], ["c1"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["c1", "lo", "hi"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("Conv", ["c2", "w3"], ["c3"], group=4, pads=[0, 1, 2, 1]),
        helper.make_node("GlobalAveragePool", ["c3"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "w4", "b4"], ["y"], transB=1),
    ]
    inits = [w("w0", 8, 3, 3, 3), w("b0", 8), w("w1", 8, 1, 3, 3), w("b1", 8), w("w2", 16, 8, 1, 1),
             w("w3", 16, 4, 3, 3), w("w4", 5, 16), w("b4", 5),
             onnx.numpy_helper.from_array(np.array(0, dtype), "lo"),
             onnx.numpy_helper.from_array(np.array(6, dtype), "hi")]
    graph = helper.make_graph(nodes, "mobilenet_block",
                              [helper.make_tensor_value_info("x", elem, ["N", 3, 16, 16])],
                              [helper.make_tensor_value_info("y", elem, ["N", 5])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_depthwise_separable_cnn_runs_every_op_in_a_kernel(dtype: str, kernel_cache) -> None:
    elem, np_dtype = {"f32": (TensorProto.FLOAT, np.float32),
                      "f16": (TensorProto.FLOAT16, np.float16)}[dtype]
    model = _mobilenet_block(elem, np_dtype)
    exe = partita.compile(model, cache_dir=kernel_cache)
    rows = exe.report().rows
    assert not [r for r in rows if r.symbol.startswith("(in @")], exe.report().table()  # no host step
    assert any("nn.conv2d" in r.ops and r.target == "cuda" for r in rows)  # the grouped ones
    reference = ReferenceEvaluator(_mobilenet_block())
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
        (got,) = exe.run(x.astype(np_dtype))
        (want,) = reference.run(None, {"x": x})
        tol = 1e-4 if dtype == "f32" else 3e-2
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("partitioner", ["eager", "collage"])
def test_resnet_shortcuts_are_convolution_epilogues(partitioner: str, kernel_cache) -> None:
    """Each ResNet block's ``relu(bn(conv(...)) + shortcut)`` is its second convolution's
    epilogue (CUTLASS's broadcast convolution: bias vector, the shortcut as C, ReLU), the
    identity shortcuts and the strided block's projection alike: no add runs in a kernel of
    its own, and a forward launches 11 kernels (5 convolutions + 3 broadcast ones, the head
    GEMM, the input transpose, the pooling). Numerics: tests/models/test_models.py."""
    from support import model_zoo  # tests/support/model_zoo.py

    exe = partita.compile(model_zoo.resnet(np.float16), partitioner=partitioner, cache_dir=kernel_cache)
    rows = [r for r in exe.report().rows if r.kernel]
    fused = [r for r in rows if r.kernel.endswith("_bias_residual_relu")]
    assert sum(r.calls for r in fused) == 3 and all(r.target == "cutlass" for r in fused)
    assert all(r.ops == ("nn.conv2d", "nn.bias_add", "nn.add", "nn.relu") for r in fused), exe.report().table()
    assert not [r for r in rows if "nn.add" in r.ops and r.target != "cutlass"], exe.report().table()
    assert sum(r.calls for r in rows) == 11, exe.report().table()


@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_indices_output(storage_order: int, kernel_cache) -> None:
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 2], strides=[2, 1],
                            pads=[1, 0, 1, 1], storage_order=storage_order)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 5, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    exe = partita.compile(model, cache_dir=kernel_cache)
    assert not [r for r in exe.report().rows if r.symbol.startswith("(")]
    x = np.random.default_rng(1).standard_normal((2, 2, 5, 4)).astype(np.float32)
    got = exe.run(x)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


# Images of any size: the batch and spatial dims run-time, as torchvision's detectors and
# segmenters are exported (dynamic height and width).
ANY_SIZE = """
func.func @main(%x: tensor<?x3x?x?xf32>, %w: tensor<4x3x3x3xf32>, %n: tensor<?x?x?x5xf32>, %dw: tensor<10x3x3x1xf32>) -> (tensor<?x4x?x?xf32>, tensor<?x3x?x?xf32>, tensor<?x3x?x?xf32>, tensor<?x?x?x10xf32>) {
  %0 = nn.conv2d %x, %w {strides = array<i64: 2, 1>, padding = array<i64: 1, 0, 2, 1>, dilation = array<i64: 1, 2>} : (tensor<?x3x?x?xf32>, tensor<4x3x3x3xf32>) -> tensor<?x4x?x?xf32>
  %1 = nn.max_pool2d %x {pool_size = array<i64: 3, 2>, strides = array<i64: 2, 2>, padding = array<i64: 1, 0, 0, 1>, ceil_mode = true} : (tensor<?x3x?x?xf32>) -> tensor<?x3x?x?xf32>
  %2 = nn.avg_pool2d %x {pool_size = array<i64: 2, 3>, strides = array<i64: 1, 2>, padding = array<i64: 1, 1, 1, 1>, count_include_pad = true} : (tensor<?x3x?x?xf32>) -> tensor<?x3x?x?xf32>
  %3 = nn.conv2d %n, %dw {padding = array<i64: 1, 1, 1, 1>, data_layout = "NHWC", kernel_layout = "OHWI", groups = 5 : i64} : (tensor<?x?x?x5xf32>, tensor<10x3x3x1xf32>) -> tensor<?x?x?x10xf32>
  func.return %0, %1, %2, %3 : tensor<?x4x?x?xf32>, tensor<?x3x?x?xf32>, tensor<?x3x?x?xf32>, tensor<?x?x?x10xf32>
}
"""

ROI_ALIGN_ANY_SIZE = """
func.func @main(%x: tensor<?x?x?x?xf32>, %rois: tensor<?x4xf32>, %b: tensor<?xi64>) -> tensor<?x?x2x2xf32> {
  %0 = nn.roi_align %x, %rois, %b {output_height = 2 : i64, output_width = 2 : i64, spatial_scale = 0.5 : f64, sampling_ratio = 2 : i64} : (tensor<?x?x?x?xf32>, tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x?x2x2xf32>
  func.return %0 : tensor<?x?x2x2xf32>
}
"""


def test_windows_over_images_of_any_size_on_the_host(tmp_path) -> None:
    """Convolutions (strided, padded, dilated; depthwise NHWC), max pooling with
    ``ceil_mode``, average pooling counting the padding, and RoIAlign over regions past the
    image's edges, read the image's height and width as run-time dims: each kernel, built
    for the host, against the reference at two sizes."""
    from support.kernel_check import build_for_host, check_kernels, fuse, fused_functions, launch_beside_reference

    module, roi_module = fuse(ANY_SIZE), fuse(ROI_ALIGN_ANY_SIZE)
    for size in (7, 12):
        (tmp_path / str(size)).mkdir()
        anchors = check_kernels(module, tmp_path / str(size), dynamic=size)
        assert sorted(anchors) == ["nn.avg_pool2d", "nn.conv2d", "nn.conv2d", "nn.max_pool2d"]
        (tmp_path / str(size) / "roi").mkdir()
        _, records, host = build_for_host(roi_module, tmp_path / str(size) / "roi")
        (name, function), = fused_functions(roi_module).items()
        rng = np.random.default_rng(size)
        start = rng.uniform(-4, 2 * size, (6, 2))
        rois = np.concatenate([start, start + rng.uniform(0.5, size, (6, 2))], axis=1).astype(np.float32)
        args = [rng.standard_normal((2, 3, size, size + 3)).astype(np.float32), rois, rng.integers(0, 2, 6)]
        out, expected = launch_beside_reference(function, name, records[name], host, args)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_a_cnn_of_any_image_size_runs_its_convolutions_on_the_device(kernel_cache) -> None:
    """A CNN exported with a dynamic height and width: its convolutions and pooling are
    kernels (a CUTLASS implicit GEMM where the channels align, the native direct convolution
    for three input channels), the same compile runs two image sizes as onnxruntime does,
    and on the recording driver the CUTLASS launch takes each size's H, W, P and Q."""
    import onnxruntime as ort
    from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py

    from partita.runtime.cuda import CudaDevice
    from partita.runtime.plan import Runtime

    rng = np.random.default_rng(0)
    weights = [onnx.numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
               for n, s in (("w1", (8, 3, 3, 3)), ("w2", (16, 8, 3, 3)), ("b2", (16,)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    exe = partita.compile(model, cache_dir=kernel_cache)
    assert exe.runtime.plan.host_ops == []
    assert sorted(row.target for row in exe.report().rows if "nn.conv2d" in row.ops) == ["cuda", "cutlass"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    runtime = Runtime(exe.module, CudaDevice(driver=RecordingDriver()), graphs=False)
    for h, w in ((16, 20), (9, 13)):
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        np.testing.assert_allclose(exe.run(x)[0], session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-4)
        runtime.run(x)
        (bound,) = [b for b in runtime._bound.values() if b.signature[0][0] == (1, 3, h, w)]
        (conv,) = [s for s in bound.steps if "fprop" in getattr(getattr(s, "function", None), "name", "")]
        pooled = (h // 2, w // 2)
        out = ((pooled[0] - 1) // 2 + 1, (pooled[1] - 1) // 2 + 1)
        # N, H, W, C, K, R, S, P, Q, the pads, strides and dilations
        assert [v for kind, v in conv.args if kind == "int"][:9] == [1, *pooled, 8, 16, 3, 3, *out]
    runtime.close()
