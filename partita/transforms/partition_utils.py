"""Shared helpers of the partitioning passes: wrap a convex set of ops into a
``byoc.partition`` region, dissolve one, and name partitions deterministically.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from xdsl.dialects.builtin import ModuleOp, StringAttr, UnitAttr
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Block, Operation, OpResult, Region, SSAValue

from partita.backends.pattern import CONSTANT_OPS
from partita.dialects.byoc import COMPILER, GLOBAL_SYMBOL, INLINE, PRIMITIVE, PartitionOp, YieldOp
from partita.ir import op_error

__all__ = [
    "create_partition",
    "dissolve_partition",
    "func_bodies",
    "partition_attributes_for",
]


def func_bodies(module: ModuleOp) -> list[Block]:
    """The bodies of the module's function definitions; the partitioners group ops of one
    block, so a function with branches (several blocks) is refused, located."""
    bodies = []
    for op in module.ops:
        if isinstance(op, FuncOp) and op.body.blocks:
            if len(op.body.blocks) > 1:
                raise op_error(op, f"has {len(op.body.blocks)} blocks: Partita partitions "
                               "single-block functions only (no unstructured control flow)")
            bodies.append(op.body.block)
    return bodies


def create_partition(
    ops: Sequence[Operation],
    attributes: Mapping[str, Attribute],
    *,
    bind_constants: bool = False,
) -> PartitionOp:
    """Move ``ops`` (a convex set of ops of one block, in topological order) into a new
    ``byoc.partition`` and return it.

    Values entering the set become operands (block arguments), except constants when
    ``bind_constants``: those are cloned into the region (the original is erased if it
    has no other use). Results used outside the set become the partition's results.
    Ops between the set's members that the set depends on are moved before the
    partition, so dominance holds wherever the set's ops sat in the block.
    """
    block = ops[0].parent_block()
    assert block is not None and all(op.parent_block() is block for op in ops)
    members = set(ops)

    inputs: dict[SSAValue, None] = {}
    bound: dict[SSAValue, Operation] = {}
    for op in ops:
        for v in op.operands:
            if isinstance(v, OpResult) and v.op in members:
                continue
            if bind_constants and isinstance(v, OpResult) and v.op.name in CONSTANT_OPS:
                bound.setdefault(v, v.op)
            else:
                inputs[v] = None
    outputs = [r for op in ops for r in op.results if any(u.operation not in members for u in r.uses)]

    # Hoist the ops the set depends on that sit between its members.
    first = _hoist_dependencies(block, ops, members)

    body = Block(arg_types=[v.type for v in inputs])
    for arg, v in zip(body.args, inputs):
        arg.name_hint = v.name_hint
    mapping: dict[SSAValue, SSAValue] = dict(zip(inputs, body.args))
    for value, const in bound.items():
        clone = const.clone()
        body.add_op(clone)
        mapping[value] = clone.results[value.index]  # type: ignore[attr-defined]
        clone.results[value.index].name_hint = value.name_hint  # type: ignore[attr-defined]

    partition = PartitionOp(list(inputs), [r.type for r in outputs], Region(body), attributes)
    block.insert_op_before(partition, first)
    for old, new in zip(outputs, partition.results):
        old.replace_uses_with_if(new, lambda use: use.operation not in members)
        new.name_hint = old.name_hint
    for op in ops:
        op.detach()
        body.add_op(op)
        for i, v in enumerate(op.operands):
            if v in mapping:
                op.operands[i] = mapping[v]
    body.add_op(YieldOp(*outputs))
    for const in dict.fromkeys(bound.values()):
        if all(not r.uses for r in const.results) and (parent := const.parent_block()) is not None:
            parent.erase_op(const)
    return partition


def _first_member(ops: Sequence[Operation], members: set[Operation]) -> Operation:
    """The member that comes first in block order, found by walking both ways from
    ``ops[0]`` until every member was seen: O(span of the set), not O(block)."""
    first = ops[0]
    seen = 1
    back, ahead = first.prev_op, first.next_op
    while seen < len(members):
        if back is not None:
            if back in members:
                first = back
                seen += 1
            back = back.prev_op
        if ahead is not None:
            if ahead in members:
                seen += 1
            ahead = ahead.next_op
        assert back is not None or ahead is not None or seen == len(members)
    return first


def _hoist_dependencies(block: Block, ops: Sequence[Operation], members: set[Operation]) -> Operation:
    """Move every non-member op that lies between the first and last member (in block
    order) and that some member depends on to just before the first member; returns
    the first member. Convexity guarantees those ops do not depend on the set."""
    first = _first_member(ops, members)
    remaining = len(members)
    span: list[Operation] = []
    op = first
    while op is not None and remaining:
        if op in members:
            remaining -= 1
        else:
            span.append(op)
        op = op.next_op
    if not span:
        return first
    in_span = set(span)
    needed: set[Operation] = set()
    work = [v.op for m in members for v in m.operands if isinstance(v, OpResult) and v.op in in_span]
    while work:
        op = work.pop()
        if op in needed:
            continue
        needed.add(op)
        work.extend(v.op for v in op.operands if isinstance(v, OpResult) and v.op in in_span)
    for op in span:
        if op in needed:
            op.detach()
            block.insert_op_before(op, first)
    return first


def dissolve_partition(partition: PartitionOp) -> None:
    """Inline a partition's region back into its block and erase it."""
    block = partition.parent_block()
    assert block is not None
    body = partition.body.block
    for arg, v in zip(body.args, partition.inputs):
        arg.replace_all_uses_with(v)
    terminator = body.last_op
    assert isinstance(terminator, YieldOp)
    for res, v in zip(partition.results, terminator.values):
        res.replace_all_uses_with(v)
    body.erase_op(terminator)
    for op in list(body.ops):
        op.detach()
        block.insert_op_before(op, partition)
    block.erase_op(partition)


def partition_attributes_for(compiler: str, symbol: str, extra: Mapping[str, Attribute] | None = None) -> dict[str, Attribute]:
    """The attributes of a finished partition (TVM's Compiler function attributes)."""
    attrs: dict[str, Attribute] = {
        COMPILER: StringAttr(compiler),
        GLOBAL_SYMBOL: StringAttr(symbol),
        PRIMITIVE: UnitAttr(),
        INLINE: UnitAttr(),
    }
    for key, value in (extra or {}).items():
        attrs.setdefault(key, value)
    return attrs


def iter_top_level(blocks: Iterable[Block]) -> Iterable[Operation]:
    for block in blocks:
        yield from list(block.ops)
