"""The device, module, launch and library-handle contracts are ``typing.Protocol``s that
the real devices, the simulated one and the test stand-ins all satisfy."""

from __future__ import annotations

import typing

import numpy as np
import pytest
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py

from partita.runtime.contracts import (
    CapturedGraph,
    Device,
    LibraryHandle,
    LoadedModule,
    PreparedLaunch,
    TimingDevice,
)
from partita.runtime.cuda import CudaDevice, CudaModule
from partita.runtime.device import Operand, SimulatedDevice
from partita.runtime.libraries import handle_class


def _members(protocol: type) -> set[str]:
    """The names a protocol asks for (its own and its bases', not ``object``'s)."""
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls in (object, typing.Protocol, typing.Generic):
            continue
        names |= {n for n in vars(cls) if not n.startswith("_")} | set(getattr(cls, "__annotations__", {}))
    return names


@pytest.mark.parametrize("device", [SimulatedDevice(), CudaDevice(driver=RecordingDriver())],
                         ids=["simulated", "cuda"])
def test_both_devices_are_launch_plan_devices(device) -> None:
    assert isinstance(device, Device)
    stream = device.create_stream()
    buf = device.alloc(64)
    device.upload(int(buf), np.arange(16, dtype=np.float32), stream)
    device.synchronize(stream)
    device.free(buf)
    device.destroy_stream(stream)


def test_the_cuda_device_times_steps_and_the_simulated_one_cannot() -> None:
    device = CudaDevice(driver=RecordingDriver())
    assert isinstance(device, TimingDevice) and isinstance(device, Device)
    assert _members(LoadedModule) <= set(dir(CudaModule))
    # The CPU has no device clock: a profile there says so instead of inventing times.
    assert not isinstance(SimulatedDevice(), TimingDevice)


def test_a_stand_in_missing_a_call_is_no_device() -> None:
    class Partial:
        name = "partial"
        simulated = True

        def alloc(self, nbytes):
            return 0

    assert not isinstance(Partial(), Device)
    assert not isinstance(Partial(), TimingDevice)


def test_simulated_launches_and_graphs_keep_the_contract() -> None:
    device = SimulatedDevice()
    module = device.load_module(b"")
    assert isinstance(module, LoadedModule)
    kernel = module.kernel("k", 0, lambda inputs, outputs: None)
    launch = device.prepare_launch(kernel, (1, 1, 1), (1, 1, 1), 0, [("ptr", 0)])
    assert isinstance(launch, PreparedLaunch)
    stream = device.create_stream()
    assert isinstance(device.capture(stream, [launch]), CapturedGraph)


@pytest.mark.parametrize("kind", ["cublaslt", "cudnn", "tensorrt"])
def test_library_handles_keep_the_contract(kind: str) -> None:
    cls = handle_class(kind)
    assert _members(LibraryHandle) <= set(dir(cls)) | set(getattr(cls, "__dataclass_fields__", {}))


def test_a_simulated_graph_keeps_the_arguments_it_captured() -> None:
    """As the driver copies a kernel node's arguments at capture: a launch patched after
    the capture (another input pointer) reaches the graph only through an update."""
    device = SimulatedDevice()
    kernel = device.load_module(b"cubin").kernel("fill", 0, lambda inputs, outputs: outputs[0].fill(1.0))
    first, second = device.alloc(16), device.alloc(16)
    launch = device.prepare_launch(kernel, (1, 1, 1), (4, 1, 1), 0, [("ptr", first)],
                                   [Operand(0, (4,), np.dtype(np.float32), output=True)])
    stream = device.create_stream()
    graph = device.capture(stream, [launch])
    launch.set_pointer(0, second)
    graph.launch(stream)
    assert device.view(first, (4,), np.float32).tolist() == [1.0] * 4
    assert device.view(second, (4,), np.float32).tolist() == [0.0] * 4  # the graph's copy is unpatched
    assert device.update_graph(graph, stream, [launch]) == "graph"
    graph.launch(stream)
    assert device.view(second, (4,), np.float32).tolist() == [1.0] * 4
