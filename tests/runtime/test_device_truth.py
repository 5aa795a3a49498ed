"""The device path as strict as an H100 (issue 18): each known device-path bug against a
stand-in that refuses what the driver and the libraries refuse. Each test here failed
before its fix (the commit that added it says which)."""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import numpy as np
import pytest
from runtime.test_extern_runtime import MLP  # tests/runtime/test_extern_runtime.py
from support.recording_driver import CAPTURE_UNSUPPORTED, INVALID_CONTEXT, RecordingDriver
from support.recording_libs import RecordingCublasLt, RecordingCudnn, RecordingTensorRT

import partita
import partita.runtime.cuda as cuda_module
from partita.dialects import make_context
from partita.ir import PartitaError, parse_module
from partita.runtime.cuda import CudaDevice, CudaError
from partita.runtime.device import SimulatedDevice
from partita.runtime.plan import Runtime
from partita.runtime.reference import run


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory):
    import os

    cache = Path(os.environ.get("PARTITA_CACHE_DIR") or tmp_path_factory.mktemp("cubins"))
    return partita.compile(MLP, partitioner="eager", cache_dir=cache)


def _inputs(batch: int) -> list[np.ndarray]:
    rng = np.random.default_rng(batch)
    return [(rng.standard_normal(s) * 0.1).astype(np.float16) for s in [(batch, 64), (256, 64), (256,)]]


def _runtime(exe, **options) -> tuple[RecordingDriver, Runtime]:
    drv = RecordingDriver(fail=options.pop("fail", None))
    return drv, Runtime(exe.module, CudaDevice(driver=drv), **options)


def _in_thread(fn) -> None:
    errors: list[BaseException] = []

    def body() -> None:
        try:
            fn()
        except BaseException as err:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(err)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


class _CudaArray:
    def __init__(self, ptr: int, shape, dtype, stream=None):
        self.__cuda_array_interface__ = {"data": (ptr, False), "shape": tuple(shape), "typestr": np.dtype(dtype).str,
                                         "strides": None, "version": 3, "stream": stream}


# -- the stand-in refuses what the driver refuses -------------------------------------------


def test_the_stand_in_has_a_current_context_per_thread() -> None:
    drv = RecordingDriver()
    device = CudaDevice(driver=drv)
    seen = []
    _in_thread(lambda: seen.append(drv.cuMemAlloc(16)[0]))
    assert seen == [INVALID_CONTEXT]
    assert drv.cuMemAlloc(16)[0] == 0  # the thread that made it current
    device.close()


def test_the_stand_in_refuses_synchronous_work_inside_a_capture() -> None:
    drv = RecordingDriver()
    device = CudaDevice(driver=drv)
    stream = device.create_stream()
    with pytest.raises(CudaError, match="CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"):
        device.capture(stream, [lambda s: device.alloc(64)])
    assert not drv.capturing() and not drv.live().get("graphs")
    buf = device.alloc(64)  # the stream and the context are usable again
    graph = device.capture(stream, [lambda s: device.memset(buf.ptr, 64, s)])
    graph.destroy()
    buf.free()
    device.destroy_stream(stream)
    device.close()
    assert drv.live() == {}


def test_the_stand_in_checks_launch_limits_and_the_shared_memory_opt_in() -> None:
    drv = RecordingDriver()
    device = CudaDevice(driver=drv)
    module = device.load_module(b"cubin")
    args = [("ptr", 0x1000)]
    with pytest.raises(CudaError, match="INVALID_VALUE"):
        module.launch("k", (1, 1, 1), (2048, 1, 1), args)  # more than 1024 threads per block
    with pytest.raises(CudaError, match="INVALID_VALUE"):
        module.launch("k", (1, 70000, 1), (32, 1, 1), args)  # grid y above 65535
    fn = module.kernel("big", 100 * 1024)  # opted in: launches
    device.prepare_launch(fn, (1, 1, 1), (128, 1, 1), 100 * 1024, args)(0)
    raw = module.function("raw")  # no opt-in: at or above 48 KiB it is refused
    launch = device.prepare_launch(cuda_module.CudaFunction(module, "raw", raw), (1, 1, 1), (128, 1, 1), 64 * 1024, args)
    with pytest.raises(CudaError, match="INVALID_VALUE"):
        launch(0)
    drv.static_smem["static"] = 200 * 1024  # static + dynamic above the device's 227 KiB
    with pytest.raises(CudaError, match="INVALID_VALUE"):
        module.kernel("static", 48 * 1024)
    module.unload()
    device.close()


