"""Resize and depth / space rearrangement: NumPy references against onnx's node suite,
native kernels (built for the host) against the references, and end to end."""

from __future__ import annotations

import re
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from ops.test_ops_conv import DYN, NP, TOL, _function, _inputs
from support.cuda_host import HostKernels, have_gxx  # tests/support/cuda_host.py
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp
from xdsl.passes import PassPipeline

import partita
from partita.dialects import make_context, nn
from partita.ir import PartitaError
from partita.lowering.cuda.codegen import program_of
from partita.runtime.extern import kernel_handles
from partita.runtime.reference import run
from partita.transforms import get_all_passes


def _resize(**kw):
    return lambda x: [nn.ResizeOp(x, **kw)]


CASES = {
    "nearest_up_half_pixel": ([(DYN, 2, 3, 4)], _resize(
        sizes=(-1, 2, 7, 9), scales=(1.0, 1.0, 7 / 3, 2.25))),
    "nearest_ceil_asymmetric": ([(1, 2, 5, 4)], _resize(
        sizes=(1, 2, 3, 8), scales=(1.0, 1.0, 0.6, 2.0), coordinate_transformation_mode="asymmetric",
        nearest_mode="ceil")),
    "linear_align_corners": ([(2, 3, 4, 5)], _resize(
        sizes=(2, 3, 7, 3), scales=(1.0, 1.0, 1.75, 0.6), mode="linear",
        coordinate_transformation_mode="align_corners")),
    "linear_pytorch_1d": ([(DYN, 3, 6)], _resize(
        sizes=(-1, 3, 4), scales=(1.0, 1.0, 4 / 6), mode="linear",
        coordinate_transformation_mode="pytorch_half_pixel")),
    "cubic_exclude_outside": ([(1, 1, 4, 4)], _resize(
        sizes=(1, 1, 8, 3), scales=(1.0, 1.0, 2.0, 0.8), mode="cubic", cubic_coeff_a=-0.5,
        exclude_outside=True)),
    "cubic_symmetric_3d": ([(1, 2, 3, 4, 5)], _resize(
        sizes=(1, 2, 5, 4, 3), scales=(1.0, 1.0, 5 / 3, 1.0, 0.6), mode="cubic",
        coordinate_transformation_mode="half_pixel_symmetric")),
    "tf_crop_and_resize": ([(1, 1, 4, 4)], _resize(
        sizes=(1, 1, 3, 3), scales=(1.0, 1.0, 0.75, 0.75), mode="linear",
        coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=10.0,
        roi=(0, 0, 0.4, -0.2, 1, 1, 1.2, 0.7))),
    # Antialiased downsampling: the filters widened by 1 / scale (4 and 10 linear taps, 8
    # cubic ones), an axis scaled up keeping the plain filter, exclude_outside on top.
    "linear_antialias": ([(DYN, 2, 9, 7)], _resize(
        sizes=(-1, 2, 4, 10), scales=(1.0, 1.0, 4 / 9, 10 / 7), mode="linear", antialias=True)),
    "linear_antialias_strong": ([(1, 1, 4, 20)], _resize(
        sizes=(1, 1, 4, 4), scales=(1.0, 1.0, 1.0, 0.2), mode="linear", antialias=True,
        coordinate_transformation_mode="pytorch_half_pixel")),
    "cubic_antialias_exclude_outside": ([(1, 2, 6, 8)], _resize(
        sizes=(1, 2, 4, 5), scales=(1.0, 1.0, 4 / 6, 5 / 8), mode="cubic", antialias=True,
        exclude_outside=True)),
    "depth_to_space_dcr": ([(DYN, 8, 2, 3)], lambda x: [nn.DepthToSpaceOp(x, 2)]),
    "depth_to_space_crd": ([(2, 18, 2, 2)], lambda x: [nn.DepthToSpaceOp(x, 3, mode="CRD")]),
    "space_to_depth_dcr": ([(DYN, 3, 4, 6)], lambda x: [nn.SpaceToDepthOp(x, 2)]),
    "space_to_depth_crd": ([(1, 2, 6, 3)], lambda x: [nn.SpaceToDepthOp(x, 3, mode="CRD")]),
}


