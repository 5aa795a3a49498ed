"""``cudnn-codegen``: every ``cudnn`` partition becomes a cuDNN frontend graph record.

Two graphs: ``conv2d`` (NCHW or NHWC, groups, dilation, asymmetric padding) with a bias
and ReLU, and ``sdpa`` (scaled dot-product attention, matched by ``is_attention``).
cuDNN describes every tensor by its logical NCHW (or BHSD) dims and strides, so a layout
is only a choice of strides: :func:`packed_strides` turns a storage order into them, and
a K stored transposed (``q @ kᵀ`` exports) is read in place the same way.

The attention scale must be a constant: a partition receives it as an argument, so the
value is read from the call site's ``nn.constant`` (this pass sees the whole module).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp
from xdsl.dialects.func import CallOp, FuncOp, ReturnOp
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue

from partita.dialects import nn
from partita.dialects.byoc import compiler_functions
from partita.ir import op_error
from partita.lowering.library import LibraryCodegen, element_type, static_shape
from partita.lowering.records import dataclass_from, fields_attr, register_record_kind

KIND = "cudnn"
IO_TYPES = {"f16": "HALF", "bf16": "BFLOAT16", "f32": "FLOAT"}
SDPA_TYPES = ("f16", "bf16")


def packed_strides(dims: Sequence[int], order: str, logical: str) -> tuple[int, ...]:
    """Strides, in ``logical`` axis order, of a tensor stored densely in ``order``
    (``packed_strides((N, C, H, W), "NHWC", "NCHW") = (HWC, 1, WC, C)``)."""
    size = dict(zip(logical, dims, strict=True))
    stride, acc = {}, 1
    for axis in reversed(order):
        stride[axis] = acc
        acc *= max(size[axis], 1)
    return tuple(stride[a] for a in logical)


@dataclass(frozen=True)
class ConvRecord:
    kind: str
    graph: str
    layout: str  # storage of x and y: NCHW or NHWC (weights OIHW / OHWI)
    x: tuple[int, ...]  # logical N, C, H, W (N = -1: run time)
    w: tuple[int, ...]  # logical K, C/groups, R, S
    y: tuple[int, ...]
    groups: int
    pre_padding: tuple[int, ...]
    post_padding: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    dtype: str
    io_type: str
    compute_type: str
    epilogue: str  # none, bias, relu, bias_relu
    roles: tuple[str, ...]

    def strides(self, dims: Sequence[int]) -> tuple[int, ...]:
        return packed_strides(dims, self.layout, "NCHW")

    def to_attr(self) -> DictionaryAttr:
        return fields_attr(self)


@dataclass(frozen=True)
class SdpaRecord:
    kind: str
    graph: str
    rank: int  # 4: [B, H, S, D]; 3: [B*H, S, D] (read as H = 1)
    q: tuple[int, ...]  # logical B, H, S_q, D (B = -1: run time)
    k: tuple[int, ...]  # logical B, H, S_kv, D
    v: tuple[int, ...]  # logical B, H, S_kv, D_v
    k_storage: str  # BHSD: cuDNN needs the head dim unit-strided (a Kᵀ export's transpose is read through)
    mask: tuple[int, ...]  # logical dims of the additive mask (broadcast), () for none
    scale: str  # the attention scale, as text (records hold no floats)
    dtype: str
    io_type: str
    compute_type: str
    roles: tuple[str, ...]  # q, k, v, [mask], and the scale constant(s): scale or scale_q, scale_k

    @property
    def attn_scale(self) -> float:
        return float(self.scale)

    def to_attr(self) -> DictionaryAttr:
        return fields_attr(self)


def record_from_attr(attr: DictionaryAttr) -> ConvRecord | SdpaRecord:
    graph = attr.data["graph"].data  # type: ignore[attr-defined]
    return dataclass_from(ConvRecord if graph == "conv2d" else SdpaRecord, attr)


def _roles(function: FuncOp, roles: dict[SSAValue, str], what: str, at: Operation) -> tuple[str, ...]:
    args = function.body.block.args
    if any(not isinstance(v, BlockArgument) for v in roles) or len(set(roles)) != len(args):
        raise op_error(at, f"the operands of a cuDNN {what} must be the partition's arguments, each used once")
    return tuple(roles[a] for a in args)


def conv_record(function: FuncOp, ops: list[Operation]) -> ConvRecord:
    conv = ops[0]
    assert isinstance(conv, nn.Conv2DOp)
    dtype = element_type(conv.results[0])
    if dtype not in IO_TYPES:
        raise op_error(conv, f"cuDNN convolutions take f16, bf16 or f32, not {dtype}")
    x, w, y = static_shape(conv.operands[0]), static_shape(conv.operands[1]), static_shape(conv.results[0])
    if conv.data_layout == "NHWC":
        x, y, w = (x[0], x[3], x[1], x[2]), (y[0], y[3], y[1], y[2]), (w[0], w[3], w[1], w[2])
    if any(d < 0 for d in (*x[1:], *w)):
        raise op_error(conv, "cuDNN convolutions here need static C, H, W and weights")
    roles: dict[SSAValue, str] = {conv.operands[0]: "x", conv.operands[1]: "w"}
    epilogue, rest = [], ops[1:]
    if rest and isinstance(rest[0], nn.BiasAddOp | nn.AddOp):
        bias = rest.pop(0)
        shape = static_shape(bias.operands[1])
        axis = 1 if conv.data_layout == "NCHW" else 3
        if isinstance(bias, nn.BiasAddOp):
            ok = bias.axis % 4 == axis and shape == (w[0],)
        else:  # nn.add: ones but the channel dim, right-aligned against the output
            padded = (1,) * (4 - len(shape)) + shape
            ok = len(shape) <= 4 and padded[axis] == w[0] and prod(padded) == w[0]
        if not ok:
            raise op_error(bias, "the cuDNN bias is one value per output channel")
        roles[bias.operands[1]] = "bias"
        epilogue.append("bias")
    if rest and isinstance(rest[0], nn.ReluOp):
        rest.pop(0)
        epilogue.append("relu")
    if rest:
        raise op_error(rest[0], "is not part of a cuDNN convolution's epilogue")
    t, left, b, r = conv.padding
    return ConvRecord(
        KIND, "conv2d", conv.data_layout, x, (w[0], w[1], w[2], w[3]), y, conv.groups, (t, left), (b, r),
        tuple(conv.strides), tuple(conv.dilation), dtype, IO_TYPES[dtype], "FLOAT", "_".join(epilogue) or "none",
        _roles(function, roles, "convolution", conv),
    )


def _scale_value(value: SSAValue, module: ModuleOp, function: FuncOp) -> float:
    """The constant the scale operand carries: in the body, or at every call site."""
    if isinstance(value, OpResult) and isinstance(value.op, nn.ConstantOp):
        return float(np.asarray(value.op.to_numpy(), np.float64).reshape(-1)[0])
    assert isinstance(value, BlockArgument)
    found = set()
    for op in module.walk():
        if isinstance(op, CallOp) and op.callee.string_value() == function.sym_name.data:
            operand = op.operands[value.index]
            if not (isinstance(operand, OpResult) and isinstance(operand.op, nn.ConstantOp)):
                raise op_error(op, "passes a non-constant attention scale to a cuDNN attention")
            found.add(float(np.asarray(operand.op.to_numpy(), np.float64).reshape(-1)[0]))
    if len(found) != 1:
        raise op_error(function, "the cuDNN attention scale must be one constant")
    return found.pop()


def _bhsd(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape if len(shape) == 4 else (shape[0], 1, shape[1], shape[2])


def _producer(value: SSAValue, kind: type, ops: list[Operation]) -> Operation | None:
    op = value.op if isinstance(value, OpResult) else None
    return op if isinstance(op, kind) and op in ops else None


def sdpa_record(function: FuncOp, ops: list[Operation], module: ModuleOp) -> SdpaRecord:
    """Reads the attention back from its softmax: ``pv(softmax([mask +] scale(qk)), v)``,
    the scale after the scores or split over Q and Kᵀ."""
    pv = ops[-1]
    softmax = _producer(pv.operands[0], nn.SoftmaxOp, ops)
    if softmax is None:
        raise op_error(pv, "is not the end of an attention (softmax · V)")
    dtype = element_type(pv.results[0])
    if dtype not in SDPA_TYPES:
        raise op_error(pv, f"cuDNN attention takes f16 or bf16, not {dtype}")
    scores = softmax.operands[0]
    mask_op = _producer(scores, nn.AddOp, ops)
    if mask_op is not None:
        scores = mask_op.operands[0]
    roles: dict[SSAValue, str] = {}
    scale = 1.0
    scale_op = _producer(scores, nn.MultiplyOp | nn.DivideOp, ops)
    if scale_op is not None:
        value = _scale_value(scale_op.operands[1], module, function)
        scale = 1.0 / value if isinstance(scale_op, nn.DivideOp) else value
        roles[scale_op.operands[1]] = "scale"
        scores = scale_op.operands[0]
    qk = _producer(scores, nn.MatmulOp | nn.BatchMatmulOp, ops)
    if qk is None:
        raise op_error(softmax, "is not fed by Q·Kᵀ")
    q_value, k_value = qk.operands
    if scale_op is None:  # PyTorch: sqrt(scale) multiplied into Q and into Kᵀ
        for name in ("q", "k"):
            side = _producer(q_value if name == "q" else k_value, nn.MultiplyOp, ops)
            if side is None:
                raise op_error(qk, "is an attention without a scale")
            scale *= _scale_value(side.operands[1], module, function)
            roles[side.operands[1]] = f"scale_{name}"
            if name == "q":
                q_value = side.operands[0]
            else:
                k_value = side.operands[0]
    v_value = pv.operands[1]
    rank = len(static_shape(q_value))
    q = _bhsd(static_shape(q_value))
    transpose = _producer(k_value, nn.TransposeOp, ops)
    if isinstance(qk, nn.MatmulOp):
        # cuDNN's SDPA needs K with a unit-stride head dim (its frontend rejects any other
        # at build()): K is read before the transpose that made Kᵀ.
        if transpose is None or list(transpose.perm) != [*range(rank - 2), rank - 1, rank - 2]:
            raise op_error(qk, "reads K transposed (B,H,D,S) with no transpose in the partition; cuDNN attention "
                               "needs K with a unit-stride head dim (B,H,S,D)")
        k_value = transpose.input
    k_storage = "BHSD"
    k = _bhsd(static_shape(k_value))
    v = _bhsd(static_shape(v_value))
    if q[3] % 8 or q[3] > 128:
        raise op_error(qk, "cuDNN attention needs a head dim that is a multiple of 8, at most 128")
    roles.update({q_value: "q", k_value: "k", v_value: "v"})
    mask: tuple[int, ...] = ()
    if mask_op is not None:
        m = static_shape(mask_op.operands[1])
        mask = (1,) * (4 - len(m)) + m if rank == 4 else _bhsd((1,) * (3 - len(m)) + m)
        roles[mask_op.operands[1]] = "mask"
    if softmax.axis % rank != rank - 1:
        raise op_error(softmax, "cuDNN attention takes the softmax over the keys (last axis)")
    return SdpaRecord(KIND, "sdpa", rank, q, k, v, k_storage, mask, repr(scale), dtype, IO_TYPES[dtype], "FLOAT",
                      _roles(function, roles, "attention", qk))


def cudnn_record(function: FuncOp, module: ModuleOp) -> ConvRecord | SdpaRecord:
    ops = [op for op in function.body.block.ops if not isinstance(op, ReturnOp)]
    if ops and isinstance(ops[0], nn.Conv2DOp):
        return conv_record(function, ops)
    if any(isinstance(op, nn.SoftmaxOp) for op in ops):
        return sdpa_record(function, ops, module)
    raise op_error(ops[0] if ops else function, "has no cuDNN graph (conv2d and attention do)")


def describe(record: ConvRecord | SdpaRecord) -> str:
    dims = lambda d: "x".join("?" if v < 0 else str(v) for v in d)  # noqa: E731
    if isinstance(record, ConvRecord):
        return (f"cudnn conv_fprop {record.layout} x={dims(record.x)} w={dims(record.w)} y={dims(record.y)} "
                f"groups={record.groups} pad={list(record.pre_padding)}/{list(record.post_padding)} "
                f"stride={list(record.stride)} dilation={list(record.dilation)} io={record.io_type} "
                f"compute={record.compute_type} epilogue={record.epilogue}")
    return (f"cudnn sdpa q={dims(record.q)} k={dims(record.k)} ({record.k_storage}) v={dims(record.v)} "
            f"scale={record.scale} mask={dims(record.mask) or 'none'} io={record.io_type} compute={record.compute_type}")


@dataclass(frozen=True)
class CudnnCodegen(LibraryCodegen):
    """Turn every cudnn partition function into a cuDNN frontend graph record."""

    name = "cudnn-codegen"
    compiler: ClassVar[str] = "cudnn"

    def records(self, module: ModuleOp) -> dict[str, DictionaryAttr]:
        return {f.sym_name.data: cudnn_record(f, module).to_attr() for f in compiler_functions(module, self.compiler)}


register_record_kind("cudnn", record_from_attr, library=True)
