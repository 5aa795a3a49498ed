"""Buffer liveness and arena packing: which values name one allocation's memory, from
which op to which op each buffer lives, and offsets that never overlap two live buffers.

``plan-memory`` writes the result into the IR (``byoc.offset``, ``byoc.arena_size``); the
launch plan reads it back and plans dynamically sized buffers per shape signature with the
same ``assign_offsets``.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerAttr, TensorType
from xdsl.ir import Block, SSAValue

from partita.dialects.byoc import AllocTensorOp, CallExternOp
from partita.dialects.nn import ReshapeOp, numpy_dtype
from partita.ir import op_error

__all__ = [
    "ARENA_SIZE",
    "MAX_ARENA_BYTES",
    "OFFSET",
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
