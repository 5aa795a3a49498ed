"""AffineGrid, Col2Im, ReverseSequence and MaxUnpool: native kernels built for the host
(equal to the references, op by op), the results against onnxruntime, the run-time
parameters bound by ``nn.dyn``, and end to end through ``partita.compile``."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.cuda_host import have_gxx  # tests/support/cuda_host.py

import partita
from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError

ONNX_OPS = ("AffineGrid", "Col2Im", "ReverseSequence", "MaxUnpool")

F32, F16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64


def _model(node: onnx.NodeProto, inputs: list[tuple[str, int, list]], opset: int,
           initializers: dict[str, np.ndarray] | None = None) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(node.output[0], inputs[0][1], None)],
        [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _host(model: onnx.ModelProto, inputs: list[np.ndarray], tmp_path) -> np.ndarray:
    """The model's output from its kernels built for the host (each equal to its reference
    function, the whole to the reference on the unfused module), with no host step left."""
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    from support.kernel_harness import run_host_kernels  # tests/support/kernel_harness.py

    (got,), left = run_host_kernels(model, inputs, tmp_path)
    assert not left, left  # every op is a kernel
    return got


# -- AffineGrid --------------------------------------------------------------------------

AFFINE_GRID = [([2, 3, 5, 6], 0), ([2, 3, 5, 6], 1), ([2, 1, 3, 4, 5], 0), ([2, 1, 3, 4, 5], 1),
               ([2, 1, 1, 4], 0), ([2, 1, 1, 4], 1), ([2, 1, 1, 1, 3], 1)]


def _affine_grid_model(size: list[int], align: int, elem: int = F32, runtime: bool = False) -> onnx.ModelProto:
    k = len(size) - 2
    node = helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align)
    inputs = [("theta", elem, [size[0], k, k + 1])] + ([("size", I64, [len(size)])] if runtime else [])
    return _model(node, inputs, 20, None if runtime else {"size": np.array(size, np.int64)})


def _theta(size: list[int], dtype=np.float32) -> np.ndarray:
    k = len(size) - 2
    return np.random.default_rng(len(size)).uniform(-2, 2, (size[0], k, k + 1)).astype(dtype)


@pytest.mark.parametrize("size, align", AFFINE_GRID, ids=[f"{len(s) - 2}d-{s[-1]}-align{a}" for s, a in AFFINE_GRID])
def test_affine_grid_kernel_against_onnxruntime(size, align, tmp_path) -> None:
    """2-D and 3-D, both corner conventions, axes of one cell (with align_corners,
    onnxruntime's 1: onnx's reference takes -1, PyTorch 0)."""
    model = _affine_grid_model(size, align)
    theta = _theta(size)
    got = _host(model, [theta], tmp_path)
    assert got.shape == (size[0], *size[2:], len(size) - 2)
    np.testing.assert_allclose(got, _ort(model, {"theta": theta}), rtol=1e-6, atol=1e-6)


def test_affine_grid_f16_kernel(tmp_path) -> None:
    size = [2, 3, 4, 7]
    theta = _theta(size, np.float16)
    got = _host(_affine_grid_model(size, 0, F16), [theta], tmp_path)
    want = _ort(_affine_grid_model(size, 0), {"theta": theta.astype(np.float32)})
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=2e-3)


def test_affine_grid_size_at_run_time_end_to_end(tmp_path) -> None:
    """``size`` a graph input (the node suite's form): ``nn.dyn`` binds the grid's shape
    from its values, each run its own."""
    model = _affine_grid_model([2, 3, 5, 6], 1, runtime=True)
    exe = partita.compile(model, cache_dir=tmp_path)
    for size in ([2, 3, 5, 6], [2, 1, 2, 9]):
        theta = _theta(size)
        feeds = {"theta": theta, "size": np.array(size, np.int64)}
        (got,) = exe.run(theta, feeds["size"])
        np.testing.assert_allclose(got, _ort(model, feeds), rtol=1e-6, atol=1e-6)
    with pytest.raises(PartitaError, match="theta's batch"):
        exe.run(theta, np.array([3, 1, 2, 9], np.int64))


def test_affine_grid_feeding_grid_sample_end_to_end(tmp_path) -> None:
    nodes = [helper.make_node("AffineGrid", ["theta", "size"], ["grid"]),
             helper.make_node("GridSample", ["x", "grid"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F32, [2, 3, 6, 5]),
                     helper.make_tensor_value_info("theta", F32, [2, 2, 3])],
        [helper.make_tensor_value_info("y", F32, None)], [numpy_helper.from_array(np.array([2, 3, 4, 4]), "size")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    exe = partita.compile(model, cache_dir=tmp_path)
    assert not [r for r in exe.report().rows if r.symbol.startswith("(")]  # kernels, no host step
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    theta = rng.uniform(-1, 1, (2, 2, 3)).astype(np.float32)
    (got,) = exe.run(x, theta)
    np.testing.assert_allclose(got, _ort(model, {"x": x, "theta": theta}), rtol=1e-5, atol=1e-5)


# -- Col2Im ------------------------------------------------------------------------------

COL2IM = [
    ([5, 5], [2, 2], {}),
    ([5, 5], [3, 3], {"strides": [2, 2]}),
    ([5, 5], [1, 5], {"pads": [0, 1, 0, 1]}),
    ([6, 6], [2, 2], {"dilations": [1, 5]}),
    ([7, 6], [3, 2], {"strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [2, 1]}),
    ([3, 4, 5], [1, 2, 3], {"pads": [0, 1, 1, 0, 0, 1]}),
    ([9], [3], {"strides": [3]}),  # blocks that do not overlap
]


def _col2im_case(image, block, attrs, elem=F32, runtime=False):
    rank = len(image)
    strides = attrs.get("strides", [1] * rank)
    pads = attrs.get("pads", [0] * 2 * rank)
    dil = attrs.get("dilations", [1] * rank)
    blocks = [(image[k] + pads[k] + pads[rank + k] - dil[k] * (block[k] - 1) - 1) // strides[k] + 1
              for k in range(rank)]
    shape = [2, 3 * int(np.prod(block)), int(np.prod(blocks))]
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)
    params = {"image": np.array(image, np.int64), "block": np.array(block, np.int64)}
    inputs = [("x", elem, shape)] + ([("image", I64, [rank]), ("block", I64, [rank])] if runtime else [])
    model = _model(node, inputs, 18, None if runtime else params)
    x = np.random.default_rng(rank).standard_normal(shape)
    return model, x, params


@pytest.mark.parametrize("image, block, attrs", COL2IM, ids=[f"{len(i)}d-{k}" for k, (i, _, _) in enumerate(COL2IM)])
def test_col2im_kernel_against_onnxruntime(image, block, attrs, tmp_path) -> None:
    """Overlapping and disjoint blocks, strides, asymmetric pads, dilations, 1-D to 3-D."""
    model, x, _ = _col2im_case(image, block, attrs)
    x = x.astype(np.float32)
    got = _host(model, [x], tmp_path)
    assert got.shape == (2, 3, *image)
    np.testing.assert_allclose(got, _ort(model, {"x": x}), rtol=1e-6, atol=1e-6)


def test_col2im_f16_kernel(tmp_path) -> None:
    image, block, attrs = COL2IM[4]
    model, x, _ = _col2im_case(image, block, attrs, F16)
    got = _host(model, [x.astype(np.float16)], tmp_path)
    f32, _, _ = _col2im_case(image, block, attrs)
    want = _ort(f32, {"x": x.astype(np.float16).astype(np.float32)})
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=2e-3)


def test_col2im_shapes_at_run_time_end_to_end(tmp_path) -> None:
    """image_shape and block_shape graph inputs (the node suite's form): bound by ``nn.dyn``."""
    image, block, attrs = COL2IM[1]
    model, x, params = _col2im_case(image, block, attrs, runtime=True)
    x = x.astype(np.float32)
    exe = partita.compile(model, cache_dir=tmp_path)
    (got,) = exe.run(x, params["image"], params["block"])
    np.testing.assert_allclose(got, _ort(model, {"x": x, **params}), rtol=1e-6, atol=1e-6)
    with pytest.raises(PartitaError, match="sliding blocks"):
        exe.run(x, np.array([7, 7], np.int64), params["block"])


def test_col2im_constant_shapes_end_to_end(tmp_path) -> None:
    model, x, _ = _col2im_case(*COL2IM[3])
    x = x.astype(np.float32)
    exe = partita.compile(model, cache_dir=tmp_path)
    assert not [r for r in exe.report().rows if r.symbol.startswith("(")]  # a kernel
    (got,) = exe.run(x)
    np.testing.assert_allclose(got, _ort(model, {"x": x}), rtol=1e-6, atol=1e-6)


# -- ReverseSequence ---------------------------------------------------------------------

REVERSE = [((4, 3, 2), 1, 0, [4, 1, 2]), ((3, 5), 0, 1, [1, 5, 3]), ((2, 6, 3, 2), 0, 1, [6, 6])]


def _reverse_model(shape, batch_axis, time_axis, elem=F32) -> onnx.ModelProto:
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=batch_axis, time_axis=time_axis)
    return _model(node, [("x", elem, list(shape)), ("lens", I64, [shape[batch_axis]])], 10)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("shape, batch_axis, time_axis, lens", REVERSE,
                         ids=[f"batch{b}-time{t}-rank{len(s)}" for s, b, t, _ in REVERSE])
def test_reverse_sequence_kernel_against_onnxruntime(shape, batch_axis, time_axis, lens, dtype, tmp_path) -> None:
    """Either axis order, lengths of 1 (unchanged) and of the whole axis, f16 moved exactly."""
    model = _reverse_model(shape, batch_axis, time_axis, F16 if dtype == np.float16 else F32)
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(dtype)
    lens = np.array(lens, np.int64)
    got = _host(model, [x, lens], tmp_path)
    np.testing.assert_array_equal(got, _ort(model, {"x": x, "lens": lens}))


def test_reverse_sequence_end_to_end(tmp_path) -> None:
    model = _reverse_model((5, 3, 4), 1, 0)
    exe = partita.compile(model, cache_dir=tmp_path)
    assert not [r for r in exe.report().rows if r.symbol.startswith("(")]  # a kernel
    x = np.arange(60, dtype=np.float32).reshape(5, 3, 4)
    for lens in ([5, 1, 3], [1, 1, 1]):
        lens = np.array(lens, np.int64)
        (got,) = exe.run(x, lens)
        np.testing.assert_array_equal(got, _ort(model, {"x": x, "lens": lens}))
    with pytest.raises(PartitaError, match=r"sequence length is outside \[0, 5\]"):
        exe.run(x, np.array([6, 1, 1], np.int64))


# -- MaxUnpool ---------------------------------------------------------------------------


def _unpool_model(shape, kernel, output_shape=None, runtime=False, **attrs) -> onnx.ModelProto:
    node = helper.make_node("MaxUnpool", ["x", "i"] + (["shape"] if output_shape is not None else []), ["y"],
                            kernel_shape=kernel, **attrs)
    inputs = [("x", F32, list(shape)), ("i", I64, list(shape))]
    inits = None
    if output_shape is not None:
        if runtime:
            inputs.append(("shape", I64, [len(output_shape)]))
        else:
            inits = {"shape": np.array(output_shape, np.int64)}
    return _model(node, inputs, 22, inits)


def _pooled(spatial, kernel, strides, seed: int = 0):
    """A MaxPool's values and indices over a random ``[2, 3, *spatial]`` input."""
    pool = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=kernel, strides=strides)
    graph = helper.make_graph([pool], "p", [helper.make_tensor_value_info("x", F32, [2, 3, *spatial])],
                              [helper.make_tensor_value_info("y", F32, None), helper.make_tensor_value_info("i", I64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    import onnxruntime as ort

    x = np.random.default_rng(seed).standard_normal((2, 3, *spatial)).astype(np.float32)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})


UNPOOL = [((4, 6), [2, 2], [2, 2], None), ((4, 6), [2, 2], [2, 2], [2, 3, 4, 6]),
          ((6, 6), [3, 3], [1, 1], None),  # overlapping windows: repeated indices
          ((4, 4, 6), [2, 2, 3], [2, 2, 3], None), ((9,), [3], [2], [2, 3, 9])]


@pytest.mark.parametrize("spatial, kernel, strides, output_shape", UNPOOL,
                         ids=[f"{len(s)}d-{k}" for k, (s, *_) in enumerate(UNPOOL)])
def test_max_unpool_kernel_against_onnxruntime(spatial, kernel, strides, output_shape, tmp_path) -> None:
    """MaxPool's indices unpooled into the default shape (given as output_shape too),
    overlapping windows' repeated indices included."""
    y, i = _pooled(spatial, kernel, strides)
    model = _unpool_model(y.shape, kernel, output_shape, strides=strides)
    got = _host(model, [y, i], tmp_path)
    np.testing.assert_array_equal(got, _ort(model, {"x": y, "i": i}))


def test_max_unpool_repeated_indices_take_the_last_write(tmp_path) -> None:
    model = _unpool_model((1, 2, 4), [2], strides=[1])
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 2, 4)
    i = np.array([[[1, 1, 4, 1], [6, 9, 6, 0]]], np.int64)  # across channels too
    got = _host(model, [x, i], tmp_path)
    np.testing.assert_array_equal(got, _ort(model, {"x": x, "i": i}))
    assert got.reshape(-1)[[0, 1, 4, 6, 9]].tolist() == [8, 4, 3, 7, 6]


