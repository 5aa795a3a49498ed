"""TensorRT partitions: every supported op's ONNX export against the reference
semantics, combined sub-graphs through the compiler, the engine path through a
recording TensorRT (engine built once, cached on disk by digest, bound by name), and
the missing-extra error."""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
from support.recording_driver import RecordingDriver
from support.recording_libs import RecordingTensorRT, RecordingTensorRT10

import partita
from partita.backends.tensorrt import TENSORRT_OPS
from partita.dialects import make_context
from partita.ir import PartitaError, parse_module
from partita.lowering.tensorrt.export import CONVERTERS, export_function
from partita.runtime.cuda import CudaDevice, cuda_available
from partita.runtime.extern import kernel_handles
from partita.runtime.plan import Runtime
from partita.runtime.reference import run


def _recorded_runtime(exe, graphs: bool = False, lib_class=RecordingTensorRT) -> tuple[Runtime, RecordingTensorRT]:
    """The launch plan on a recording CUDA device with a recording TensorRT (11, unless
    ``lib_class`` says), whose "engines" run their ONNX model under onnxruntime in the
    plan's memory."""
    drv = RecordingDriver()
    lib = lib_class(drv)
    return Runtime(exe.module, CudaDevice(driver=drv), graphs=graphs, libraries={"tensorrt": lib}), lib

