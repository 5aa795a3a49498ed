"""Per-step timing of a launch plan: measuring goes through the plan that runs.

As IREE's HAL profiling and TVM's VM profiler do, a profile is the normal run of a
bound plan (inputs uploaded, steps on the one stream, outputs downloaded, one
synchronization) with a pair of device events recorded around each step: a kernel
launch, a library call, or a host step (whose pair spans its download, the NumPy work
and its upload, the stall the stream really sees). The events are read after the run's
synchronization; a step's time is the median over the timed runs. Steps run eagerly
while profiled (a CUDA graph replays as one launch, so its steps could not be told
apart). Collage's ``cost=measure`` times its candidates with this same clock
(``partita.transforms.collage.measure``), so the codebase has one timer.

A device without events (the simulated device: the CPU has no device clock) runs the
same steps, and every step's time is ``None`` ("n/a"), never an invented number.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from partita.dialects import byoc
from partita.ir import PartitaError
from partita.report import format_seconds, format_table
from partita.runtime.contracts import TimingDevice
from partita.runtime.libraries import LibraryHandle

__all__ = ["NO_CLOCK", "Profile", "StepClock", "StepTime", "time_steps"]

NO_CLOCK = "the {device} has no device clock: steps are not timed"


@dataclass(frozen=True)
class StepTime:
    """One step of a bound plan and its time per run."""

    index: int
    """Its position in the bound plan's steps."""
    label: str
    """The kernel entry, library call or host op it runs."""
    kind: str
    """``kernel``, ``library`` or ``host``."""
    partition: str | None
    """The extern function (partition) it runs; ``None`` for a host op of the entry."""
    op_index: int
    """The position of its op in the entry block (the steps of one call share it)."""
    seconds: float | None
    """Median over the timed runs; ``None`` when the device has no clock."""


@dataclass(frozen=True)
class Profile:
    """What ``Runtime.profile`` / ``Executable.profile`` measured (a value, never kept in
    a global)."""

    device: str
    runs: int
    steps: tuple[StepTime, ...]
    note: str | None = None
    """Why the steps have no times (``None`` when they were measured)."""

    @property
    def measured(self) -> bool:
        return self.note is None

    @property
    def total(self) -> float | None:
        """Sum of the steps' medians: device time per run, copies of inputs and outputs aside."""
        return sum(s.seconds for s in self.steps if s.seconds is not None) if self.measured else None

    def partitions(self) -> dict[str, float | None]:
        """Per partition symbol, the time of its steps per run (over all its calls)."""
        out: dict[str, float | None] = {}
        for step in self.steps:
            if step.partition is not None:
                out[step.partition] = _add(out.get(step.partition, 0.0), step.seconds)
        return out

    def by_op(self) -> dict[int, float | None]:
        """Per op of the entry block (a call, a host op), the time of its steps per run."""
        out: dict[int, float | None] = {}
        for step in self.steps:
            out[step.op_index] = _add(out.get(step.op_index, 0.0), step.seconds)
        return out

    def format(self) -> str:
        """The steps, then the partitions, as tables (``n/a`` where nothing was timed)."""
        def time(seconds: float | None) -> str:
            return "n/a" if seconds is None else format_seconds(seconds)

        rows = [(str(s.index), s.kind, s.partition or "-", s.label, time(s.seconds)) for s in self.steps]
        head = f"profile on {self.device}: {self.runs} timed run(s), median per step"
        lines = [head + (f" ({self.note})" if self.note else ""),
                 format_table(("step", "kind", "partition", "what it runs", "time"), rows)]
        partitions = self.partitions()
        if partitions:
            lines.append(format_table(("partition", "time per run"), [(p, time(t)) for p, t in partitions.items()]))
        lines.append(f"total (steps): {time(self.total)}")
        return "\n".join(lines)


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