# Scales (and a roi) read at run time (f32 arguments): (input shape, sizes, scales, mode,
# coordinate mode[, roi[, axes the operands describe]]).
RUNTIME_SCALES = {
    "linear_runtime_scales": ((DYN, 2, 3, 4), (-1, 2, 5, 6), (1, 1, 5 / 3, 1.5), "linear",
                              "align_corners"),
    "cubic_runtime_scales": ((1, 2, 4, 4), (1, 2, 7, 3), (1, 1, 1.75, 0.8), "cubic",
                             "half_pixel_symmetric"),
    "nearest_runtime_scales": ((2, 1, 5, 4), (2, 1, 3, 9), (1, 1, 0.6, 2.3), "nearest",
                               "pytorch_half_pixel"),
    "crop_runtime_scales_and_roi": ((1, 2, 4, 5), (1, 2, 3, 3), (1, 1, 0.75, 0.6), "linear",
                                    "tf_crop_and_resize", (0, 0, 0.4, -0.2, 1, 1, 1.2, 0.7)),
    "crop_runtime_axes_3_2": ((1, 2, 4, 5), (1, 2, 3, 3), (0.6, 0.75), "cubic",
                              "tf_crop_and_resize", (-0.2, 0.4, 0.7, 1.2), (3, 2)),
}


def _runtime_scales_function(name: str, dtype: str) -> FuncOp:
    from xdsl.dialects.builtin import Float32Type, TensorType
    from xdsl.dialects.func import ReturnOp
    from xdsl.ir import Block, Region

    shape, sizes, scales, mode, coordinate, *rest = RUNTIME_SCALES[name]
    roi, axes = (rest + [None, None])[:2]
    block = Block(arg_types=[TensorType(nn.element_type_of(NP[dtype]), shape),
                             TensorType(Float32Type(), (len(scales),)),
                             *([TensorType(Float32Type(), (len(roi),))] if roi else [])])
    op = nn.ResizeOp(block.args[0], sizes, block.args[1], mode=mode,
                     coordinate_transformation_mode=coordinate, extrapolation_value=-3.0,
                     roi=block.args[2] if roi else None, axes=axes)
    block.add_ops([op, ReturnOp(op.result)])
    return FuncOp(f"{name}_{dtype}", (block.arg_types, [op.result.type]), Region(block))


def _module(dtype: str) -> ModuleOp:
    return ModuleOp([_function(f"{name}_{dtype}", shapes, dtype, build)
                     for name, (shapes, build) in CASES.items()]
                    + [_runtime_scales_function(name, dtype) for name in RUNTIME_SCALES])


def _case_inputs(function: FuncOp, name: str, dtype: str, seed: int) -> list[np.ndarray]:
    if name in RUNTIME_SCALES:
        _, _, scales, _, _, *roi = RUNTIME_SCALES[name]
        roi = roi[:1]
        x = _inputs(function, dtype, seed)[0]
        return [x, np.array(scales, np.float32), *(np.array(r, np.float32) for r in roi)]
    return _inputs(function, dtype, seed)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_kernels_compute_the_reference_semantics(dtype: str, tmp_path) -> None:
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    ctx = make_context()
    fused = _module(dtype)
    PassPipeline.parse_spec(get_all_passes(), "fuse-native-kernels").apply(ctx, fused)
    module = _module(dtype)
    pipeline = f'fuse-native-kernels,cuda-codegen{{arch=sm_90 cache-dir="{tmp_path}"}},lower-extern-calls'
    PassPipeline.parse_spec(get_all_passes(), pipeline).apply(ctx, module)
    handles = kernel_handles(module)
    names = [*CASES, *RUNTIME_SCALES]
    assert sorted(handles) == sorted(f"{name}_{dtype}_fused_0" for name in names)
    host = HostKernels(program_of(fused).code, [h.record for h in handles.values()], tmp_path)
    originals = {f.sym_name.data: f for f in _module(dtype).ops}
    for k, name in enumerate(names):
        entry = f"{name}_{dtype}"
        args = _case_inputs(originals[entry], name, dtype, k)
        (expected,) = run(ModuleOp([originals[entry].clone()]), *args, entry=entry)
        rec = handles[f"{entry}_fused_0"].record
        out = np.zeros(expected.shape, NP[dtype])
        grid, block = rec.geometry(out.shape)
        host.launch(rec, (min(grid[0], 2), 1, 1), block, args, out)
        np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64),
                                   rtol=TOL[dtype], atol=TOL[dtype], err_msg=name)


def _node_cases(pattern: str):
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [c for c in node_cases.collect_testcases(None) if re.match(pattern, c.name)]


def _constant_inputs(case) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    """The case's model with every input but the first made an initializer (Resize's
    scales / sizes / roi decide the output shape, so they must be constants)."""
    (ins, outs), *_ = case.data_sets
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    graph = model.graph
    first = graph.input[0]
    for info, value in list(zip(graph.input, ins))[1:]:
        graph.initializer.append(numpy_helper.from_array(value, info.name))
    del graph.input[:]
    graph.input.append(first)
    return model, ins[0], outs[0]


