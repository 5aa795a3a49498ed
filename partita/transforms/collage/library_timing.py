"""Measured costs of library candidates (Collage's ``cost=measure``).

A candidate for ``cublas``, ``cudnn`` or ``tensorrt`` is lowered exactly as a partition
is (its codegen makes the record; a candidate the codegen rejects is unmeasurable), then
each library call is bound once (plan made as at load, buffers, workspace) and the bound
call (``partita.runtime.libraries.LibraryLaunch``, the plan's own step) timed on stream 0
with CUDA events: ``warmup`` calls, then ``rounds``
samples of ``repeat`` calls, the median sample per call. The plan is made outside the
timed region, as it is at load.

The device times calls through ``device.time_calls(fn, warmup, repeat) -> ms per call``
when it has one (test doubles), else through the CUDA driver's events on stream 0.
"""

from __future__ import annotations

import importlib
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp

from partita.dialects import byoc
from partita.ir import PartitaError
from partita.lowering.library import LIBRARY_CODEGENS
from partita.runtime.extern import kernel_handles
from partita.runtime.libraries import LibraryHandle, LibraryLaunch, library_binding


def lower_library_candidate(ctx: Context, module: ModuleOp, function: FuncOp, target: str) -> str | None:
    """Runs ``target``'s codegen on the candidate module; a reason if it rejects it."""
    module_name, cls = LIBRARY_CODEGENS[target]
    codegen = getattr(importlib.import_module(module_name), cls)()
    function.attributes[byoc.COMPILER] = StringAttr(target)
    try:
        codegen.apply(ctx, module.clone())  # a rejection must leave the module as it was
    except PartitaError:
        return f"not a {target} partition"
    codegen.apply(ctx, module)
    return None


def _event_timer(device: Any) -> Callable[[Callable[[], None], int, int], float]:
    from cuda.bindings import driver as drv

    def time(fn: Callable[[], None], warmup: int, repeat: int) -> float:
        for _ in range(warmup):
            fn()
        start, stop = device.event(), device.event()
        try:
            drv.cuEventRecord(start, 0)
            for _ in range(repeat):
                fn()
            drv.cuEventRecord(stop, 0)
            drv.cuEventSynchronize(stop)
            err, ms = drv.cuEventElapsedTime(start, stop)
            if err != drv.CUresult.CUDA_SUCCESS:
                raise PartitaError(f"cost=measure: timing a library call failed ({err})")
        finally:
            drv.cuEventDestroy(start)
            drv.cuEventDestroy(stop)
        return float(ms) / repeat

    return time


def time_library_calls(module: ModuleOp, device: Any, libraries: dict[str, Any],
                       make_array: Callable[[Any], np.ndarray], *, warmup: int, repeat: int, rounds: int) -> float:
    """Seconds per run of every library call of ``module`` (see the module doc).
    ``libraries`` caches the bindings by library name (stand-ins in tests)."""
    timer = getattr(device, "time_calls", None) or _event_timer(device)
    functions = {f.sym_name.data: f for f in module.ops if isinstance(f, FuncOp)}
    total = 0.0
    for name, handle in kernel_handles(module).items():
        if not isinstance(handle, LibraryHandle):
            continue
        lib = library_binding(libraries, handle)
        signature = functions[name].function_type
        inputs = [make_array(t) for t in signature.inputs]
        outputs = [make_array(t) for t in signature.outputs]
        plan = handle.make_plan(lib, tuple(a.shape for a in inputs), tuple(str(a.dtype) for a in inputs))
        buffers = [device.to_device(a) for a in inputs]
        out_buffers = [device.alloc(max(a.nbytes, 1)) for a in outputs]
        workspace = handle.workspace_bytes(plan)
        scratch = [device.alloc(workspace)] if workspace > 0 else []
        try:
            call = LibraryLaunch(handle, lib, plan, tuple(int(b) for b in buffers), tuple(int(b) for b in out_buffers),
                                 int(scratch[0]) if scratch else 0)
            samples = [timer(lambda call=call: call(0), warmup if k == 0 else 0, repeat) for k in range(rounds)]
        finally:
            for buffer in (*buffers, *out_buffers, *scratch):
                device.free(buffer)
        total += statistics.median(samples) / 1e3
    return total
