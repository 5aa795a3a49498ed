"""The launch plan on the simulated device and on a CUDA device driven through a recording
driver: memory plan, pool, copies, synchronizations, graphs, device arrays, and the fixes
of the device path (issue 11)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py

import partita
from partita.dialects import make_context
from partita.driver import load_module
from partita.ir import PartitaError, parse_module
from partita.runtime.cuda import (
    CudaDevice,
    CudaError,
    arch_runs_on,
    cuda_status,
    parse_arch,
)
from partita.runtime.device import SimulatedDevice
from partita.runtime.interop import DeviceArray, dlpack_tensor
from partita.runtime.plan import Runtime
from partita.runtime.reference import run
from partita.transforms.plan_memory import assign_offsets

EXAMPLES = Path(__file__).parents[2] / "examples"

MLP = """
func.func @main(%x: tensor<?x64xf16>, %w1: tensor<256x64xf16>, %b1: tensor<256xf16>) -> tensor<?x256xf16> {
  %0 = nn.dense %x, %w1 : (tensor<?x64xf16>, tensor<256x64xf16>) -> tensor<?x256xf16>
  %1 = nn.bias_add %0, %b1 : (tensor<?x256xf16>, tensor<256xf16>) -> tensor<?x256xf16>
  %2 = nn.relu %1 : (tensor<?x256xf16>) -> tensor<?x256xf16>
  func.return %2 : tensor<?x256xf16>
}
"""

HOST_SOFTMAX = """
func.func @main(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>) -> tensor<?x32xf32> {
  %0 = nn.dense %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %1 = nn.softmax %0 : (tensor<?x32xf32>) -> tensor<?x32xf32>
  func.return %1 : tensor<?x32xf32>
}
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import os

    return Path(os.environ.get("PARTITA_CACHE_DIR") or tmp_path_factory.mktemp("cubins"))


@pytest.fixture(scope="module")
def models(cache: Path) -> dict:
    """name -> (executable, reference module, input maker)."""
    out = {}
    mlp = partita.compile(MLP, partitioner="eager", cache_dir=cache)
    out["mlp"] = (mlp, parse_module(MLP, make_context(), "mlp.mlir"), _mlp_inputs)
    for name in ("encoder", "cnn"):
        path = EXAMPLES / f"{name}.onnx"
        exe = partita.compile(path, cache_dir=cache)
        out[name] = (exe, load_module(path), _random_inputs(exe))
    return out


def _mlp_inputs(batch: int) -> list[np.ndarray]:
    rng = np.random.default_rng(batch)
    return [(rng.standard_normal(s) * 0.1).astype(np.float16) for s in [(batch, 64), (256, 64), (256,)]]


def _random_inputs(exe):
    from partita.dialects.nn import numpy_dtype

    types = exe.entry_function().function_type.inputs.data

    def make(batch: int) -> list[np.ndarray]:
        rng = np.random.default_rng(batch)
        return [rng.standard_normal([batch if d < 0 else d for d in t.get_shape()]).astype(numpy_dtype(t.element_type))
                for t in types]

    return make


def _close(got, want, dtype) -> None:
    tol = 2e-2 if dtype == np.float16 else 1e-4
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=tol, atol=tol)


# -- the memory planner ----------------------------------------------------------------------


def test_assign_offsets_never_overlaps_live_buffers() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 30))
        sizes = [int(s) for s in rng.integers(0, 5000, n)]
        starts = rng.integers(0, 40, n)
        ranges = [(int(s), int(s + rng.integers(0, 10))) for s in starts]
        offsets, arena = assign_offsets(sizes, ranges, 256)
        assert all(o % 256 == 0 for o in offsets) and arena % 256 == 0
        assert arena >= max(o + s for o, s in zip(offsets, sizes))
        for i in range(n):
            for j in range(i + 1, n):
                live_together = ranges[i][0] <= ranges[j][1] and ranges[j][0] <= ranges[i][1]
                disjoint = offsets[i] + sizes[i] <= offsets[j] or offsets[j] + sizes[j] <= offsets[i]
                assert not live_together or disjoint or 0 in (sizes[i], sizes[j])
    # Reuse happens: three equal buffers in a chain need two slots, not three.
    assert assign_offsets([1024] * 3, [(0, 3), (2, 5), (4, 7)])[1] == 2048


# -- the simulated device: the plan a GPU runs, checked against the reference executor ------