def test_a_misaligned_pointer_is_a_sticky_error() -> None:
    drv = RecordingDriver()
    device = CudaDevice(driver=drv)
    module = device.load_module(b"cubin")
    buf = device.alloc(64)
    drv.alignment["k"] = {0: 16}
    module.launch("k", (1, 1, 1), (32, 1, 1), [("ptr", buf.ptr + 16)])
    device.synchronize()
    module.launch("k", (1, 1, 1), (32, 1, 1), [("ptr", buf.ptr + 2)])  # faults asynchronously
    with pytest.raises(CudaError, match="CUDA_ERROR_MISALIGNED_ADDRESS"):
        device.synchronize()
    with pytest.raises(CudaError, match="CUDA_ERROR_MISALIGNED_ADDRESS"):
        device.alloc(16)  # the context is lost


# -- threads: the current context is per thread ---------------------------------------------


def test_a_new_shape_a_device_output_and_close_on_other_threads(mlp) -> None:
    drv, runtime = _runtime(mlp, graphs=True)
    runtime.run(*_inputs(2))
    results = {}
    # Binding a new shape allocates, plans and captures: all need the context current.
    _in_thread(lambda: results.update(out=runtime.run(*_inputs(3), outputs="device")))
    (out,) = results["out"]
    _in_thread(lambda: results.update(host=out.numpy()))
    assert results["host"].shape == (3, 256)  # (kernels do not run on the stand-in: no values)
    _in_thread(runtime.close)
    runtime.device.close()
    assert drv.live() == {}


# -- capture: after an eager warm-up, eager when it fails ------------------------------------


def test_graphs_are_captured_after_a_warm_up_run_for_the_libraries() -> None:
    """cuDNN builds its engine at the first execute and TensorRT needs one enqueue after
    its shapes: neither may happen inside a capture, so the first run is eager."""
    from lowering.test_cudnn import _args, _check, _compile, conv_ir

    text, shapes = conv_ir("NHWC", "f16")
    exe = _compile(text)
    drv = RecordingDriver()
    lib = RecordingCudnn(drv)
    runtime = Runtime(exe.module, CudaDevice(driver=drv), libraries={"cudnn": lib})
    args = _args(shapes, "f16")
    want = run(parse_module(text, make_context()), *args)[0]
    for _ in range(3):
        _check(runtime.run(*args)[0], want, "f16")
    assert (runtime.stats["captures"], runtime.stats["capture_fallbacks"]) == (1, 0)
    assert drv.calls["cuGraphLaunch"] == 2 and len(lib.executed) == 2  # warm-up, capture; replays
    runtime.close()
    runtime.device.close()
    assert drv.live() == {} and lib.live() == {}


def test_a_failed_capture_runs_eagerly_says_why_and_leaks_nothing(mlp) -> None:
    drv, runtime = _runtime(mlp, graphs=True, fail={"cuGraphInstantiate": 2})
    for batch in (2, 2, 3):
        (out,) = runtime.run(*_inputs(batch))
        assert out.shape == (batch, 256)
    assert runtime.stats["capture_fallbacks"] == 2 and runtime.stats["captures"] == 0
    assert drv.calls["cuGraphLaunch"] == 0 and len(drv.launches) == 3  # one eager launch per run
    text = runtime.describe()
    assert "inputs (2x64, 256x64, 256) run eagerly: their capture failed: cuGraphInstantiate failed" in text
    runtime.close()
    runtime.device.close()
    assert drv.live() == {}  # every arena, graph, stream and the context released


