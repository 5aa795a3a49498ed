"""``merge-compiler-regions``: grow annotated ops into compiler regions (TVM's
MergeCompilerRegions).

Units annotated with ``byoc.compiler`` (by ``annotate-target``) are merged with the units
that feed them when both name the same compiler and the union stays convex: no path
leaves the union and comes back (that would make the region depend on itself). Each
merged group becomes a ``byoc.partition {byoc.compiler = ...}`` (named later by
``partition-graph``).

Composite regions are units only with ``merge=true``: by default each composite remains a
partition of its own, as in TVM's CUTLASS flow. Merged composites stay nested in the new
region as composites (their ``byoc.compiler`` moves to the enclosing region).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import Block, Operation, OpResult
from xdsl.passes import ModulePass

from partita.dialects.byoc import COMPILER, COMPOSITE, GLOBAL_SYMBOL, PartitionOp
from partita.transforms.partition_utils import create_partition, func_bodies


def compiler_of(op: Operation, include_composites: bool) -> str | None:
    """The compiler annotated on a unit still to be partitioned, else ``None``."""
    attr = op.attributes.get(COMPILER)
    if not isinstance(attr, StringAttr):
        return None
    if isinstance(op, PartitionOp):
        if GLOBAL_SYMBOL in op.attributes or not include_composites or COMPOSITE not in op.attributes:
            return None
    return attr.data


def _escapes_and_returns(src: set[Operation], dst: set[Operation], union: set[Operation]) -> bool:
    """True if a path leaves ``src`` through ops outside ``union`` and reaches ``dst``."""
    frontier = [u.operation for op in src for r in op.results for u in r.uses if u.operation not in union]
    seen: set[Operation] = set()
    while frontier:
        op = frontier.pop()
        if op in seen:
            continue
        seen.add(op)
        for r in op.results:
            for use in r.uses:
                if use.operation in dst:
                    return True
                if use.operation not in union:
                    frontier.append(use.operation)
    return False


def merge_regions(block: Block, merge_composites: bool) -> list[tuple[str, list[Operation]]]:
    """Groups of units (block order) to wrap, each with its compiler."""
    group_of: dict[Operation, int] = {}
    groups: dict[int, set[Operation]] = {}
    compiler: dict[int, str] = {}
    order = {op: i for i, op in enumerate(block.ops)}
    for op in block.ops:
        name = compiler_of(op, merge_composites)
        if name is None:
            continue
        gid = len(order) + len(groups)
        group_of[op] = gid
        groups[gid] = {op}
        compiler[gid] = name
        for v in op.operands:
            if not isinstance(v, OpResult) or v.op not in group_of:
                continue
            a, b = group_of[v.op], group_of[op]
            if a == b or compiler[a] != compiler[b]:
                continue
            ga, gb = groups[a], groups[b]
            union = ga | gb
            if _escapes_and_returns(ga, gb, union) or _escapes_and_returns(gb, ga, union):
                continue
            keep, drop = (a, b) if len(ga) >= len(gb) else (b, a)
            for member in groups[drop]:
                group_of[member] = keep
            groups[keep] = union
            del groups[drop], compiler[drop]
    return [(compiler[g], sorted(ops, key=order.__getitem__)) for g, ops in groups.items()]


@dataclass(frozen=True)
class MergeCompilerRegions(ModulePass):
    name = "merge-compiler-regions"

    merge: bool = False
    """Also merge composites into larger partitions (default: one partition each)."""

    bind_constants: bool = False
    """Clone constant inputs into the regions instead of passing them as operands."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for block in func_bodies(op):
            for name, ops in merge_regions(block, self.merge):
                if len(ops) == 1 and isinstance(ops[0], PartitionOp):
                    continue  # a lone composite is its own partition
                for unit in ops:
                    del unit.attributes[COMPILER]
                create_partition(ops, {COMPILER: StringAttr(name)}, bind_constants=self.bind_constants)