class StepClock:
    """The run loop with a pair of events around each step (created once, reused by
    every run); ``collect()`` after the run's synchronization reads them. On a device
    without events it only runs the steps.

    With ``burst`` above 1 each step is enqueued that many times between its events and
    timed as their mean: the host's work for one copy (a library's Python call, tens of
    microseconds) then overlaps the device's run of the one before, where with a single
    copy the device sits idle inside the events for all of it. Only for steps that may
    run again on their own outputs (a candidate's, a benchmark's kernels)."""

    def __init__(self, device: Any, count: int, burst: int = 1):
        if burst < 1:
            raise PartitaError(f"a step clock needs burst >= 1, got {burst}")
        self.device = device
        self.burst = burst
        self.timing = isinstance(device, TimingDevice)
        self.samples: list[list[float]] = [[] for _ in range(count)]
        self.events: list[tuple[Any, Any]] = []
        if self.timing:
            try:
                for _ in range(count):
                    start = device.create_event()
                    try:
                        self.events.append((start, device.create_event()))
                    except BaseException:
                        device.destroy_event(start)
                        raise
            except BaseException:
                self.close()
                raise

    def __call__(self, steps: Sequence[Callable[[Any], None]], stream: Any, first: int = 0) -> None:
        """Runs ``steps``, timed as the run's steps ``first``, ``first + 1``... (a plan
        with stages gives its steps a stage at a time)."""
        if not self.timing:
            for step in steps:
                step(stream)
            return
        record = self.device.record_event
        for step, (start, stop) in zip(steps, self.events[first:first + len(steps)], strict=True):
            record(start, stream)
            for _ in range(self.burst):
                step(stream)
            record(stop, stream)

    def collect(self) -> None:
        """Reads the run's events (its stream is synchronized)."""
        for samples, (start, stop) in zip(self.samples, self.events):
            samples.append(self.device.elapsed_ms(start, stop) / 1e3 / self.burst)

    def seconds(self) -> list[float | None]:
        """Per step, the median of its samples (``None`` without a clock)."""
        if not self.timing:
            return [None] * len(self.samples)
        return [statistics.median(s) if s else None for s in self.samples]

    def profile(self, device: str, runs: int, ops: Sequence[Any], calls: Mapping[Any, Any],
                steps: Sequence[Any], step_ops: Sequence[Any]) -> Profile:
        """The collected times as a ``Profile``: each step named by what it runs and by the
        op of the entry block (``ops``) it comes from (``step_ops``); ``calls``: the plan's
        prepared extern calls by op (a call without a compiled kernel is a host step)."""
        index = {op: i for i, op in enumerate(ops)}
        out = []
        for k, (step, op, seconds) in enumerate(zip(steps, step_ops, self.seconds(), strict=True)):
            call = calls.get(op)
            if isinstance(op, byoc.CallExternOp):
                partition = op.callee.string_value()
                if call is None or call.prepared is None:
                    kind = "host"
                else:
                    kind = "library" if isinstance(call.handle, LibraryHandle) else "kernel"
            else:
                partition, kind = None, "host"
            label = getattr(step, "label", None) or getattr(getattr(step, "function", None), "name", None) or op.name
            out.append(StepTime(k, str(label), kind, partition, index[op], seconds))
        return Profile(device, runs, tuple(out), None if self.timing else NO_CLOCK.format(device=device))

    def close(self) -> None:
        events, self.events = self.events, []
        for pair in events:
            for event in pair:
                self.device.destroy_event(event)


def time_steps(device: Any, steps: Sequence[Callable[[Any], None]], *, repeat: int = 10, warmup: int = 2,
               burst: int = 1) -> list[float]:
    """Seconds per run of each of ``steps`` (prepared launches, library calls), the
    median of ``repeat`` runs after ``warmup`` untimed ones, on a stream of their own,
    with the profile's events (``burst``: see ``StepClock``): how a benchmark times
    kernels it launches outside a plan."""
    if not isinstance(device, TimingDevice):
        raise PartitaError(NO_CLOCK.format(device=getattr(device, "name", "device")))
    stream = device.create_stream()
    try:
        clock = StepClock(device, len(steps), burst)
        try:
            for _ in range(warmup):
                for step in steps:
                    step(stream)
            for _ in range(repeat):
                clock(steps, stream)
                device.synchronize(stream)
                clock.collect()
        finally:
            clock.close()
    finally:
        device.destroy_stream(stream)
    return [float(s) for s in clock.seconds() if s is not None]
