"""Kernel argument layouts (``partita.runtime.arguments``): the C ABI of a launch's
parameter buffer, and a launch plan that builds each layout once, at load (checked
against the kernel's cubin there), and only fills values when it binds a new shape
signature."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest
from support.artifact_files import reseal

import partita
from partita.dialects import make_context
from partita.ir import PartitaError, parse_module
from partita.runtime.arguments import ArgumentLayout, ArgumentLayouts, pack_kernel_args
from partita.runtime.device import SimulatedDevice
from partita.runtime.plan import Runtime
from partita.runtime.reference import run
from partita.runtime.validate import CheckedDevice

# Two native kernels with different parameter lists: the element-wise one reads x and b
# (ptr, ptr, ptr, int), the softmax row kernel reads x alone (ptr, ptr, int).
MODEL = """
func.func @main(%x: tensor<?x64xf32>, %b: tensor<64xf32>) -> (tensor<?x64xf32>, tensor<?x64xf32>) {
  %0 = nn.bias_add %x, %b : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %1 = nn.relu %0 : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %2 = nn.softmax %x : (tensor<?x64xf32>) -> tensor<?x64xf32>
  func.return %1, %2 : tensor<?x64xf32>, tensor<?x64xf32>
}
"""
TARGETS = ("cuda -arch=sm_90", "llvm")
KINDS = {("ptr", "ptr", "ptr", "int"), ("ptr", "ptr", "int")}


@pytest.fixture(scope="module")
def exe():
    return partita.compile(MODEL, targets=TARGETS, partitioner="eager")


@pytest.fixture
def built(monkeypatch) -> list[tuple[str, ...]]:
    """The kind lists ``ArgumentLayout.of`` builds layouts for, in order."""
    seen: list[tuple[str, ...]] = []
    original = ArgumentLayout.of.__func__

    def counting(cls, kinds):
        layout = original(cls, kinds)
        seen.append(layout.kinds)
        return layout

    monkeypatch.setattr(ArgumentLayout, "of", classmethod(counting))
    return seen


def test_layout_follows_the_c_abi() -> None:
    layout = ArgumentLayout.of(["int", "ptr", "f32", "i64", "u32"])
    # An 8-byte argument after a 4-byte one is aligned up; the buffer ends on 8 bytes.
    assert layout.offsets == (0, 8, 16, 24, 32) and layout.sizes == (4, 8, 4, 8, 4) and layout.size == 40
    buffer = layout.pack([-3, 0x7F00_0000_1000, 1.5, -(2**40), 2**32 - 1])
    assert len(buffer) == 40 and buffer[4:8] == bytes(4) and buffer[36:] == bytes(4)  # padding is zero
    assert struct.unpack_from("<i", buffer, 0)[0] == -3
    assert struct.unpack_from("<Q", buffer, 8)[0] == 0x7F00_0000_1000
    assert struct.unpack_from("<f", buffer, 16)[0] == 1.5
    assert struct.unpack_from("<q", buffer, 24)[0] == -(2**40)
    assert struct.unpack_from("<I", buffer, 32)[0] == 2**32 - 1
    assert ArgumentLayout.of(["int", "int"]).size == 8  # no 8-byte argument: no padding to 8
    with pytest.raises(ValueError, match="negative pointer"):
        layout.pack([0, -1, 0.0, 0, 0])
    with pytest.raises(ValueError, match="unknown kernel argument kind"):
        ArgumentLayout.of(["ptr", "f16"])
    with pytest.raises(ValueError, match="4 argument values for 5"):
        layout.pack([0, 0, 0.0, 0])


def test_a_plan_builds_each_layout_once_at_load_and_binds_only_values(exe, built) -> None:
    reference = parse_module(MODEL, make_context(), "model.mlir")
    runtime = Runtime(exe.module, "simulated", graphs=False)
    try:
        # Every layout exists once the plan is loaded, before any shape is known ...
        assert sorted(built) == sorted(KINDS) and len(runtime.plan.checked_device.layouts) == 2
        at_load = list(built)
        rng = np.random.default_rng(0)
        bias = rng.standard_normal(64).astype(np.float32)
        for batch in (1, 3, 5, 3, 1, 7):
            x = rng.standard_normal((batch, 64)).astype(np.float32)
            got = runtime.run(x, bias)
            want = run(reference, x, bias)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        bound = list(runtime._bound.values())
        launches = [step for b in bound for step in b.steps if hasattr(step, "args")]
        prepared = len(launches)
        kinds = {tuple(kind for kind, _ in launch.args) for launch in launches}
        assert runtime.stats["binds"] == 4 and runtime.stats["runs"] == 6
        assert kinds == KINDS
        assert prepared == 4 * 2  # two kernels, packed for each of the four signatures
        # ... and binding four signatures and six runs built none: one layout per
        # parameter list for the whole plan, not one per packed launch.
        assert built == at_load and len(runtime.plan.checked_device.layouts) == 2
        for launch in launches:  # and each launch's buffer holds its own values in it
            assert bytes(launch.params) == pack_kernel_args(launch.args)[0]
        dims = sorted({launch.args[-1][1] for launch in launches if len(launch.args) == 4})
        assert dims == [1, 3, 5, 7]  # the run-time batch dim, filled per signature
    finally:
        runtime.close()


def test_a_layout_no_call_reported_at_load_is_an_invariant_not_a_user_error() -> None:
    layouts = ArgumentLayouts()
    layout = layouts.add(["ptr", "int"])
    assert layouts.add(("ptr", "int")) is layout and layouts[("ptr", "int")] is layout and len(layouts) == 1
    with pytest.raises(AssertionError, match="built at load"):
        layouts[("ptr", "ptr", "int")]


def _one_more_dim(text: str) -> str:
    """The element-wise kernel's record given one more run-time dim than its cubin's
    kernel takes: its launches would pack (ptr, ptr, ptr, int, int)."""
    records = re.findall(r'\{[^{}]*kind = "fused"[^{}]*\}', text)
    assert len(records) == 1, records
    dims = "dims = [[0 : i64, 0 : i64]]"  # the batch dim of x
    assert dims in records[0], records[0]
    edited = records[0].replace(dims, "dims = [[0 : i64, 0 : i64], [0 : i64, 0 : i64]]")
    return text.replace(records[0], edited)


def test_a_record_its_cubin_contradicts_is_refused_at_load(exe, built, tmp_path, monkeypatch) -> None:
    binds: list[object] = []
    monkeypatch.setattr(CheckedDevice, "prepare_launch", lambda self, *args, **kw: binds.append(args))
    saved = tmp_path / "model.partita"
    exe.save(saved)
    edited = tmp_path / "edited.partita"
    edited.write_bytes(reseal(saved.read_bytes(), _one_more_dim))
    loaded = partita.load(edited)
    with pytest.raises(PartitaError, match=r"packs arguments as \(offset, size\) \[\(0, 8\), \(8, 8\), \(16, 8\), "
                                           r"\(24, 4\), \(28, 4\)\], but the kernel takes") as refused:
        loaded.load(SimulatedDevice())
    # located at the call (file:line:col of the module), and refused before any bind
    where = r"edited\.partita:module\.mlir:\d+:\d+: error: 'byoc\.call_extern' op kernel 'main_fused_0' of @\w+: "
    assert re.search(where, str(refused.value)), str(refused.value)
    assert not binds and ("ptr", "ptr", "ptr", "int", "int") in built
