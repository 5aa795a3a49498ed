"""``flatten-tensorrt-partitions``: TensorRT's "after partitioning" phase pass.

The eager flow merges TensorRT's single-op composites into sub-graphs (TVM's TensorRT
BYOC merges compiler regions); the composites stay nested in the merged region. TensorRT
compiles the sub-graph as a whole, so the nesting means nothing to it: this pass inlines
every composite nested in a ``tensorrt`` partition into the partition's own body, which
leaves one plain region per sub-graph to outline and export.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from partita.dialects.byoc import PartitionOp, YieldOp

COMPILER = "tensorrt"


def flatten(partition: PartitionOp) -> None:
    """Inlines the partitions nested in ``partition`` (once, outermost first)."""
    nested = [op for op in partition.body.block.ops if isinstance(op, PartitionOp)]
    for inner in nested:
        block = inner.body.block
        terminator = block.last_op
        assert isinstance(terminator, YieldOp)
        values = list(terminator.operands)
        Rewriter.inline_block(block, InsertPoint.before(inner), inner.operands)
        Rewriter.erase_op(terminator)
        for result, value in zip(inner.results, values, strict=True):
            result.replace_all_uses_with(value)
        Rewriter.erase_op(inner)


@dataclass(frozen=True)
class FlattenTensorRTPartitions(ModulePass):
    name = "flatten-tensorrt-partitions"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for partition in [p for p in op.walk() if isinstance(p, PartitionOp) and p.compiler == COMPILER]:
            flatten(partition)
