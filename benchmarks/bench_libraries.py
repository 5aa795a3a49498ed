"""TFLOP/s of cuBLASLt against Partita's CUTLASS kernels (and the native CUDA GEMM) on one
GEMM: 4096x4096x4096 f16 by default (``--dtype bf16``), and the encoder's GEMM shapes with
``--encoder``. On an H100/H200 a second CUTLASS column times the CUTLASS 3 Hopper kernel
(TMA + wgmma) that ``sm_90a`` builds beside the Sm80 one.
Each backend is timed as Collage's ``cost=measure`` does it (``CandidateTimer``): lowered
by its codegen, loaded as a launch plan (library plans made at load), each step timed with CUDA events.

    python benchmarks/bench_libraries.py [--m 4096 --n 4096 --k 4096] [--encoder] [--batch 32]

Needs a CUDA device (and ``pip install 'partita[cublas]'``); prints why not otherwise.
"""

from __future__ import annotations

import argparse

from xdsl.dialects.func import FuncOp

from partita.dialects import make_context
from partita.ir import parse_module
from partita.runtime.cuda import CudaDevice, cuda_available
from partita.transforms.collage.measure import CandidateTimer

BACKENDS = ("cublas", "cutlass", "cuda")


def dense(m: int, n: int, k: int, dtype: str = "f16") -> str:
    t = lambda s: f"tensor<{s}x{dtype}>"  # noqa: E731
    return (f"func.func @main(%x: {t(f'{m}x{k}')}, %w: {t(f'{n}x{k}')}) -> {t(f'{m}x{n}')} {{\n"
            f"  %0 = nn.dense %x, %w : ({t(f'{m}x{k}')}, {t(f'{n}x{k}')}) -> {t(f'{m}x{n}')}\n"
            f"  func.return %0 : {t(f'{m}x{n}')}\n}}\n")


def shapes(args: argparse.Namespace) -> list[tuple[str, int, int, int]]:
    if not args.encoder:
        return [("square", args.m, args.n, args.k)]
    tokens = args.batch * 16  # the bundled encoder: seq 16, hidden 64, ffn 256
    return [("qkv/out proj", tokens, 64, 64), ("ffn up", tokens, 256, 64), ("ffn down", tokens, 64, 256)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--encoder", action="store_true")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    args = parser.parse_args()
    if not cuda_available():
        print("no CUDA device: nothing to time (the roofline's figures are in partita/collage/devices.json)")
        return
    device = CudaDevice()
    # the default cubin cache: a second run (or a warmed cache) skips the cold NVRTC compiles
    timers = {b: CandidateTimer(device, warmup=5, repeat=20) for b in BACKENDS}
    if device.arch in ("sm_90", "sm_90a"):
        timers["cutlass sm_90a"] = CandidateTimer(device, arch="sm_90a", warmup=5, repeat=20)
    print(f"{device.name} ({device.arch}), {args.dtype}")
    print(f"{'shape':14} {'M x N x K':>20} " + " ".join(f"{b:>16}" for b in timers))
    for label, m, n, k in shapes(args):
        func = next(op for op in parse_module(dense(m, n, k, args.dtype), make_context()).ops
                    if isinstance(op, FuncOp))
        ops = [op for op in func.body.block.ops if op.name.startswith("nn.")]
        cells = []
        for column, timer in timers.items():
            seconds = timer.time(ops, column.split()[0])
            cells.append("n/a" if seconds is None else f"{2 * m * n * k / seconds / 1e12:10.1f} TF/s")
        print(f"{label:14} {f'{m} x {n} x {k}':>20} " + " ".join(f"{c:>16}" for c in cells))
    for column, timer in timers.items():
        if timer.unmeasured:
            print(f"not measured ({column}):", timer.unmeasured)


if __name__ == "__main__":
    main()
