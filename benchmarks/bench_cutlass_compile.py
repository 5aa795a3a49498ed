"""Cold vs warm NVRTC compile time of CUTLASS modules with 1, 4 and 16 distinct kernels.

Usage: python benchmarks/bench_cutlass_compile.py [--arch sm_80] [--jobs 2] [--sizes 1,4,16]

Each case compiles into a fresh temporary cache (cold), then again from that
cache (warm: no NVRTC work).  With ``--jobs N`` > 1 a module's kernels are split
into N independent programs compiled in parallel worker processes (NVRTC holds
the GIL, so threads do not overlap; processes use every core).  The 16-kernel
case runs once.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from partita.lowering import nvrtc
from partita.lowering.cutlass import KernelSpec, choose_config, emit_module


def distinct_kernels(n: int, sm: int):
    """n specs whose CUTLASS kernel types all differ."""
    specs = []
    for ep in ("none", "bias", "bias_relu", "bias_gelu"):
        specs.append(KernelSpec.dense(4096, 4096, 1024, "float16", ep))   # 128x128 tile
        specs.append(KernelSpec.dense(64, 256, 256, "float16", ep))       # 64x64 tile
        specs.append(KernelSpec.dense(1024, 1024, 1024, "float32", ep))   # SIMT
    for ep in ("none", "bias", "bias_relu"):
        specs.append(KernelSpec.conv2d((8, 56, 56, 64), (64, 3, 3, 64), padding=1, epilogue=ep))
    specs.append(KernelSpec.batch_matmul(16, 512, 512, 64))
    ks = [(f"tvmgen_default_cutlass_main_{i}", s, choose_config(s, sm)) for i, s in enumerate(specs)]
    # interleave so that splitting into programs mixes the kinds
    ks = ks[::2] + ks[1::2]
    out = ks[:n]
    assert len(out) == n
    assert len({c.name for _, _, c in out}) == n, "kernels must be distinct"
    return out


def run_case(n: int, arch: str, jobs: int) -> tuple[float, float, int]:
    sm = int(arch.split("_")[1])
    ks = distinct_kernels(n, sm)
    parts = max(1, min(jobs, n))
    sources = [emit_module(ks[i::parts]) for i in range(parts)]
    with tempfile.TemporaryDirectory(prefix="partita-bench-") as tmp:
        cache = Path(tmp)
        t0 = time.perf_counter()
        bins = nvrtc.compile_many(sources, jobs=jobs, arch=arch, cache_dir=cache)
        cold = time.perf_counter() - t0
        assert len(bins) == parts and not any(b.cache_hit for b in bins)
        size = sum(len(b.cubin) for b in bins)
        t0 = time.perf_counter()
        warm_bins = nvrtc.compile_many(sources, jobs=jobs, arch=arch, cache_dir=cache)
        warm = time.perf_counter() - t0
        assert all(b.cache_hit for b in warm_bins)
    return cold, warm, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_80")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--sizes", default="1,4,16")
    args = ap.parse_args()
    print(f"NVRTC {'.'.join(map(str, nvrtc.nvrtc_version()))}, arch {args.arch}, jobs {args.jobs}")
    print(f"{'kernels':>8} {'programs':>9} {'cold [s]':>9} {'warm [ms]':>10} {'cubin KB':>9}")
    for n in (int(x) for x in args.sizes.split(",")):
        cold, warm, size = run_case(n, args.arch, args.jobs)
        print(f"{n:>8} {max(1, min(args.jobs, n)):>9} {cold:>9.2f} {warm * 1e3:>10.2f} "
              f"{size / 1024:>9.0f}", flush=True)


if __name__ == "__main__":
    main()
