"""``tune-cutlass-kernels``: each CUTLASS partition's kernel chosen by timing, as TVM's
``tune_cutlass_kernels`` and CUTLASS's profiler choose.

``cutlass-codegen`` takes a kernel configuration per problem from its tuning tables
(``partita.lowering.cutlass.tuning``), chosen ahead of time. This pass, run before it on
a machine with the GPU, times the alternatives instead:

1. for each ``cutlass`` partition function, the configurations the codegen builds for
   its problem (``kernel_candidates``: the table's, then the others of
   ``SM90_CANDIDATES`` on ``sm=90a`` or of ``SM80_CANDIDATES``: tiles, 2-CTA clusters,
   schedules, pipeline depths);
2. every candidate of every partition is compiled at once (one ``cutlass-codegen`` run:
   its NVRTC programs side by side, into the cubin cache), then each one's launch plan is
   timed on the device (``CandidateTimer``, as ``collage-partition{cost=measure}`` times
   candidates; run-time dims take ``dynamic-dim``); a candidate that fails to build or run
   is left out;
3. the fastest is pinned on the function (``cutlass.kernel = "<label>"``), which
   ``cutlass-codegen`` then builds.

The times of every problem tuned are kept in ``cutlass-tuning.json`` in ``cache-dir``
(or the file ``record`` names; by arch, the problem's spec and the run-time dim size), so a
later compile of any model with that problem times nothing. With ``measure=false`` the pass only pins the
winners the file holds (no GPU needed); each run's choices are in ``reports``.
"""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass

from partita.dialects import byoc
from partita.ir import PartitaError
from partita.lowering.cutlass.codegen import (
    COMPILER,
    CutlassCodegen,
    cutlass_functions,
    kernel_candidates,
    partition_kernel,
    sm_option,
)
from partita.lowering.cutlass.options import function_options
from partita.lowering.cutlass.tuning import KERNEL_ATTR
from partita.lowering.functions import outline_compiler_partitions
from partita.lowering.nvrtc import default_cache_dir
from partita.runtime.contracts import TimingDevice
from partita.runtime.cuda import CudaError
from partita.transforms.collage.measure import CandidateTimer, candidate_module, open_timing_device

__all__ = ["TUNING_FILE", "TuneCutlassKernels", "TuningChoice"]

TUNING_FILE = "cutlass-tuning.json"
"""The tuning record in the cache directory: ``{"version": 1, "problems": {key: {"kernel":
label, "seconds": {label: seconds or null}}}}``."""
_VERSION = 1


@dataclass(frozen=True)
class TuningChoice:
    """One partition's choice: the kernel pinned and every candidate's seconds (``None``:
    it did not build or run), or ``measured`` False when the record held it."""

    function: str
    kernel: str
    seconds: dict[str, float | None]
    measured: bool