@pytest.mark.parametrize("name", ["mlp", "encoder", "cnn"])
def test_simulated_device_matches_the_reference_executor(models, name: str) -> None:
    exe, reference, inputs = models[name]
    runtime = Runtime(exe.module, "simulated")
    try:
        for batch in (1, 3, 1):
            args = inputs(batch)
            got = runtime.run(*args)
            want = run(reference, *args)
            for g, w in zip(got, want, strict=True):
                assert g.shape == w.shape and g.dtype == w.dtype
                _close(g, w, w.dtype)
        assert runtime.stats["binds"] == 2 and runtime.stats["runs"] == 3
        assert runtime.device.counts["launch"] > 0 and not runtime.stats["host_steps"]
    finally:
        runtime.close()
    assert runtime.device.allocated_bytes == 0  # everything the plan allocated is freed


def test_an_aliasing_mistake_gives_wrong_results_on_the_simulated_device(models, monkeypatch) -> None:
    """What the simulated device is for: a memory plan that overlaps live tensors must
    fail in CI, not only on a GPU."""
    from partita.runtime import plan_bind, plan_load

    exe, reference, inputs = models["encoder"]
    args = inputs(2)
    (want,) = run(reference, *args)
    overlapping = lambda sizes, ranges, alignment=256: ([0] * len(sizes), max(sizes))  # noqa: E731
    for module in (plan_load, plan_bind):  # weights and activations
        monkeypatch.setattr(module, "assign_offsets", overlapping)
    runtime = Runtime(exe.module, "simulated")
    (got,) = runtime.run(*args)
    assert not np.allclose(got, want, rtol=1e-3, atol=1e-3)
    runtime.close()


def test_kernels_run_at_the_pointers_packed_in_their_arguments(models) -> None:
    """A launch reads the pointers from its packed argument buffer: corrupting a pointer
    in the bytes (not in any Python-side table) changes what the kernel reads."""
    exe, _, inputs = models["mlp"]
    runtime = Runtime(exe.module, "simulated", graphs=False)
    args = inputs(4)
    (good,) = runtime.run(*args)
    bound = next(iter(runtime._bound.values()))
    (launch,) = bound.steps
    x, _, bias = bound.inputs  # x is 4x64 f16, the bias 256 f16: the same 512 bytes
    launch.params = bias.ptr.to_bytes(8, "little") + launch.params[8:]
    assert launch.pointer(0) == bias.ptr != x.ptr
    (bad,) = runtime.run(*args)
    assert not np.array_equal(good, bad)
    # A pointer past its allocation is caught, as a GPU's illegal address would be.
    launch.params = (bias.ptr + 256).to_bytes(8, "little") + launch.params[8:]
    with pytest.raises(RuntimeError, match="outside every allocation"):
        runtime.run(*args)
    runtime.close()


def test_the_signature_cache_is_a_bounded_pool(models) -> None:
    exe, _, inputs = models["mlp"]
    device = SimulatedDevice()
    runtime = Runtime(exe.module, device, max_signatures=2)
    at_load = device.counts["alloc"]
    assert at_load == 0  # the MLP has no constants and no static allocations
    for batch in (2, 3, 2, 2):
        runtime.run(*inputs(batch))
    assert device.counts["alloc"] == 2 and runtime.stats["binds"] == 2  # one arena per shape seen
    runtime.run(*inputs(5))  # a third shape evicts the least recently used (3)
    assert device.counts["free"] == 1 and len(runtime._bound) == 2
    runtime.run(*inputs(2))
    assert device.counts["alloc"] == 3
    runtime.close()


def test_weights_are_uploaded_once_at_load(models) -> None:
    exe, _, inputs = models["encoder"]
    constants = [op for op in exe.entry_function().body.block.ops if op.name == "nn.constant"]
    device = SimulatedDevice()
    runtime = Runtime(exe.module, device)
    # The simulated device reads weights in place (issue 25): mapped, never copied.
    assert device.counts["map_host"] == len(constants) > 0 and device.counts["upload"] == 0
    assert device.counts["alloc"] == 0
    for _ in range(3):
        runtime.run(*inputs(2))
    assert device.counts["upload"] == 3 and device.counts["map_host"] == len(constants)  # one upload per run: the input
    runtime.close()


# -- a CUDA device through the recording driver -------------------------------------------


