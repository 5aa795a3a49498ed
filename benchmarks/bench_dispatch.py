"""Host time per kernel launch of the launch plan, on the simulated device with kernels as
no-ops (so only dispatch is measured), eager and graph mode, on the 12-layer encoder; plus
the same loop on a CUDA device driven through the recording driver (every driver call a
Python call that returns at once: the cost of ``cuda.bindings`` itself is not in it).

    python benchmarks/bench_dispatch.py [--layers 12] [--batch 8] [--runs 200]

Goal (issue 11): at most 5 us of host time per kernel in eager mode, one host call per run
in graph mode.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import partita
from partita.runtime.device import SimulatedDevice
from partita.runtime.plan import Runtime

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ["cuda -arch=sm_90", "cutlass", "llvm"]


def make_encoder(layers: int):
    spec = importlib.util.spec_from_file_location("make_models", ROOT / "examples" / "make_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_encoder(layers=layers, dtype=np.float16)


def inputs(exe, batch: int) -> list[np.ndarray]:
    from partita.dialects.nn import numpy_dtype

    rng = np.random.default_rng(0)
    return [rng.standard_normal([batch if d < 0 else d for d in t.get_shape()]).astype(numpy_dtype(t.element_type))
            for t in exe.entry_function().function_type.inputs.data]


def measure(runtime: Runtime, args, runs: int) -> tuple[float, int]:
    runtime.run(*args)  # bind (and capture) once
    start = time.perf_counter()
    for _ in range(runs):
        runtime.run(*args)
    per_run = (time.perf_counter() - start) / runs
    (bound,) = runtime._bound.values()
    return per_run, len(bound.steps)


def step_loop(runtime: Runtime, runs: int) -> float:
    """Seconds per kernel of the bare launch loop (what eager mode adds per kernel)."""
    (bound,) = runtime._bound.values()
    steps, stream = bound.steps, runtime.stream
    start = time.perf_counter()
    for _ in range(runs):
        for step in steps:
            step(stream)
    return (time.perf_counter() - start) / (runs * len(steps))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--cache-dir", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        exe = partita.compile(make_encoder(args.layers), TARGETS, cache_dir=args.cache_dir or tmp)
    x = inputs(exe, args.batch)
    print(f"encoder, {args.layers} layers (f16), batch {args.batch}, {args.runs} runs")
    for graphs in (False, True):
        device = SimulatedDevice(execute=False)
        runtime = Runtime(exe.module, device, graphs=graphs)
        per_run, kernels = measure(runtime, x, args.runs)
        mode = "graph" if graphs else "eager"
        line = f"  simulated, {mode:5s}: {per_run * 1e6:8.1f} us/run, {kernels} kernels, {per_run / kernels * 1e6:5.2f} us/kernel (whole run)"
        if not graphs:
            line += f", {step_loop(runtime, args.runs) * 1e6:5.2f} us/kernel (launch loop alone)"
        else:
            before = device.counts["graph_launch"]
            runtime.run(*x)
            line += f", {device.counts['graph_launch'] - before} graph launch per run"
        print(line)
        runtime.close()
    sys.path.insert(0, str(ROOT / "tests"))
    from support.recording_driver import RecordingDriver

    from partita.runtime.cuda import CudaDevice

    for graphs in (False, True):
        drv = RecordingDriver()
        runtime = Runtime(exe.module, CudaDevice(driver=drv), graphs=graphs)
        per_run, kernels = measure(runtime, x, args.runs)
        drv.reset()
        runtime.run(*x)
        calls = sum(v for k, v in drv.calls.items() if not k.endswith(":bytes"))
        mode = "graph" if graphs else "eager"
        print(f"  recording CUDA driver, {mode:5s}: {per_run * 1e6:8.1f} us/run, {per_run / kernels * 1e6:5.2f} us/kernel, "
              f"{calls} driver calls per run ({drv.calls['cuLaunchKernel']} cuLaunchKernel, {drv.calls['cuGraphLaunch']} cuGraphLaunch)")
        runtime.close()

    class NullLaunchDriver(RecordingDriver):
        """Launches that return at once: the runtime's own cost per cuLaunchKernel."""

        def cuLaunchKernel(self, *args):
            return (0,)

    drv = NullLaunchDriver()
    runtime = Runtime(exe.module, CudaDevice(driver=drv), graphs=False)
    runtime.run(*x)
    print(f"  CUDA device, driver launches as no-ops, eager: {step_loop(runtime, args.runs) * 1e6:5.2f} us/kernel (launch loop alone)")
    runtime.close()


if __name__ == "__main__":
    main()
