"""The old and new schedules of a native row reduction: ``reduce_mean`` over the last axis
of a ``[rows, cols]`` tensor (4096 x 4096 f16 by default: LLaMA's RMSNorm statistics over
the hidden size), as a ``window`` kernel (one thread per output element loops over its
row: the schedule before rowwise reductions) and as the ``rowwise`` kernel ``cuda-codegen``
emits now (one block per row, strided coalesced loads, a block tree reduction). Each is
the emitter's CUDA C compiled by NVRTC for the device, launched with its record's
geometry, checked against NumPy, and timed with CUDA events; prints microseconds per
launch and the bandwidth of reading the input once.

    python benchmarks/bench_reductions.py [--rows 4096] [--cols 4096] [--dtype f16]

Needs a CUDA device; prints why not otherwise.
"""

from __future__ import annotations

import argparse
import tempfile
from unittest import mock

import ml_dtypes
import numpy as np
from xdsl.dialects.func import FuncOp

import partita.lowering.cuda.ops  # noqa: F401  (registers the lowering rules)
from partita.dialects import make_context
from partita.ir import parse_module
from partita.lowering import nvrtc
from partita.lowering.cuda.program import emit_program
from partita.lowering.cuda.records import RECORDS, fused_record
from partita.lowering.cuda.rules import ROWWISE
from partita.runtime.cuda import CudaDevice, cuda_available, cuda_status
from partita.runtime.profile import time_steps

NUMPY = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}


def reduce_mean(rows: int, cols: int, dtype: str) -> FuncOp:
    x, y = f"tensor<{rows}x{cols}x{dtype}>", f"tensor<{rows}x1x{dtype}>"
    text = (f"func.func @reduce_mean(%x: {x}) -> {y} {{\n"
            f"  %0 = nn.reduce_mean %x {{axes = array<i64: 1>}} : ({x}) -> {y}\n"
            f"  func.return %0 : {y}\n}}\n")
    return next(op for op in parse_module(text, make_context()).ops if isinstance(op, FuncOp))


def schedules(function: FuncOp) -> dict[str, object]:
    """The function's CUDA program per schedule: ``window`` with the rowwise rules set
    aside (what the emitter produced before them), and ``rowwise``."""
    with mock.patch.dict(ROWWISE, clear=True):
        window = emit_program([function])
    return {"window": window, "rowwise": emit_program([function])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--dtype", choices=sorted(NUMPY), default="f16")
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    if not cuda_available():
        print(f"no CUDA device ({cuda_status()}): nothing to time")
        return
    function = reduce_mean(args.rows, args.cols, args.dtype)
    x = np.random.default_rng(0).standard_normal((args.rows, args.cols)).astype(NUMPY[args.dtype])
    want = x.astype(np.float32).mean(axis=1, keepdims=True)
    device = CudaDevice()
    print(f"{device.name} ({device.arch}): reduce_mean over the last axis of {args.rows} x {args.cols} {args.dtype}")
    print(f"{'schedule':10} {'grid':>10} {'block':>6} {'us/launch':>11} {'GB/s':>8} {'max |err|':>10}")
    with tempfile.TemporaryDirectory() as cache:
        x_buf = device.to_device(x)
        out_buf = device.alloc(args.rows * x.itemsize)
        try:
            for name, program in schedules(function).items():
                (kernel,) = program.kernels.values()
                assert kernel.kind == name, kernel.kind
                record = RECORDS[kernel.kind].from_attr(fused_record(kernel))
                cubin = nvrtc.compile_cuda(program.code, arch=device.arch, cache_dir=cache).cubin
                module = device.load_module(cubin)
                grid, block = record.geometry((args.rows, 1))
                device.memset0(out_buf)  # what the check reads is this schedule's
                kernel_args = record.args([int(x_buf)], int(out_buf), record.runtime_dims([x.shape]))
                launch = device.prepare_launch(module.kernel(record.entry), grid, block, 0, kernel_args)
                (seconds,) = time_steps(device, [launch], repeat=args.repeat, warmup=3)
                ms = seconds * 1e3
                got = device.from_device(out_buf, (args.rows, 1), x.dtype).astype(np.float32)
                err = float(np.max(np.abs(got - want)))
                gbs = x.nbytes / (ms * 1e-3) / 1e9
                print(f"{name:10} {grid[0]:>10} {block[0]:>6} {ms * 1e3:>11.1f} {gbs:>8.1f} {err:>10.2e}")
                module.unload()
        finally:
            device.free(x_buf)
            device.free(out_buf)


if __name__ == "__main__":
    main()
