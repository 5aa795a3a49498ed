"""``convert-layout{conv2d=NHWC}``: rewrite NCHW convolutions to NHWC (TVM's ConvertLayout).

Each ``nn.conv2d`` (and 2-d ``nn.conv_integer``, whose zero points are scalars or per output
channel: unaffected) in NCHW/OIHW becomes ``transpose -> conv NHWC/OHWI -> transpose`` (a
constant weight is transposed at compile time instead). The transposes back to NCHW are
then sunk through layout-agnostic users (element-wise ops, casts, ``quantize`` /
``dequantize``, ``bias_add``, ``batch_norm``,
pools, ``global_avg_pool2d``, ``lrn``, ``softmax``, ``pad``, ``concatenate`` and binary ops;
a constant operand's payload is permuted, another 4-d operand gets a transpose when that
does not add transposes) and pairs that compose to the identity
cancel, so a chain of convolutions keeps one transpose at its entry and one at its exit.
NHWC is what cuDNN/CUTLASS tensor-core convolutions want.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, ModuleOp, StringAttr, TensorType, i64
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from partita.dialects import nn
from partita.ir import PartitaError

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
# An NCHW axis index -> the same dimension's index in NHWC.
_NHWC_AXIS = TO_NCHW


def _transpose_of(value: SSAValue, perm: tuple[int, ...]) -> nn.TransposeOp | None:
    owner = value.owner
    if isinstance(owner, nn.TransposeOp) and owner.perm == perm:
        return owner
    return None


def _erase_if_dead(rewriter: PatternRewriter, op: Operation | None) -> None:
    if op is not None and op.parent is not None and all(not r.uses for r in op.results):
        rewriter.erase(op)


def _constant_to_nhwc(const: nn.ConstantOp) -> nn.ConstantOp | None:
    """A broadcastable constant of rank <= 4 re-expressed for an NHWC operand."""
    array = const.to_numpy()
    if array.ndim > 4:
        return None
    if array.ndim == 0:
        return nn.ConstantOp(array)
    array = array.reshape((1,) * (4 - array.ndim) + array.shape)
    return nn.ConstantOp(array.transpose(TO_NHWC))  # a splat stays one (zero strides)


def is_nchw_conv(op: Operation) -> bool:
    """An NCHW/OIHW ``conv2d`` or 2-d ``conv_integer``: what ``ConvToNHWC`` rewrites."""
    if isinstance(op, nn.ConvIntegerOp):
        return op.SPATIAL == 2 and op.data_layout == "NCHW"
    return isinstance(op, nn.Conv2DOp) and op.data_layout == "NCHW"


class ConvToNHWC(RewritePattern):
    """``conv2d`` / ``conv_integer`` NCHW/OIHW -> transpose, the conv in NHWC/OHWI,
    transpose back."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        if not is_nchw_conv(op):
            return
        assert isinstance(op, nn.Conv2DOp | nn.ConvIntegerOp)
        new_ops: list[Operation] = [x := nn.TransposeOp(op.input, TO_NHWC)]
        old_weight = op.weight.owner
        if isinstance(old_weight, nn.ConstantOp):
            w = nn.ConstantOp(old_weight.to_numpy().transpose(TO_NHWC))
        else:
            w = nn.TransposeOp(op.weight, TO_NHWC)
        window = {"strides": op.strides, "padding": op.padding, "dilation": op.dilation, "groups": op.groups,
                  "data_layout": "NHWC", "kernel_layout": "OHWI"}
        if isinstance(op, nn.ConvIntegerOp):
            conv = nn.ConvIntegerOp(x, w, op.input_zero_point, op.weight_zero_point, **window)
        else:
            conv = nn.Conv2DOp(x, w, **window)
        back = nn.TransposeOp(conv, TO_NCHW)
        new_ops += [w, conv, back]
        rewriter.replace(op, new_ops)
        if isinstance(old_weight, nn.ConstantOp):
            _erase_if_dead(rewriter, old_weight)


def _relayout_properties(op: Operation) -> dict | None:
    """Properties of ``op`` working on NHWC instead of NCHW, or None if not agnostic."""
    props = dict(op.properties)
    if isinstance(op, nn.UnaryOp) and not op.properties:
        return props  # relu, sigmoid, tanh
    if isinstance(op, nn.ElementwiseUnaryOp):  # scalar properties (alpha, min, ...), casts
        return props
    if isinstance(op, nn.QuantizationOp) and not op.block_size:  # scale and zero point: scalars or per axis
        if op.channel_axis() is not None:
            props["axis"] = IntegerAttr(_NHWC_AXIS[op.axis % 4], i64)
        return props
    if isinstance(op, nn.Pool2DOp | nn.GlobalAvgPool2DOp):
        if op.layout != "NCHW":
            return None
        props["layout"] = StringAttr("NHWC")
        return props
    if isinstance(op, nn.BiasAddOp | nn.BatchNormOp | nn.SoftmaxOp | nn.LRNOp
                  | nn.ConcatenateOp):
        props["axis"] = IntegerAttr(_NHWC_AXIS[op.axis % 4], i64)
        return props
    if isinstance(op, nn.PadOp):
        for key in ("pad_before", "pad_after"):
            values = getattr(op, key)
            props[key] = DenseArrayBase.from_list(i64, [values[p] for p in TO_NHWC])
        return props
    if isinstance(op, nn.ElementwiseBinaryOp):
        return props
    return None


