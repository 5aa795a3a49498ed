"""The launch-plan step of a CUTLASS 3 Hopper GEMM (record kind ``cutlass_sm90``).

At load the cubin is loaded and the kernel opted in to its shared memory (over 200 KiB:
the mainloop's stages); when a shape signature is bound, the operands' TMA descriptors are
encoded (``device.encode_tensor_map``) and the kernel's ``Params`` packed once from the
layout its probe recorded (``partita.runtime.tma``); a run is then one cluster launch
(``cuLaunchKernelEx``) per call, or its replay in a CUDA graph.
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
from partita.runtime.tma import persistent_schedule, sm90_arguments, sm90_grid, sm90_pieces
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
        return PreparedSm90(self, kernel, as_checked(module))

    def problem(self, inputs: Sequence[tuple[tuple[int, ...], np.dtype]], out: tuple[tuple[int, ...], np.dtype]
                ) -> tuple[int, int, int, int]:
        """(M, N, K, batch) of a call on operands of these (shape, dtype); a located error
        when they do not fit the kernel."""
        spec = self.entry.spec
        check_operand_dtypes(self.function, self.roles, inputs, out, NUMPY_DTYPES[spec.out_dtype],
                             {role: NUMPY_DTYPES[spec.role_dtype(role)] for role in self.roles})
        shapes = {role: tuple(shape) for role, (shape, _) in zip(self.roles, inputs)}
        try:
            dims = problem_dims(spec, shapes)
        except UnsupportedKernel as err:
            raise PartitaError(f"@{self.function}: {spec.op} kernel: {err}") from None
        problem = (dims["M"], dims["N"], dims["K"], dims.get("batch", 1))
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

    def argument_kinds(self) -> list[tuple[Any, tuple[str, ...]]]:
        """The kernel and the pieces of its ``Params``, from the probe's recorded layout."""
        return [(self.kernel, tuple(kind for kind, *_ in sm90_pieces(self.handle.layout)))]

    def workspace_bytes(self, shapes: Sequence[tuple[int, ...]], outputs: Sequence[tuple[int, ...]] = ()) -> int:
        return 0  # not split-K, and the persistent scheduler (not stream-K) keeps no state in memory

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
        if cfg.persistent:  # about one CTA an SM, walking the tiles
            sm_count = int(getattr(device, "multiprocessor_count", 0) or HOPPER_SMS)
            schedule = persistent_schedule(problem, cfg.tile, cfg.cluster, sm_count)
        args = sm90_arguments(handle.layout, cfg.tile, cfg.cluster, DTYPE_BYTES[entry.spec.dtype], problem,
                              pointers, entry.spec.source, device.encode_tensor_map, entry.spec.layout,
                              MMA_PROMOTION_INTERVAL, schedule, sm_count)
        operands = [Operand(args.index[operand[role]], tuple(t.shape), np.dtype(t.dtype))
                    for role, t in zip(handle.roles, inputs)]
        operands.append(Operand(args.index["out"], tuple(out.shape), np.dtype(out.dtype), output=True))
        block = (int(handle.layout["threads"]), 1, 1)
        grid = schedule.grid if schedule is not None else sm90_grid(problem, cfg.tile, cfg.cluster)
        launch = device.prepare_launch(self.kernel, grid, block, handle.smem, list(args.args), operands,
                                       cluster=cfg.cluster)
        check_cutlass_contract(self.checked, entry, handle.function)  # after the geometry and layout checks
        return [launch]
