"""End-to-end compile time of the encoder at 1, 12 and 48 layers: cold (empty cubin cache)
and warm (same cache), with the time spent in each pass.

    python benchmarks/bench_compile.py [--partitioner collage|eager] [layers ...]
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

import numpy as np

import partita

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TARGETS = ["cuda -arch=sm_90", "cutlass", "llvm"]


def make_encoder(layers: int):
    spec = importlib.util.spec_from_file_location("make_models", EXAMPLES / "make_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_encoder(layers=layers, dtype=np.float16)


def compile_once(model, partitioner: str, cache: str) -> tuple[float, partita.Executable]:
    start = time.perf_counter()
    exe = partita.compile(model, TARGETS, partitioner=partitioner, cache_dir=cache)
    return time.perf_counter() - start, exe


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("layers", nargs="*", type=int, default=[1, 12, 48])
    parser.add_argument("--partitioner", default="collage")
    args = parser.parse_args()
    print(f"encoder (hidden 64, f16), targets {','.join(TARGETS)}, partitioner {args.partitioner}")
    for layers in args.layers:
        model = make_encoder(layers)
        with tempfile.TemporaryDirectory() as cache:
            cold, exe = compile_once(model, args.partitioner, cache)
            warm, warm_exe = compile_once(model, args.partitioner, cache)
        rows = exe.report().rows
        cutlass = sum(1 for row in rows if row.kernel and row.target == "cutlass")
        native = sum(1 for row in rows if row.kernel and row.target == "cuda")
        print(f"\n{layers} layer(s): {cutlass} CUTLASS partition function(s), {native} native CUDA kernel function(s)")
        print(f"  cold {cold:7.2f} s  ({exe.compiles} NVRTC compile(s))")
        print(f"  warm {warm:7.2f} s  ({warm_exe.compiles} NVRTC compile(s), {warm_exe.cache_hits} cache hit(s))")
        cold_times, warm_times = dict(exe.pass_times), dict(warm_exe.pass_times)
        for name, seconds in exe.pass_times:
            print(f"    {name:36s} cold {seconds:7.3f} s   warm {warm_times.get(name, 0.0):7.3f} s")
        assert cold_times.keys() == warm_times.keys()


if __name__ == "__main__":
    main()
