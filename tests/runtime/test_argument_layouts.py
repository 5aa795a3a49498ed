"""Kernel argument layouts (``partita.runtime.arguments``): the C ABI of a launch's
parameter buffer, and a launch plan that works each layout out once and only fills values
when it binds a new shape signature."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import partita
from partita.dialects import make_context
from partita.ir import parse_module
from partita.runtime.arguments import ArgumentLayout, pack_kernel_args
from partita.runtime.plan import Runtime
from partita.runtime.reference import run

# Two native kernels with different parameter lists: the element-wise one reads x and b
# (ptr, ptr, ptr, int), the softmax row kernel reads one input (ptr, ptr, int).
MODEL = """
func.func @main(%x: tensor<?x64xf32>, %b: tensor<64xf32>) -> tensor<?x64xf32> {
  %0 = nn.bias_add %x, %b : (tensor<?x64xf32>, tensor<64xf32>) -> tensor<?x64xf32>
  %1 = nn.relu %0 : (tensor<?x64xf32>) -> tensor<?x64xf32>
  %2 = nn.softmax %1 : (tensor<?x64xf32>) -> tensor<?x64xf32>
  func.return %2 : tensor<?x64xf32>
}
"""


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


def test_a_plan_builds_each_layout_once_and_binds_only_values(monkeypatch) -> None:
    exe = partita.compile(MODEL, targets=("cuda -arch=sm_90", "llvm"), partitioner="eager")
    reference = parse_module(MODEL, make_context(), "model.mlir")
    built: list[tuple[str, ...]] = []
    original = ArgumentLayout.of.__func__

    def counting(cls, kinds):
        layout = original(cls, kinds)
        built.append(layout.kinds)
        return layout

    monkeypatch.setattr(ArgumentLayout, "of", classmethod(counting))
    runtime = Runtime(exe.module, "simulated", graphs=False)
    try:
        rng = np.random.default_rng(0)
        bias = rng.standard_normal(64).astype(np.float32)
        for batch in (1, 3, 5, 3, 1, 7):
            x = rng.standard_normal((batch, 64)).astype(np.float32)
            (got,) = runtime.run(x, bias)
            (want,) = run(reference, x, bias)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        bound = list(runtime._bound.values())
        launches = [step for b in bound for step in b.steps if hasattr(step, "args")]
        prepared = len(launches)
        kinds = {tuple(kind for kind, _ in launch.args) for launch in launches}
        assert runtime.stats["binds"] == 4 and runtime.stats["runs"] == 6
        assert kinds == {("ptr", "ptr", "ptr", "int"), ("ptr", "ptr", "int")}
        assert prepared == 4 * 2  # two kernels, packed for each of the four signatures
        # One layout per parameter list for the whole plan, not one per packed launch.
        assert sorted(built) == sorted(kinds) and len(runtime.plan.checked_device.layouts) == 2
        for launch in launches:  # and each launch's buffer holds its own values in it
            assert bytes(launch.params) == pack_kernel_args(launch.args)[0]
        dims = sorted({launch.args[-1][1] for launch in launches if len(launch.args) == 4})
        assert dims == [1, 3, 5, 7]  # the run-time batch dim, filled per signature
    finally:
        runtime.close()