# One function per converted op: (IR body, argument types, result type).
OPS = {
    "nn.add": ("nn.add %a, %b : (T<4x6>, T<6>) -> T<4x6>", ["4x6", "6"], "4x6"),
    "nn.subtract": ("nn.subtract %a, %b : (T<4x6>, T<4x6>) -> T<4x6>", ["4x6", "4x6"], "4x6"),
    "nn.multiply": ("nn.multiply %a, %b : (T<4x6>, T<1x6>) -> T<4x6>", ["4x6", "1x6"], "4x6"),
    "nn.divide": ("nn.divide %a, %b : (T<4x6>, T<4x6>) -> T<4x6>", ["4x6", "4x6"], "4x6"),
    "nn.relu": ("nn.relu %a : (T<4x6>) -> T<4x6>", ["4x6"], "4x6"),
    "nn.sigmoid": ("nn.sigmoid %a : (T<4x6>) -> T<4x6>", ["4x6"], "4x6"),
    "nn.tanh": ("nn.tanh %a : (T<4x6>) -> T<4x6>", ["4x6"], "4x6"),
    "nn.gelu": ("nn.gelu %a : (T<4x6>) -> T<4x6>", ["4x6"], "4x6"),
    "nn.gelu tanh": ('nn.gelu %a {approximate = "tanh"} : (T<4x6>) -> T<4x6>', ["4x6"], "4x6"),
    "nn.clip": ("nn.clip %a {min = -0.5 : f64, max = 0.25 : f64} : (T<4x6>) -> T<4x6>", ["4x6"], "4x6"),
    "nn.softmax": ("nn.softmax %a {axis = 0 : i64} : (T<4x6>) -> T<4x6>", ["4x6"], "4x6"),
    "nn.dense": ("nn.dense %a, %b : (T<?x3x6>, T<5x6>) -> T<?x3x5>", ["?x3x6", "5x6"], "?x3x5"),
    "nn.matmul": ("nn.matmul %a, %b : (T<2x4x6>, T<2x6x3>) -> T<2x4x3>", ["2x4x6", "2x6x3"], "2x4x3"),
    "nn.batch_matmul": ("nn.batch_matmul %a, %b {transpose_a = true, transpose_b = false} : (T<2x6x4>, T<2x6x3>) -> T<2x4x3>",
                        ["2x6x4", "2x6x3"], "2x4x3"),
    "nn.bias_add": ("nn.bias_add %a, %b {axis = 1 : i64} : (T<2x3x4>, T<3>) -> T<2x3x4>", ["2x3x4", "3"], "2x3x4"),
    "nn.layer_norm": ("nn.layer_norm %a, %b, %c {axis = -1 : i64} : (T<4x6>, T<6>, T<6>) -> T<4x6>", ["4x6", "6", "6"], "4x6"),
    "nn.batch_norm": ("nn.batch_norm %a, %b, %c, %d, %e : (T<2x3x4x4>, T<3>, T<3>, T<3>, T<3>) -> T<2x3x4x4>",
                      ["2x3x4x4", "3", "3", "3", "3+"], "2x3x4x4"),
    "nn.conv2d NCHW": ("nn.conv2d %a, %b {strides = array<i64: 2, 1>, padding = array<i64: 1, 0, 0, 2>, groups = 2 : i64} "
                       ": (T<1x4x7x7>, T<6x2x3x3>) -> T<1x6x3x7>", ["1x4x7x7", "6x2x3x3"], "1x6x3x7"),
    "nn.conv2d NHWC": ('nn.conv2d %a, %b {data_layout = "NHWC", kernel_layout = "OHWI", dilation = array<i64: 2, 2>} '
                       ": (T<1x7x7x3>, T<4x3x3x3>) -> T<1x3x3x4>", ["1x7x7x3", "4x3x3x3"], "1x3x3x4"),
    "nn.max_pool2d": ("nn.max_pool2d %a {pool_size = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>} "
                      ": (T<1x2x7x7>) -> T<1x2x4x4>", ["1x2x7x7"], "1x2x4x4"),
    "nn.avg_pool2d": ('nn.avg_pool2d %a {pool_size = array<i64: 2, 2>, strides = array<i64: 2, 2>, layout = "NHWC"} '
                      ": (T<1x6x6x3>) -> T<1x3x3x3>", ["1x6x6x3"], "1x3x3x3"),
    "nn.global_avg_pool2d": ("nn.global_avg_pool2d %a : (T<2x3x4x5>) -> T<2x3x1x1>", ["2x3x4x5"], "2x3x1x1"),
    "nn.pad": ("nn.pad %a {pad_before = array<i64: 1, 0>, pad_after = array<i64: 0, 2>, pad_value = 1.5 : f64} "
               ": (T<4x6>) -> T<5x8>", ["4x6"], "5x8"),
    "nn.reshape": ("nn.reshape %a : (T<?x6>) -> T<?x2x3>", ["?x6"], "?x2x3"),
    # two ? dims: sized by shape references (simplify-transposes' form of a unit-dim transpose)
    "nn.reshape refs": ("nn.reshape %a, %a, %a {ref_axes = array<i64: 0, 2>, targets = array<i64: 0, 1>} "
                        ": (T<?x1x?x4>, T<?x1x?x4>, T<?x1x?x4>) -> T<?x?x1x4>", ["?x1x?x4"], "?x?x1x4"),
    "nn.transpose": ("nn.transpose %a {perm = array<i64: 2, 0, 1>} : (T<2x3x4>) -> T<4x2x3>", ["2x3x4"], "4x2x3"),
    "nn.concatenate": ("nn.concatenate %a, %b {axis = 1 : i64} : (T<2x3>, T<2x4>) -> T<2x7>", ["2x3", "2x4"], "2x7"),
}


def _function(key: str, dtype: str) -> tuple[str, list[tuple[int, ...]]]:
    body, args, result = OPS[key]
    t = lambda s: f"tensor<{s}x{dtype}>"  # noqa: E731
    names = "abcde"
    sig = ", ".join(f"%{names[i]}: {t(a.rstrip('+'))}" for i, a in enumerate(args))
    body = re.sub(r"T<([^>]*)>", lambda m: t(m.group(1)), body)
    text = f"func.func @main({sig}) -> {t(result)} {{\n  %0 = {body}\n  func.return %0 : {t(result)}\n}}\n"
    shapes = [tuple(3 if d == "?" else int(d) for d in a.rstrip("+").split("x")) for a in args]
    return text, shapes


def _inputs(shapes, dtype, variance_last=False, seed=0):
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(s).astype(dtype) for s in shapes]
    if variance_last:
        out[-1] = np.abs(out[-1]) + 0.5
    return out


def test_every_converter_has_a_case() -> None:
    assert {k.split()[0] for k in OPS} == set(CONVERTERS)


