"""Extern calls as steps of the launch plan: the simulated device without a GPU, and the
CUDA device path driven through a recording driver."""

from __future__ import annotations

import dataclasses
from math import prod
from pathlib import Path

import numpy as np
import pytest
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py

from partita.dialects import make_context
from partita.ir import PartitaError, parse_module
from partita.runtime.cuda import CudaDevice, cuda_available
from partita.runtime.extern import kernel_handles, runtime_dims
from partita.runtime.plan import LaunchPlan, Runtime
from partita.runtime.reference import run

MLP = """
func.func @main(%x: tensor<?x64xf16>, %w1: tensor<256x64xf16>, %b1: tensor<256xf16>) -> tensor<?x256xf16> {
  %0 = nn.dense %x, %w1 : (tensor<?x64xf16>, tensor<256x64xf16>) -> tensor<?x256xf16>
  %1 = nn.bias_add %0, %b1 : (tensor<?x256xf16>, tensor<256xf16>) -> tensor<?x256xf16>
  %2 = nn.relu %1 : (tensor<?x256xf16>) -> tensor<?x256xf16>
  func.return %2 : tensor<?x256xf16>
}
"""


@pytest.fixture(scope="module")
def lowered(tmp_path_factory: pytest.TempPathFactory):
    import partita

    cache = tmp_path_factory.mktemp("cubins")
    return partita.compile(MLP, ["cuda -arch=sm_80", "cutlass", "llvm"], partitioner="eager", cache_dir=cache)


def _inputs(batch: int) -> list[np.ndarray]:
    rng = np.random.default_rng(batch)
    return [(rng.standard_normal(s) * 0.1).astype(np.float16) for s in [(batch, 64), (256, 64), (256,)]]


def test_without_a_device_the_plan_runs_on_the_simulated_device(lowered) -> None:
    runtime = Runtime(lowered.module, "simulated")
    reference = parse_module(MLP, make_context(), "mlp.mlir")
    for batch in (3, 7):
        args = _inputs(batch)
        (out,) = runtime.run(*args)
        np.testing.assert_array_equal(out, run(reference, *args)[0])
    assert runtime.device.counts["launch"] == 2 and not runtime.stats["host_steps"]
    assert runtime.describe().startswith("1 kernel(s) compiled for sm_80, running on simulated device (CPU)")


def test_device_path_launches_with_the_recorded_geometry(lowered) -> None:
    (handle,) = kernel_handles(lowered.module).values()
    entry = handle.entry
    drv = RecordingDriver(arch=(8, 0))
    runtime = Runtime(lowered.module, CudaDevice(driver=drv), graphs=False)
    args = _inputs(5)
    (out,) = runtime.run(*args)

    assert drv.calls["cuModuleLoadData"] == 1
    (launch,) = drv.launches
    dims = {"M": 5}
    assert launch["name"] == entry.name  # the configuration's entry
    assert launch["grid"] == entry.grid(dims) and launch["block"] == entry.block and launch["smem"] == handle.smem
    (step,) = next(iter(runtime._bound.values())).steps
    # x, w, bias, out, then every GEMM dim: M from the run, N and K from the record
    assert [kind for kind, _ in step.args] == ["ptr"] * 4 + ["int"] * 3
    assert list(step.args[4:]) == [("int", 5), ("int", 256), ("int", 64)]
    # Inputs reached the device byte for byte, in the kernel's role order.
    pointers = dict(zip([p.name for p in entry.params], (value for _, value in step.args)))
    for role, array in zip(handle.roles, args):
        assert drv.read(pointers[role], array.nbytes) == array.tobytes()
    # The host got back what the device holds at the output (no kernel ran: zeros).
    assert drv.read(pointers["out"], out.nbytes) == out.tobytes() and out.shape == (5, 256)


def test_runtime_dims_follow_the_kernel_inputs(lowered) -> None:
    (handle,) = kernel_handles(lowered.module).values()
    assert runtime_dims(handle.entry.spec, {"x": np.zeros((2, 3, 64))}) == {"M": 6}
    assert prod(handle.entry.output_shape({"M": 6})) == 6 * 256


def test_missing_cubin_is_a_clear_error(lowered, tmp_path: Path) -> None:
    handles = {k: dataclasses.replace(h, path=tmp_path / "gone.cubin") for k, h in kernel_handles(lowered.module).items()}
    with pytest.raises(PartitaError, match="the cubin of @cutlass_sm80 is gone"):
        LaunchPlan(lowered.module, CudaDevice(driver=RecordingDriver(arch=(8, 0))), handles=handles)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_kernel_matches_the_reference(tmp_path: Path) -> None:  # pragma: no cover - no GPU in CI
    import partita

    device = CudaDevice()
    exe = partita.compile(MLP, [f"cuda -arch={device.arch}", "cutlass", "llvm"], partitioner="eager", cache_dir=tmp_path)
    runtime = Runtime(exe.module, device)
    reference = parse_module(MLP, make_context(), "mlp.mlir")
    for batch in (33, 1, 0):
        args = _inputs(batch)
        (out,) = runtime.run(*args)
        np.testing.assert_allclose(out.astype(np.float32), run(reference, *args)[0].astype(np.float32), rtol=2e-2, atol=2e-2)