def _recording_runtime(exe, graphs: bool, **driver):
    drv = RecordingDriver(**driver)
    return drv, Runtime(exe.module, CudaDevice(driver=drv), graphs=graphs)


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("name", ["mlp", "encoder", "cnn"])
def test_second_run_makes_no_allocation_and_copies_exactly_the_inputs_and_outputs(models, name: str, graphs: bool) -> None:
    exe, _, inputs = models[name]
    drv, runtime = _recording_runtime(exe, graphs)
    args = inputs(3)
    outs = runtime.run(*args)
    kernels = len(drv.launches)
    assert kernels == len(next(iter(runtime._bound.values())).steps) > 0
    drv.reset()
    outs = runtime.run(*args)
    calls = drv.calls
    assert calls["cuMemAlloc"] == 0 and calls["cuMemFree"] == 0
    assert calls["cuMemcpyHtoDAsync"] == len(args) and calls["cuMemcpyHtoD"] == 0
    assert calls["cuMemcpyHtoDAsync:bytes"] == sum(a.nbytes for a in args)  # weights stay on the device
    assert calls["cuMemcpyDtoHAsync"] == len(outs) and calls["cuMemcpyDtoHAsync:bytes"] == sum(o.nbytes for o in outs)
    assert calls["cuStreamSynchronize"] == 1 and calls["cuCtxSynchronize"] == 0
    assert len(drv.launches) == kernels and {launch["stream"] for launch in drv.launches} == {runtime.stream}
    if graphs:
        assert calls["cuGraphLaunch"] == 1 and calls["cuLaunchKernel"] == 0
        assert all(launch.get("graph") for launch in drv.launches)
    else:
        assert calls["cuLaunchKernel"] == kernels and calls["cuGraphLaunch"] == 0
    # A new batch size: one arena (and one capture), then the same again.
    drv.reset()
    runtime.run(*inputs(5))
    assert drv.calls["cuMemAlloc"] == 1 and drv.calls["cuStreamBeginCapture"] == int(graphs)
    runtime.close()
    assert not drv.memory  # every allocation freed
    runtime.device.close()
    assert drv.live() == {}  # and every module, stream, graph and the retained context


def test_the_graph_switch_off_launches_eagerly(models) -> None:
    exe, _, inputs = models["mlp"]
    drv, runtime = _recording_runtime(exe, graphs=False)
    runtime.run(*inputs(2))
    assert drv.calls["cuStreamBeginCapture"] == 0 and runtime.stats["captures"] == 0
    assert "eager launches" in runtime.describe()


def test_host_steps_are_explicit_counted_and_reported(cache: Path) -> None:
    exe = partita.compile(HOST_SOFTMAX, ["cutlass", "llvm"], partitioner="eager", cache_dir=cache)
    reference = parse_module(HOST_SOFTMAX, make_context(), "m.mlir")
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 64)).astype(np.float32), rng.standard_normal((32, 64)).astype(np.float32)
    runtime = Runtime(exe.module, "simulated")
    for _ in range(2):
        (got,) = runtime.run(x, w)
        _close(got, run(reference, x, w)[0], np.float32)
    s = runtime.stats
    assert (s["host_steps"], s["host_downloads"], s["host_uploads"]) == (2, 2, 2)
    assert s["host_download_bytes"] == s["host_upload_bytes"] == 2 * 3 * 32 * 4
    assert s["captures"] == 0  # the host step needs the host between launches: no graph
    text = runtime.describe()
    assert "1 host step(s)" in text and "nn.softmax" in text and "2 downloads (768 B), 2 uploads (768 B)" in text


VIEWS = """
func.func @main(%x: tensor<?x?x64xf32>, %w: tensor<32x64xf32>) -> tensor<?x?x32xf32> {
  %0 = nn.reshape %x : (tensor<?x?x64xf32>) -> tensor<?x64xf32>
  %1 = nn.dense %0, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %2 = nn.reshape %1, %x, %x {ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 1>} : (tensor<?x32xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>) -> tensor<?x?x32xf32>
  func.return %2 : tensor<?x?x32xf32>
}
"""


