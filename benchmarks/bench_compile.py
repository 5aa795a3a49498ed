"""End-to-end compile time of the encoder at 1, 12 and 48 layers: cold (empty cubin cache)
and warm (same cache), with the time spent in each pass. ``--bert-base`` gives the encoder
BERT-base's sizes (hidden 768, 12 heads, FFN 3072, 128 tokens); ``--arch sm_90a`` compiles
for an H100 (the CUTLASS 3 Hopper kernels, each its own NVRTC program).

    python benchmarks/bench_compile.py [--partitioner collage|eager] [--arch sm_90a] [--bert-base] [layers ...]
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
BERT_BASE = {"hidden": 768, "heads": 12, "seq": 128, "ffn": 3072}


def make_encoder(layers: int, sizes: dict[str, int]):
    spec = importlib.util.spec_from_file_location("make_models", EXAMPLES / "make_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_encoder(layers=layers, dtype=np.float16, **sizes)


def compile_once(model, targets: list[str], partitioner: str, cache: str) -> tuple[float, partita.Executable]:
    start = time.perf_counter()
    exe = partita.compile(model, targets, partitioner=partitioner, cache_dir=cache)
    return time.perf_counter() - start, exe


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("layers", nargs="*", type=int, default=[1, 12, 48])
    parser.add_argument("--partitioner", default="collage")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--bert-base", action="store_true")
    args = parser.parse_args()
    targets = [f"cuda -arch={args.arch}", "cutlass", "llvm"]
    sizes = BERT_BASE if args.bert_base else {}
    print(f"encoder (hidden {sizes.get('hidden', 64)}, f16), targets {','.join(targets)}, "
          f"partitioner {args.partitioner}")
    for layers in args.layers:
        model = make_encoder(layers, sizes)
        with tempfile.TemporaryDirectory() as cache:
            cold, exe = compile_once(model, targets, args.partitioner, cache)
            warm, warm_exe = compile_once(model, targets, args.partitioner, cache)
            rows = exe.report().rows  # loads the plan: its cubins are in this cache
        cutlass = sum(1 for row in rows if row.kernel and row.target == "cutlass")
        hopper = sum(1 for row in rows if row.kernel and "sm90" in row.kernel)
        native = sum(1 for row in rows if row.kernel and row.target == "cuda")
        print(f"\n{layers} layer(s): {cutlass} CUTLASS partition function(s) ({hopper} on Hopper kernels), "
              f"{native} native CUDA kernel function(s)")
        print(f"  cold {cold:7.2f} s  ({exe.compiles} NVRTC compile(s))")
        print(f"  warm {warm:7.2f} s  ({warm_exe.compiles} NVRTC compile(s), {warm_exe.cache_hits} cache hit(s))")
        cold_times, warm_times = dict(exe.pass_times), dict(warm_exe.pass_times)
        for name, seconds in exe.pass_times:
            print(f"    {name:36s} cold {seconds:7.3f} s   warm {warm_times.get(name, 0.0):7.3f} s")
        assert cold_times.keys() == warm_times.keys()


if __name__ == "__main__":
    main()
