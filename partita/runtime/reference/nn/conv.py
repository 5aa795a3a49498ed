"""NumPy references of the ``nn`` convolutions and pools (any number of spatial dims), and
of col2im."""

from __future__ import annotations

import itertools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from xdsl.interpreter import InterpreterFunctions, impl, register_impls

from partita.dialects import nn
from partita.ir import PartitaError
from partita.runtime.reference.nn.base import in_compute_type


def to_channels_first(x: np.ndarray, layout: str) -> np.ndarray:
    """``x`` with its channel axis (``C``, or ``I`` of a kernel layout) second."""
    return x if layout[1] in "CI" else np.moveaxis(x, -1, 1)


def from_channels_first(x: np.ndarray, layout: str) -> np.ndarray:
    return x if layout[1] in "CI" else np.moveaxis(x, 1, -1)


def windows(x: np.ndarray, kernel, strides, dilation) -> np.ndarray:
    """``[N, C, *out, *kernel]`` view of the sliding windows of an (already padded)
    channels-first array."""
    rank = len(kernel)
    extent = [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]
    view = sliding_window_view(x, extent, axis=tuple(range(2, 2 + rank)))
    steps = [slice(None, None, s) for s in strides] + [slice(None, None, d) for d in dilation]
    return view[(slice(None), slice(None), *steps)]


def pool_pads(op: nn.PoolOp, sizes) -> list[tuple[int, int]]:
    """Leading / trailing padding per spatial dim, extended at the end so that every
    ceil_mode window has cells to read."""
    rank = op.SPATIAL
    pads = []
    for k, size in enumerate(sizes):
        lo, hi = op.padding[k], op.padding[rank + k]
        out = nn.conv_output_dim(size, op.pool_size[k], op.strides[k], lo, hi, op.dilation[k],
                                 op.ceil_mode)
        needed = (out - 1) * op.strides[k] + op.dilation[k] * (op.pool_size[k] - 1) + 1
        pads.append((lo, max(hi, needed - size - lo)))
    return pads


def _lowest(dtype: np.dtype):
    return -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