def test_reshapes_left_in_the_entry_are_views_not_host_steps(cache: Path) -> None:
    """GPT-2's ``x.view(-1, n)`` around a CUTLASS GEMM: the reshapes stay in @main as views
    of their input's buffer (one of a function argument, one of a kernel result), so the
    plan has no host step and replays as a CUDA graph."""
    exe = partita.compile(VIEWS, ["cutlass", "llvm"], partitioner="eager", cache_dir=cache)
    rows = {row.symbol: row.ops for row in exe.report().rows}
    assert rows["(views in @main)"] == ("nn.reshape", "nn.reshape") and "(in @main)" not in rows
    reference = parse_module(VIEWS, make_context(), "m.mlir")
    runtime = Runtime(exe.module, "simulated")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 64)).astype(np.float32)
    for shape in ((2, 3, 64), (1, 5, 64), (2, 3, 64)):
        x = rng.standard_normal(shape).astype(np.float32)
        (got,) = runtime.run(x, w)
        _close(got, run(reference, x, w)[0], np.float32)
    assert runtime.stats["host_steps"] == 0 and "host step" not in runtime.describe()


def test_a_view_of_the_wrong_size_is_an_error_at_bind(cache: Path) -> None:
    """A view copies nothing, so its sizes are checked once per shape signature."""
    wrong = VIEWS.replace("%0 = nn.reshape %x : (tensor<?x?x64xf32>)",  # dim 0 said to be x's batch
                          "%0 = nn.reshape %x, %x {ref_axes = array<i64: 0>, targets = array<i64: 0>} : "
                          "(tensor<?x?x64xf32>, tensor<?x?x64xf32>)")
    exe = partita.compile(wrong, ["cutlass", "llvm"], partitioner="eager", cache_dir=cache)
    x, w = np.ones((2, 3, 64), np.float32), np.ones((32, 64), np.float32)
    with pytest.raises(PartitaError, match=r"cannot view 384 elements of shape \(2, 3, 64\) as \(2, 64\)"):
        Runtime(exe.module, "simulated").run(x, w)


# -- device arrays in and out -------------------------------------------------------------


class _CudaArray:
    """A minimal ``__cuda_array_interface__`` producer (what CuPy / PyTorch expose)."""

    def __init__(self, ptr: int, shape, dtype):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": tuple(shape), "typestr": np.dtype(dtype).str,
                                         "strides": None, "version": 3}


def test_cuda_array_inputs_are_read_in_place_and_outputs_can_stay_on_the_device(models) -> None:
    exe, _, inputs = models["mlp"]
    drv, runtime = _recording_runtime(exe, graphs=True)
    x, w, b = inputs(4)
    buffer = runtime.device.to_device(w)
    device_w = _CudaArray(buffer.ptr, w.shape, w.dtype)
    runtime.run(x, device_w, b)
    drv.reset()
    (out,) = runtime.run(x, device_w, b, outputs="device")
    assert drv.calls["cuMemcpyHtoDAsync:bytes"] == x.nbytes + b.nbytes  # no host copy of w
    assert drv.calls["cuMemcpyDtoDAsync"] == 1 and drv.calls["cuMemcpyDtoDAsync:bytes"] == w.nbytes
    assert drv.calls["cuMemcpyDtoHAsync"] == 0 and isinstance(out, DeviceArray)
    cai = out.__cuda_array_interface__
    assert cai["shape"] == (4, 256) and cai["typestr"] == "<f2" and cai["data"][0] == out.ptr
    assert out.ptr == next(iter(runtime._bound.values())).outputs[0].ptr
    buffer.free()
    runtime.close()


def test_in_eager_mode_cuda_array_inputs_are_passed_to_the_kernels_in_place(models) -> None:
    exe, _, inputs = models["mlp"]
    drv, runtime = _recording_runtime(exe, graphs=False)
    x, w, b = inputs(4)
    buffer = runtime.device.to_device(w)
    runtime.run(x, _CudaArray(buffer.ptr, w.shape, w.dtype), b)
    (step,) = next(iter(runtime._bound.values())).steps
    drv.reset()
    runtime.run(x, _CudaArray(buffer.ptr, w.shape, w.dtype), b)
    assert drv.calls["cuMemcpyDtoDAsync"] == 0 and drv.calls["cuMemcpyHtoDAsync:bytes"] == x.nbytes + b.nbytes
    arg = step.operands[1].arg
    assert step.args[arg][1] != buffer.ptr  # packed at bind with the planned slot ...
    assert int.from_bytes(step.params[step.offsets[arg]:step.offsets[arg] + 8], "little") == buffer.ptr  # ... now w
    runtime.run(x, w, b)  # a host array again: back to its slot, uploaded there
    assert int.from_bytes(step.params[step.offsets[arg]:step.offsets[arg] + 8], "little") == step.args[arg][1]
    buffer.free()
    runtime.close()


