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

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    TensorType,
)
from xdsl.ir import Block, SSAValue
from xdsl.passes import ModulePass

from partita.dialects.byoc import AllocTensorOp, CallExternOp
from partita.dialects.nn import ReshapeOp, numpy_dtype
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

OFFSET = "byoc.offset"
"""Byte offset of a planned ``byoc.alloc_tensor`` in its function's arena."""
ARENA_SIZE = "byoc.arena_size"
"""Bytes of a function's arena (the end of its highest planned buffer)."""
MAX_ARENA_BYTES = 1 << 48
"""No device addresses more (48-bit virtual addresses); an i64 attribute holds it without
wrapping negative."""


def tensor_bytes(typ: TensorType, shape: Sequence[int] | None = None) -> int:
    """Bytes of a dense tensor of ``typ`` (with ``shape`` for its concrete dims)."""
    dims = typ.get_shape() if shape is None else shape
    return prod(dims) * numpy_dtype(typ.element_type).itemsize


def buffer_of(block: Block) -> dict[SSAValue, SSAValue]:
    """Every value of ``block`` that names an allocation's memory, mapped to that
    allocation's result (``byoc.call_extern`` results alias their ``outs``; an
    ``nn.reshape`` left in the function is a view of its input, as TVM's ``__nop``)."""
    alias: dict[SSAValue, SSAValue] = {}
    for op in block.ops:
        if isinstance(op, AllocTensorOp):
            alias[op.result] = op.result
        elif isinstance(op, CallExternOp):
            for out, res in zip(op.outs, op.res, strict=True):
                alias[res] = alias.get(out, out)
        elif isinstance(op, ReshapeOp):  # a view: the input's bytes under new dims
            alias[op.result] = alias.get(op.input, op.input)
    return alias


def live_ranges(block: Block, values: Sequence[SSAValue] | None = None) -> dict[SSAValue, tuple[int, int]]:
    """``[first, last]`` op index of every buffer of ``block`` (or of ``values`` and their
    aliases), by ``buffer_of``; values the terminator returns live to the end."""
    alias = buffer_of(block)
    ops = list(block.ops)
    ranges: dict[SSAValue, list[int]] = {}
    wanted = set(values) if values is not None else None

    def touch(value: SSAValue, at: int) -> None:
        root = alias.get(value, value)
        if wanted is not None and root not in wanted:
            return
        span = ranges.setdefault(root, [at, at])
        span[0], span[1] = min(span[0], at), max(span[1], at)

    for arg in block.args:
        touch(arg, 0)
    for i, op in enumerate(ops):
        for res in op.results:
            touch(res, i)
        for operand in op.operands:
            touch(operand, i)
    end = len(ops)
    terminator = block.last_op
    if terminator is not None:
        for value in terminator.operands:
            root = alias.get(value, value)
            if root in ranges:
                ranges[root][1] = end
    return {value: (span[0], span[1]) for value, span in ranges.items()}


def assign_offsets(
    sizes: Sequence[int], ranges: Sequence[tuple[int, int]], alignment: int = 256
) -> tuple[list[int], int]:
    """Offsets for buffers of ``sizes`` live over ``ranges`` (inclusive op indices): two
    buffers with overlapping ranges never overlap in memory. Largest first, each at the
    lowest aligned offset that fits between the buffers already placed and live at the
    same time. Returns the offsets and the arena size."""
    order = sorted(range(len(sizes)), key=lambda i: (-sizes[i], ranges[i][0], i))
    offsets = [0] * len(sizes)
    placed: list[int] = []
    arena = 0
    for i in order:
        lo, hi = ranges[i]
        busy = sorted(
            (offsets[j], offsets[j] + sizes[j]) for j in placed if ranges[j][0] <= hi and lo <= ranges[j][1]
        )
        offset = 0
        for start, stop in busy:
            if offset + sizes[i] <= start:
                break
            offset = max(offset, -(-stop // alignment) * alignment)
        offsets[i] = offset
        placed.append(i)
        arena = max(arena, offset + sizes[i])
    return offsets, -(-arena // alignment) * alignment if arena else 0


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


def check_memory_plan(function: func.FuncOp) -> None:
    """A located error unless the plan recorded on ``function`` is one a device can run:
    an arena size in ``[0, MAX_ARENA_BYTES]``, every planned buffer inside it, and no two
    buffers live at the same time sharing a byte. Run at load, before anything is
    allocated: a compiled-model file is untrusted input, and a bad offset would make a
    kernel write over another buffer (a simulated device's bounds check is no GPU's)."""
    allocs = [o for o in function.body.block.ops if isinstance(o, AllocTensorOp) and OFFSET in o.attributes]
    if not allocs:
        return
    size = function.attributes.get(ARENA_SIZE)
    if not isinstance(size, IntegerAttr):
        raise op_error(function, f"has planned allocations but no integer '{ARENA_SIZE}'")
    arena = size.value.data
    if not 0 <= arena <= MAX_ARENA_BYTES:
        raise op_error(function, f"'{ARENA_SIZE}' = {arena} is outside [0, {MAX_ARENA_BYTES}]")
    spans = []
    for alloc in allocs:
        offset = alloc.attributes[OFFSET]
        if not isinstance(offset, IntegerAttr):
            raise op_error(alloc, f"'{OFFSET}' must be an integer")
        typ = alloc.result.type
        if DYNAMIC_INDEX in typ.get_shape():
            raise op_error(alloc, f"has a '{OFFSET}' but a dynamic shape: only static allocations are planned")
        start, nbytes = offset.value.data, tensor_bytes(typ)
        if start < 0 or start + nbytes > arena:
            raise op_error(alloc, f"'{OFFSET}' = {start}: its {nbytes} bytes do not lie inside the "
                                  f"{arena}-byte arena")
        if nbytes:  # an empty buffer shares no byte with anything
            spans.append((start, start + nbytes, alloc))
    ranges = live_ranges(function.body.block, [a.result for a in allocs])
    spans.sort(key=lambda s: s[0])
    for i, (start, stop, alloc) in enumerate(spans):
        lo, hi = ranges.get(alloc.result, (0, 0))
        for other_start, _, other in spans[i + 1:]:
            if other_start >= stop:
                break
            other_lo, other_hi = ranges.get(other.result, (0, 0))
            if other_lo <= hi and lo <= other_hi and other_start < stop:
                raise op_error(other, f"'{OFFSET}' = {other_start} overlaps a buffer live at the same time "
                                      f"(bytes {start}..{stop} of the arena)")
