"""Per-step timing through the launch plan (``Runtime.profile`` / ``Executable.profile``):
device events around every step of the same bound plan a run uses, read on the recording
driver's stand-in clock; the simulated device has no clock and says so."""

from __future__ import annotations

import numpy as np
import pytest
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py

import partita
from partita.ir import PartitaError
from partita.runtime.cuda import CudaDevice
from partita.runtime.plan import Runtime
from partita.runtime.profile import Profile

HOST_SOFTMAX = """
func.func @main(%x: tensor<?x64xf32>, %w: tensor<32x64xf32>) -> tensor<?x32xf32> {
  %0 = nn.dense %x, %w : (tensor<?x64xf32>, tensor<32x64xf32>) -> tensor<?x32xf32>
  %1 = nn.softmax %0 : (tensor<?x32xf32>) -> tensor<?x32xf32>
  func.return %1 : tensor<?x32xf32>
}
"""


@pytest.fixture(scope="module")
def exe():
    # The default cubin cache: this CUTLASS kernel is compiled once per machine.
    return partita.compile(HOST_SOFTMAX, ["cutlass", "llvm"], partitioner="eager")


def _inputs(batch: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(batch)
    return [rng.standard_normal((batch, 64)).astype(np.float32), rng.standard_normal((32, 64)).astype(np.float32)]


def test_each_step_is_timed_with_events_on_the_plans_stream(exe) -> None:
    (symbol,) = [row.symbol for row in exe.partitions if row.target == "cutlass"]
    (handle,) = exe.load("simulated").handles.values()
    exe.close()
    entry = handle.entry.name  # the kernel the driver launches
    drv = RecordingDriver(arch=(8, 0), kernel_us={entry: 40.0}, copy_bytes_per_us=100.0)
    runtime = Runtime(exe.module, CudaDevice(driver=drv))
    (expected,) = runtime.run(*_inputs())
    drv.reset()

    profile = runtime.profile(*_inputs(), repeat=3, warmup=1)

    assert isinstance(profile, Profile) and profile.measured and profile.runs == 3
    kernel, host = profile.steps
    assert (kernel.kind, kernel.partition, kernel.label) == ("kernel", symbol, entry)
    assert kernel.seconds == pytest.approx(40e-6)
    # The host step's events span its download and upload of 3x32 f32 (768 bytes at
    # 100 bytes/us on the stand-in clock) and the NumPy softmax between them.
    assert (host.kind, host.partition, host.label) == ("host", None, "nn.softmax")
    assert host.seconds == pytest.approx(768 / 100 * 1e-6)
    assert profile.partitions() == {symbol: pytest.approx(40e-6)}
    assert profile.total == pytest.approx(40e-6 + 7.68e-6)
    assert profile.by_op()[kernel.op_index] == kernel.seconds and kernel.op_index < host.op_index
    # Warm-up and timed runs are whole runs of the plan: 4 launches, each run bracketed
    # by events on the runtime's one stream (2 per step), none left behind.
    assert [launch["name"] for launch in drv.launches] == [entry] * 4
    records = [entry for entry in drv.log if entry[0] == "cuEventRecord"]
    assert len(records) == 3 * 2 * 2 and {stream for _, stream, _ in records} == {runtime.stream}
    assert not drv.events
    text = profile.format()
    assert "40.00 us" in text and "7.68 us" in text and symbol in text and "n/a" not in text
    # Profiling leaves the run as it was.
    (again,) = runtime.run(*_inputs())
    np.testing.assert_array_equal(again, expected)
    runtime.close()
    runtime.device.close()
    assert drv.live() == {}


def test_the_simulated_device_runs_the_steps_but_times_nothing(exe) -> None:
    runtime = Runtime(exe.module, "simulated")
    profile = runtime.profile(*_inputs(), repeat=2, warmup=0)
    assert not profile.measured and "simulated device (CPU) has no device clock" in profile.note
    assert [s.kind for s in profile.steps] == ["kernel", "host"]
    assert all(s.seconds is None for s in profile.steps) and profile.total is None
    assert set(profile.partitions().values()) == {None}
    assert runtime.device.counts["launch"] == 2 and runtime.stats["host_steps"] == 2
    assert "n/a" in profile.format()


def test_profile_options_are_checked(exe) -> None:
    with pytest.raises(PartitaError, match="repeat >= 1"):
        exe.load("simulated").profile(*_inputs(), repeat=0)
    exe.close()


def test_the_stand_in_clock_counts_replayed_work_and_refuses_untimed_events() -> None:
    """The recording driver's events time what the stream executed, eagerly or replayed
    from a captured graph; like the driver, it refuses to time an event made without
    timing or never recorded."""
    drv = RecordingDriver(kernel_us={"k": 3.0}, copy_bytes_per_us=2.0)
    device = CudaDevice(driver=drv)
    stream = device.create_stream()
    launch = device.prepare_launch(device.load_module(b"cubin").kernel("k"), (1, 1, 1), (32, 1, 1), 0, [("ptr", 0x1000)])
    buffer, host = device.alloc(16), np.zeros(16, np.uint8)

    graph = device.capture(stream, [launch, lambda s: device.upload(int(buffer), host, s)])
    start, stop = device.create_event(), device.create_event()
    device.record_event(start, stream)
    graph.launch(stream)
    device.record_event(stop, stream)
    assert device.elapsed_ms(start, stop) == pytest.approx((3.0 + 16 / 2.0) / 1e3)
    assert drv.cuEventElapsedTime(start, drv.cuEventCreate(0)[1])[0] != 0  # never recorded
    untimed = drv.cuEventCreate(2)[1]  # CU_EVENT_DISABLE_TIMING
    drv.cuEventRecord(untimed, stream)
    assert drv.cuEventElapsedTime(start, untimed)[0] != 0


def test_events_that_cannot_be_made_are_all_released(exe) -> None:
    drv = RecordingDriver(arch=(8, 0))
    runtime = Runtime(exe.module, CudaDevice(driver=drv))
    created = []
    original = drv.cuEventCreate

    def third_fails(flags):
        if len(created) == 2:  # the second step's start event
            return (2, None)
        result = original(flags)
        created.append(result[1])
        return result

    drv.cuEventCreate = third_fails
    with pytest.raises(Exception, match="cuEventCreate"):
        runtime.profile(*_inputs(), repeat=1, warmup=0)
    assert not drv.events  # the first step's pair was destroyed
    runtime.close()