def test_zero_copy_inputs_on_the_simulated_device_compute_the_same(models) -> None:
    exe, _, inputs = models["mlp"]
    device = SimulatedDevice()
    runtime = Runtime(exe.module, device, graphs=False)
    x, w, b = inputs(3)
    (want,) = runtime.run(x, w, b)
    ptr = device.alloc(w.nbytes)
    device.view(ptr, w.shape, w.dtype)[...] = w
    cai = {"data": (ptr, False), "shape": w.shape, "typestr": w.dtype.str, "strides": None, "version": 3}
    (got,) = runtime.run(x, type("A", (), {"__cuda_array_interface__": cai})(), b)
    np.testing.assert_array_equal(got, want)
    assert device.counts["copy"] == 0
    runtime.close()


def test_device_outputs_on_the_simulated_device(models) -> None:
    exe, _, inputs = models["mlp"]
    runtime = Runtime(exe.module, "simulated")
    args = inputs(3)
    (host,) = runtime.run(*args)
    (dev,) = runtime.run(*args, outputs="device")
    np.testing.assert_array_equal(dev.numpy(), host)
    with pytest.raises(AttributeError):
        dev.__cuda_array_interface__  # noqa: B018 - host memory is no CUDA array
    runtime.close()


class _DLPackOnly:
    """An array only reachable through DLPack (as a JAX or TF array is)."""

    def __init__(self, array: np.ndarray):
        self._array = array

    def __dlpack__(self, stream=None, **kw):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_dlpack_inputs(models) -> None:
    exe, _, inputs = models["mlp"]
    runtime = Runtime(exe.module, "simulated")
    args = inputs(2)
    (want,) = runtime.run(*args)
    (got,) = runtime.run(_DLPackOnly(args[0]), *args[1:])
    np.testing.assert_array_equal(got, want)
    array = np.arange(12, dtype=np.float16).reshape(3, 4)
    device_type, _, tensor = dlpack_tensor(array.__dlpack__())
    assert (device_type, tensor.ptr, tensor.shape, tensor.dtype) == (1, array.ctypes.data, (3, 4), np.float16)
    with pytest.raises(PartitaError, match=r"argument #0 \(%x\): expected a NumPy array"):
        runtime.run([[1.0]], *args[1:])
    runtime.close()


@pytest.mark.gpu
@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_framework_arrays_in_and_out_on_a_gpu(models, library: str) -> None:  # pragma: no cover - no GPU in CI
    lib = pytest.importorskip(library)
    if cuda_status() is not None:
        pytest.skip("needs a CUDA device")
    exe, reference, inputs = models["mlp"]
    runtime = Runtime(exe.module, "cuda")
    args = inputs(5)
    device_args = [lib.asarray(a) if library == "cupy" else lib.from_numpy(a).cuda() for a in args]
    (out,) = runtime.run(*device_args, outputs="device")
    result = lib.asarray(out) if library == "cupy" else lib.as_tensor(out, device="cuda")
    host = result.get() if library == "cupy" else result.cpu().numpy()
    _close(host, run(reference, *args)[0], np.float16)


# -- the fixes of the device path -------------------------------------------------------------


def test_large_dynamic_shared_memory_is_opted_in_at_48_kib() -> None:
    drv = RecordingDriver()
    module = CudaDevice(driver=drv).load_module(b"cubin")
    module.kernel("exactly", 48 * 1024)
    module.kernel("below", 48 * 1024 - 1)
    assert drv.func_attributes == {("exactly", 8): 48 * 1024}


def test_an_old_driver_is_refused_with_a_message() -> None:
    old = RecordingDriver(version=12040)
    assert cuda_status(old) == "the CUDA driver is version 12.4; these CUDA 13 bindings need a driver >= 13.0"
    with pytest.raises(CudaError, match="need a driver >= 13.0"):
        CudaDevice(driver=old)
    assert cuda_status(RecordingDriver(devices=0)) == "the CUDA driver reports no device"