class SinkTransposeToNCHW(RewritePattern):
    """``f(transpose(x, [0,3,1,2]))`` -> ``transpose(f'(x), [0,3,1,2])`` for a layout-agnostic
    ``f``, where ``f'`` is ``f`` with its layout/axis properties moved to NHWC."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        if not isinstance(op, nn.NNOp) or len(op.results) != 1:
            return
        result_type = op.results[0].type
        if not isinstance(result_type, TensorType) or len(result_type.get_shape()) != 4:
            return
        if not any(_transpose_of(v, TO_NCHW) for v in op.operands):
            return
        # Secondary operands of batch_norm / bias_add / layer params are per-channel vectors.
        data_operands = (list(op.operands) if isinstance(op, nn.ElementwiseBinaryOp
                                                         | nn.ConcatenateOp)
                         else [op.operands[0]])
        if _transpose_of(data_operands[0], TO_NCHW) is None and not isinstance(
                op, nn.ElementwiseBinaryOp | nn.ConcatenateOp):
            return
        props = _relayout_properties(op)
        if props is None:
            return
        transposed = sum(_transpose_of(v, TO_NCHW) is not None for v in data_operands)
        plain = [v for v in data_operands if _transpose_of(v, TO_NCHW) is None
                 and not isinstance(v.owner, nn.ConstantOp)]
        # Other 4-d operands get a transpose to NHWC (TVM's layout_transform) when that
        # does not add more transposes than the sinking removes.
        if any(len(v.type.get_shape()) != 4 for v in plain) or len(plain) > transposed:
            return
        new_operands: list[SSAValue] = []
        new_consts: list[Operation] = []
        for v in op.operands:
            if v not in data_operands:
                new_operands.append(v)
                continue
            if (t := _transpose_of(v, TO_NCHW)) is not None:
                new_operands.append(t.input)
            elif isinstance(v.owner, nn.ConstantOp):
                if (c := _constant_to_nhwc(v.owner)) is None:
                    return
                new_consts.append(c)
                new_operands.append(c.result)
            else:
                new_consts.append(t := nn.TransposeOp(v, TO_NHWC))
                new_operands.append(t.result)
        old_shape = result_type.get_shape()
        new_type = TensorType(result_type.element_type, [old_shape[p] for p in TO_NHWC])
        new_op = type(op).create(operands=new_operands, result_types=[new_type],
                                 properties=props, attributes=dict(op.attributes))
        back = nn.TransposeOp(new_op.results[0], TO_NCHW)
        old_inputs = [v.owner for v in op.operands]
        rewriter.replace(op, [*new_consts, new_op, back])
        for owner in old_inputs:
            if isinstance(owner, nn.TransposeOp | nn.ConstantOp):
                _erase_if_dead(rewriter, owner)


class ComposeTransposes(RewritePattern):
    """``transpose(transpose(x, p), q)`` -> ``x`` when they cancel, else one transpose;
    a transpose of a constant is folded into a new constant."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter, /) -> None:
        if not isinstance(op, nn.TransposeOp):
            return
        inner = op.input.owner
        if isinstance(inner, nn.ConstantOp):
            rewriter.replace(op, nn.ConstantOp(inner.to_numpy().transpose(op.perm)))
            _erase_if_dead(rewriter, inner)
            return
        if not isinstance(inner, nn.TransposeOp):
            return
        perm = tuple(inner.perm[p] for p in op.perm)
        if perm == tuple(range(len(perm))):
            rewriter.replace(op, [], [inner.input])
        else:
            rewriter.replace(op, nn.TransposeOp(inner.input, perm))
        _erase_if_dead(rewriter, inner)


@dataclass(frozen=True)
class ConvertLayout(ModulePass):
    """Convert ``nn.conv2d`` (and 2-d ``nn.conv_integer``) to the ``conv2d`` layout and
    minimise the transposes."""

    name = "convert-layout"

    conv2d: str = "NHWC"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.conv2d != "NHWC":
            raise PartitaError(f"convert-layout: unsupported conv2d layout '{self.conv2d}' "
                               "(supported: NHWC)")
        PatternRewriteWalker(
            GreedyRewritePatternApplier(
                [ConvToNHWC(), SinkTransposeToNCHW(), ComposeTransposes()],
                dce_enabled=False,
            )
        ).rewrite_module(op)
