"""The launch-plan step of a CUTLASS 3 Hopper GEMM (record kind ``cutlass_sm90``).

At load the cubin is loaded and the kernel opted in to its shared memory (over 200 KiB:
the mainloop's stages); when a shape signature is bound, the operands' TMA descriptors are
encoded (``device.encode_tensor_map``) and the kernel's ``Params`` packed once from the
layout its probe recorded (``partita.runtime.tma``); a run is then one cluster launch
(``cuLaunchKernelEx``) per call, or its replay in a CUDA graph. A split-K or stream-K kernel takes a
workspace from the plan (its f32 partials, then its reduction barriers) and a memset of the
barriers before each launch, which the kernel leaves counted up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import DictionaryAttr, StringAttr

from partita.dialects import byoc
from partita.ir import PartitaError
from partita.lowering.binaries import cubin_file
from partita.lowering.cutlass.kernels import DTYPE_BYTES, NUMPY_DTYPES, UnsupportedKernel, problem_dims
from partita.lowering.cutlass.sm90 import MMA_PROMOTION_INTERVAL, RECORD_KIND, Sm90Entry, sm90_from_record
from partita.runtime.device import Operand, check_operand_dtypes
from partita.runtime.tma import (
    StreamKSchedule,
    persistent_schedule,
    sm90_arguments,
    sm90_grid,
    sm90_pieces,
    stream_k_schedule,
)
from partita.runtime.validate import CheckedModule, as_checked, check_cutlass_contract

HOPPER_SMS = 132
"""SMs of an H100 / H200 SXM: what a persistent kernel's grid is sized for on a device that
does not say (the simulated one)."""


@dataclass(frozen=True)
class Sm90KernelHandle:
    """One extern function's Hopper GEMM, as recorded in a ``byoc.binary``."""

    function: str
    binary: str
    path: Path
    arch: str
    entry: Sm90Entry
    roles: tuple[str, ...]
    layout: dict
    kind: ClassVar[str] = RECORD_KIND

    @property
    def kernel_name(self) -> str:
        return self.entry.config.name

    @property
    def smem(self) -> int:
        return int(self.layout["smem"])

    @classmethod
    def from_record(cls, function: str, binary: byoc.BinaryOp, record: DictionaryAttr) -> Sm90KernelHandle:
        entry, roles, layout = sm90_from_record(record)
        arch = binary.attributes.get("arch")
        return cls(function, binary.sym_name.data, cubin_file(binary),
                   arch.data if isinstance(arch, StringAttr) else "", entry, roles, layout)

    def prepare(self, loader: Any) -> PreparedSm90:
        module = loader.module(self)
        kernel = module.kernel(self.entry.name, self.smem, loader.emulation)
        return PreparedSm90(self, kernel, as_checked(module), loader.multiprocessor_count or HOPPER_SMS)

    def problem_of(self, shapes: Sequence[tuple[int, ...]]) -> tuple[int, int, int, int]:
        """(M, N, K, batch) of a call on inputs of these shapes; a located error when they
        do not fit the kernel."""
        spec = self.entry.spec
        try:
            dims = problem_dims(spec, {role: tuple(shape) for role, shape in zip(self.roles, shapes)})
        except UnsupportedKernel as err:
            raise PartitaError(f"@{self.function}: {spec.op} kernel: {err}") from None
        return dims["M"], dims["N"], dims["K"], dims.get("batch", 1)

    def problem(self, inputs: Sequence[tuple[tuple[int, ...], np.dtype]], out: tuple[tuple[int, ...], np.dtype]
                ) -> tuple[int, int, int, int]:
        """(M, N, K, batch) of a call on operands of these (shape, dtype); a located error
        when they do not fit the kernel."""
        spec = self.entry.spec
        check_operand_dtypes(self.function, self.roles, inputs, out, NUMPY_DTYPES[spec.out_dtype],
                             {role: NUMPY_DTYPES[spec.role_dtype(role)] for role in self.roles})
        problem = self.problem_of([shape for shape, _ in inputs])
        if prod(problem[:2]) * problem[3] != prod(out[0]):
            raise PartitaError(f"@{self.function}: output of {tuple(out[0])} does not fit the kernel's "
                               f"{problem[3]} x {problem[0]} x {problem[1]}")
        return problem


