"""NumPy references of the ``nn`` image ops (resize, depth / space rearrangement, RoiAlign,
GridSample, AffineGrid)."""

from __future__ import annotations

import itertools

import numpy as np
from xdsl.interpreter import InterpreterFunctions, impl, register_impls

from partita.dialects import nn
from partita.ir import PartitaError
from partita.runtime.reference.nn.base import in_compute_type


def depth_to_space(op: nn.DepthToSpaceOp, x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    b = op.block_size
    if op.mode == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(n, c // (b * b), h * b, w * b)


def space_to_depth(op: nn.SpaceToDepthOp, x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    b = op.block_size
    t = x.reshape(n, c, h // b, b, w // b, b)
    if op.mode == "DCR":
        t = t.transpose(0, 3, 5, 1, 2, 4)
    else:
        t = t.transpose(0, 1, 3, 5, 2, 4)
    return t.reshape(n, c * b * b, h // b, w // b)


def source_coordinates(op: nn.ResizeOp, axis: int, size: int, out: int,
                       scale: float, roi) -> np.ndarray:
    """Input coordinate sampled by each output cell of ``axis`` (float64)."""
    y = np.arange(out, dtype=np.float64)
    mode = op.coordinate_transformation_mode
    length = scale * size  # ONNX uses the unrounded output length
    if mode == "align_corners":
        return np.zeros(out) if length == 1 else y * (size - 1) / (length - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        lo, hi = roi[axis], roi[len(op.sizes) + axis]
        if length == 1:
            return np.full(out, (hi - lo) * (size - 1) / 2 + lo * (size - 1))
        return y * (hi - lo) * (size - 1) / (length - 1) + lo * (size - 1)
    if mode == "pytorch_half_pixel":
        return np.full(out, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = size / 2 * (1 - out / length)
        return offset + (y + 0.5) / scale - 0.5
    return (y + 0.5) / scale - 0.5  # half_pixel


def cubic_weights(r: np.ndarray, a: float, at: bool = False) -> np.ndarray:
    """Keys' cubic convolution weights of the taps at -1, 0, 1, 2 around ``floor(x)``
    (``at``: the kernel at the distances ``r`` themselves)."""
    def k(t):
        t = np.abs(t)
        return np.where(t <= 1, ((a + 2) * t - (a + 3)) * t * t + 1,
                        np.where(t < 2, ((a * t - 5 * a) * t + 8 * a) * t - 4 * a, 0.0))
    if at:
        return k(r)
    return np.stack([k(r + 1), k(r), k(1 - r), k(2 - r)], axis=-1)


def taps(op: nn.ResizeOp, x: np.ndarray, size: int, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, weights)``, each ``[out, taps]``, of the input cells an axis reads
    (``scale`` widens an antialiased filter)."""
    base = np.floor(x)
    r = x - base
    base = base.astype(np.int64)
    if op.antialias and op.mode != "nearest" and scale < 1:
        first, count = nn.antialias_window(op.mode, scale)
        offsets = np.arange(first, first + count)
        index = base[:, None] + offsets
        t = np.abs((offsets - r[:, None]) * scale)
        weight = np.clip(1 - t, 0, 1) if op.mode == "linear" else cubic_weights(t, op.cubic_coeff_a, at=True)
        weight = weight / weight.sum(axis=-1, keepdims=True)
    elif op.mode == "nearest":
        integral = r == 0
        up = {"round_prefer_floor": r > 0.5, "round_prefer_ceil": r >= 0.5,
              "floor": np.zeros_like(integral), "ceil": ~integral}[op.nearest_mode]
        index = base + (up & ~integral)
        return np.clip(index, 0, size - 1)[:, None], np.ones((len(x), 1))
    elif op.mode == "linear":
        index = base[:, None] + np.arange(2)
        weight = np.stack([1 - r, r], axis=-1)
    else:
        index = base[:, None] + np.arange(-1, 3)
        weight = cubic_weights(r, op.cubic_coeff_a)
    if op.exclude_outside:
        weight = np.where((index < 0) | (index >= size), 0.0, weight)
        weight = weight / weight.sum(axis=-1, keepdims=True)
    return np.clip(index, 0, size - 1), weight


def resize(op: nn.ResizeOp, x: np.ndarray, *params: np.ndarray) -> np.ndarray:
    out_shape = op.result.type.get_shape()
    params, rank, axes = list(params), x.ndim, op.operand_axes()
    scales, roi = list(op.scales), list(op.roi)
    if op.dynamic_scales is not None:
        scales = [1.0] * rank
        for a, s in zip(axes, np.asarray(params.pop(0), np.float32)):
            scales[a] = float(s)
    if op.dynamic_roi is not None:
        given = [float(r) for r in np.asarray(params.pop(0), np.float64)]
        roi = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(axes):
            roi[a], roi[rank + a] = given[i], given[len(axes) + i]
    result = x.astype(np.float64)
    outside = np.zeros(x.ndim * [1], dtype=bool)
    for axis in op.resized_axes():
        size, out = result.shape[axis], out_shape[axis]
        coords = source_coordinates(op, axis, size, out, scales[axis], roi)
        index, weight = taps(op, coords, size, scales[axis])
        gathered = np.take(result, index, axis=axis)  # [..., out, taps, ...]
        shape = [1] * gathered.ndim
        shape[axis], shape[axis + 1] = weight.shape
        result = (gathered * weight.reshape(shape)).sum(axis=axis + 1)
        if op.coordinate_transformation_mode == "tf_crop_and_resize":
            mask_shape = [1] * x.ndim
            mask_shape[axis] = out
            outside = outside | ((coords < 0) | (coords > size - 1)).reshape(mask_shape)
    result = np.where(outside, op.extrapolation_value, result)
    if np.issubdtype(x.dtype, np.integer):
        return np.rint(result).astype(x.dtype)
    return result.astype(x.dtype)


def _roi_taps(coord: np.ndarray, size: int) -> tuple[np.ndarray, ...]:
    """Bilinear taps along one axis, as onnxruntime's RoiAlign takes them: (in range,
    low index, high index, low weight, high weight); a sample beyond one pixel outside the
    image is out of range, one at the last pixel uses it twice."""
    valid = (coord >= -1.0) & (coord <= size)
    c = np.maximum(coord, 0.0)
    low = np.floor(c).astype(np.int64)
    edge = low >= size - 1
    low = np.where(edge, size - 1, low)
    high = np.where(edge, size - 1, low + 1)
    frac = np.where(edge, 0.0, c - low)
    return valid, low, high, 1.0 - frac, frac


def roi_align(op: nn.RoiAlignOp, x: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    oh, ow = op.output_height, op.output_width
    offset = op.pixel_offset
    out = np.zeros((rois.shape[0], c, oh, ow), np.float64)
    for r, (roi, b) in enumerate(zip(np.asarray(rois, np.float64), np.asarray(batch_indices))):
        if not 0 <= int(b) < n:
            raise PartitaError(f"{op.name}: batch index {int(b)} out of range for {n} images")
        x1, y1, x2, y2 = roi * op.spatial_scale - offset
        rw, rh = x2 - x1, y2 - y1
        if not op.half_pixel:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / oh, rw / ow
        gh = op.sampling_ratio or int(np.ceil(rh / oh))
        gw = op.sampling_ratio or int(np.ceil(rw / ow))
        if gh <= 0 or gw <= 0:
            continue  # no samples: the bins stay 0
        ys = y1 + np.arange(oh)[:, None] * bh + (np.arange(gh)[None, :] + 0.5) * bh / gh  # [oh, gh]
        xs = x1 + np.arange(ow)[:, None] * bw + (np.arange(gw)[None, :] + 0.5) * bw / gw  # [ow, gw]
        y_ok, y_lo, y_hi, wy_lo, wy_hi = (a[:, :, None, None] for a in _roi_taps(ys, h))
        x_ok, x_lo, x_hi, wx_lo, wx_hi = (a[None, None] for a in _roi_taps(xs, w))
        image = x[int(b)]
        valid = y_ok & x_ok  # [oh, gh, ow, gw]
        terms = [np.where(valid, wy * wx, 0.0) * image[:, yi, xi]
                 for wy, yi in ((wy_lo, y_lo), (wy_hi, y_hi)) for wx, xi in ((wx_lo, x_lo), (wx_hi, x_hi))]
        if op.mode == "avg":  # summed sample by sample, in the kernel's order
            per_sample = sum(terms)
            acc = np.zeros((c, oh, ow))
            for iy in range(gh):
                for ix in range(gw):
                    acc += per_sample[:, :, iy, :, ix]
            out[r] = acc / (gh * gw)
        else:  # the largest weighted tap of any sample
            out[r] = np.maximum.reduce(terms).max(axis=(2, 4))
    return out


def grid_reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``x`` reflected off ``lo`` and ``hi`` until it lies between them."""
    span = hi - lo
    if span <= 0:
        return np.where((x < lo) | (x > hi), lo, x)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, x - hi)
    turns = np.floor(dx / span)
    r = dx - turns * span
    even = turns % 2 == 0
    return np.where(below, np.where(even, lo + r, hi - r), np.where(above, np.where(even, hi - r, lo + r), x))


def grid_taps(op: nn.GridSampleOp, normalized: np.ndarray, size: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Along one axis of ``size``: the taps' pixel indices (before padding) and weights."""
    g = normalized.astype(np.float64)
    x = (g + 1.0) / 2.0 * (size - 1.0) if op.align_corners else ((g + 1.0) * size - 1.0) / 2.0
    if op.mode == "nearest":
        x = np.rint(x)
    lo, hi = op.bounds(size)
    outside = (x < lo) | (x > hi)
    if op.mode == "cubic":
        pass  # PyTorch and onnxruntime pad only the taps of a cubic sample, not its coordinate
    elif op.padding_mode == "border":
        x = np.where(outside, np.clip(x, 0.0, size - 1.0), x)
    elif op.padding_mode == "reflection":
        x = np.where(outside, grid_reflect(x, lo, hi), x)
    if op.mode == "nearest":
        return [np.trunc(x).astype(np.int64)], [np.ones_like(x)]
    base = np.floor(x)
    t = x - base
    base = base.astype(np.int64)
    if op.mode == "linear":
        return [base, base + 1], [1.0 - t, t]
    a = op.CUBIC_A
    weights = [((a * (t + 1.0) - 5.0 * a) * (t + 1.0) + 8.0 * a) * (t + 1.0) - 4.0 * a,
               ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0,
               ((a + 2.0) * (1.0 - t) - (a + 3.0)) * (1.0 - t) * (1.0 - t) + 1.0,
               ((a * (2.0 - t) - 5.0 * a) * (2.0 - t) + 8.0 * a) * (2.0 - t) - 4.0 * a]
    return [base - 1, base, base + 1, base + 2], weights


def grid_pixel(op: nn.GridSampleOp, index: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """A tap's index into an axis after padding, and whether it reads the image (``zeros``:
    a tap outside reads 0)."""
    if op.padding_mode == "zeros":
        return np.clip(index, 0, size - 1), (index >= 0) & (index < size)
    if op.padding_mode == "reflection":
        index = np.trunc(grid_reflect(index.astype(np.float64), *op.bounds(size)))
    return np.clip(index.astype(np.int64), 0, size - 1), np.ones(index.shape, bool)


def grid_sample(op: nn.GridSampleOp, x: np.ndarray, grid: np.ndarray) -> np.ndarray:
    n, spatial = x.shape[0], x.shape[2:]
    k = len(spatial)
    taps = [grid_taps(op, grid[..., k - 1 - a], size) for a, size in enumerate(spatial)]
    batch = np.arange(n).reshape(n, *[1] * k)
    acc = np.zeros((n, x.shape[1], *grid.shape[1:-1]))
    # Tap by tap, the first axis outermost, the weights multiplied in axis order: the
    # kernel's order, so both round alike.
    for combo in itertools.product(*(range(len(t[0])) for t in taps)):
        weight, valid, index = None, None, []
        for a, (t, size) in enumerate(zip(combo, spatial)):
            pixel, inside = grid_pixel(op, taps[a][0][t], size)
            w = taps[a][1][t]
            weight = w if weight is None else weight * w
            valid = inside if valid is None else valid & inside
            index.append(pixel)
        values = np.moveaxis(x[(batch, slice(None), *index)], -1, 1)  # [N, O..., C] -> [N, C, O...]
        acc += weight[:, None] * np.where(valid[:, None], values, 0.0)
    return acc


def affine_grid(op: nn.AffineGridOp, theta: np.ndarray) -> np.ndarray:
    """In double precision, ``x * theta[.., 0] + y * theta[.., 1] (+ z * theta[.., 2]) +
    theta[.., k]`` in that order (the kernel's), rounded once to float (double for f64)."""
    size = list(op.size)
    k = len(size)
    t = theta.astype(np.float64)
    axes = np.meshgrid(*(np.array([op.position(i, s) for i in range(s)]) for s in size), indexing="ij")
    acc = None
    for a in range(k):  # coordinate a runs along spatial axis k - 1 - a
        term = axes[k - 1 - a][None, ..., None] * t[:, None, :, a].reshape(t.shape[0], *[1] * k, k)
        acc = term if acc is None else acc + term
    acc = acc + t[:, :, k].reshape(t.shape[0], *[1] * k, k)
    return acc if theta.dtype == np.float64 else acc.astype(np.float32)


@register_impls
class ImageFunctions(InterpreterFunctions):
    """Reference semantics of the ``nn`` image ops."""

    run_depth_to_space = impl(nn.DepthToSpaceOp)(in_compute_type(depth_to_space))
    run_space_to_depth = impl(nn.SpaceToDepthOp)(in_compute_type(space_to_depth))
    run_resize = impl(nn.ResizeOp)(in_compute_type(resize))
    run_roi_align = impl(nn.RoiAlignOp)(in_compute_type(roi_align))
    run_grid_sample = impl(nn.GridSampleOp)(in_compute_type(grid_sample))
    run_affine_grid = impl(nn.AffineGridOp)(in_compute_type(affine_grid))
