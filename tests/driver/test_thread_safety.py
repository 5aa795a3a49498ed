"""One loaded ``Executable`` served from a thread pool: every concurrent run equals the
sequential run of the same inputs, on the simulated device and through the recording CUDA
driver (where one run's driver calls on the shared stream never interleave with another's)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py
from xdsl.dialects.builtin import TensorType

import partita
from partita.dialects.nn import numpy_dtype
from partita.runtime.cuda import CudaDevice
from partita.runtime.plan import Runtime

EXAMPLES = Path(__file__).parents[2] / "examples"
THREADS = 6
RUNS = 24


@pytest.fixture(scope="module")
def encoder():
    return partita.compile(EXAMPLES / "encoder.onnx")


def _inputs(exe, seed: int, batch: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    types = [t for t in exe.entry_function().function_type.inputs.data if isinstance(t, TensorType)]
    return [rng.standard_normal([batch if d < 0 else d for d in t.get_shape()]).astype(numpy_dtype(t.element_type))
            for t in types]


def _hammer(run, cases):
    barrier = threading.Barrier(THREADS)

    def one(i):
        if i < THREADS:
            barrier.wait()  # every worker starts together
        return run(*cases[i])

    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(one, range(len(cases))))


@pytest.mark.parametrize("shapes", ["one", "several"])
def test_concurrent_runs_equal_sequential_runs_on_the_simulated_device(encoder, shapes) -> None:
    # "several": batches of 1..3 rows, so threads also bind new shape signatures at once.
    cases = [_inputs(encoder, seed, 2 if shapes == "one" else 1 + seed % 3) for seed in range(RUNS)]
    sequential = [encoder.run(*case) for case in cases]
    encoder.load("simulated")  # a fresh runtime: binding happens under the threads too
    concurrent = _hammer(encoder.run, cases)
    for want, got in zip(sequential, concurrent, strict=True):
        for a, b in zip(want, got, strict=True):
            np.testing.assert_array_equal(b, a)


def test_first_runs_from_many_threads_load_one_runtime(encoder) -> None:
    exe = encoder
    exe._runtime = None  # the same compiled model, not yet loaded
    cases = [_inputs(exe, seed) for seed in range(THREADS)]
    _hammer(exe.run, cases)
    runtime = exe._runtime
    assert runtime is not None and runtime.stats["runs"] == THREADS  # no run went to a discarded runtime


class _ThreadLog(RecordingDriver):
    """The recording driver, noting which thread made each stream call."""

    def __init__(self):
        super().__init__()
        self.thread_log: list[tuple[int, str]] = []
        self._guard = threading.Lock()

    def _call(self, name, *values):
        with self._guard:
            self.thread_log.append((threading.get_ident(), name))
            return super()._call(name, *values)


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graph"])
def test_concurrent_runs_never_interleave_on_the_recording_driver(encoder, graphs) -> None:
    driver = _ThreadLog()
    runtime = Runtime(encoder.module, CudaDevice(driver=driver), graphs=graphs)
    cases = [_inputs(encoder, seed) for seed in range(RUNS)]
    sequential = [runtime.run(*case) for case in cases]
    driver.thread_log.clear()
    launches = len(driver.launches)
    concurrent = _hammer(runtime.run, cases)
    assert len(driver.launches) == 2 * launches  # each run launched everything it should
    for want, got in zip(sequential, concurrent, strict=True):
        for a, b in zip(want, got, strict=True):
            np.testing.assert_array_equal(b, a)
    # Each run is one contiguous stretch of stream work (uploads, launches, downloads,
    # one synchronization): no other thread's call comes in between.
    runs, current = [], None
    for thread, name in driver.thread_log:
        if name in ("cuCtxSetCurrent",):
            continue
        if current is None or current[0] != thread:
            current = (thread, [])
            runs.append(current)
        current[1].append(name)
    # (a pool thread may make several runs in a row: a stretch holds whole runs)
    assert all(names[-1] == "cuStreamSynchronize" for _, names in runs), [names[-3:] for _, names in runs]
    assert sum(names.count("cuStreamSynchronize") for _, names in runs) == RUNS
    runtime.close()
