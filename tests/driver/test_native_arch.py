"""``cuda -arch=native``, ``partita.compile``'s default: the arch of the GPU present, asked of
the driver (the recording stand-in here), so an H100 gets the Hopper-native CUTLASS 3 kernels
without being told; sm_90 where there is no GPU."""

from __future__ import annotations

import pytest
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py
from xdsl.dialects.builtin import StringAttr

import partita
import partita.driver
from partita.dialects import byoc
from partita.driver import NATIVE_FALLBACK_ARCH, NATIVE_FALLBACK_DEVICE, resolve_native
from partita.target import CompilationConfig
from partita.transforms.collage.families import cutlass_sm

RELU = """
func.func @main(%x: tensor<?x64xf16>) -> tensor<?x64xf16> {
  %0 = nn.relu %x : (tensor<?x64xf16>) -> tensor<?x64xf16>
  func.return %0 : tensor<?x64xf16>
}
"""


@pytest.mark.parametrize(("capability", "arch", "sm"), [((9, 0), "sm_90a", "90a"), ((8, 0), "sm_80", 80),
                                                        ((8, 9), "sm_89", 89), ((10, 0), "sm_100", 100)])
def test_native_is_the_arch_of_the_gpu_present(capability, arch, sm) -> None:
    """Hopper gets the arch-specific target (its TMA + wgmma kernels need it), and the
    cutlass target follows the cuda target's arch; the fallback device is kept."""
    config = CompilationConfig("cuda -arch=native,cutlass,llvm", "cpu")
    resolved, _ = resolve_native(config, "h100", RecordingDriver(arch=capability))
    assert resolved.target_for_kind("cuda").get("arch") == arch and cutlass_sm(resolved) == sm
    assert resolved.default_device is config.default_device and len(resolved) == 3


@pytest.mark.parametrize("driver", [RecordingDriver(devices=0), RecordingDriver(version=12080),
                                    RecordingDriver(fail={"cuInit": 100})])
def test_native_without_a_usable_gpu_is_sm_90(driver) -> None:
    resolved, _ = resolve_native(CompilationConfig("cuda -arch=native,cutlass,llvm"), "h100", driver)
    assert resolved.target_for_kind("cuda").get("arch") == NATIVE_FALLBACK_ARCH == "sm_90"
    assert cutlass_sm(resolved) == 90


def test_an_explicit_arch_and_device_are_not_asked_of_the_driver() -> None:
    driver = RecordingDriver(arch=(8, 0))
    config = CompilationConfig("cuda -arch=sm_90a,cutlass,llvm")
    assert resolve_native(config, "h100", driver) == (config, "h100") and not driver.calls
    resolved, spec = resolve_native(CompilationConfig("cuda -arch=native,cutlass,llvm"), "native", driver)
    assert driver.calls["cuDeviceGet"] == 1  # both resolved from one question
    assert resolved.target_for_kind("cuda").get("arch") == "sm_80" and spec == "h100"


def test_compile_builds_for_the_native_arch_by_default(monkeypatch, tmp_path) -> None:
    """partita.compile's default targets ask for the GPU present: with an H100 there, the
    kernels are built for sm_90a and the config says so."""
    monkeypatch.setattr(partita.driver, "present_device", lambda ordinal, driver: ("sm_90", "NVIDIA H100 80GB HBM3"))
    exe = partita.compile(RELU, cache_dir=tmp_path)
    assert exe.config.target_for_kind("cuda").get("arch") == "sm_90a"
    archs = {op.attributes["arch"] for op in exe.module.walk() if isinstance(op, byoc.BinaryOp)}
    assert archs == {StringAttr("sm_90a")}


class _Named(RecordingDriver):
    """The recording driver with a device name of its own."""

    def __init__(self, name: bytes, **kwargs):
        super().__init__(**kwargs)
        self.name = name

    def cuDeviceGetName(self, size, device):
        return self._call("cuDeviceGetName", self.name)


@pytest.mark.parametrize(("name", "spec"), [(b"NVIDIA H200", "h200"), (b"NVIDIA H100 80GB HBM3", "h100"),
                                            (b"NVIDIA A100-SXM4-80GB", "a100"), (b"NVIDIA L40S", "h100")])
def test_the_native_cost_model_device_is_the_gpu_present(name, spec) -> None:
    """Collage's roofline spec by the GPU's name (an H200's bandwidth is not an H100's);
    one devices.json does not describe, or no GPU, is estimated as an H100."""
    config = CompilationConfig("cuda -arch=sm_90,cutlass,llvm")
    assert resolve_native(config, "native", _Named(name))[1] == spec
    assert resolve_native(config, "native", RecordingDriver(devices=0))[1] == NATIVE_FALLBACK_DEVICE == "h100"
    assert resolve_native(config, "a100", _Named(b"NVIDIA H200"))[1] == "a100"  # an explicit spec stays