def test_max_unpool_output_shape_at_run_time_end_to_end(tmp_path) -> None:
    y, i = _pooled((4, 6), [2, 2], [2, 2])
    model = _unpool_model(y.shape, [2, 2], [2, 3, 4, 6], runtime=True, strides=[2, 2])
    exe = partita.compile(model, cache_dir=tmp_path)
    shape = np.array([2, 3, 4, 6], np.int64)
    (got,) = exe.run(y, i, shape)
    np.testing.assert_array_equal(got, _ort(model, {"x": y, "i": i, "shape": shape}))
    with pytest.raises(PartitaError, match="output_shape"):
        exe.run(y, i, np.array([2, 4, 4, 6], np.int64))
    with pytest.raises(PartitaError, match=r"spatial extent \[5, 7\] is not the default \[4, 6\]"):
        exe.run(y, i, np.array([2, 3, 5, 7], np.int64))


def test_max_unpool_to_a_larger_output_shape_is_refused() -> None:
    """Past the default extent onnxruntime and onnx's reference disagree on what the
    indices address: a located error, not one of the two answers."""
    y, _ = _pooled((5, 7), [2, 2], [2, 2])
    model = _unpool_model(y.shape, [2, 2], [2, 3, 5, 7], strides=[2, 2])
    with pytest.raises(PartitaError, match=r"\(MaxUnpool\): an output_shape whose spatial extent \[5, 7\]"):
        import_onnx(model)