def test_backend_takes_exactly_the_converted_ops() -> None:
    # The backend's predicate (below lowering) and the exporter's table must not drift.
    assert set(TENSORRT_OPS) == set(CONVERTERS)


@pytest.mark.parametrize("key", sorted(OPS))
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_each_op_exports_to_an_equal_onnx_model(key: str, dtype: str) -> None:
    from partita.runtime.libraries.tensorrt import _session

    text, shapes = _function(key, dtype)
    module = parse_module(text, make_context(), key)
    function = next(iter(module.ops))
    model = export_function(function)
    np_dtype = np.float16 if dtype == "f16" else np.float32
    args = _inputs(shapes, np_dtype, variance_last=key == "nn.batch_norm")
    (want,) = run(module, *args)
    (got,) = _session(model.SerializeToString())({f"arg{i}": a for i, a in enumerate(args)})
    assert got.shape == want.shape and got.dtype == want.dtype
    tol = 2e-2 if dtype == "f16" else 2e-5
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)


def test_the_reference_evaluator_runs_the_export_without_onnxruntime(monkeypatch: pytest.MonkeyPatch) -> None:
    from partita.runtime.libraries.tensorrt import _session

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    text, shapes = _function("nn.conv2d NHWC", "f32")
    module = parse_module(text, make_context())
    args = _inputs(shapes, np.float32)
    (got,) = _session(export_function(next(iter(module.ops))).SerializeToString())({"arg0": args[0], "arg1": args[1]})
    np.testing.assert_allclose(got, run(module, *args)[0], rtol=1e-5, atol=1e-5)


MLP = """
func.func @main(%x: tensor<?x16xf32>, %w: tensor<32x16xf32>, %b: tensor<32xf32>, %g: tensor<32xf32>, %be: tensor<32xf32>) -> tensor<?x32xf32> {
  %0 = nn.dense %x, %w : (tensor<?x16xf32>, tensor<32x16xf32>) -> tensor<?x32xf32>
  %1 = nn.add %0, %b : (tensor<?x32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
  %2 = nn.layer_norm %1, %g, %be : (tensor<?x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
  %3 = nn.tanh %2 : (tensor<?x32xf32>) -> tensor<?x32xf32>
  func.return %3 : tensor<?x32xf32>
}
"""
MLP_SHAPES = [(5, 16), (32, 16), (32,), (32,), (32,)]


@pytest.fixture(scope="module")
def mlp():
    return partita.compile(MLP, ["cuda -arch=sm_90", "tensorrt", "llvm"], partitioner="collage", max_depth=4)


def test_collage_makes_one_tensorrt_sub_graph(mlp) -> None:
    (handle,) = kernel_handles(mlp.module).values()
    assert handle.ops == ("nn.dense", "nn.add", "nn.layer_norm", "nn.tanh")
    assert handle.inputs[0] == (-1, 16) and handle.outputs == ((-1, 32),)
    args = _inputs(MLP_SHAPES, np.float32)
    runtime = Runtime(mlp.module, "simulated")  # the sub-model itself runs, under onnxruntime
    (out,) = runtime.run(*args)
    np.testing.assert_allclose(out, run(parse_module(MLP, make_context()), *args)[0], rtol=1e-5, atol=1e-5)
    (emulated,) = runtime.handles.values()
    assert runtime.device.counts["launch"] == 1 and emulated._session is not None


def test_eager_merges_adjacent_tensorrt_ops_into_one_sub_graph() -> None:
    exe = partita.compile(MLP, ["cuda -arch=sm_90", "tensorrt", "llvm"], partitioner="eager")
    (handle,) = kernel_handles(exe.module).values()
    assert handle.ops == ("nn.dense", "nn.add", "nn.layer_norm", "nn.tanh")
    assert "byoc.partition" not in str(exe)  # the single-op composites were inlined
    args = _inputs(MLP_SHAPES, np.float32)
    np.testing.assert_allclose(exe.run(*args)[0], run(parse_module(MLP, make_context()), *args)[0],
                               rtol=1e-5, atol=1e-5)


