"""CUTLASS entries of identical parameter layouts cannot be swapped in a compiled-model
file either. Each kernel configuration is a unit of its own, with one entry named after
it (``entry_name``) whose cubin holds the digest of its kernel type and ABI
(``partita.lowering.contracts``, ``EntryInfo.contract``): a record naming another entry,
or a binary holding another unit's cubin, is refused when the model is loaded or a shape
signature is bound, before anything runs."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest
from support.artifact_files import compile_and_save, reseal  # tests/support/artifact_files.py
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py

import partita
from partita.ir import PartitaError
from partita.lowering.contracts import contract_symbol
from partita.lowering.cubin import kernel_params, read_global
from partita.runtime.cuda import CudaDevice
from partita.runtime.device import SimulatedDevice
from partita.runtime.extern import kernel_handles

# Two GEMMs with a bias of one parameter layout (x, w, bias, out, M): only their epilogues
# (ReLU, GELU) differ.
MODEL = """
func.func @main(%x: tensor<?x64xf16>, %w: tensor<32x64xf16>, %b: tensor<32xf16>) -> (tensor<?x32xf16>, tensor<?x32xf16>) {
  %0 = nn.dense %x, %w : (tensor<?x64xf16>, tensor<32x64xf16>) -> tensor<?x32xf16>
  %1 = nn.bias_add %0, %b : (tensor<?x32xf16>, tensor<32xf16>) -> tensor<?x32xf16>
  %2 = nn.relu %1 : (tensor<?x32xf16>) -> tensor<?x32xf16>
  %3 = nn.dense %x, %w : (tensor<?x64xf16>, tensor<32x64xf16>) -> tensor<?x32xf16>
  %4 = nn.bias_add %3, %b : (tensor<?x32xf16>, tensor<32xf16>) -> tensor<?x32xf16>
  %5 = nn.gelu %4 : (tensor<?x32xf16>) -> tensor<?x32xf16>
  func.return %2, %5 : tensor<?x32xf16>, tensor<?x32xf16>
}
"""

RNG = np.random.default_rng(0)
X, W, B = (RNG.standard_normal(s).astype(np.float16) * 0.5 for s in ((4, 64), (32, 64), (32,)))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return compile_and_save(MODEL, "cuda -arch=sm_90,cutlass,llvm", tmp_path_factory.mktemp("cutlass_contracts"))


def _entries(exe) -> list:
    handles = [h for h in kernel_handles(exe.module).values() if getattr(h, "kind", "") == "cutlass"]
    assert sorted(h.entry.spec.epilogue for h in handles) == ["bias_gelu", "bias_relu"]
    return handles


def _swap(first: str, second: str):
    """An edit of the module text exchanging two strings."""

    def swap(text: str) -> str:
        swapped, n = re.subn(rf"{first}|{second}", lambda m: second if m.group(0) == first else first, text)
        assert n >= 2
        return swapped

    return swap


def test_the_entries_share_a_parameter_layout_and_carry_their_contracts(saved) -> None:
    exe, _ = saved
    relu, gelu = sorted(_entries(exe), key=lambda h: h.entry.spec.epilogue, reverse=True)
    assert relu.binary != gelu.binary  # two configurations: two units, two cubins
    cubins = {h: exe.binaries.get(h.binary) or h.path.read_bytes() for h in (relu, gelu)}
    assert kernel_params(cubins[relu], relu.entry.name) == kernel_params(cubins[gelu], gelu.entry.name)
    for handle in (relu, gelu):
        entry = handle.entry
        assert read_global(cubins[handle], contract_symbol(entry.name)) == entry.contract
    assert relu.entry.contract != gelu.entry.contract


def _edits(exe) -> dict[str, tuple]:
    """Each edit of the saved file (module text, parts) and the error it must meet."""
    relu, gelu = sorted(_entries(exe), key=lambda h: h.entry.spec.epilogue, reverse=True)
    cubin_digests = [hashlib.sha256(exe.binaries.get(h.binary) or h.path.read_bytes()).hexdigest() for h in (relu, gelu)]

    def swap_cubins(parts: dict[str, bytes]) -> None:
        a, b = f"cubin/@{relu.binary}", f"cubin/@{gelu.binary}"
        parts[a], parts[b] = parts[b], parts[a]

    return {
        # each record names the other configuration's entry
        "entries": ((_swap(relu.entry.name, gelu.entry.name), None), r"is not '\w+', the entry of its kernel type"),
        # each binary holds the other unit's cubin (digests recomputed, as an editor would)
        "cubins": ((_swap(*cubin_digests), swap_cubins), r"kernel '\w+' is not in the cubin of @\w+"),
    }


@pytest.mark.parametrize("edit", ["entries", "cubins"])
@pytest.mark.parametrize("device", ["simulated", "recording"])
def test_swapped_entries_are_refused_before_any_launch(saved, tmp_path, device, edit) -> None:
    exe, data = saved
    path = tmp_path / "model.partita"
    path.write_bytes(reseal(data))
    relu, gelu = partita.load(path).run(X, W, B)
    np.testing.assert_array_equal(relu, np.maximum(relu, 0))  # the unedited file runs the ReLU where it should
    assert (gelu < 0).any()

    (edit_module, edit_parts), error = _edits(exe)[edit]
    path.write_bytes(reseal(data, edit_module, edit_parts))
    driver = RecordingDriver()
    target = SimulatedDevice() if device == "simulated" else CudaDevice(driver=driver)
    with pytest.raises(PartitaError, match=error):
        partita.load(path).load(target).run(X, W, B)
    assert not driver.launches and driver.calls["cuLaunchKernel"] == 0
