"""Bandwidth of the native row kernels: softmax, layer_norm, rms_norm, a row sum, and a
layer_norm with its residual add fused in (the prologue), over ``[rows, cols]`` rows.

For each kernel it prints the schedule ``cuda-codegen`` chose (``row_stats.RowSchedule``:
warp or block per row, threads, rows per block, 16-byte vectors or scalar loads), the
passes over the row, the bytes a perfect kernel moves (inputs read once, output written
once), and an estimate of the DRAM bytes this one moves: the statistics pass reads the row
from DRAM, the output pass again, from L2 when the rows in flight fit the L2 (the device's
resident rows times the row's bytes), from DRAM otherwise. ``share`` is perfect / estimated
bytes: the fraction of the HBM bandwidth the kernel's traffic allows (an upper bound:
latency and issue limits are not modelled). With NVRTC, the SASS counts of 128-bit and
narrower global loads and of local-memory spills are printed too. With a CUDA device,
each kernel is also launched with its record's geometry, checked against the reference,
timed with CUDA events, and its measured GB/s of the perfect bytes printed, with the share
of the device's HBM bandwidth.

    python benchmarks/bench_row_kernels.py [--rows 4096] [--cols 768,1024,4096,8192] [--dtype f16]
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
from partita.transforms import get_all_passes

NUMPY = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}
L2_BYTES = 50 * 2**20
"""H100's L2 cache."""
SMS, THREADS_PER_SM = 132, 2048
"""H100 SXM: streaming multiprocessors, resident threads per SM."""
HBM_GBS = {"H100": 3350.0, "H200": 4800.0}
"""HBM bandwidth by device name (GB/s, SXM parts)."""

KERNELS = {
    "softmax": "%0 = nn.softmax %x {{axis = 1 : i64}} : ({X}) -> {X}",
    "layer_norm": "%0 = nn.layer_norm %x, %g, %b {{axis = 1 : i64, epsilon = 1.0e-05 : f64}} : ({X}, {C}, {C}) -> {X}",
    "rms_norm": "%0 = nn.rms_norm %x, %g {{axis = 1 : i64, epsilon = 1.0e-06 : f64}} : ({X}, {C}) -> {X}",
    "reduce_sum": "%0 = nn.reduce_sum %x {{axes = array<i64: 1>, keepdims = true}} : ({X}) -> {Y}",
    "add+layer_norm": ("%r0 = nn.add %x, %r : ({X}, {X}) -> {X}\n  "
                       "%0 = nn.layer_norm %r0, %g, %b {{axis = 1 : i64, epsilon = 1.0e-05 : f64}} : ({X}, {C}, {C}) -> {X}"),
}


def function(name: str, rows: int, cols: int, dtype: str) -> tuple[ModuleOp, list[str]]:
    """The op as a fused module (``fuse-native-kernels``) and its argument names."""
    X, C, Y = f"tensor<{rows}x{cols}x{dtype}>", f"tensor<{cols}x{dtype}>", f"tensor<{rows}x1x{dtype}>"
    body = KERNELS[name].format(X=X, C=C, Y=Y)
    args = [a for a in ("x", "r", "g", "b") if f"%{a}" in body]
    types = {"x": X, "r": X, "g": C, "b": C}
    out = Y if name == "reduce_sum" else X
    text = (f"func.func @{name.replace('+', '_')}({', '.join(f'%{a}: {types[a]}' for a in args)}) -> {out} {{\n"
            f"  {body}\n  func.return %0 : {out}\n}}\n")
    ctx = make_context()
    module = parse_module(text, ctx, "bench.mlir")
    PassPipeline.parse_spec(get_all_passes(), "fuse-native-kernels").apply(ctx, module)
    return module, args