def test_debug_runs_eagerly_and_names_the_failing_step(mlp) -> None:
    drv, runtime = _runtime(mlp, debug=True)  # graphs on, the default
    for _ in range(2):
        runtime.run(*_inputs(2))
    assert drv.calls["cuStreamBeginCapture"] == 0 and drv.calls["cuLaunchKernel"] == 2
    drv.fail["cuStreamSynchronize"] = 719
    with pytest.raises(PartitaError, match=r"@tvmgen_default_cutlass_main_0 \(kernel cutlass_\w+\) failed: "
                                           r"cuStreamSynchronize failed: CUDA_ERROR_LAUNCH_FAILED"):
        runtime.run(*_inputs(2))


# -- user device inputs: alignment and the producer's stream ------------------------------


def _kernel_alignment(drv: RecordingDriver, runtime: Runtime) -> None:
    """Every pointer the kernels take is read with 128-bit accesses (as CUTLASS's are)."""
    for bound in runtime._bound.values():
        for step in bound.steps:
            drv.alignment[step.function.name] = {o.arg: 16 for o in step.operands if o.arg is not None}


def test_a_misaligned_device_input_is_copied_into_the_arena(mlp) -> None:
    drv, runtime = _runtime(mlp, graphs=False)
    x, w, b = _inputs(4)
    runtime.run(x, w, b)
    _kernel_alignment(drv, runtime)
    buffer = runtime.device.alloc(x.nbytes + 16)
    ctypes.memmove(buffer.ptr + 2, x.ctypes.data, x.nbytes)
    drv.reset()
    runtime.run(_CudaArray(buffer.ptr + 2, x.shape, x.dtype), w, b)  # a view 2 bytes in: misaligned
    assert drv.calls["cuMemcpyDtoDAsync"] == 1 and drv.sticky is None
    ctypes.memmove(buffer.ptr, x.ctypes.data, x.nbytes)
    drv.reset()
    runtime.run(_CudaArray(buffer.ptr, x.shape, x.dtype), w, b)  # aligned: read in place
    assert drv.calls["cuMemcpyDtoDAsync"] == 0 and drv.sticky is None
    buffer.free()
    runtime.close()


def test_a_cuda_array_is_read_after_its_producers_stream(mlp) -> None:
    drv, runtime = _runtime(mlp, graphs=False)
    x, w, b = _inputs(4)
    producer = runtime.device.create_stream()
    buffer = runtime.device.to_device(x)
    runtime.run(_CudaArray(buffer.ptr, x.shape, x.dtype, stream=int(producer)), w, b)
    assert drv.waits == [(runtime.stream, producer)]
    first_read = next(i for i, entry in enumerate(drv.log) if entry[0] == "cuLaunchKernel")
    wait = drv.log.index(("cuStreamWaitEvent", runtime.stream, producer))
    assert wait < first_read and not drv.events  # the event is released
    drv.reset()
    runtime.run(_CudaArray(buffer.ptr, x.shape, x.dtype, stream=None), w, b)  # None: nothing to wait for
    assert drv.waits == []
    with pytest.raises(PartitaError, match="'stream' of 0 is ambiguous"):
        runtime.run(_CudaArray(buffer.ptr, x.shape, x.dtype, stream=0), w, b)
    buffer.free()
    runtime.device.destroy_stream(producer)
    runtime.close()


def test_a_graph_copies_a_cuda_array_after_its_producer_wrote_it(mlp) -> None:
    """Under a graph a device input is copied into its slot: on the runtime's stream, which
    must be ordered after the producer's write (the stand-in lists unordered reads)."""
    drv, runtime = _runtime(mlp, graphs=True)
    x, w, b = _inputs(4)
    producer = runtime.device.create_stream()
    buffer = runtime.device.alloc(x.nbytes)
    for _ in range(2):  # the second run replays the graph and copies x into its slot
        runtime.device.upload(buffer.ptr, x, producer)  # the producer writes x on its stream
        runtime.run(_CudaArray(buffer.ptr, x.shape, x.dtype, stream=int(producer)), w, b)
    assert drv.calls["cuMemcpyDtoDAsync"] == 1 and drv.calls["cuGraphLaunch"] == 1
    assert drv.races == []
    drv.cuStreamSynchronize(producer)
    runtime.device.upload(buffer.ptr, x, producer)
    runtime.run(_CudaArray(buffer.ptr, x.shape, x.dtype, stream=None), w, b)  # says: nothing to wait for
    assert drv.races == [(runtime.stream, producer, buffer.ptr)]  # the stand-in sees the race
    buffer.free()
    runtime.device.destroy_stream(producer)
    runtime.close()


