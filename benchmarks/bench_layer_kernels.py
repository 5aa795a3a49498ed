"""Kernel launches per forward of the exported transformer fixtures
(``tests/models/exported``, two layers each), counted on the recording CUDA driver of the
tests (eager launches, no GPU needed), with both partitioners; prints launches per layer
and, per kernel, the ops it covers and its estimated time (``partita-run --report``).

    python benchmarks/bench_layer_kernels.py [--models bert,gpt2,llama,vit] [--report]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import partita

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from support.recording_driver import recorded_run  # noqa: E402 (tests/ on the path first)

LAYERS = 2
TARGETS = ["cuda -arch=sm_90", "cutlass", "llvm"]


def launches(name: str, partitioner: str, report: bool) -> int:
    path = ROOT / "tests" / "models" / "exported" / f"{name}.onnx"
    exe = partita.compile(path, TARGETS, partitioner=partitioner)
    sample = dict(np.load(path.with_suffix(".npz")))
    drv, _, _ = recorded_run(exe.module, exe.entry, list(sample.values()))
    if report:
        print(exe.report().table())
    return len(drv.launches)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,gpt2,llama,vit")
    parser.add_argument("--report", action="store_true")
    args = parser.parse_args(argv)
    for name in args.models.split(","):
        for partitioner in ("eager", "collage"):
            n = launches(name, partitioner, args.report)
            print(f"{name:8s} {partitioner:8s} {n:3d} launches per forward, {n / LAYERS:.1f} per layer", flush=True)


if __name__ == "__main__":
    main()