def estimate(kernel, code: str, row_bytes: int, perfect: int, rows: int) -> tuple[int, int]:
    """(passes over the row, estimated DRAM bytes)."""
    body = code.split(f"{kernel.entry}(")[1].split('extern "C"')[0]
    passes = len(re.findall(r"for \((?:int|long long) jv? = (?:threadIdx\.x|lane);", body))
    in_flight = SMS * (THREADS_PER_SM // kernel.block) * kernel.rows_per_block * row_bytes
    reread = 0 if in_flight <= L2_BYTES else (passes - 1) * rows * row_bytes
    return passes, perfect + reread


def sass_counts(code: str, entries: list[str]) -> dict[str, tuple[int, int, int]] | None:
    """Per entry: (128-bit global loads, narrower global loads, local-memory accesses)."""
    try:
        from partita.lowering import nvrtc
        from partita.lowering.cubin import sass_listing

        sass = sass_listing(nvrtc.compile_cuda(code, arch="sm_90").cubin)
    except Exception as err:  # noqa: BLE001 - no NVRTC / nvdisasm: no SASS column
        print(f"(no SASS: {err})")
        return None
    out = {}
    for entry in entries:
        text = sass.split(f".text.{entry}:")[1].split(".section")[0]
        wide = len(re.findall(r"LDG\.E\.128", text))
        narrow = len(re.findall(r"LDG\.E(?!\.128)", text))
        out[entry] = (wide, narrow, len(re.findall(r"\b(?:LDL|STL)\b", text)))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", default="768,1024,4096,8192")
    parser.add_argument("--dtype", choices=sorted(NUMPY), default="f16")
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args(argv)
    device = None
    from partita.runtime.cuda import CudaDevice, cuda_available, cuda_status

    if cuda_available():
        device = CudaDevice()
        print(f"{device.name} ({device.arch}): measured with CUDA events")
    else:
        print(f"no CUDA device ({cuda_status()}): estimates only")
    peak = next((v for k, v in HBM_GBS.items() if device is not None and k in device.name), None)
    itemsize = np.dtype(NUMPY[args.dtype]).itemsize
    print(f"{'kernel':15} {'cols':>5} {'schedule':13} {'block':>5} {'rows/blk':>8} {'vec':>4} {'passes':>6} "
          f"{'MB min':>7} {'share':>6} {'LDG.128':>7} {'LDG<128':>7} {'spill':>5} {'us':>8} {'GB/s':>7} {'of HBM':>6}")
    for cols in (int(c) for c in args.cols.split(",")):
        modules = {name: function(name, args.rows, cols, args.dtype) for name in args.kernels.split(",")}
        programs = {name: program_of(m) for name, (m, _) in modules.items()}
        counts = {}
        for name, program in programs.items():
            entries = [k.entry for k in program.kernels.values()]
            counts[name] = (sass_counts(program.code, entries) or {}).get(entries[0])
        for name, program in programs.items():
            (kernel,) = program.kernels.values()
            module, names = modules[name]
            row_bytes = cols * itemsize * (2 if name.startswith("add+") else 1)
            out_bytes = args.rows * (1 if name == "reduce_sum" else cols) * itemsize
            perfect = args.rows * row_bytes + out_bytes + (2 * cols * itemsize if "norm" in name else 0)
            passes, dram = estimate(kernel, program.code, row_bytes, perfect, args.rows)
            vec = "128" if "partita_v16" in kernel.code else "-"
            wide, narrow, spill = counts[name] or ("?", "?", "?")
            line = (f"{name:15} {cols:>5} {kernel.schedule:13} {kernel.block:>5} {kernel.rows_per_block:>8} {vec:>4} "
                    f"{passes:>6} {perfect / 1e6:>7.1f} {perfect / dram:>6.0%} {wide!s:>7} {narrow!s:>7} {spill!s:>5}")
            if device is not None:
                line += measure(device, kernel, module, names, args, cols, perfect, peak)
            print(line, flush=True)


def measure(device, kernel, module: ModuleOp, names: list[str], args, cols: int, perfect: int, peak) -> str:
    """`` us GB/s share``: the kernel launched with its record's geometry, timed, checked."""
    rng = np.random.default_rng(0)
    shapes = {"x": (args.rows, cols), "r": (args.rows, cols), "g": (cols,), "b": (cols,)}
    inputs = [rng.standard_normal(shapes[n]).astype(NUMPY[args.dtype]) for n in names]
    want, got, seconds = time_fused_kernel(device, module, kernel, inputs, args.repeat)
    err = float(np.max(np.abs(got - want.astype(np.float32))))
    gbs = perfect / seconds / 1e9
    share = f"{gbs / peak:>6.0%}" if peak else f"{'?':>6}"
    return f" {seconds * 1e6:>8.1f} {gbs:>7.0f} {share}" + (f"  (max |err| {err:.2e})" if err > 1e-2 else "")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    main()