class _CudaDLPack:
    """A CUDA DLPack producer that records the stream the consumer asked it to order for."""

    def __init__(self, array: np.ndarray):
        self._array, self.streams = array, []

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return (2, 0)


def test_a_dlpack_producer_is_given_the_runtimes_stream(mlp) -> None:
    drv, runtime = _runtime(mlp, graphs=False)
    x, w, b = _inputs(4)
    buffer = runtime.device.to_device(x)
    block = drv.memory[buffer.ptr]
    producer = _CudaDLPack(block[: x.nbytes].view(np.float16).reshape(x.shape))
    runtime.run(producer, w, b)
    assert producer.streams == [int(runtime.stream)]
    buffer.free()
    runtime.close()


# -- leaks: close() releases what was made ----------------------------------------------------


def test_a_runtime_that_chose_its_device_releases_the_primary_context(mlp, monkeypatch: pytest.MonkeyPatch) -> None:
    drv = RecordingDriver()
    monkeypatch.setattr(cuda_module, "_driver", lambda: drv)
    runtime = Runtime(mlp.module, "cuda")
    runtime.run(*_inputs(2))
    runtime.run(*_inputs(2))
    assert drv.retained == 1
    runtime.close()
    assert drv.live() == {}
    runtime.close()  # twice is harmless


def test_an_executable_closes_its_runtime(mlp, monkeypatch: pytest.MonkeyPatch) -> None:
    drv = RecordingDriver()
    monkeypatch.setattr(cuda_module, "_driver", lambda: drv)
    mlp.load("cuda")
    mlp.run(*_inputs(2))
    assert drv.retained == 1
    mlp.close()
    assert drv.live() == {}
    mlp.close()


@pytest.mark.parametrize("library", ["cublas", "cudnn", "tensorrt"])
def test_close_destroys_every_library_object(library: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path))
    drv = RecordingDriver()
    device = CudaDevice(driver=drv)
    if library == "cublas":
        from lowering import test_cublas as t

        text, shapes = t._dense("f16", "bias")
        exe, lib, args = t._compile(text), RecordingCublasLt(drv), t._args([(5, 24), *shapes[1:]], "f16")
    elif library == "cudnn":
        from lowering import test_cudnn as t

        text, shapes = t.conv_ir("NCHW", "f16")
        exe, lib, args = t._compile(text), RecordingCudnn(drv), t._args(shapes, "f16")
    else:
        from lowering import test_tensorrt as t

        exe = partita.compile(t.MLP, ["cuda -arch=sm_90", "tensorrt", "llvm"], partitioner="eager")
        lib, args = RecordingTensorRT(drv), t._inputs(t.MLP_SHAPES, np.float32)
    runtime = Runtime(exe.module, device, libraries={library: lib})
    for _ in range(3):
        runtime.run(*args)
    assert lib.live()
    runtime.close()
    assert lib.live() == {}
    device.close()
    assert drv.live() == {}


def test_plans_are_never_made_inside_a_capture() -> None:
    drv = RecordingDriver()
    device = CudaDevice(driver=drv)
    lib = RecordingCublasLt(drv)
    stream = device.create_stream()

    with pytest.raises(RuntimeError, match="STREAM_CAPTURE_UNSUPPORTED"):
        device.capture(stream, [lambda s: lib.create()])
    assert drv.cuStreamBeginCapture(stream, 1)[0] == 0
    assert drv.cuMemAlloc(16)[0] == CAPTURE_UNSUPPORTED
    drv.cuStreamEndCapture(stream)
    device.destroy_stream(stream)


