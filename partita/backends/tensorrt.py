"""What the ``tensorrt`` backend takes, and its "after partitioning" phase pass.

``TENSORRT_OPS`` and :func:`unsupported_reason` are the backend's pattern predicate (TVM's
``relay/op/contrib/tensorrt.py``): the ops the ONNX export of
``partita.lowering.tensorrt.export`` converts, which holds one converter per name here.

``flatten-tensorrt-partitions``: the eager flow merges TensorRT's single-op composites into sub-graphs (TVM's TensorRT
BYOC merges compiler regions); the composites stay nested in the merged region. TensorRT
compiles the sub-graph as a whole, so the nesting means nothing to it: this pass inlines
every composite nested in a ``tensorrt`` partition into the partition's own body, which
leaves one plain region per sub-graph to outline and export.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from partita.dialects import nn
from partita.dialects.byoc import PartitionOp, YieldOp

COMPILER = "tensorrt"

EXPORT_DTYPES = ("f16", "bf16", "f32", "i32", "i64", "i8", "i1")
"""Element types of the ONNX sub-models TensorRT parses."""

TENSORRT_OPS = (
    "nn.add", "nn.subtract", "nn.multiply", "nn.divide", "nn.relu", "nn.sigmoid", "nn.tanh",
    "nn.gelu", "nn.clip", "nn.softmax", "nn.dense", "nn.matmul", "nn.batch_matmul",
    "nn.bias_add", "nn.layer_norm", "nn.batch_norm", "nn.conv2d", "nn.max_pool2d",
    "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.pad", "nn.reshape", "nn.transpose",
    "nn.concatenate",
)
"""The nn ops a TensorRT partition may hold (besides constants), in pattern order."""


def _shape(value: SSAValue) -> tuple[int, ...]:
    assert isinstance(value.type, TensorType)
    return tuple(value.type.get_shape())


def unsupported_reason(op: Operation) -> str | None:
    """Why ``op`` cannot go into a TensorRT sub-model, or ``None``."""
    if op.name == "nn.constant":
        return None
    if op.name not in TENSORRT_OPS:
        return "has no TensorRT (ONNX) conversion"
    for value in (*op.operands, *op.results):
        if not isinstance(value.type, TensorType) or str(value.type.element_type) not in EXPORT_DTYPES:
            return f"has an operand type TensorRT does not take ({value.type})"
    if isinstance(op, nn.BatchNormOp) and op.axis % len(_shape(op.operands[0])) != 1:
        return "is a batch norm over an axis other than 1"
    if isinstance(op, nn.ReshapeOp) and sum(d < 0 for d in _shape(op.results[0])) - len(op.targets) > 1:
        return "reshapes to more than one dynamic dimension without shape references"
    if isinstance(op, nn.Conv2DOp | nn.Pool2DOp | nn.GlobalAvgPool2DOp):
        layout = op.data_layout if isinstance(op, nn.Conv2DOp) else op.layout
        if layout not in ("NCHW", "NHWC"):
            return f"has layout {layout}"
    return None


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
