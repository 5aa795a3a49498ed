"""``sink-reshapes``: an element-wise unary op reading a reshape moves before it.

Exporters reshape a GEMM's ``[B * S, N]`` result to ``[B, S, N]`` before its activation
(GPT-2's MLP: ``gelu(reshape(c_fc(x) + b))``), so the ``dense -> bias -> activation`` chain
that GEMM epilogues take (CUTLASS's ``dense_bias_gelu``, cuBLASLt's ``GELU_BIAS``) is broken
by a reshape that changes no value. An element-wise op commutes with any reshape:

    unary(reshape(x))  ->  reshape(unary(x))

when the reshape has no other use (the activation would otherwise be computed twice) and
the op keeps its operand's element type (casts stay where the exporter put them, for the
attention and RMSNorm matchers that read them). Reshapes are views, so moving one costs
nothing; repeated to a fixed point, a chain of activations moves as a whole (MLIR's
``BubbleUpExpandShapeThroughGenericOp`` in spirit).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from partita.dialects import nn

__all__ = ["SinkReshapePastElementwise", "SinkReshapes", "sinks_a_reshape"]


def sinks_a_reshape(op: Operation) -> bool:
    """Whether ``op`` is an element-wise unary op on the sole use of a reshape, keeping its
    element type: what the pattern rewrites."""
    if nn.op_kind(op) != nn.OpKind.ELEMWISE or len(op.operands) != 1 or len(op.results) != 1:
        return False
    (x,), (y,) = op.operands, op.results
    reshape = x.owner
    return (isinstance(reshape, nn.ReshapeOp) and len(list(x.uses)) == 1 and isinstance(y.type, TensorType)
            and isinstance(x.type, TensorType) and y.type.element_type == x.type.element_type
            and isinstance(reshape.input.type, TensorType))


class SinkReshapePastElementwise(RewritePattern):
    """``unary(reshape(x)) -> reshape(unary(x))`` (see the module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.ReshapeOp, rewriter: PatternRewriter) -> None:
        users = [use.operation for use in op.result.uses]
        if len(users) != 1 or not sinks_a_reshape(users[0]):
            return
        unary = users[0]
        moved = type(unary).create(operands=[op.input], result_types=[op.input.type],
                                   properties=dict(unary.properties), attributes=dict(unary.attributes))
        moved.location = unary.location
        reshaped = op.clone()
        reshaped.operands = [moved.results[0], *op.operands[1:]]
        rewriter.insert([moved, reshaped], InsertPoint.before(unary))
        rewriter.replace(unary, [], [reshaped.results[0]])
        rewriter.erase(op)


@dataclass(frozen=True)
class SinkReshapes(ModulePass):
    """Element-wise unary ops move before the reshapes they read (see the module docstring)."""

    name = "sink-reshapes"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(GreedyRewritePatternApplier([SinkReshapePastElementwise()], dce_enabled=False)
                             ).rewrite_module(op)