def conv(op: nn.ConvOp, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    rank = op.SPATIAL
    x = to_channels_first(x, op.data_layout)
    w = to_channels_first(w, op.kernel_layout)
    x = np.pad(x, [(0, 0), (0, 0)] + [(op.padding[k], op.padding[rank + k])
                                      for k in range(rank)])
    win = windows(x, w.shape[2:], op.strides, op.dilation)
    g, cin, cout = op.groups, w.shape[1], w.shape[0] // op.groups
    reduce_win = [1, *range(2 + rank, 2 + 2 * rank)]
    reduce_w = list(range(1, 2 + rank))
    parts = [np.tensordot(win[:, i * cin:(i + 1) * cin], w[i * cout:(i + 1) * cout],
                          axes=(reduce_win, reduce_w)) for i in range(g)]
    out = np.moveaxis(np.concatenate(parts, axis=-1), -1, 1)
    return from_channels_first(out, op.data_layout)


def conv_integer(op: nn.ConvIntegerOp, x: np.ndarray, w: np.ndarray, zx: np.ndarray,
                 zw: np.ndarray) -> np.ndarray:
    """The integer convolution of the shifted operands, summed exactly (int64) and wrapped
    to int32 as the kernel's int32 accumulator is."""
    x = x.astype(np.int64) - np.asarray(zx, np.int64).reshape(())
    zw = np.asarray(zw, np.int64)
    w = w.astype(np.int64) - (zw.reshape((-1,) + (1,) * (w.ndim - 1)) if zw.size > 1 else zw.reshape(()))
    return conv(op, x, w).astype(np.int32)


def conv_transpose(op: nn.ConvTransposeOp, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    rank, g = op.SPATIAL, op.groups
    n, _, *sizes = x.shape
    cin_g, cout_g, *kernel = w.shape[0] // g, w.shape[1], *w.shape[2:]
    full = [(s - 1) * st + d * (k - 1) + 1 + p for s, st, d, k, p in
            zip(sizes, op.strides, op.dilation, kernel, op.output_padding)]
    out = np.zeros((n, cout_g * g, *full), dtype=x.dtype)
    for i in range(g):
        xg = x[:, i * cin_g:(i + 1) * cin_g]
        wg = w[i * cin_g:(i + 1) * cin_g]
        for pos in itertools.product(*(range(k) for k in kernel)):
            part = np.tensordot(xg, wg[(slice(None), slice(None), *pos)], axes=([1], [0]))
            where = tuple(slice(p * d, p * d + (s - 1) * st + 1, st) for p, d, s, st in
                          zip(pos, op.dilation, sizes, op.strides))
            out[(slice(None), slice(i * cout_g, (i + 1) * cout_g), *where)] += \
                np.moveaxis(part, -1, 1)
    crop = tuple(slice(op.padding[k], f - op.padding[rank + k]) for k, f in enumerate(full))
    return out[(slice(None), slice(None), *crop)]


def max_pool(op: nn.MaxPoolOp, x: np.ndarray) -> np.ndarray:
    x = to_channels_first(x, op.layout)
    pads = pool_pads(op, x.shape[2:])
    x = np.pad(x, [(0, 0), (0, 0), *pads], constant_values=_lowest(x.dtype))
    axes = tuple(range(-op.SPATIAL, 0))
    out = windows(x, op.pool_size, op.strides, op.dilation).max(axis=axes)
    return from_channels_first(out, op.layout)


def max_pool_indices(op: nn.MaxPoolIndicesOp, x: np.ndarray) -> np.ndarray:
    rank = op.SPATIAL
    x = to_channels_first(x, op.layout)
    n, c, *sizes = x.shape
    out_sizes = [nn.conv_output_dim(size, op.pool_size[k], op.strides[k], op.padding[k],
                                    op.padding[rank + k], op.dilation[k], op.ceil_mode)
                 for k, size in enumerate(sizes)]
    grids = np.meshgrid(*(np.arange(o) for o in out_sizes), indexing="ij")
    best = np.full((n, c, *out_sizes), _lowest(x.dtype), dtype=x.dtype)
    found = np.zeros((n, c, *out_sizes), dtype=bool)
    index = np.zeros((n, c, *out_sizes), dtype=np.int64)
    base = (np.arange(n)[:, None] * c + np.arange(c)[None, :]).reshape(n, c, *[1] * rank)
    for taps in itertools.product(*(range(k) for k in op.pool_size)):
        coords = [g * op.strides[k] - op.padding[k] + taps[k] * op.dilation[k]
                  for k, g in enumerate(grids)]
        inside = np.logical_and.reduce([(i >= 0) & (i < s) for i, s in zip(coords, sizes)])
        clamped = [np.clip(i, 0, s - 1) for i, s in zip(coords, sizes)]
        value = x[(slice(None), slice(None), *clamped)]
        better = inside & (~found | (value > best))
        best = np.where(better, value, best)
        found |= better
        spatial, stride = 0, 1
        order = range(rank) if op.column_major else range(rank - 1, -1, -1)
        for k in order:  # the fastest axis first
            spatial, stride = spatial + clamped[k] * stride, stride * sizes[k]
        offset = base * stride + spatial
        index = np.where(better, offset, index)
    return from_channels_first(index, op.layout)


def avg_pool(op: nn.AvgPoolOp, x: np.ndarray) -> np.ndarray:
    rank = op.SPATIAL
    x = to_channels_first(x, op.layout)
    sizes = x.shape[2:]
    pads = pool_pads(op, sizes)
    # Cells that count towards the divisor: the input, plus the declared padding
    # when count_include_pad (never the extra ceil_mode cells).
    counted = np.zeros((1, 1, *(s + lo + hi for s, (lo, hi) in zip(sizes, pads))),
                       np.float32)
    if op.count_include_pad:
        inside = tuple(slice(lo - op.padding[k], lo + s + op.padding[rank + k])
                       for k, (s, (lo, _)) in enumerate(zip(sizes, pads)))
    else:
        inside = tuple(slice(lo, lo + s) for s, (lo, _) in zip(sizes, pads))
    counted[(..., *inside)] = 1
    x = np.pad(x, [(0, 0), (0, 0), *pads])
    axes = tuple(range(-rank, 0))
    total = windows(x, op.pool_size, op.strides, op.dilation).sum(axis=axes)
    count = windows(counted, op.pool_size, op.strides, op.dilation).sum(axis=axes)
    return from_channels_first(total / count.astype(total.dtype), op.layout)


def lp_pool(op: nn.LpPoolOp, x: np.ndarray) -> np.ndarray:
    x = to_channels_first(x, op.layout)
    pads = pool_pads(op, x.shape[2:])
    x = np.pad(np.abs(x) ** x.dtype.type(op.p), [(0, 0), (0, 0), *pads])
    axes = tuple(range(-op.SPATIAL, 0))
    total = windows(x, op.pool_size, op.strides, op.dilation).sum(axis=axes)
    return from_channels_first(total ** x.dtype.type(1.0 / op.p), op.layout)


def global_avg_pool2d(op: nn.GlobalAvgPool2DOp, x: np.ndarray) -> np.ndarray:
    axes = (2, 3) if op.layout == "NCHW" else (1, 2)
    return x.mean(axis=axes, keepdims=True)


def col2im(op: nn.Col2ImOp, x: np.ndarray) -> np.ndarray:
    """Each image cell gathers the column entries that came from it: for every block
    offset, in row-major order (the kernel's), the block whose window puts that offset on
    the cell, if the strides land one there."""
    image, block = list(op.image_shape), list(op.block_shape)
    rank, blocks = len(image), op.blocks()
    n, window = x.shape[0], int(np.prod(block))
    cols = x.reshape(n, x.shape[1] // window, window, *blocks)
    acc = np.zeros((n, cols.shape[1], *image), x.dtype)
    for k, offset in enumerate(itertools.product(*(range(b) for b in block))):
        index, valid = [], None
        for a in range(rank):
            q = np.arange(image[a]) + op.padding[a] - offset[a] * op.dilation[a]
            ok = (q >= 0) & (q % op.strides[a] == 0) & (q // op.strides[a] < blocks[a])
            index.append(np.where(ok, q // op.strides[a], 0))
            valid = ok if valid is None else np.logical_and.outer(valid, ok)
        acc += np.where(valid, cols[:, :, k][(slice(None), slice(None), *np.ix_(*index))], 0)
    return acc


def max_unpool(op: nn.MaxUnpoolOp, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """Zeros, then ``x`` written in order at ``indices`` (the last write wins)."""
    shape = op.result.type.get_shape()
    out = np.zeros(x.shape[:2] + tuple(shape[2:]), x.dtype)
    flat, at = out.reshape(-1), np.asarray(indices, np.int64).reshape(-1)
    if at.size and (at.min() < 0 or at.max() >= flat.size):
        raise PartitaError(f"{op.name}: an index is outside the result's {flat.size} elements")
    # NumPy does not promise an order for repeated indices: keep the last write of each.
    targets, first_from_end = np.unique(at[::-1], return_index=True)
    flat[targets] = x.reshape(-1)[at.size - 1 - first_from_end]
    return out


def deform_conv2d(op: nn.DeformConv2DOp, x: np.ndarray, w: np.ndarray, offset: np.ndarray,
                  mask: np.ndarray | None = None) -> np.ndarray:
    """Each tap's bilinear samples as columns (one gather per neighbour), then the grouped
    product with the weight."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = offset.shape[2:]
    og, groups = op.offset_groups, op.groups
    (sh, sw), (dh, dw), (ph, pw) = op.strides, op.dilation, op.padding[:2]
    off = offset.reshape(n, og, kh, kw, 2, oh, ow)
    rows = (np.arange(oh) * sh - ph)[:, None] + (np.arange(kh) * dh)[:, None, None, None]  # kh, 1, oh, 1
    cols = (np.arange(ow) * sw - pw)[None, :] + (np.arange(kw) * dw)[None, :, None, None]  # 1, kw, 1, ow
    py, px = rows + off[:, :, :, :, 0], cols + off[:, :, :, :, 1]  # n, og, kh, kw, oh, ow
    y0, x0 = np.floor(py), np.floor(px)
    ly, lx = py - y0, px - x0
    flat = x.reshape(n, og, c // og, h * wd)
    sampled = np.zeros((n, og, c // og, kh * kw * oh * ow), x.dtype)
    for dy, dx, weight in ((0, 0, (1 - ly) * (1 - lx)), (0, 1, (1 - ly) * lx), (1, 0, ly * (1 - lx)), (1, 1, ly * lx)):
        yy, xx = (y0 + dy).astype(np.int64), (x0 + dx).astype(np.int64)
        inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < wd)  # outside the image: zero
        at = (np.clip(yy, 0, h - 1) * wd + np.clip(xx, 0, wd - 1)).reshape(n, og, 1, -1)
        values = np.take_along_axis(flat, np.broadcast_to(at, sampled.shape), axis=3)
        sampled += values * np.where(inside, weight, 0).reshape(n, og, 1, -1)
    if mask is not None:
        sampled *= mask.reshape(n, og, 1, -1)
    taps = sampled.reshape(n, groups, cg, kh, kw, oh * ow)
    y = np.einsum("ngcabp,gocab->ngop", taps, w.reshape(groups, o // groups, cg, kh, kw))
    return y.reshape(n, o, oh, ow)


@register_impls
class ConvFunctions(InterpreterFunctions):
    """Reference semantics of the ``nn`` convolutions and pools."""

    run_col2im = impl(nn.Col2ImOp)(in_compute_type(col2im))
    run_deform_conv2d = impl(nn.DeformConv2DOp)(in_compute_type(deform_conv2d))
    run_max_unpool = impl(nn.MaxUnpoolOp)(lambda self, interpreter, op, args: (max_unpool(op, *args),))
    run_conv1d = impl(nn.Conv1DOp)(in_compute_type(conv))
    run_conv2d = impl(nn.Conv2DOp)(in_compute_type(conv))
    run_conv3d = impl(nn.Conv3DOp)(in_compute_type(conv))

    @impl(nn.ConvIntegerOp)
    def run_conv_integer(self, interpreter, op: nn.ConvIntegerOp, args):
        return (conv_integer(op, *(np.asarray(v) for v in args)),)

    run_conv1d_transpose = impl(nn.Conv1DTransposeOp)(in_compute_type(conv_transpose))
    run_conv2d_transpose = impl(nn.Conv2DTransposeOp)(in_compute_type(conv_transpose))
    run_conv3d_transpose = impl(nn.Conv3DTransposeOp)(in_compute_type(conv_transpose))
    run_max_pool1d = impl(nn.MaxPool1DOp)(in_compute_type(max_pool))
    run_max_pool2d = impl(nn.MaxPool2DOp)(in_compute_type(max_pool))
    run_max_pool3d = impl(nn.MaxPool3DOp)(in_compute_type(max_pool))
    run_max_pool1d_indices = impl(nn.MaxPool1DIndicesOp)(in_compute_type(max_pool_indices))
    run_max_pool2d_indices = impl(nn.MaxPool2DIndicesOp)(in_compute_type(max_pool_indices))
    run_max_pool3d_indices = impl(nn.MaxPool3DIndicesOp)(in_compute_type(max_pool_indices))
    run_avg_pool1d = impl(nn.AvgPool1DOp)(in_compute_type(avg_pool))
    run_avg_pool2d = impl(nn.AvgPool2DOp)(in_compute_type(avg_pool))
    run_avg_pool3d = impl(nn.AvgPool3DOp)(in_compute_type(avg_pool))
    run_lp_pool1d = impl(nn.LpPool1DOp)(in_compute_type(lp_pool))
    run_lp_pool2d = impl(nn.LpPool2DOp)(in_compute_type(lp_pool))
    run_lp_pool3d = impl(nn.LpPool3DOp)(in_compute_type(lp_pool))
    run_global_avg_pool2d = impl(nn.GlobalAvgPool2DOp)(in_compute_type(global_avg_pool2d))