def test_arch_strings_with_suffixes() -> None:
    from partita.target import CompilationConfig
    from partita.transforms.collage.families import cutlass_sm

    assert parse_arch("sm_90a") == (90, "a") and parse_arch("sm_80") == (80, "") and parse_arch(86) == (86, "")
    assert arch_runs_on("sm_80", "sm_86") and not arch_runs_on("sm_86", "sm_80")
    assert not arch_runs_on("sm_80", "sm_90") and arch_runs_on("sm_90a", "sm_90") and not arch_runs_on("sm_90a", "sm_100")
    # sm_90a reaches cutlass-codegen as 90a: the Hopper kernels need the arch-specific target
    assert cutlass_sm(CompilationConfig(["cuda -arch=sm_90a", "cutlass", "llvm"])) == "90a"
    assert cutlass_sm(CompilationConfig(["cuda -arch=sm_90", "cutlass", "llvm"])) == 90
    with pytest.raises(ValueError, match="is not a CUDA arch"):
        parse_arch("compute_90")


def test_a_cubin_for_another_arch_is_a_clear_error(models) -> None:
    exe, _, _ = models["mlp"]  # compiled for sm_90
    with pytest.raises(PartitaError, match=r"built for sm_90 and does not run on Recording GPU \(sm_80\); compile for sm_80"):
        _recording_runtime(exe, graphs=False, arch=(8, 0))


def test_failures_name_the_kernel(models) -> None:
    exe, _, inputs = models["mlp"]
    (handle,) = exe.runtime.handles.values()
    kernel = handle.entry.name  # the entry of the partition's kernel configuration
    drv, runtime = _recording_runtime(exe, graphs=False, fail={"cuLaunchKernel": 719})
    with pytest.raises(CudaError, match=rf"cuLaunchKernel\({kernel}\) failed: CUDA_ERROR_LAUNCH_FAILED"):
        runtime.run(*inputs(2))
    drv.fail = {"cuStreamSynchronize": 700}
    with pytest.raises(PartitaError, match="CUDA_ERROR_ILLEGAL_ADDRESS.*run with debug=True"):
        runtime.run(*inputs(2))
    runtime.debug = True
    with pytest.raises(PartitaError, match=rf"@\w+ \(kernel {kernel}\) failed: cuStreamSynchronize failed"):
        runtime.run(*inputs(2))


def test_cutlass_launch_checks_its_operands_and_skips_empty_outputs(models) -> None:
    exe, _, inputs = models["mlp"]
    (handle,) = exe.runtime.handles.values()
    with pytest.raises(PartitaError, match="input 'x' is float32, the kernel takes float16"):
        handle.check([((2, 64), np.float32), ((256, 64), np.float16), ((256,), np.float16)], ((2, 256), np.float16))
    with pytest.raises(PartitaError, match=r"output of \(2, 255\) does not fit the kernel's \(2, 256\)"):
        handle.check([((2, 64), np.float16), ((256, 64), np.float16), ((256,), np.float16)], ((2, 255), np.float16))
    drv, runtime = _recording_runtime(exe, graphs=False)
    (out,) = runtime.run(*inputs(0))  # M = 0: a zero grid would be an invalid launch
    assert out.shape == (0, 256) and drv.calls["cuLaunchKernel"] == 0
    runtime.close()


def test_the_context_is_made_current_in_the_thread_that_runs(models) -> None:
    exe, _, inputs = models["mlp"]
    drv, runtime = _recording_runtime(exe, graphs=True)
    seen = []
    thread = threading.Thread(target=lambda: (runtime.run(*inputs(2)), seen.append(threading.get_ident())))
    thread.start()
    thread.join()
    assert seen and drv.current.get(seen[0]) == runtime.device.context
    runtime.close()


def test_a_failed_copy_frees_what_it_allocated() -> None:
    drv = RecordingDriver(fail={"cuMemcpyHtoD": 1})
    device = CudaDevice(driver=drv)
    with pytest.raises(CudaError, match="cuMemcpyHtoD failed"):
        device.to_device(np.ones(16, np.float32))
    assert not drv.memory and drv.calls["cuMemFree"] == 1


