"""Partita's flash attention kernel: an estimate of its share of the H100's dense f16 peak
from its sm_90 SASS and occupancy (no GPU needed), and, with a CUDA device, its measured
time against the FLOPs of ``B x H x Sq x Skv x D`` attention.

The estimate (printed as such) is an issue model of one SM sub-partition running one
key tile per warp:

- ``hmma``: the ``HMMA.16816`` per tile (from the SASS); at the H100's dense f16 peak
  (989 TFLOPS, 132 SMs, 1.83 GHz: 1024 FLOP per clock per sub-partition) one
  m16n8k16 MMA (4096 FLOP) issues every 4 clocks; ``mma.sync`` (not ``wgmma``) reaches
  about ``MMA_SYNC_SHARE`` of that on Hopper, so an HMMA costs ``4 / MMA_SYNC_SHARE``.
- ``other``: the other instructions of the tile, one issue slot each: the body of the
  loop over the tiles whole for every row of the block (the kernel's shorter HMMA loop;
  the masked tiles, a partial last one or the causal diagonal, run another).
- The wgmma form (``--wgmma``, sm_90a): an ``HGMMA.64xNx16`` of a warpgroup spreads its
  ``2 * 64 * N * 16`` FLOP over the four sub-partitions, ``N / 2`` clocks each at the peak;
  each of the warpgroup's warps issues it once.
- ``mufu``: ``MUFU.EX2`` runs at 16 results a clock an SM, 8 clocks a warp instruction.
- A block's warps run each phase of a tile together (its barriers), so the tensor work,
  the issue slots (``mma + other``) and the MUFU pipe overlap only across blocks: with two
  blocks or more an SM (the occupancy from ptxas's registers and shared memory) a tile
  costs the largest of the three, else their sum (less the MMAs' own issue).

    python benchmarks/bench_attention.py [--dtype f16] [--head-dim 128] [--seq 2048]
"""

from __future__ import annotations

import argparse
import re

import numpy as np

from partita.lowering import nvrtc
from partita.lowering.cubin import sass_by_function, sass_listing, sass_loops
from partita.lowering.cuda.flash_attention import FlashConfig, flash_attention_source
from partita.runtime.profile import time_steps

PEAK_TFLOPS = 989.4
"""H100 SXM dense f16 / bf16 tensor-core peak."""
SM_COUNT, REGISTERS, SMEM, MAX_WARPS = 132, 65536, 227 * 1024, 64
MMA_SYNC_SHARE = 0.66
"""Share of the wgmma peak ``mma.sync`` sustains on sm_90 (measured by others; an input to
the estimate, not a measurement here)."""


