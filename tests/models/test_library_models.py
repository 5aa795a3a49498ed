"""Both bundled models compile for every backend at once (cuBLAS, cuDNN, TensorRT,
CUTLASS, native CUDA, host) under both partitioners and compute what the reference does
(library calls emulated: TensorRT sub-models under onnxruntime, the others from their
reference bodies)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import partita
from partita.driver import load_module
from partita.runtime.reference import run

EXAMPLES = Path(__file__).parents[2] / "examples"
TARGETS = ["cuda -arch=sm_90", "cublas", "cudnn", "tensorrt", "cutlass", "llvm"]


def _input(path: Path) -> np.ndarray:
    dims = [d.dim_value or 3 for d in onnx.load(path).graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(0).standard_normal(dims).astype(np.float32)


@pytest.mark.parametrize("model", ["encoder.onnx", "cnn.onnx"])
@pytest.mark.parametrize("partitioner", ["collage", "eager"])
def test_bundled_model_with_every_library(model: str, partitioner: str, kernel_cache: Path) -> None:
    path = EXAMPLES / model
    exe = partita.compile(path, TARGETS, partitioner=partitioner, cache_dir=kernel_cache)
    x = _input(path)
    (want,) = run(load_module(path), x)
    (got,) = exe.run(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    compilers = {row.target for row in exe.report().rows}
    # TensorRT takes what no kernel library does; every op is placed somewhere real.
    assert "tensorrt" in compilers
    assert all(not row.target.startswith("llvm") for row in exe.report().rows)
    for stage in ("cublas-codegen", "cudnn-codegen", "tensorrt-codegen"):
        assert stage in exe.pipeline


@pytest.mark.parametrize("model", ["encoder.onnx", "cnn.onnx"])
def test_library_calls_are_steps_of_the_captured_plan(model: str, kernel_cache: Path) -> None:
    """On a (recording) CUDA device every library call of a bundled model is enqueued on the
    runtime's stream between the kernels, and captured with them into one CUDA graph."""
    from support.recording_driver import RecordingDriver
    from support.recording_libs import RecordingCublasLt, RecordingCudnn, RecordingTensorRT

    from partita.runtime.cuda import CudaDevice
    from partita.runtime.plan import Runtime

    path = EXAMPLES / model
    exe = partita.compile(path, TARGETS, partitioner="collage", cache_dir=kernel_cache)
    drv = RecordingDriver()
    libraries = {"cublas": RecordingCublasLt(drv), "cudnn": RecordingCudnn(drv), "tensorrt": RecordingTensorRT(drv)}
    runtime = Runtime(exe.module, CudaDevice(driver=drv), libraries=libraries)
    calls = [h for h in runtime.handles.values() if h.arch is None]
    assert calls and not runtime.plan.host_ops
    x = _input(path)
    for _ in range(3):  # the first run is eager (the libraries' warm-up), then captured
        runtime.run(x)
    assert drv.calls["cuGraphLaunch"] == 2 and drv.calls["cuStreamBeginCapture"] == 1
    assert runtime.stats["captures"] == 1 and not runtime.stats["capture_fallbacks"]
    replayed = [launch for launch in drv.launches if launch.get("graph")]
    assert {launch["stream"] for launch in replayed} == {runtime.stream}
    # Each replay holds every kernel and every library call of the plan, in plan order.
    names = [launch["name"] for launch in replayed]
    per_run = len(names) // 2
    assert names[:per_run] == names[per_run:]
    assert sum(1 for launch in replayed[:per_run] if launch.get("library")) == len(calls)