def test_engines_are_built_once_and_cached_on_disk(mlp, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path))
    want = run(parse_module(MLP, make_context()), *_inputs(MLP_SHAPES, np.float32))[0]
    for attempt in range(2):  # a second runtime (a second load) finds the engine on disk
        runtime, lib = _recorded_runtime(mlp)
        for _ in range(2):
            (out,) = runtime.run(*_inputs(MLP_SHAPES, np.float32))
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
        assert len(lib.builds) == (1 if attempt == 0 else 0)
        assert lib.deserialized == 1  # one plan per shape signature
        assert len(lib.executions) == 2
    (engine,) = (tmp_path / "tensorrt").iterdir()
    (handle,) = kernel_handles(mlp.module).values()
    assert engine.name.startswith(handle.digest[:32])
    run_ = lib.executions[0]
    assert run_["stream"] == runtime.stream and run_["memory"][1] == lib.workspace
    assert lib.memory.buffer(run_["memory"][0] + lib.workspace - 1)  # the plan's workspace, in its arena
    assert set(run_["addresses"]) == {"arg0", "arg1", "arg2", "arg3", "arg4", "out0"}


def test_a_new_shape_gets_its_own_engine(mlp, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path))
    runtime, lib = _recorded_runtime(mlp, graphs=True)
    for m in (5, 9, 5):
        args = _inputs([(m, 16), *MLP_SHAPES[1:]], np.float32)
        np.testing.assert_allclose(runtime.run(*args)[0], run(parse_module(MLP, make_context()), *args)[0],
                                   rtol=1e-5, atol=1e-5)
    assert [b["profiles"][0]["arg0"][0] for b in lib.builds] == [(5, 16), (9, 16)]
    # Per shape: the first run enqueues (TensorRT's warm-up), the capture enqueues once;
    # the third run replays a graph.
    assert len(lib.executions) == 4
    assert (runtime.stats["captures"], runtime.stats["capture_fallbacks"]) == (2, 0)
    assert all(lib.BuilderFlag.TF32 in b["flags"] for b in lib.builds)


def test_a_missing_extra_names_it(mlp, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    with pytest.raises(PartitaError, match=r"pip install 'partita\[tensorrt\]'"):
        Runtime(mlp.module, CudaDevice(driver=RecordingDriver()))


WEIGHTS = """
func.func @main(%x: tensor<?x16xf32>) -> tensor<?x32xf32> {
  %w = nn.constant dense<0.25> : tensor<32x16xf32>
  %b = nn.constant dense<-1.0> : tensor<32xf32>
  %0 = nn.dense %x, %w : (tensor<?x16xf32>, tensor<32x16xf32>) -> tensor<?x32xf32>
  %1 = nn.add %0, %b : (tensor<?x32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
  %2 = nn.tanh %1 : (tensor<?x32xf32>) -> tensor<?x32xf32>
  func.return %2 : tensor<?x32xf32>
}
"""


def test_constant_weights_are_built_into_the_engine(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path))
    exe = partita.compile(WEIGHTS, ["cuda -arch=sm_90", "tensorrt", "llvm"], partitioner="eager")
    (handle,) = kernel_handles(exe.module).values()
    assert len(handle.folded) == 2  # the weight and the bias: initializers, not inputs
    assert [i.name for i in handle.onnx_model().graph.input] == [f"arg{i}" for i in range(3) if i not in handle.folded]
    x = _inputs([(6, 16)], np.float32)
    want = run(parse_module(WEIGHTS, make_context()), *x)[0]
    np.testing.assert_allclose(Runtime(exe.module, "simulated").run(*x)[0], want, rtol=1e-5, atol=1e-5)
    runtime, lib = _recorded_runtime(exe)
    np.testing.assert_allclose(runtime.run(*x)[0], want, rtol=1e-5, atol=1e-5)
    (build,) = lib.builds
    assert sorted(build["profiles"][0]) == ["arg0"] and set(lib.executions[0]["addresses"]) == {"arg0", "out0"}