RESIZE_CASES = _node_cases(r"test_(resize|upsample)_")


@pytest.mark.parametrize("case", RESIZE_CASES, ids=[c.name for c in RESIZE_CASES])
def test_node_suite_resize_with_constant_scales(case, tmp_path) -> None:
    """Every Resize / Upsample case of onnx's node suite, scales / sizes / roi as
    initializers: the kernel's result matches onnx's (antialiased ones too)."""
    model, x, want = _constant_inputs(case)
    exe = partita.compile(model, cache_dir=tmp_path)
    assert not [r for r in exe.report().rows if r.symbol.startswith("(")]
    (got,) = exe.run(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# Refused: antialias with scales known only at run time (the filter's width follows them).
ANTIALIASED = re.compile(r".*scales_.*antialias")
RUNTIME = [c for c in RESIZE_CASES if not ANTIALIASED.match(c.name)]


@pytest.mark.parametrize("case", RUNTIME, ids=[c.name for c in RUNTIME])
def test_node_suite_resize_as_given(case, tmp_path) -> None:
    """Scales or sizes fed at run time, as the node suite does: sizes are the declared
    output shape; the kernel reads run-time scales (with a keep_aspect_ratio_policy, the
    one scale computed from the sizes on the device)."""
    exe = partita.compile(case.model, cache_dir=tmp_path)
    assert not [r for r in exe.report().rows if r.symbol.startswith("(")]
    (ins, outs), *_ = case.data_sets
    (got,) = exe.run(*ins)
    np.testing.assert_allclose(got, outs[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("case", [c for c in RESIZE_CASES if ANTIALIASED.match(c.name)],
                         ids=lambda c: c.name)
def test_antialias_at_run_time_scales_is_a_host_step(case, tmp_path) -> None:
    """An antialiased filter's taps follow its scale, which the kernel unrolls: with scales
    fed at run time the resize runs on the host (its reference, reading the scales then)."""
    exe = partita.compile(case.model, cache_dir=tmp_path)
    assert [r.ops for r in exe.report().rows if r.symbol.startswith("(")] == [("nn.resize",)]
    (ins, outs), *_ = case.data_sets
    (got,) = exe.run(*ins)
    np.testing.assert_allclose(got, outs[0], rtol=1e-4, atol=1e-5)


def test_dynamic_batch_resize_and_depth_to_space_end_to_end(tmp_path) -> None:
    nodes = [helper.make_node("Resize", ["x", "", "s"], ["r"], mode="linear"),
             helper.make_node("DepthToSpace", ["r"], ["y"], blocksize=2, mode="CRD")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2, 12, 12])],
        [numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    exe = partita.compile(model, cache_dir=tmp_path)
    assert not [r for r in exe.report().rows if r.symbol.startswith("(")]
    from onnx.reference import ReferenceEvaluator

    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 8, 3, 4)).astype(np.float32)
        (got,) = exe.run(x)
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _interpolate_model() -> onnx.ModelProto:
    """``F.interpolate(x, size=(2 * ceil(h / 2), 2 * ceil(w / 2)))`` as the TorchScript
    exporter writes it (MobileViT's unfolding): sizes ``Concat(Shape(x)[:2], ...)``, the
    batch a dynamic dim."""
    size = lambda i: [  # noqa: E731 - 2 * ceil(Shape(x)[i] / 2), through floats
        helper.make_node("Gather", ["shape", f"i{i}"], [f"d{i}"], axis=0),
        helper.make_node("Cast", [f"d{i}"], [f"f{i}"], to=TensorProto.FLOAT),
        helper.make_node("Div", [f"f{i}", "two"], [f"q{i}"]),
        helper.make_node("Ceil", [f"q{i}"], [f"c{i}"]),
        helper.make_node("Mul", [f"c{i}", "two"], [f"m{i}"]),
        helper.make_node("Cast", [f"m{i}"], [f"n{i}"], to=TensorProto.INT64)]
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Shape", ["x"], ["lead_shape"]),
             helper.make_node("Slice", ["lead_shape", "zero", "two_i"], ["lead"]),
             *size(2), *size(3),
             helper.make_node("Concat", ["n2", "n3"], ["hw"], axis=0),
             helper.make_node("Concat", ["lead", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")]
    inits = [numpy_helper.from_array(np.array([2], np.int64), "i2"), numpy_helper.from_array(np.array([3], np.int64), "i3"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"), numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([2], np.int64), "two_i")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 5, 7])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_resize_to_sizes_computed_from_the_input_shape(tmp_path) -> None:
    """The sizes fold at import (the spatial ones static, the batch the input's own) into a
    Resize whose output keeps the dynamic batch, as onnxruntime computes it."""
    import onnxruntime as ort

    model = _interpolate_model()
    exe = partita.compile(model, cache_dir=tmp_path)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 5, 7)).astype(np.float32)
        (got,) = exe.run(x)
        (want,) = session.run(None, {"x": x})
        assert got.shape == want.shape == (batch, 3, 6, 8)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_to_run_time_sizes_the_model_does_not_declare(mode, tmp_path) -> None:
    """Sizes (or scales) read from a tensor the run computes, with no declared output shape
    (Mask R-CNN pastes each mask at its box's size): an ``nn.dyn`` resize, sized when the
    plan reads the values, one compile for every size, as onnxruntime computes it."""
    import onnxruntime as ort

    for given, dtype, values in (("sizes", TensorProto.INT64, ([1, 2, 7, 3], [1, 2, 2, 9])),
                                 ("scales", TensorProto.FLOAT, ([1.0, 1.0, 1.5, 0.5], [1.0, 1.0, 0.75, 2.0]))):
        inputs = ["x", "", given] if given == "scales" else ["x", "", "", given]
        graph = helper.make_graph(
            [helper.make_node("Abs", ["v"], [given]), helper.make_node("Resize", inputs, ["y"], mode=mode)], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 6]),
             helper.make_tensor_value_info("v", dtype, [4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        exe = partita.compile(model, cache_dir=tmp_path)
        assert 'kind = "resize"' in str(exe)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        x = np.random.default_rng(0).standard_normal((1, 2, 4, 6)).astype(np.float32)
        for v in values:
            v = np.array(v, np.int64 if dtype == TensorProto.INT64 else np.float32)
            (got,) = exe.run(x, v)
            (want,) = session.run(None, {"x": x, "v": v})
            assert got.shape == want.shape, given
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{given} {v}")


def test_resize_to_another_tensors_run_time_size(tmp_path) -> None:
    """``F.interpolate(top, size=lateral.shape[-2:])``, an FPN's top-down path as torchvision
    exports it: the sizes are another tensor's run-time dims, read when the plan binds (an
    ``nn.dyn`` resize), one compile for every pair of sizes, as onnxruntime computes it."""
    import onnxruntime as ort

    n = helper.make_node
    nodes = [n("Shape", ["top"], ["top_shape"]), n("Shape", ["lateral"], ["lateral_shape"]),
             n("Slice", ["top_shape", "zero", "two"], ["lead"]), n("Slice", ["lateral_shape", "two", "four"], ["hw"]),
             n("Concat", ["lead", "hw"], ["sizes"], axis=0), n("Resize", ["top", "", "", "sizes"], ["up"], mode="nearest"),
             n("Add", ["up", "lateral"], ["y"])]
    inits = [numpy_helper.from_array(np.array([k], np.int64), name) for k, name in ((0, "zero"), (2, "two"), (4, "four"))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("top", TensorProto.FLOAT, [1, 4, "h", "w"]),
                                           helper.make_tensor_value_info("lateral", TensorProto.FLOAT, [1, 4, "H", "W"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    graph.value_info.append(helper.make_tensor_value_info("up", TensorProto.FLOAT, [1, 4, "H", "W"]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    exe = partita.compile(model, cache_dir=tmp_path)
    # the declared batch and channels stay static; the kernels after it see them so
    (up,) = [op for op in exe.module.walk() if isinstance(op, nn.DynOp) and op.kind == "resize"]
    assert str(up.result.type) == "tensor<1x4x?x?xf32>"
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for (h, w), (big_h, big_w) in (((3, 4), (6, 8)), ((5, 3), (9, 6))):
        rng = np.random.default_rng(h)
        top, lateral = (rng.standard_normal(s).astype(np.float32) for s in ((1, 4, h, w), (1, 4, big_h, big_w)))
        (got,) = exe.run(top, lateral)
        (want,) = session.run(None, {"top": top, "lateral": lateral})
        assert got.shape == want.shape == (1, 4, big_h, big_w)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# -- RoiAlign ----------------------------------------------------------------------------


def _roi_align_model(rois: int | str, opset: int, **attrs) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 9, 7]),
         helper.make_tensor_value_info("rois", TensorProto.FLOAT, [rois, 4]),
         helper.make_tensor_value_info("batch", TensorProto.INT64, [rois])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _regions(count: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3, 9, 7)).astype(np.float32)
    start = rng.uniform(-2, 6, (count, 2))
    rois = np.concatenate([start, start + rng.uniform(0.2, 5, (count, 2))], axis=1).astype(np.float32)
    rois[0] = [-3.0, -3.0, 9.0, 11.0]  # past every edge: samples beyond one pixel out count 0
    return x, rois, rng.integers(0, 2, count).astype(np.int64)


ROI_ALIGN = [
    (16, {"mode": "avg", "output_height": 2, "output_width": 3, "sampling_ratio": 2}),
    (16, {"mode": "max", "output_height": 3, "output_width": 2, "spatial_scale": 0.5}),
    (16, {"coordinate_transformation_mode": "output_half_pixel", "output_height": 2, "output_width": 2}),
    (10, {"mode": "max", "output_height": 2, "output_width": 2, "sampling_ratio": 0}),
]


@pytest.mark.parametrize("opset, attrs", ROI_ALIGN, ids=[f"opset{o}-{a.get('mode', 'avg')}-{k}"
                                                          for k, (o, a) in enumerate(ROI_ALIGN)])
def test_roi_align_kernel_computes_the_reference(opset, attrs, tmp_path) -> None:
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    from support.kernel_harness import run_host_kernels  # tests/support/kernel_harness.py

    model = _roi_align_model(5, opset, **attrs)
    x, rois, batch = _regions(5, len(attrs))
    (got,), left = run_host_kernels(model, [x, rois, batch], tmp_path)
    assert not left  # the op is a kernel, not a host step
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x, "rois": rois, "batch": batch})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_roi_align_over_a_run_time_number_of_regions(tmp_path) -> None:
    model = _roi_align_model("R", 16, output_height=2, output_width=2)
    exe = partita.compile(model, cache_dir=tmp_path)
    assert not [r for r in exe.report().rows if r.symbol.startswith("(")]  # a kernel
    for count in (1, 4):
        x, rois, batch = _regions(count, count)
        (y,) = exe.run(x, rois, batch)
        assert y.shape == (count, 3, 2, 2)
    with pytest.raises(PartitaError, match="batch index 2 out of range for 2 images"):
        exe.run(x, rois, np.full(4, 2, np.int64))


# -- GridSample --------------------------------------------------------------------------


def _grid_sample_model(spatial: tuple[int, ...], points: tuple[int, ...], configs) -> onnx.ModelProto:
    """One GridSample node per (mode, padding, align_corners) of ``configs``, over one input."""
    nodes = [helper.make_node("GridSample", ["x", "grid"], [f"y{k}"], mode=mode, padding_mode=padding,
                              align_corners=align) for k, (mode, padding, align) in enumerate(configs)]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, *spatial]),
         helper.make_tensor_value_info("grid", TensorProto.FLOAT, [2, *points, len(spatial)])],
        [helper.make_tensor_value_info(f"y{k}", TensorProto.FLOAT, None) for k in range(len(configs))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


GRID_SAMPLE_2D = [("nearest", "zeros", 0), ("nearest", "reflection", 1), ("linear", "border", 0),
                  ("linear", "reflection", 0), ("cubic", "reflection", 1), ("cubic", "border", 0),
                  ("cubic", "zeros", 1)]
GRID_SAMPLE_3D = [("nearest", "border", 1), ("linear", "reflection", 0), ("linear", "zeros", 1)]


@pytest.mark.parametrize("spatial, configs", [((5, 6), GRID_SAMPLE_2D), ((3, 4, 5), GRID_SAMPLE_3D)], ids=["2d", "3d"])
def test_grid_sample_kernels_compute_the_reference(spatial, configs, tmp_path) -> None:
    """Every mode and padding (cubic is 2-D only), each a kernel built for the host: equal
    to the reference, and to onnxruntime within rounding (the node suite checks the rest of
    the combinations on the reference)."""
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    from support.kernel_harness import run_host_kernels  # tests/support/kernel_harness.py

    points = (3, 4) if len(spatial) == 2 else (2, 2, 3)
    model = _grid_sample_model(spatial, points, configs)
    rng = np.random.default_rng(len(spatial))
    x = rng.standard_normal((2, 3, *spatial)).astype(np.float32)
    grid = rng.uniform(-1.6, 1.6, (2, *points, len(spatial))).astype(np.float32)  # some points outside
    grid.reshape(-1, len(spatial))[:2] = 0.5  # 2-D, unaligned: between two pixels (nearest: half to even)
    got, left = run_host_kernels(model, [x, grid], tmp_path)
    assert not left  # every op is a kernel, not a host step
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for g, w, config in zip(got, session.run(None, {"x": x, "grid": grid}), configs, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=str(config))
