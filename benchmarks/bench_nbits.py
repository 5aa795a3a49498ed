"""Weight-only 4-bit GEMMs (``nn.matmul_nbits``) from a decode step to a prefill: one
``[rows, K] @ dequantize(W)ᵀ`` projection of an LLM (``N = K = 4096``, blocks of 32, f16
activations by default) at several row counts.

The kernel holds two schedules and its rows choose at launch (``schedules.GEMV_ROWS``): a
warp per output, which reads each packed weight row once per row of ``x``, or 128x128
tensor-core tiles, which stage each weight tile once per 128 rows. For each row count it
prints the schedule taken (``tiles/8K``: the tiles in 8 K slices, split-K), the FLOPs, the weight bytes each schedule moves (``weight MB``;
the first pass from DRAM, the rest from L2 when the packed weight fits it) against the
GEMV-only kernel before the tiles (``GEMV MB``), and, from the sm_90 SASS of the kernel,
its HMMA, 128-bit load and spill counts. With a CUDA device each launch is also timed with
CUDA events through the plan's step clock (``time_steps``), checked against the reference,
and its TFLOP/s printed.

    python benchmarks/bench_nbits.py [--n 4096] [--k 4096] [--rows 1,4,16,128,2048] [--dtype f16]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
from fused_launch import time_fused_kernel  # benchmarks/fused_launch.py
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import PassPipeline

from partita.dialects import make_context
from partita.ir import parse_module
from partita.lowering.cuda.codegen import program_of
from partita.lowering.cuda.records import RECORDS, fused_record
from partita.transforms import get_all_passes

NUMPY = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
L2_BYTES = 50 * 2**20
"""H100's L2 cache."""


def module_of(n: int, k: int, block: int, dtype: str) -> ModuleOp:
    """``nn.matmul_nbits`` of ``?`` rows, fused (``fuse-native-kernels``)."""
    x, w = f"tensor<?x{k}x{dtype}>", f"tensor<{n}x{k // 2}xui8>"
    s, z, y = f"tensor<{n}x{k // block}x{dtype}>", f"tensor<{n}x{k // block}xui8>", f"tensor<?x{n}x{dtype}>"
    text = (f"func.func @nbits(%x: {x}, %w: {w}, %s: {s}, %z: {z}) -> {y} {{\n"
            f"  %0 = nn.matmul_nbits %x, %w, %s, %z {{block_size = {block} : i64}} : ({x}, {w}, {s}, {z}) -> {y}\n"
            f"  func.return %0 : {y}\n}}\n")
    ctx = make_context()
    module = parse_module(text, ctx, "bench.mlir")
    PassPipeline.parse_spec(get_all_passes(), "fuse-native-kernels").apply(ctx, module)
    return module


def sass_counts(code: str, entry: str) -> str:
    """``HMMA / LDG.E.128 / spills`` of the kernel's sm_90 SASS, or why there is none."""
    try:
        from partita.lowering import nvrtc
        from partita.lowering.cubin import sass_listing

        sass = sass_listing(nvrtc.compile_cuda(code, arch="sm_90").cubin)
    except Exception as err:  # noqa: BLE001 - no NVRTC / nvdisasm: no SASS column
        return f"(no SASS: {err})"
    text = sass.split(f".text.{entry}:")[1].split(".section")[0]
    hmma, wide, local = (len(re.findall(p, text)) for p in (r"\bHMMA\b", r"LDG\.E\.128", r"\b(?:LDL|STL)\b"))
    return f"sm_90 SASS: {hmma} HMMA, {wide} LDG.E.128, {local} local-memory accesses"


def weight_traffic(passes: int, weight: int) -> str:
    """``MB`` of weight reads: the first pass from DRAM, the rest from L2 when it fits."""
    if passes <= 1:
        return f"{weight / 1e6:.1f}"
    where = "L2" if weight <= L2_BYTES else "DRAM"
    return f"{weight / 1e6:.1f} + {(passes - 1) * weight / 1e6:.0f} {where}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--rows", default="1,4,16,128,2048")
    parser.add_argument("--dtype", choices=sorted(NUMPY), default="f16")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    from partita.runtime.cuda import CudaDevice, cuda_available, cuda_status

    device = CudaDevice() if cuda_available() else None
    print(f"{device.name} ({device.arch}): measured with CUDA events" if device is not None
          else f"no CUDA device ({cuda_status()}): estimates only")
    module = module_of(args.n, args.k, args.block, args.dtype)
    program = program_of(module)
    (kernel,) = program.kernels.values()
    record = RECORDS[kernel.kind].from_attr(fused_record(kernel))
    print(f"{args.n}x{args.k} 4-bit weight, blocks of {args.block}, {args.dtype} activations; "
          f"{kernel.kind} kernel, warp per output up to {record.gemv_rows} rows; {sass_counts(program.code, kernel.entry)}")
    weight = args.n * args.k // 2
    print(f"{'rows':>5} {'schedule':>12} {'GFLOP':>7} {'weight MB':>16} {'GEMV MB':>16} {'us':>8} {'TFLOP/s':>8}")
    for rows in (int(r) for r in args.rows.split(",")):
        gemv = rows <= record.gemv_rows
        passes = rows if gemv else -(-rows // record.tile)
        flops = 2.0 * rows * args.n * args.k
        slices = record.slices([(rows, args.k)], (rows, args.n))  # split-K: K slices, then their sum
        schedule = "warp" if gemv else "tiles" if slices == 1 else f"tiles/{slices}K"
        line = (f"{rows:>5} {schedule:>12} {flops / 1e9:>7.2f} {weight_traffic(passes, weight):>16} "
                f"{weight_traffic(rows, weight):>16}")
        if device is not None:
            seconds = measure(device, kernel, module, rows, args)
            line += f" {seconds * 1e6:>8.1f} {flops / seconds / 1e12:>8.1f}"
        print(line, flush=True)


def measure(device, kernel, module: ModuleOp, rows: int, args) -> float:
    """Seconds per launch with the record's geometry for ``rows`` rows (checked against the
    reference, which must agree to f16 rounding)."""
    rng = np.random.default_rng(0)
    t, blocks = NUMPY[args.dtype], args.k // args.block
    inputs = [rng.standard_normal((rows, args.k)).astype(t),
              rng.integers(0, 256, (args.n, args.k // 2)).astype(np.uint8),
              (rng.random((args.n, blocks)) * 0.02).astype(t), rng.integers(0, 16, (args.n, blocks)).astype(np.uint8)]
    want, got, seconds = time_fused_kernel(device, module, kernel, inputs, args.repeat)
    scale = float(np.abs(want.astype(np.float32)).max()) or 1.0
    if float(np.abs(got - want.astype(np.float32)).max()) > 2e-2 * scale:
        raise SystemExit(f"{rows} rows: the kernel does not match the reference")
    return seconds


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
