"""ONNX converters of convolutions and pools (1-d, 2-d and 3-d), and of Col2Im and
MaxUnpool. A QDQ convolution (onnxruntime's static quantization) is the integer
convolution its dequantized operands stand for, scaled once."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import SSAValue

from partita.dialects import nn
from partita.frontends.onnx.dyn import dyn, static_length
from partita.frontends.onnx.linalg import qdq_operands, scaled_product
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.values import const_ints, fail, shape_of

if TYPE_CHECKING:  # pragma: no cover
    from partita.frontends.onnx.importer import Importer

CONV_OPS = {1: nn.Conv1DOp, 2: nn.Conv2DOp, 3: nn.Conv3DOp}
CONV_TRANSPOSE_OPS = {1: nn.Conv1DTransposeOp, 2: nn.Conv2DTransposeOp,
                      3: nn.Conv3DTransposeOp}
MAX_POOL_INDICES_OPS = {1: nn.MaxPool1DIndicesOp, 2: nn.MaxPool2DIndicesOp,
                        3: nn.MaxPool3DIndicesOp}
POOL_OPS = {
    "MaxPool": {1: nn.MaxPool1DOp, 2: nn.MaxPool2DOp, 3: nn.MaxPool3DOp},
    "AveragePool": {1: nn.AvgPool1DOp, 2: nn.AvgPool2DOp, 3: nn.AvgPool3DOp},
    "LpPool": {1: nn.LpPool1DOp, 2: nn.LpPool2DOp, 3: nn.LpPool3DOp},
}


def _auto_pad(attrs) -> str:
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    return auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad


def _spatial_rank(x_shape, what: str) -> int:
    rank = len(x_shape) - 2
    if rank not in (1, 2, 3):
        fail(f"{what} over {rank} spatial dimensions is not supported (1, 2 or 3)")
    return rank


def spatial_attrs(attrs, x_shape, kernel, ceil_mode: bool = False):
    """(strides, padding, dilations) of a Conv/Pool node: ``padding`` holds the leading
    pads of every spatial dim, then the trailing ones (ONNX ``pads``)."""
    rank = len(kernel)
    strides = list(attrs.get("strides", [1] * rank))
    dilations = list(attrs.get("dilations", [1] * rank))
    if len(strides) != rank or len(dilations) != rank:
        fail(f"strides {strides} and dilations {dilations} must have {rank} values")
    auto_pad = _auto_pad(attrs)
    if auto_pad == "NOTSET":
        pads = list(attrs.get("pads", [0] * (2 * rank)))
    elif auto_pad == "VALID":
        pads = [0] * (2 * rank)
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for size, k, s, d in zip(x_shape[2:], kernel, strides, dilations):
            if size == nn.DYN:
                fail(f"auto_pad {auto_pad} needs static spatial dimensions")
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            lo.append(small if auto_pad == "SAME_UPPER" else big)
            hi.append(big if auto_pad == "SAME_UPPER" else small)
        pads = lo + hi
    else:
        fail(f"unsupported auto_pad '{auto_pad}'")
    if len(pads) != 2 * rank:
        fail(f"pads {pads} must have {2 * rank} values")
    return strides, pads, dilations


def _kernel_shape(attrs, w_shape):
    kernel = list(attrs.get("kernel_shape", w_shape[2:]))
    if list(kernel) != list(w_shape[2:]) and nn.DYN not in w_shape[2:]:
        fail(f"kernel_shape {kernel} does not match the weight's {list(w_shape[2:])}")
    return kernel


def _bias(cx, out, ins, x):
    if len(ins) > 2 and ins[2] is not None:
        out = cx.emit(nn.BiasAddOp(out, cx.tensor(ins[2], x), axis=1))
    return out


INT8_CONV_CHANNELS = 16
"""The input channels an int8 tensor-core convolution reads per access (16 bytes): a
convolution whose channel count is a multiple of it is laid out for one."""


def integer_conv(cx: Importer, x: SSAValue, w: np.ndarray, zx: np.ndarray, strides, pads, dilations) -> SSAValue:
    """``conv(x - zx, w)`` in i32 for a constant symmetric int8 weight (zero point 0, not
    grouped). Laid out for int8 tensor cores, which read no zero points, when the channels
    fit them (2-d, ``C % 16 == 0``): ``zx`` folded out of the product as TVM's QNN does,
    the input padded with ``zx`` (the padding cells of ``x - zx`` hold 0) and
    ``conv(x, w) - zx * sum(w)``, the second term an i32 row per output channel (added
    after the product: its epilogue's bias). Both sides are integers: the rewrite is exact.
    Any other convolution keeps ``zx`` in the op (the native kernel subtracts it)."""
    rank = w.ndim - 2
    zero_w = cx.tensor(np.zeros((), w.dtype))
    fold = bool(zx) and rank == 2 and w.shape[1] % INT8_CONV_CHANNELS == 0
    if not fold:
        return cx.emit(nn.ConvIntegerOp(x, cx.tensor(w), cx.tensor(zx), zero_w, strides=strides, padding=pads,
                                        dilation=dilations))
    if any(pads):
        x = cx.emit(nn.PadOp(x, [0, 0, *pads[:rank]], [0, 0, *pads[rank:]], pad_value=float(zx)))
    out = cx.emit(nn.ConvIntegerOp(x, cx.tensor(w), cx.tensor(np.zeros((), zx.dtype)), zero_w, strides=strides,
                                   padding=[0] * (2 * rank), dilation=dilations))
    offset = zx.astype(np.int64) * w.astype(np.int64).sum(axis=tuple(range(1, w.ndim)))
    row = (-offset).astype(np.int32).reshape(1, -1, *[1] * rank)  # wraps as the i32 accumulator does
    return cx.emit(nn.AddOp(out, cx.tensor(row)))


def _qdq_conv(cx: Importer, x: SSAValue, weight: str, strides, pads, dilations, groups: int) -> SSAValue | None:
    """The QDQ form of a quantized Conv, ``Conv(DequantizeLinear(xq), DequantizeLinear(wq))``
    (onnxruntime's static quantization), as the integer convolution it stands for, scaled
    once by ``sx * sw`` (as ``_qdq_matmul``): a per-tensor activation and a symmetric weight
    quantized per tensor or per output channel (axis 0). A grouped (depthwise) one or an
    asymmetric weight keeps the float convolution of the dequantized values (None)."""
    if groups != 1:
        return None
    q = qdq_operands(cx, x, weight, len(shape_of(x)), 0, symmetric=True)
    if q is None or q.is_float8:  # no FP8 convolution: the float one of the dequantized values
        return None
    product = integer_conv(cx, q.dequantize.input, q.weight, q.zero_point, strides, pads, dilations)
    return scaled_product(cx, q, product, [1, -1, *[1] * (q.weight.ndim - 2)])


@converter("Conv")
def _conv(cx, ins, attrs):
    x = cx.tensor(ins[0])
    rank = _spatial_rank(shape_of(x), "Conv")
    kernel = _kernel_shape(attrs, shape_of(ins[1]) if isinstance(ins[1], SSAValue) else np.shape(ins[1]))
    strides, pads, dilations = spatial_attrs(attrs, shape_of(x), kernel)
    groups = attrs.get("group", 1)
    out = _qdq_conv(cx, x, cx.node.input[1], strides, pads, dilations, groups)
    if out is None:
        out = cx.emit(CONV_OPS[rank](x, cx.tensor(ins[1], x), strides=strides, padding=pads, dilation=dilations,
                                     groups=groups))
    return _bias(cx, out, ins, x)


@converter("ConvTranspose")
def _conv_transpose(cx, ins, attrs):
    x = cx.tensor(ins[0])
    w = cx.tensor(ins[1], x)
    rank = _spatial_rank(shape_of(x), "ConvTranspose")
    kernel = _kernel_shape(attrs, shape_of(w))
    strides = list(attrs.get("strides", [1] * rank))
    dilations = list(attrs.get("dilations", [1] * rank))
    output_padding = list(attrs.get("output_padding", [0] * rank))
    pads = list(attrs.get("pads", [0] * (2 * rank)))
    auto_pad = _auto_pad(attrs)
    output_shape = attrs.get("output_shape")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        sizes = shape_of(x)[2:]
        if nn.DYN in sizes:
            fail("output_shape and auto_pad need static spatial dimensions")
        if output_shape is None:
            output_shape = [s * st for s, st in zip(sizes, strides)]
        output_shape = list(output_shape)[-rank:]
        lo, hi = [], []
        for k in range(rank):
            total = (strides[k] * (sizes[k] - 1) + output_padding[k]
                     + (kernel[k] - 1) * dilations[k] + 1 - output_shape[k])
            if total < 0:  # the requested output is larger: extend it at the end
                output_padding[k] -= total
                total = 0
            small, big = total // 2, total - total // 2
            lower = auto_pad != "SAME_UPPER"  # the spec's split, output_shape included
            lo.append(big if lower else small)
            hi.append(small if lower else big)
        pads = lo + hi
    elif auto_pad not in ("NOTSET", "VALID"):
        fail(f"unsupported auto_pad '{auto_pad}'")
    elif auto_pad == "VALID":
        pads = [0] * (2 * rank)
    out = cx.emit(CONV_TRANSPOSE_OPS[rank](x, w, strides=strides, padding=pads,
                                           output_padding=output_padding,
                                           dilation=dilations, groups=attrs.get("group", 1)))
    return _bias(cx, out, ins, x)


def _pool(kind: str):
    def convert(cx, ins, attrs):
        indices = kind == "MaxPool" and cx._used_output(1)
        x = cx.tensor(ins[0])
        rank = _spatial_rank(shape_of(x), kind)
        kernel = list(attrs["kernel_shape"])
        if len(kernel) != rank:
            fail(f"kernel_shape {kernel} must have {rank} values")
        strides, pads, dilations = spatial_attrs(attrs, shape_of(x), kernel)
        extra = {}
        if kind == "AveragePool":
            extra["count_include_pad"] = bool(attrs.get("count_include_pad", 0))
        if kind == "LpPool":
            extra["p"] = float(attrs.get("p", 2))
        window = {"strides": strides, "padding": pads, "dilation": dilations,
                  "ceil_mode": bool(attrs.get("ceil_mode", 0))}
        outs = [cx.emit(POOL_OPS[kind][rank](x, kernel, **window, **extra))]
        if indices:
            outs.append(cx.emit(MAX_POOL_INDICES_OPS[rank](
                x, kernel, column_major=bool(attrs.get("storage_order", 0)), **window)))
        return outs

    return convert


for _kind in POOL_OPS:
    converter(_kind)(_pool(_kind))


def _global_pool(kind: str):
    """A window covering the whole spatial extent (global average pooling of rank 4
    keeps its own op, which also takes dynamic spatial dims)."""

    def convert(cx, ins, attrs):
        x = cx.tensor(ins[0])
        shape = shape_of(x)
        rank = _spatial_rank(shape, f"Global{kind}")
        if kind == "AveragePool" and rank == 2:
            return cx.emit(nn.GlobalAvgPool2DOp(x))
        if nn.DYN in shape[2:]:
            fail(f"Global{kind} needs static spatial dimensions")
        extra = {"p": float(attrs.get("p", 2))} if kind == "LpPool" else {}
        return cx.emit(POOL_OPS[kind][rank](x, list(shape[2:]), **extra))

    return convert


for _kind in POOL_OPS:
    converter(f"Global{_kind}")(_global_pool(_kind))


@converter("Col2Im")
def _col2im(cx, ins, attrs):
    x = cx.tensor(ins[0])
    image, block = ins[1], ins[2]
    runtime = isinstance(image, SSAValue) or isinstance(block, SSAValue)
    rank = static_length(image, "image_shape") if isinstance(image, SSAValue) else len(const_ints(image, "image_shape"))
    strides = list(attrs.get("strides", [1] * rank))
    dilations = list(attrs.get("dilations", [1] * rank))
    pads = list(attrs.get("pads", [0] * (2 * rank)))
    if len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        fail(f"strides {strides}, dilations {dilations} and pads {pads} must have {rank}, {rank} and "
             f"{2 * rank} values")
    if runtime:
        # The image's shape (and the channels, through the block) bound at plan time.
        return dyn(cx, "col2im", [x], {"image_shape": image, "block_shape": block}, 2 + rank,
                   x.type.element_type, "image_shape / block_shape", strides=strides, padding=pads,
                   dilation=dilations)
    return cx.emit(nn.Col2ImOp(x, const_ints(image, "image_shape"), const_ints(block, "block_shape"), strides,
                               pads, dilations))


@converter("DeformConv")
def _deform_conv(cx, ins, attrs):
    ins = list(ins) + [None] * (5 - len(ins))
    x = cx.tensor(ins[0])
    if len(shape_of(x)) != 4:
        fail(f"DeformConv is supported over 2 spatial dims (rank 4 input), got rank {len(shape_of(x))}")
    w, offset = cx.tensor(ins[1], x), cx.tensor(ins[2], x)
    if "kernel_shape" in attrs and list(attrs["kernel_shape"]) != list(shape_of(w)[2:]):
        fail(f"kernel_shape {list(attrs['kernel_shape'])} does not match the weight's {list(shape_of(w)[2:])}")
    mask = None if ins[4] is None else cx.tensor(ins[4], x)
    y = cx.emit(nn.DeformConv2DOp(x, w, offset, mask, strides=attrs.get("strides"), padding=attrs.get("pads"),
                                  dilation=attrs.get("dilations"), groups=attrs.get("group", 1),
                                  offset_groups=attrs.get("offset_group", 1)))
    if ins[3] is None:
        return y
    bias = cx.tensor(ins[3], x)
    return cx.emit(nn.AddOp(y, cx.emit(nn.ReshapeOp(bias, [shape_of(bias)[0], 1, 1]))))


@converter("MaxUnpool")
def _max_unpool(cx, ins, attrs):
    x = cx.tensor(ins[0])
    indices = ins[1] if isinstance(ins[1], SSAValue) else cx.tensor(np.asarray(ins[1], np.int64))
    shape = shape_of(x)
    rank = _spatial_rank(shape, "MaxUnpool")
    kernel = list(attrs["kernel_shape"]) if "kernel_shape" in attrs else fail("MaxUnpool needs kernel_shape")
    strides = list(attrs.get("strides", [1] * rank))
    pads = list(attrs.get("pads", [0] * (2 * rank)))
    if len(kernel) != rank or len(strides) != rank or len(pads) != 2 * rank:
        fail(f"kernel_shape {kernel}, strides {strides} and pads {pads} must have {rank}, {rank} and "
             f"{2 * rank} values")
    given = ins[2] if len(ins) > 2 else None
    if isinstance(given, SSAValue):  # the result's shape bound when the plan reads the values
        if static_length(given, "output_shape") != rank + 2:
            fail(f"output_shape must hold {rank + 2} values")
        return dyn(cx, "max_unpool", [x, indices], {"output_shape": given}, rank + 2, x.type.element_type,
                   "output_shape", kernel=kernel, strides=strides, padding=pads)
    sizes = nn.max_unpool_sizes(shape, kernel, strides, pads)
    if nn.DYN in sizes:
        fail("MaxUnpool needs static spatial dimensions")
    if given is not None:
        given_sizes = const_ints(given, "output_shape")
        if len(given_sizes) != rank + 2:
            fail(f"output_shape {given_sizes} must hold {rank + 2} values")
        try:
            nn.check_max_unpool_size(given_sizes[2:], sizes)
        except ValueError as err:
            fail(str(err))
    return cx.emit(nn.MaxUnpoolOp(x, indices, sizes))