def test_the_target_options_reach_the_builder(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path))
    exe = partita.compile(WEIGHTS, ["cuda -arch=sm_90", "tensorrt -use_fp16=true -max_workspace_size=4096", "llvm"],
                          partitioner="eager")
    (handle,) = kernel_handles(exe.module).values()
    assert (handle.fp16, handle.workspace_limit) == (1, 4096)
    runtime, lib = _recorded_runtime(exe, lib_class=RecordingTensorRT10)
    runtime.run(*_inputs([(2, 16)], np.float32))
    (build,) = lib.builds
    assert build["flags"] == {lib.BuilderFlag.TF32, lib.BuilderFlag.FP16}
    assert build["pools"] == {lib.MemoryPoolType.WORKSPACE: 4096}


def test_use_fp16_on_tensorrt_11_is_an_error_not_dropped(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorRT 11 removed BuilderFlag.FP16 (strong typing): -use_fp16 cannot be honoured,
    so it is said, not silently dropped; without it the same model builds."""
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path))
    assert not hasattr(RecordingTensorRT.BuilderFlag, "FP16")
    exe = partita.compile(WEIGHTS, ["cuda -arch=sm_90", "tensorrt -use_fp16=true", "llvm"], partitioner="eager")
    runtime, lib = _recorded_runtime(exe)
    with pytest.raises(PartitaError, match=r"-use_fp16 needs weakly typed networks, which TensorRT 11"):
        runtime.run(*_inputs([(2, 16)], np.float32))
    assert not lib.builds
    runtime.close()
    exe = partita.compile(WEIGHTS, ["cuda -arch=sm_90", "tensorrt", "llvm"], partitioner="eager")
    runtime, lib = _recorded_runtime(exe)
    runtime.run(*_inputs([(2, 16)], np.float32))
    assert [b["flags"] for b in lib.builds] == [{lib.BuilderFlag.TF32}]


def test_an_external_target_without_a_backend_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from partita import backends

    monkeypatch.delitem(backends._BACKENDS, "tensorrt")  # as before this backend existed
    with pytest.raises(PartitaError, match="unknown backend 'tensorrt'"):
        partita.compile(MLP, ["cuda -arch=sm_90", "tensorrt", "llvm"], partitioner="collage")


def test_an_unsupported_op_is_a_located_error() -> None:
    text = """func.func @main(%x: tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32> attributes {byoc.compiler = "tensorrt"} {
  %0 = nn.lrn %x {size = 3 : i64} : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  func.return %0 : tensor<1x4x3x3xf32>
}"""
    function = next(iter(parse_module(text, make_context(), "bad.mlir").ops))
    with pytest.raises(PartitaError, match=r"bad.mlir:2:3: error: 'nn.lrn' op has no TensorRT \(ONNX\) conversion"):
        export_function(function)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")
def test_on_a_gpu_tensorrt_matches_numpy(mlp) -> None:  # pragma: no cover
    pytest.importorskip("tensorrt", reason="the tensorrt extra is not installed")
    args = _inputs(MLP_SHAPES, np.float32)
    runtime = mlp.load("cuda")
    np.testing.assert_allclose(runtime.run(*args)[0], run(parse_module(MLP, make_context()), *args)[0], rtol=1e-3, atol=1e-3)
    assert "1 library call(s) (tensorrt)" in runtime.describe() and not runtime.plan.host_ops


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("key", sorted(OPS))
def test_on_a_gpu_every_tensorrt_op_matches_numpy(key: str) -> None:  # pragma: no cover
    pytest.importorskip("tensorrt", reason="the tensorrt extra is not installed")
    text, shapes = _function(key, "f16")
    exe = partita.compile(text, ["cuda -arch=sm_90", "tensorrt", "llvm"], partitioner="eager")
    args = _inputs(shapes, np.float16, variance_last=key == "nn.batch_norm")
    runtime = exe.load("cuda")
    np.testing.assert_allclose(runtime.run(*args)[0].astype(np.float32),
                               run(parse_module(text, make_context()), *args)[0].astype(np.float32), rtol=2e-2, atol=2e-2)
    assert "library call(s) (tensorrt)" in runtime.describe()
