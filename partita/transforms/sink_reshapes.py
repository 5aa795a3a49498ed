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

The same reshape stands between a pre-norm transformer's projection and its residual add
(GPT-2's ``h + reshape(c_proj(x) + b)``). An add of a GEMM result's sole reshape and a
tensor of the reshape's own shape moves before it too, reading the other operand reshaped
the GEMM's way (a view):

    add(reshape(g), r)  ->  reshape(add(g, reshape(r)))

so ``dense -> bias -> residual`` reaches the CUTLASS patterns whole (``dense_bias_residual``).
Only a GEMM result (``nn.dense``, ``nn.matmul``, ``nn.batch_matmul``, after its bias add)
whose reshape infers at most one run-time dim of the other operand moves: other adds of
reshapes (attention masks, rotary halves) stay where their matchers expect them.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue
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

__all__ = ["SinkReshapePastElementwise", "SinkReshapePastResidualAdd", "SinkReshapes", "sinks_a_reshape"]

_GEMMS = (nn.DenseOp, nn.MatmulOp, nn.BatchMatmulOp)


def sinks_a_reshape(op: Operation) -> bool:
    """Whether a pattern of ``sink-reshapes`` rewrites ``op``: an element-wise unary op on the
    sole use of a reshape, keeping its element type, or a residual add of a GEMM result's
    reshape (:func:`residual_behind_reshape`)."""
    return _unary_behind_reshape(op) or (isinstance(op, nn.AddOp) and residual_behind_reshape(op) is not None)


def _unary_behind_reshape(op: Operation) -> bool:
    """An element-wise unary op on the sole use of a reshape, keeping its element type."""
    if nn.op_kind(op) != nn.OpKind.ELEMWISE or len(op.operands) != 1 or len(op.results) != 1:
        return False
    (x,), (y,) = op.operands, op.results
    reshape = x.owner
    return (isinstance(reshape, nn.ReshapeOp) and len(list(x.uses)) == 1 and isinstance(y.type, TensorType)
            and isinstance(x.type, TensorType) and y.type.element_type == x.type.element_type
            and isinstance(reshape.input.type, TensorType))


def _is_gemm_result(value: SSAValue) -> bool:
    """A GEMM's result, or the result of the add of its bias."""
    owner = value.owner
    if isinstance(owner, nn.AddOp | nn.BiasAddOp):
        owner = owner.operands[0].owner
    return isinstance(owner, _GEMMS)


def residual_behind_reshape(add: nn.AddOp) -> tuple[int, nn.ReshapeOp] | None:
    """``(k, reshape)`` when operand ``k`` of ``add`` is the sole use of a reshape of a GEMM
    result and the other operand has the reshape's shape and element type (no broadcast),
    and reshaping it back to the GEMM's shape infers at most one run-time dim; else None."""
    for k, value in enumerate(add.operands):
        reshape, other = value.owner, add.operands[1 - k]
        if not isinstance(reshape, nn.ReshapeOp) or len(list(value.uses)) != 1 or other is value:
            continue
        source = reshape.input
        if not (_is_gemm_result(source) and isinstance(source.type, TensorType) and isinstance(other.type, TensorType)):
            continue
        if other.type != value.type or add.results[0].type != value.type:
            continue
        if list(source.type.get_shape()).count(-1) <= 1:
            return k, reshape
    return None


class SinkReshapePastResidualAdd(RewritePattern):
    """``add(reshape(g), r) -> reshape(add(g, reshape(r)))`` for a GEMM result ``g`` (see
    the module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.AddOp, rewriter: PatternRewriter) -> None:
        found = residual_behind_reshape(op)
        if found is None:
            return
        k, reshape = found
        source = reshape.input
        other = nn.ReshapeOp(op.operands[1 - k], source.type.get_shape())  # type: ignore[attr-defined]
        operands = [source, other.result] if k == 0 else [other.result, source]
        moved = nn.AddOp.create(operands=operands, result_types=[source.type],
                                properties=dict(op.properties), attributes=dict(op.attributes))
        moved.location = op.location
        reshaped = reshape.clone()
        reshaped.operands = [moved.results[0], *reshape.operands[1:]]
        rewriter.insert([other, moved, reshaped], InsertPoint.before(op))
        rewriter.replace(op, [], [reshaped.results[0]])
        rewriter.erase(reshape)


class SinkReshapePastElementwise(RewritePattern):
    """``unary(reshape(x)) -> reshape(unary(x))`` (see the module docstring)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.ReshapeOp, rewriter: PatternRewriter) -> None:
        users = [use.operation for use in op.result.uses]
        if len(users) != 1 or not _unary_behind_reshape(users[0]):
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
    """Element-wise unary ops, and residual adds of GEMM results, move before the reshapes
    they read (see the module docstring)."""

    name = "sink-reshapes"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        patterns = [SinkReshapePastElementwise(), SinkReshapePastResidualAdd()]
        PatternRewriteWalker(GreedyRewritePatternApplier(patterns, dce_enabled=False)).rewrite_module(op)