def test_a_model_the_gpu_cannot_hold_is_out_of_memory_not_a_driver_fault(mlp) -> None:
    """``CUDA_ERROR_OUT_OF_MEMORY`` is the model's size, not a fault: ``MemoryError`` as the
    simulated device raises it (``Executable.run`` makes both a ``PartitaError``)."""
    for code, raised, message in [(2, MemoryError, "out of device memory: cannot allocate"),
                                  (1, CudaError, "cuMemAlloc failed")]:  # any other refusal stays a driver error
        drv = RecordingDriver(fail={"cuMemAlloc": code})
        with pytest.raises(raised, match=message):
            Runtime(mlp.module, CudaDevice(driver=drv)).run(*_inputs(4))


def test_splats_on_a_gpu_are_limited_by_device_memory_alone(monkeypatch) -> None:
    """Splat constants are device fills: the host-memory budget that guards the simulated
    device (whose memory is the host's) does not apply on a GPU (here a 1 MiB budget for
    two 1 MiB splats)."""
    import functools

    import partita.runtime.plan_load as plan_load
    from partita.ir.constants import check_splat_budget
    from partita.runtime.device import SimulatedDevice
    from partita.runtime.plan import LaunchPlan

    monkeypatch.setattr(plan_load, "check_splat_budget", functools.partial(check_splat_budget, total=1 << 20))
    splats = "\n".join(f"  %c{i} = nn.constant dense<1.0> : tensor<262144xf32>" for i in range(2))
    text = (f"func.func @main(%x: tensor<4xf32>) -> (tensor<262144xf32>, tensor<262144xf32>) {{\n{splats}\n"
            "  func.return %c0, %c1 : tensor<262144xf32>, tensor<262144xf32>\n}")
    module = parse_module(text, make_context(), "splats.mlir")
    with pytest.raises(PartitaError, match="splat constants would take"):
        LaunchPlan(module, SimulatedDevice())
    drv = RecordingDriver()
    plan = LaunchPlan(module, CudaDevice(driver=drv))  # both filled on the device by memsets
    assert drv.calls["cuMemsetD32Async"] == 2 and drv.calls["cuMemcpyHtoDAsync"] == 0
    plan.close()


def _argument(record: dict, k: int, ctype) -> int:
    """Argument ``k`` of a recorded launch, read through its ``kernelParams``."""
    slot = ctypes.c_void_p.from_address(int(record["params"]) + 8 * k).value
    return ctype.from_address(slot).value


def test_a_cloned_launch_packs_its_own_arguments() -> None:
    """A bound plan reuses launches bound before at the same tensors as copies: a copy
    launches the same kernel, geometry and arguments (a cluster launch stays one), and
    repointing its input leaves the launch it was copied from untouched."""
    drv = RecordingDriver()
    device = CudaDevice(driver=drv)
    module = device.load_module(b"cubin")
    kernel = module.kernel("k")
    for cluster in (None, (2, 1, 1)):
        original = device.prepare_launch(kernel, (4, 1, 1), (32, 1, 1), 0, [("ptr", 0x1000), ("int", 3)],
                                         cluster=cluster)
        copy = original.clone()
        assert copy.params == original.params and copy.grid == original.grid and copy.args == original.args
        copy.set_pointer(0, 0x2000)
        assert copy.params != original.params and original.params[:8] == (0x1000).to_bytes(8, "little")
        drv.launches.clear()
        original(0)
        copy(0)
        first, second = drv.launches
        assert first["name"] == second["name"] == "k" and first["grid"] == second["grid"] == (4, 1, 1)
        assert first.get("cluster") == second.get("cluster") == cluster
        # what each launch's kernelParams point at: its own pointer, the same int
        assert [_argument(first, k, c) for k, c in ((0, ctypes.c_uint64), (1, ctypes.c_int32))] == [0x1000, 3]
        assert [_argument(second, k, c) for k, c in ((0, ctypes.c_uint64), (1, ctypes.c_int32))] == [0x2000, 3]
    simulated = SimulatedDevice().prepare_launch(SimulatedDevice().load_module(b"cubin").kernel("k"), (1, 1, 1),
                                                 (32, 1, 1), 0, [("ptr", 0x1000)])
    copy = simulated.clone()
    copy.set_pointer(0, 0x2000)
    assert simulated.pointer(0) == 0x1000 and copy.pointer(0) == 0x2000
    device.close()
