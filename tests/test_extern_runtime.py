"""Extern calls at run time: CPU emulation without a device, and the device path driven
through a fake device that records what a real one would be asked to do."""

from __future__ import annotations

from math import prod
from pathlib import Path

import numpy as np
import pytest

from partita.ir import PartitaError, make_context, parse_module
from partita.runtime.cuda import cuda_available
from partita.runtime.extern import ExternRuntime, ModuleRunner, kernel_handles, runtime_dims
from partita.runtime.reference import run

from fake_cuda import FakeDevice  # tests/fake_cuda.py

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
    exe = partita.compile(MLP, ["cuda -arch=sm_80", "cutlass", "llvm"], partitioner="eager", cache_dir=cache)
    return exe


def _inputs(batch: int) -> list[np.ndarray]:
    rng = np.random.default_rng(batch)
    return [(rng.standard_normal(s) * 0.1).astype(np.float16) for s in [(batch, 64), (256, 64), (256,)]]


def test_without_a_device_extern_calls_are_emulated(lowered) -> None:
    runner = ModuleRunner(lowered.module, ExternRuntime(kernel_handles(lowered.module), device=None))
    reference = parse_module(MLP, make_context(), "mlp.mlir")
    for batch in (3, 7):
        args = _inputs(batch)
        (out,) = runner.run(*args)
        np.testing.assert_array_equal(out, run(reference, *args)[0])
    assert dict(runner.runtime.emulated) == {"tvmgen_default_cutlass_main_0": 2}
    assert not runner.runtime.launches
    assert runner.runtime.describe() == "kernels compiled for sm_80 but emulated on the CPU (no CUDA device)"


def test_device_path_launches_with_the_recorded_geometry(lowered) -> None:
    handles = kernel_handles(lowered.module)
    (handle,) = handles.values()
    entry = handle.entry
    device = FakeDevice()
    runner = ModuleRunner(lowered.module, ExternRuntime(handles, device=device))
    args = _inputs(5)
    (out,) = runner.run(*args)

    (module,) = device.modules
    assert module.cubin == Path(handle.path).read_bytes()
    ((name, grid, block, kernel_args, smem),) = module.launched
    dims = {"M": 5}
    assert name == "tvmgen_default_cutlass_main_0"
    assert grid == entry.grid(dims) and block == entry.block and smem == handle.smem
    assert [kind for kind, _ in kernel_args] == ["ptr", "ptr", "ptr", "ptr", "int"]
    assert kernel_args[-1] == ("int", 5)
    # Inputs reached the device byte for byte, in the kernel's role order.
    pointers = dict(zip([p.name for p in entry.params], (value for _, value in kernel_args)))
    for role, array in zip(handle.roles, args):
        assert device.memory[pointers[role]].tobytes() == array.tobytes()
    # The result is what the "kernel" wrote, not an emulation.
    assert out.shape == (5, 256) and np.all(out.view(np.uint16) == 0x0707)
    assert dict(runner.runtime.launches) == {"tvmgen_default_cutlass_main_0": 1}
    assert device.freed == 4


def test_runtime_dims_follow_the_kernel_inputs(lowered) -> None:
    (handle,) = kernel_handles(lowered.module).values()
    assert runtime_dims(handle.entry.spec, {"x": np.zeros((2, 3, 64))}) == {"M": 6}
    assert prod(handle.entry.output_shape({"M": 6})) == 6 * 256


def test_missing_cubin_is_a_clear_error(lowered, tmp_path: Path) -> None:
    import dataclasses

    handles = {k: dataclasses.replace(h, path=tmp_path / "gone.cubin") for k, h in kernel_handles(lowered.module).items()}
    runner = ModuleRunner(lowered.module, ExternRuntime(handles, device=FakeDevice()))
    with pytest.raises(PartitaError, match="the cubin of @cutlass_sm80 is gone"):
        runner.run(*_inputs(2))


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_kernel_matches_the_reference(lowered) -> None:  # pragma: no cover - no GPU in CI
    runner = ModuleRunner(lowered.module)
    reference = parse_module(MLP, make_context(), "mlp.mlir")
    args = _inputs(33)
    (out,) = runner.run(*args)
    np.testing.assert_allclose(out.astype(np.float32), run(reference, *args)[0].astype(np.float32), rtol=2e-2, atol=2e-2)
    assert runner.runtime.launches
