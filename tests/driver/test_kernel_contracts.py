"""Kernels with identical parameter layouts cannot be swapped in a compiled-model file:
each fused kernel's cubin holds the digest of the launch it was generated for
(``partita.lowering.cuda.contracts``), and the loader compares it with the record that
launches it before anything runs."""

from __future__ import annotations

import re

import numpy as np
import pytest
from support.artifact_files import compile_and_save, reseal  # tests/support/artifact_files.py
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py

import partita
from partita.ir import PartitaError
from partita.lowering.cubin import kernel_params, read_global
from partita.lowering.cuda.contracts import contract_digest, contract_symbol
from partita.runtime.cuda import CudaDevice
from partita.runtime.device import SimulatedDevice
from partita.runtime.extern import kernel_handles
from partita.tools import run as run_tool

# Two kernels of one parameter layout (one f32 8x32 pointer in, one out): only what they
# compute differs.
MODEL = """
func.func @main(%x: tensor<8x32xf32>, %y: tensor<8x32xf32>) -> (tensor<8x32xf32>, tensor<8x32xf32>) {
  %0 = nn.relu %x : (tensor<8x32xf32>) -> tensor<8x32xf32>
  %1 = nn.tanh %y : (tensor<8x32xf32>) -> tensor<8x32xf32>
  func.return %0, %1 : tensor<8x32xf32>, tensor<8x32xf32>
}
"""

X = np.linspace(-2, 2, 256, dtype=np.float32).reshape(8, 32)
Y = X[::-1].copy()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return compile_and_save(MODEL, "cuda -arch=sm_90,llvm", tmp_path_factory.mktemp("contracts"))


def _swap_entries(text: str) -> str:
    swapped, n = re.subn(r'entry = "main_fused_([01])"',
                         lambda m: f'entry = "main_fused_{1 - int(m.group(1))}"', text)
    assert n == 2
    return swapped


def test_the_two_kernels_share_a_parameter_layout_and_carry_their_contracts(saved) -> None:
    exe, _ = saved
    handles = kernel_handles(exe.module)
    first, second = handles["main_fused_0"], handles["main_fused_1"]
    cubin = exe.binaries.get(first.binary) or first.path.read_bytes()
    # What KPARAM_INFO can tell apart, it cannot here.
    assert kernel_params(cubin, first.record.entry) == kernel_params(cubin, second.record.entry)
    for handle in (first, second):
        held = read_global(cubin, contract_symbol(handle.record.entry))
        assert held == contract_digest(handle.function, handle.kind, handle.record)
    assert read_global(cubin, contract_symbol("main_fused_0")) != read_global(cubin, contract_symbol("main_fused_1"))


def test_an_unedited_file_runs(saved, tmp_path) -> None:
    path = tmp_path / "model.partita"
    path.write_bytes(reseal(saved[1]))
    relu, tanh = partita.load(path).run(X, Y)
    np.testing.assert_allclose(relu, np.maximum(X, 0))
    np.testing.assert_allclose(tanh, np.tanh(Y), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", ["simulated", "recording"])
def test_swapped_kernels_are_refused_before_any_launch(saved, tmp_path, device) -> None:
    path = tmp_path / "swapped.partita"
    path.write_bytes(reseal(saved[1], _swap_entries))
    driver = RecordingDriver()
    target = SimulatedDevice() if device == "simulated" else CudaDevice(driver=driver)
    with pytest.raises(PartitaError, match=r"kernel 'main_fused_1' of @cuda_sm90 was not generated for the launch "
                                           r"the record of @main_fused_0 describes"):
        partita.load(path).load(target).run(X, Y)
    assert not driver.launches and driver.calls["cuLaunchKernel"] == 0


def test_a_record_that_lies_about_its_ops_is_refused(saved, tmp_path) -> None:
    # Same kernel, but the record claims it computes tanh: the contract covers every field.
    path = tmp_path / "relabelled.partita"
    path.write_bytes(reseal(saved[1], lambda text: text.replace('ops = ["nn.relu"]', 'ops = ["nn.tanh"]', 1)))
    with pytest.raises(PartitaError, match="launch contract differs"):
        partita.load(path).run(X, Y)


def test_partita_run_exits_1_on_swapped_kernels(saved, tmp_path, capsys) -> None:
    path = tmp_path / "swapped.partita"
    path.write_bytes(reseal(saved[1], _swap_entries))
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=X, y=Y)
    assert run_tool.main([str(path), "--inputs", str(inputs), "--output", str(tmp_path / "out.npz")]) == 1
    err = capsys.readouterr().err
    assert "error:" in err and "the record names the wrong kernel" in err and "Traceback" not in err
    assert not (tmp_path / "out.npz").exists()