def test_a_benchmark_times_steps_with_the_profile_clock() -> None:
    from partita.runtime.profile import time_steps

    drv = RecordingDriver(kernel_us={"k": 12.5})
    device = CudaDevice(driver=drv)
    module = device.load_module(b"cubin")
    launch = device.prepare_launch(module.kernel("k"), (1, 1, 1), (32, 1, 1), 0, [("ptr", 0x1000), ("int", 3)])
    (seconds,) = time_steps(device, [launch], repeat=5, warmup=2)
    assert seconds == pytest.approx(12.5e-6)  # the stand-in clock's time for k, per launch
    assert len(drv.launches) == 7 and len({launch["params"] for launch in drv.launches}) == 1
    assert drv.calls["cuEventDestroy"] == 2 and not drv.events and not drv.streams
    with pytest.raises(PartitaError, match="has no device clock"):
        time_steps(SimulatedDevice(), [launch])
    # a burst: four launches in a row between each pair of events, timed as their mean
    (seconds,) = time_steps(device, [launch], repeat=3, warmup=0, burst=4)
    assert seconds == pytest.approx(12.5e-6) and len(drv.launches) == 7 + 3 * 4
    with pytest.raises(PartitaError, match="burst >= 1"):
        time_steps(device, [launch], burst=0)


STATIC = """
func.func @main(%x: tensor<8x64xf16>, %w1: tensor<256x64xf16>, %b1: tensor<256xf16>, %w2: tensor<64x256xf16>, %b2: tensor<64xf16>) -> tensor<8x64xf16> {
  %0 = nn.dense %x, %w1 : (tensor<8x64xf16>, tensor<256x64xf16>) -> tensor<8x256xf16>
  %1 = nn.bias_add %0, %b1 : (tensor<8x256xf16>, tensor<256xf16>) -> tensor<8x256xf16>
  %2 = nn.relu %1 : (tensor<8x256xf16>) -> tensor<8x256xf16>
  %3 = nn.dense %2, %w2 : (tensor<8x256xf16>, tensor<64x256xf16>) -> tensor<8x64xf16>
  %4 = nn.bias_add %3, %b2 : (tensor<8x64xf16>, tensor<64xf16>) -> tensor<8x64xf16>
  %5 = nn.add %4, %x : (tensor<8x64xf16>, tensor<8x64xf16>) -> tensor<8x64xf16>
  %6 = nn.tanh %5 : (tensor<8x64xf16>) -> tensor<8x64xf16>
  func.return %6 : tensor<8x64xf16>
}
"""


def test_static_shapes_run_in_the_arena_plan_memory_sized(cache: Path) -> None:
    from partita.transforms.plan_memory import ARENA_SIZE, OFFSET

    exe = partita.compile(STATIC, partitioner="eager", cache_dir=cache)
    function = exe.entry_function()
    allocs = [op for op in function.body.block.ops if op.name == "byoc.alloc_tensor"]
    assert len(allocs) >= 3 and all(OFFSET in op.attributes for op in allocs)
    arena = function.attributes[ARENA_SIZE].value.data
    # The first kernel's output is dead once the second kernel ran: a later buffer reuses it.
    assert arena < sum(op.result.type.get_shape()[0] * op.result.type.get_shape()[1] * 2 for op in allocs)
    reference = parse_module(STATIC, make_context(), "static.mlir")
    rng = np.random.default_rng(0)
    args = [(rng.standard_normal(t.get_shape()) * 0.2).astype(np.float16) for t in function.function_type.inputs.data]
    device = SimulatedDevice()
    runtime = Runtime(exe.module, device)
    assert device.counts["alloc"] == 1  # the static arena, at load (no constants)
    for _ in range(2):
        (got,) = runtime.run(*args)
        _close(got, run(reference, *args)[0], np.float16)
    (bound,) = runtime._bound.values()
    base = runtime.plan.arena
    for op in allocs:  # kernels write at the offsets in the IR
        assert bound.tensor(op.result).ptr == base + op.attributes[OFFSET].value.data
    runtime.close()


def test_an_sm_90a_target_compiles_and_runs() -> None:
    # the shared cubin cache (content-addressed, verified on every hit): a cold Hopper
    # compile takes minutes, and only the first run on a machine should pay it
    exe = partita.compile(MLP, ["cuda -arch=sm_90a", "cutlass", "llvm"], partitioner="eager")
    # sm_90a reaches the codegen whole: the MLP's f16 denses become CUTLASS 3 TMA kernels
    assert "cutlass-codegen{sm=90a}" in exe.pipeline
    drv = RecordingDriver(arch=(9, 0))
    runtime = Runtime(exe.module, CudaDevice(driver=drv))
    (out,) = runtime.run(*_mlp_inputs(2))
    assert out.shape == (2, 256)
    assert drv.calls["cuLaunchKernelEx"] >= 1 and drv.calls["cuTensorMapEncodeTiled"] >= 2
    runtime.close()