def test_max_unpool_end_to_end_and_out_of_range(tmp_path) -> None:
    y, i = _pooled((4, 6), [2, 2], [2, 2])
    model = _unpool_model(y.shape, [2, 2], strides=[2, 2])
    exe = partita.compile(model, cache_dir=tmp_path)
    assert not [r for r in exe.report().rows if r.symbol.startswith("(")]  # a kernel
    (got,) = exe.run(y, i)
    np.testing.assert_array_equal(got, _ort(model, {"x": y, "i": i}))
    with pytest.raises(PartitaError, match="outside the result's 144 elements"):
        exe.run(y, np.full_like(i, 144))


def test_a_large_max_unpool_is_a_host_step(tmp_path) -> None:
    """Past ``MAX_UNPOOL_SCAN`` input elements the kernel's per-output scan is quadratic
    work: the op runs as the host's linear scatter, with the same result."""
    from partita.lowering.cuda.ops.conv import MAX_UNPOOL_SCAN

    y, i = _pooled((224, 224), [2, 2], [2, 2])
    assert y.size > MAX_UNPOOL_SCAN
    model = _unpool_model(y.shape, [2, 2], strides=[2, 2])
    exe = partita.compile(model, cache_dir=tmp_path)
    assert [r for r in exe.report().rows if r.symbol.startswith("(")]  # a host step
    np.testing.assert_array_equal(exe.run(y, i)[0], _ort(model, {"x": y, "i": i}))