def sass_estimate(config: FlashConfig) -> dict:
    binary = nvrtc.compile_cuda(flash_attention_source(config), arch="sm_90a" if config.wgmma else "sm_90",
                                options=["--ptxas-options=-v"], use_cache=False)
    text = sass_by_function(sass_listing(binary.cubin))[config.entry].split(".section")[0]
    # The key-tile loops: those holding HMMAs. The kernel has two (FlashAttention-2's): the
    # tiles whole for every row of the block, then the masked ones (a partial last tile,
    # the causal diagonal, a key mask). Long sequences spend nearly all their tiles in the
    # first, the shorter body, which is the one estimated.
    tile = min((loop for loop in sass_loops(text) if any("MMA" in line for line in loop)), key=len)
    report = binary.log.split(f"Function properties for {config.entry}")[1].split("Compile time")[0]
    regs = int(re.search(r"Used (\d+) registers", report).group(1))
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report).groups()
    threads = 32 * config.warps
    blocks = min(REGISTERS // (regs * threads), SMEM // config.shared_bytes, MAX_WARPS // config.warps, 32)
    warps_per_subpartition = blocks * config.warps / 4
    widths = [int(n) for line in tile for n in re.findall(r"HGMMA\.64x(\d+)x16", line)]
    n_hmma = len(widths) or sum("HMMA" in line for line in tile)
    other = len(tile) - n_hmma
    if widths:  # a sub-partition's share of each warpgroup MMA
        flop = sum(2 * 64 * n * 16 / 4 for n in widths)
        mma_clocks = sum(n / 2 for n in widths)
    else:
        flop = n_hmma * 4096
        mma_clocks = n_hmma * 4 / MMA_SYNC_SHARE
    mufu_clocks = 8 * sum("MUFU" in line for line in tile)
    clocks = max(mma_clocks, n_hmma + other, mufu_clocks) if blocks >= 2 else mma_clocks + other + mufu_clocks
    share = flop / clocks / 1024
    return {"entry": config.entry, "registers": regs, "spill_bytes": spills, "blocks_per_sm": blocks,
            "warps_per_subpartition": warps_per_subpartition, "hmma_per_tile": n_hmma,
            "other_per_tile": other, "ldg128": text.count("LDG.E.128"), "est_share_of_peak": share}


def measure(config: FlashConfig, batch: int, heads: int, seq: int) -> float | None:
    from partita.runtime.cuda import CudaDevice, cuda_status

    if cuda_status() is not None:
        print(f"no measurement: {cuda_status()}")
        return None
    import ml_dtypes

    device = CudaDevice()
    arch = "sm_90a" if config.wgmma else device.arch
    module = device.load_module(nvrtc.compile_cuda(flash_attention_source(config), arch=arch).cubin)
    dtype = np.float16 if config.dtype == "f16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    shape = (batch, heads, seq, config.head_dim)
    arrays = [rng.standard_normal(shape).astype(dtype) for _ in range(3)]
    bufs = [device.to_device(a) for a in arrays]
    out = device.alloc(arrays[0].nbytes)
    args = [("ptr", int(b)) for b in bufs] + [("ptr", 0), ("ptr", int(out)), ("i32", heads), ("i32", heads),
                                              ("i32", seq), ("i32", seq), ("f32", config.head_dim ** -0.5),
                                              ("i64", 0), ("i64", 0), ("i64", 0)]  # row strides: BSHD only
    smem = config.dynamic_smem  # Q's rows and the K / V stages past D = 64: opted in past 48 KiB
    launch = device.prepare_launch(module.kernel(config.entry, smem), config.grid(batch, heads, seq), config.block,
                                   smem, args)
    (seconds,) = time_steps(device, [launch], repeat=10, warmup=2)
    ms = seconds * 1e3
    flop = 4 * batch * heads * seq * seq * config.head_dim * (0.5 if config.causal else 1.0)
    tflops = flop / (ms * 1e-3) / 1e12
    print(f"measured: {ms * 1e3:.1f} us, {tflops:.1f} TFLOPS = {100 * tflops / PEAK_TFLOPS:.1f}% of the H100 dense peak")
    return ms


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    parser.add_argument("--head-dim", type=int, default=None)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--wgmma", action="store_true", help="the sm_90a wgmma form")
    args = parser.parse_args(argv)
    dims = [args.head_dim] if args.head_dim else [64, 128, 256]
    for d in dims:
        config = FlashConfig(args.dtype, d, causal=args.causal, wgmma=args.wgmma)
        est = sass_estimate(config)
        print(f"{est['entry']}: {est['registers']} registers, spills {est['spill_bytes']}, "
              f"{est['blocks_per_sm']} blocks/SM ({est['warps_per_subpartition']:g} warps per sub-partition), "
              f"{est['hmma_per_tile']} {'HGMMA' if config.wgmma else 'HMMA'} + {est['other_per_tile']} other "
              "instructions per key tile, "
              f"{est['ldg128']} LDG.E.128 -> est. {100 * est['est_share_of_peak']:.0f}% of the H100 f16 peak "
              f"(estimate from SASS, sequences long enough that the key loop dominates)")
        measure(config, args.batch, args.heads, args.seq)


if __name__ == "__main__":
    main()
