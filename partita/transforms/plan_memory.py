"""``plan-memory``: a static memory plan for the tensors a function allocates.

After ``lower-extern-calls`` every intermediate tensor of a host function is a
``byoc.alloc_tensor`` filled in place by a ``byoc.call_extern`` (destination-passing
style). This pass gives each *statically sized* allocation an offset in one arena, so the
runtime makes one allocation per function at load instead of one per tensor per run
(TVM's static graph memory planner, IREE's stream allocation):

* liveness: a buffer lives from its ``byoc.alloc_tensor`` to the last use of it or of any
  ``byoc.call_extern`` result that aliases it (result ``i`` is the ``outs`` operand ``i``);
  a buffer the function returns lives to the end;
* two buffers whose live ranges overlap never share bytes; others may (greedy, largest
  first, lowest fitting offset, as TVM's ``StorageRewrite`` / the best-fit planners do);
* offsets are multiples of ``alignment`` (256 bytes: what ``cudaMalloc`` guarantees, and
  enough for every vectorised access of the kernels).

The plan is visible in the IR: ``byoc.offset`` (i64) on each planned allocation and
``byoc.arena_size`` (i64) on the function. Dynamically sized allocations get no offset:
the runtime sizes them per input-shape signature with the same planner (``assign_offsets``)
in a second arena. The element size comes from ``nn.numpy_dtype`` so every element type
the ``nn`` dialect has is planned alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerAttr, IntegerType, ModuleOp
from xdsl.passes import ModulePass

from partita.analysis.liveness import (
    ARENA_SIZE,
    MAX_ARENA_BYTES,
    OFFSET,
    assign_offsets,
    buffer_of,
    check_memory_plan,
    live_ranges,
    tensor_bytes,
)
from partita.dialects.byoc import AllocTensorOp
from partita.ir import op_error

__all__ = [
    "ARENA_SIZE",
    "MAX_ARENA_BYTES",
    "OFFSET",
    "PlanMemory",
    "assign_offsets",
    "buffer_of",
    "check_memory_plan",
    "live_ranges",
    "tensor_bytes",
]


@dataclass(frozen=True)
class PlanMemory(ModulePass):
    """Assigns arena offsets to the statically sized ``byoc.alloc_tensor``s of every
    function with a body (``byoc.offset``) and records each arena's size
    (``byoc.arena_size``)."""

    name = "plan-memory"

    alignment: int = 256

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise op_error(op, f"plan-memory: alignment must be a power of two, got {self.alignment}")
        for function in op.ops:
            if isinstance(function, func.FuncOp) and function.body.blocks:
                self._plan(function)

    def _plan(self, function: func.FuncOp) -> None:
        allocs = [
            o for block in function.body.blocks for o in block.ops
            if isinstance(o, AllocTensorOp) and DYNAMIC_INDEX not in o.result.type.get_shape()
        ]
        if not allocs:
            return
        if len(function.body.blocks) != 1:
            raise op_error(function, "plan-memory: allocations in a function of several blocks cannot be planned")
        ranges = live_ranges(function.body.block, [a.result for a in allocs])
        sizes = [tensor_bytes(a.result.type) for a in allocs]
        for alloc, size in zip(allocs, sizes):
            if size > MAX_ARENA_BYTES:
                raise op_error(alloc, f"plan-memory: a tensor of {size} bytes exceeds the {MAX_ARENA_BYTES}-byte "
                                      "address space of a device")
        offsets, arena = assign_offsets(sizes, [ranges[a.result] for a in allocs], self.alignment)
        if arena > MAX_ARENA_BYTES:
            raise op_error(function, f"plan-memory: an arena of {arena} bytes exceeds the {MAX_ARENA_BYTES}-byte "
                                     "address space of a device")
        i64 = IntegerType(64)
        for alloc, offset in zip(allocs, offsets):
            alloc.attributes[OFFSET] = IntegerAttr(offset, i64)
        function.attributes[ARENA_SIZE] = IntegerAttr(arena, i64)