@dataclass(frozen=True)
class TuneCutlassKernels(ModulePass):
    """Times each cutlass partition's candidate kernels on the GPU and pins the fastest."""

    name = "tune-cutlass-kernels"

    sm: int | str = 0
    """As ``cutlass-codegen``'s (``90a``: the Hopper candidates); 0 takes the cutlass
    target's."""
    cache_dir: str | None = None
    """Cubin cache and tuning record directory; default ``$PARTITA_CACHE_DIR`` or
    ``~/.cache/partita``."""
    record: str = ""
    """The tuning record's path; default ``cache-dir``'s ``cutlass-tuning.json``."""
    measure: bool = True
    """False: pin the record's winners only, time nothing."""
    dynamic_dim: int = 1
    """The size of every run-time dim while timing (part of the record's key)."""
    measure_device: TimingDevice | None = field(default=None, compare=False, repr=False)
    """The device to time on, owned by whoever made the pass; ``None``: each run opens the
    first CUDA device when it has something to time, and closes it."""
    reports: list[list[TuningChoice]] = field(default_factory=list, init=False, compare=False, repr=False)
    """Each run's choices, oldest first."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.dynamic_dim < 1:
            raise PartitaError(f"{self.name}: dynamic-dim must be >= 1, got {self.dynamic_dim}")
        outline_compiler_partitions(op, COMPILER)
        functions = cutlass_functions(op)
        number, suffix = sm_option(f"pass '{self.name}'", self.sm)
        options = function_options(functions, number)
        hopper = suffix == "a" and options.sm == 90
        arch = f"sm_{options.sm}{'a' if hopper else ''}"
        path = Path(self.record) if self.record else Path(self.cache_dir or default_cache_dir()) / TUNING_FILE
        record = _read(path)
        work = []  # (function, its ops, its candidates, record key, the record's entry or None)
        for function in functions:
            if KERNEL_ATTR in function.attributes:  # pinned by hand: kept
                continue
            kernel = partition_kernel(function)
            labels = kernel_candidates(kernel, options, hopper)
            key = json.dumps([arch, self.dynamic_dim, asdict(kernel.spec)], sort_keys=True)
            known = record.get(key)
            known = known if known is not None and known["kernel"] in labels else None
            if len(labels) > 1 and (known is not None or self.measure):
                work.append((function, _body(function), labels, key, known))
        to_time = [(ops, labels) for _, ops, labels, _, known in work if known is None]
        choices: list[TuningChoice] = []
        with ExitStack() as stack:
            if to_time:  # the device first: without one, nothing is compiled in vain
                device = self.measure_device or open_timing_device(
                    stack, f"{self.name}: timing kernels", "measure=false pins the recorded winners only")
                timer = CandidateTimer(device, arch=arch, cache_dir=self.cache_dir, dynamic_dim=self.dynamic_dim)
                self._prebuild(ctx, to_time, f"{options.sm}a" if hopper else options.sm)
            for function, ops, labels, key, known in work:
                if known is not None:
                    seconds, measured = known["seconds"], False
                else:
                    seconds, measured = {label: _time(timer, ops, label) for label in labels}, True
                timed = {label: s for label, s in seconds.items() if s is not None and label in labels}
                if not timed:
                    continue
                best = min(timed, key=timed.__getitem__)
                function.attributes[KERNEL_ATTR] = StringAttr(best)
                record[key] = {"kernel": best, "seconds": seconds}
                choices.append(TuningChoice(function.sym_name.data, best, dict(seconds), measured))
        if any(c.measured for c in choices):
            _write(path, record)
        self.reports.append(choices)

    def _prebuild(self, ctx: Context, work: list[tuple[list[Operation], list[str]]], sm: int | str) -> None:
        """Compiles every candidate kernel of ``work`` (each partition's ops and labels)
        in one ``cutlass-codegen`` run, whose NVRTC programs build side by side into the
        cubin cache, so each candidate timed after finds its cubin. A program that fails
        leaves the others built; its candidates fail again, alone, when timed."""
        module = ModuleOp([])
        for i, (ops, labels) in enumerate(work):
            for j, label in enumerate(labels):
                (function,) = candidate_module(ops, f"tune_{i}_{j}").ops
                function.detach()
                function.attributes[byoc.COMPILER] = StringAttr(COMPILER)
                function.attributes[KERNEL_ATTR] = StringAttr(label)
                module.body.block.add_op(function)
        try:
            CutlassCodegen(sm=sm, cache_dir=self.cache_dir).apply(ctx, module)
        except PartitaError:
            pass


def _body(function: FuncOp) -> list[Operation]:
    """A partition function's ops, its return left out: what a candidate clones."""
    return [o for o in function.body.block.ops if not isinstance(o, ReturnOp)]


def _time(timer: CandidateTimer, ops: list[Any], label: str) -> float | None:
    """Seconds of the candidate pinned to ``label``; None when it does not build or run."""
    try:
        return timer.time(ops, "cutlass", label)
    except (PartitaError, CudaError):
        return None


def _read(path: Path) -> dict[str, Any]:
    """The record's problems; none for a missing, unreadable or other-version file (it is
    rewritten whole after the next tuning)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != _VERSION or not isinstance(data.get("problems"), dict):
        return {}
    return {key: problem for key, problem in data["problems"].items() if _well_formed(problem)}


def _well_formed(problem: Any) -> bool:
    """``{"kernel": label, "seconds": {label: seconds or null}}`` (a problem otherwise is
    tuned again)."""
    if not isinstance(problem, dict) or not isinstance(problem.get("kernel"), str):
        return False
    seconds = problem.get("seconds")
    return isinstance(seconds, dict) and all(s is None or isinstance(s, int | float) and not isinstance(s, bool)
                                             for s in seconds.values())


def _write(path: Path, problems: dict[str, Any]) -> None:
    """Atomically: a concurrent compile reads the old record or the new one, whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"version": _VERSION, "problems": problems}, indent=1, sort_keys=True))
    os.replace(tmp, path)
