"""A fused native kernel timed on a CUDA device, beside its reference: what the kernel
benchmarks (``bench_row_kernels.py``, ``bench_nbits.py``) measure with."""

from __future__ import annotations

import tempfile

import numpy as np
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp

from partita.lowering.cuda.codegen import program_of
from partita.lowering.cuda.records import RECORDS, fused_record
from partita.runtime.profile import time_steps
from partita.runtime.reference import run


def time_fused_kernel(device, module: ModuleOp, kernel, inputs: list[np.ndarray],
                      repeat: int) -> tuple[np.ndarray, np.ndarray, float]:
    """``(want, got, seconds)``: the reference executor's output of ``kernel``'s fused
    function of ``module`` on ``inputs``, the kernel's own (compiled for the device, launched
    as its record says: one launch, or a split-K GEMM's two) as f32, and its seconds per
    call by the plan's step clock (``time_steps``, 3 warm-up launches)."""
    from partita.lowering import nvrtc

    (fn,) = [f for f in module.ops if isinstance(f, FuncOp) and f.sym_name.data == kernel.function]
    clone = fn.clone()
    clone.sym_visibility = StringAttr("public")
    (want,) = run(ModuleOp([clone]), *inputs, entry=kernel.function)
    record = RECORDS[kernel.kind].from_attr(fused_record(kernel))
    bufs = [device.to_device(a) for a in inputs]
    out = device.alloc(want.nbytes)
    try:
        with tempfile.TemporaryDirectory() as cache:
            loaded = device.load_module(nvrtc.compile_cuda(program_of(module).code, arch=device.arch,
                                                           cache_dir=cache).cubin)
            shapes = [a.shape for a in inputs]
            dims = record.runtime_dims(shapes)
            # its record's launches: two for a split-K GEMM (the K slices, then their sum)
            workspace = record.workspace_bytes(shapes, want.shape)
            if workspace:
                bufs.append(device.alloc(workspace))
            launches = [device.prepare_launch(loaded.kernel(record.entry), grid, block, 0,
                                              record.args([int(b) for b in bufs[:len(inputs)]], int(out), dims,
                                                          int(bufs[-1]) if workspace else 0, k_slices))
                        for grid, block, k_slices in record.launches(shapes, want.shape)]
            seconds = sum(time_steps(device, launches, repeat=repeat, warmup=3))
            got = device.from_device(out, want.shape, want.dtype).astype(np.float32)
            loaded.unload()
    finally:
        for b in [*bufs, out]:
            device.free(b)
    return want, got, seconds