@dataclass(frozen=True)
class PreparedSm90:
    handle: Sm90KernelHandle
    kernel: Any
    checked: CheckedModule | None = None
    """The cubin's checked module, whose launch contract the record must match."""
    sm_count: int = HOPPER_SMS
    """The device's SMs, which size a persistent kernel's grid and a stream-K kernel's
    decomposition (and so its workspace)."""

    def argument_kinds(self) -> list[tuple[Any, tuple[str, ...]]]:
        """The kernel and the pieces of its ``Params``, from the probe's recorded layout."""
        return [(self.kernel, tuple(kind for kind, *_ in sm90_pieces(self.handle.layout)))]

    zeroes_workspace: ClassVar[bool] = False
    """A split-K / stream-K kernel's workspace is scratch to the plan: the call zeroes its
    barriers itself before each launch (the kernel leaves them counted up)."""

    def workspace_bytes(self, shapes: Sequence[tuple[int, ...]], outputs: Sequence[tuple[int, ...]] = ()) -> int:
        """A split-K / stream-K kernel's partials and barriers; none for the others (the
        persistent data-parallel scheduler keeps no state in memory)."""
        if not self.handle.entry.config.stream_k_scheduler:
            return 0
        return self.stream_k(self.handle.problem_of(shapes)).workspace_bytes

    def stream_k(self, problem: tuple[int, int, int, int]) -> StreamKSchedule:
        """The stream-K scheduler's schedule of ``problem``: its split-K decomposition, or its
        heuristic one (``decomposition = "stream_k"``, one split)."""
        cfg = self.handle.entry.config
        try:
            return stream_k_schedule(problem, cfg.tile, cfg.cluster, self.sm_count, cfg.splits)
        except ValueError as err:
            raise PartitaError(f"@{self.handle.function}: {err}") from None

    def bind(self, device: Any, inputs: Sequence[Any], outputs: Sequence[Any], workspace: int | None) -> list:
        handle, entry = self.handle, self.handle.entry
        (out,) = outputs
        problem = handle.problem([(t.shape, t.dtype) for t in inputs], (out.shape, out.dtype))
        if prod(out.shape) == 0:
            return []
        # a dense's x and w are the GEMM's A and B
        operand = {role: {"x": "a", "w": "b"}.get(role, role) for role in handle.roles}
        pointers = {operand[role]: t.ptr for role, t in zip(handle.roles, inputs)}
        pointers["out"] = out.ptr
        cfg = entry.config
        schedule, sm_count = None, 0
        stream_k: StreamKSchedule | None = None
        if cfg.persistent:  # about one CTA an SM, walking the tiles
            sm_count = self.sm_count
            if cfg.stream_k_scheduler:
                stream_k = self.stream_k(problem)
                if stream_k.workspace_bytes and not workspace:
                    raise PartitaError(f"@{handle.function}: its {stream_k.mode} partials need a workspace, and the "
                                       "call has none")
            else:
                schedule = persistent_schedule(problem, cfg.tile, cfg.cluster, sm_count)
        args = sm90_arguments(handle.layout, cfg.tile, cfg.cluster, DTYPE_BYTES[entry.spec.dtype], problem,
                              pointers, entry.spec.source, device.encode_tensor_map, entry.spec.layout,
                              MMA_PROMOTION_INTERVAL, schedule, sm_count,
                              stream_k.fields(workspace or 0, sm_count) if stream_k else None, entry.spec.dtype)
        # an int8 GEMM's zero points (proven zeros) are no argument: its emulation reads them
        operands = [Operand(args.index.get(operand[role]), tuple(t.shape), np.dtype(t.dtype),
                            ptr=0 if operand[role] in args.index else t.ptr)
                    for role, t in zip(handle.roles, inputs)]
        operands.append(Operand(args.index["out"], tuple(out.shape), np.dtype(out.dtype), output=True))
        block = (int(handle.layout["threads"]), 1, 1)
        grid = stream_k.grid if stream_k else schedule.grid if schedule else sm90_grid(problem, cfg.tile, cfg.cluster)
        launch = device.prepare_launch(self.kernel, grid, block, handle.smem, list(args.args), operands,
                                       cluster=cfg.cluster)
        check_cutlass_contract(self.checked, entry, handle.function)  # after the geometry and layout checks
        if stream_k is None or not stream_k.barrier_bytes:
            return [launch]
        # the reduction barriers after the partials start at zero each run
        return [ZeroFill(device, int(workspace or 0) + stream_k.reduction_bytes, stream_k.barrier_bytes), launch]


@dataclass(frozen=True)
class ZeroFill:
    """A launch-plan step zeroing ``nbytes`` at ``ptr`` on the stream (a memset node in a
    graph): a split-K or stream-K kernel's reduction barriers before it runs."""

    device: Any
    ptr: int
    nbytes: int

    def __call__(self, stream: Any) -> None:
        self.device.memset(self.ptr, self.nbytes, stream)
