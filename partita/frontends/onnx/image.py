"""ONNX converters of image ops: Resize, Upsample, DepthToSpace, SpaceToDepth, RoiAlign, GridSample,
AffineGrid."""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import Float32Type
from xdsl.ir import SSAValue
from xdsl.utils.exceptions import VerifyException

from partita.dialects import nn
from partita.frontends.onnx.dyn import dyn, static_length
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.values import SymDim, const_ints, fail, is_const, is_symbolic, shape_of


def _text(attrs, name: str, default: str) -> str:
    value = attrs.get(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _const_floats(v, what: str, runtime: bool = False):
    """The values of an optional constant input (``None`` when absent or empty); with
    ``runtime``, a run-time tensor is returned as is."""
    if v is None:
        return None
    if runtime and isinstance(v, SSAValue):
        return v
    if not is_const(v) or is_symbolic(v):
        fail(f"{what} must be a constant (an initializer): its values decide the output "
             "shape")
    values = [float(f) for f in np.asarray(v).reshape(-1)]
    return values or None


def _resize_geometry(shape, axes, scales, sizes, policy: str):
    """``nn.resize_geometry``, its refusals import errors."""
    try:
        return nn.resize_geometry(shape, axes, scales, sizes, policy)
    except VerifyException as err:
        fail(str(err))


def _declared_dims(cx, x) -> list[int] | None:
    """The node's output dims the model declares (ONNX shape inference or value_info),
    ``nn.DYN`` where it gives no size; ``None`` when it declares none of ``x``'s rank."""
    declared = cx.dim_labels.get(cx.node.output[0], [])
    if len(declared) != len(shape_of(x)):
        return None
    return [d if isinstance(d, int) else nn.DYN for d in declared]


def _declared_sizes(cx, x) -> list[float] | None:
    """The node's output shape as Resize sizes, when the model declares it: the shape
    run-time scales / sizes must produce (``-1`` keeps a dynamic dim of ``x``)."""
    declared = _declared_dims(cx, x)
    if declared is None or any(d == nn.DYN and s != nn.DYN for d, s in zip(declared, shape_of(x))):
        return None
    return [-1.0 if d == nn.DYN else float(d) for d in declared]


def _resize_mode(attrs) -> str:
    mode = _text(attrs, "mode", "nearest")
    if mode == "bilinear":  # Upsample-7's spelling
        mode = "linear"
    if mode not in nn.RESIZE_MODES:
        fail(f"unsupported Resize mode '{mode}'")
    return mode


def _run_time_resize(cx, x, axes, params: dict[str, SSAValue], attrs, mode: str) -> SSAValue:
    """A Resize whose output shape only its run-time ``sizes`` or ``scales`` decide (the
    model declares none): an ``nn.dyn`` the launch plan sizes once it has read them."""
    coordinate = _text(attrs, "coordinate_transformation_mode", "half_pixel")
    if coordinate == "tf_crop_and_resize":
        fail("tf_crop_and_resize to a run-time size the model does not declare is not supported")
    name = next(iter(params))
    if static_length(params[name], name) != len(axes):
        fail(f"{name} has {shape_of(params[name])[0]} values for {len(axes)} axes")
    options = dict(mode=mode, coordinate_transformation_mode=coordinate,
                   nearest_mode=_text(attrs, "nearest_mode", "round_prefer_floor"),
                   cubic_coeff_a=float(attrs.get("cubic_coeff_a", -0.75)),
                   exclude_outside=bool(attrs.get("exclude_outside", 0)),
                   extrapolation_value=float(attrs.get("extrapolation_value", 0.0)),
                   antialias=bool(attrs.get("antialias", 0)) and mode != "nearest",
                   keep_aspect_ratio_policy=_text(attrs, "keep_aspect_ratio_policy", "stretch"))
    if axes != list(range(len(shape_of(x)))):
        options["axes"] = axes
    # The dims the model declares stay static (a detector's batch and channels): the
    # kernels after it see them so.
    return dyn(cx, "resize", [x], params, len(shape_of(x)), x.type.element_type, f"the Resize {name}",
               _declared_dims(cx, x), **options)


def _roi(x, axes, roi):
    """The roi of a tf_crop_and_resize: a run-time tensor (starts then ends of ``axes``)
    as is, constants expanded to every axis (``[0, 1]`` for the others)."""
    if roi is None:
        fail("tf_crop_and_resize needs a roi")
    if isinstance(roi, SSAValue):
        if shape_of(roi) != (2 * len(axes),):
            fail(f"roi must have {2 * len(axes)} values")
        return roi
    if len(roi) != 2 * len(axes):
        fail(f"roi has {len(roi)} values for {len(axes)} axes")
    rank = len(shape_of(x))
    full = [0.0] * rank + [1.0] * rank
    for i, a in enumerate(axes):
        full[a], full[rank + a] = roi[i], roi[len(axes) + i]
    return full


def _policy_scales(cx, x, axes, sizes: SSAValue, policy: str) -> SSAValue:
    """The run-time scales of a Resize to run-time ``sizes`` under
    ``keep_aspect_ratio_policy``: the smallest (``not_larger``) or largest (``not_smaller``)
    of ``sizes[a] / in[a]``, the same for every resized axis."""
    if policy not in ("not_larger", "not_smaller"):
        fail(f"unsupported keep_aspect_ratio_policy '{policy}'")
    shape = shape_of(x)
    if any(shape[a] == nn.DYN for a in axes):
        fail("Resize with sizes needs static dimensions on the resized axes")
    f32 = Float32Type()
    ratios = cx.emit(nn.DivideOp(cx.emit(nn.CastOp(sizes, f32)),
                                 cx.tensor(np.array([shape[a] for a in axes], np.float32))))
    pick = nn.ReduceMinOp if policy == "not_larger" else nn.ReduceMaxOp
    scale = cx.emit(pick(ratios, [0], keepdims=True))
    return cx.emit(nn.BroadcastToOp(scale, [len(axes)]))


def _resize(cx, x, axes, scales, sizes, attrs, roi=None, declared=None):
    """A Resize / Upsample node; run-time scales (and roi) become operands the kernel
    reads, with the declared output shape (``declared``, or the node's)."""
    shape = shape_of(x)
    mode = _resize_mode(attrs)
    antialias = bool(attrs.get("antialias", 0)) and mode != "nearest"  # nearest has no filter to widen
    if isinstance(scales, SSAValue):
        if shape_of(scales) != (len(axes),) or str(scales.type.element_type) != "f32":
            fail(f"scales must be a tensor of {len(axes)} f32 values")
        declared = declared or _declared_sizes(cx, x)
        if declared is None:
            return _run_time_resize(cx, x, axes, {"scales": scales}, attrs, mode)
        out_sizes = [int(s) for s in declared]
        out_scales = scales
    else:
        out_sizes, out_scales = _resize_geometry(
            shape, axes, scales, sizes, _text(attrs, "keep_aspect_ratio_policy", "stretch"))
    coordinate = _text(attrs, "coordinate_transformation_mode", "half_pixel")
    full_roi = _roi(x, axes, roi) if coordinate == "tf_crop_and_resize" else None
    runtime = isinstance(out_scales, SSAValue) or isinstance(full_roi, SSAValue)
    return cx.emit(nn.ResizeOp(
        x, out_sizes, out_scales, mode=mode, coordinate_transformation_mode=coordinate,
        nearest_mode=_text(attrs, "nearest_mode", "round_prefer_floor"),
        cubic_coeff_a=float(attrs.get("cubic_coeff_a", -0.75)),
        exclude_outside=bool(attrs.get("exclude_outside", 0)),
        extrapolation_value=float(attrs.get("extrapolation_value", 0.0)), roi=full_roi, antialias=antialias or None,
        axes=axes if runtime and axes != list(range(len(shape))) else None))


def _axes(attrs, rank: int) -> list[int]:
    axes = [a % rank if -rank <= a < rank else fail(f"axis {a} out of range")
            for a in attrs.get("axes", range(rank))]
    if len(set(axes)) != len(axes):
        fail(f"repeated axes {list(attrs['axes'])}")
    return axes


@converter("Resize")
def _resize_node(cx, ins, attrs):
    x = cx.tensor(ins[0])
    axes = _axes(attrs, len(shape_of(x)))
    if cx.opset < 11:  # Resize-10: X, scales; asymmetric coordinates
        attrs = {**attrs, "coordinate_transformation_mode": "asymmetric",
                 "nearest_mode": attrs.get("nearest_mode", "floor")}
        return _resize(cx, x, axes, _const_floats(ins[1], "scales", runtime=True), None, attrs)
    roi = _const_floats(ins[1] if len(ins) > 1 else None, "roi", runtime=True)
    scales = _const_floats(ins[2] if len(ins) > 2 else None, "scales", runtime=True)
    given = ins[3] if len(ins) > 3 else None
    if isinstance(given, SSAValue):
        # Sizes known only at run time: the output shape, when the model declares it (ONNX
        # shape inference or value_info), with a keep_aspect_ratio_policy's one scale of
        # every axis computed from them on the device; else the plan sizes it once read.
        policy = _text(attrs, "keep_aspect_ratio_policy", "stretch")
        declared = _declared_sizes(cx, x)
        if declared is None:
            return _run_time_resize(cx, x, axes, {"sizes": given}, attrs, _resize_mode(attrs))
        if policy != "stretch":
            return _resize(cx, x, axes, _policy_scales(cx, x, axes, given, policy), None,
                           attrs, roi, declared)
        sizes = [declared[a] for a in axes]
    elif is_symbolic(given):
        sizes = _folded_sizes(cx, x, axes, given)
        if sizes is None:  # another tensor's run-time dims (an FPN's upsampling to the next level)
            return _run_time_resize(cx, x, axes, {"sizes": cx.tensor(given)}, attrs, _resize_mode(attrs))
    else:
        sizes = _const_floats(given, "sizes")
    return _resize(cx, x, axes, scales, sizes, attrs, roi)


def _folded_sizes(cx, x: SSAValue, axes: list[int], given) -> list[float] | None:
    """Sizes folded from a shape computation that keeps some of ``x``'s dynamic dims
    (``Concat(Shape(x)[:2], [2 * ceil(h / 2), ...])``, F.interpolate to a computed size):
    a dim that is ``x``'s own on its axis stays (``-1``); every other size is static.
    ``None`` when an axis takes another run-time size."""
    values = list(np.asarray(given).reshape(-1))
    if len(values) != len(axes):
        fail(f"sizes has {len(values)} values for {len(axes)} axes")
    labels = cx.labels(x)
    sizes = []
    for a, s in zip(axes, values):
        if isinstance(s, SymDim):
            if labels[a] != s:
                return None
            sizes.append(-1.0)
        else:
            sizes.append(float(s))
    return sizes


@converter("Upsample")
def _upsample(cx, ins, attrs):
    x = cx.tensor(ins[0])
    scales = attrs.get("scales") if len(ins) < 2 else _const_floats(ins[1], "scales", runtime=True)
    attrs = {**attrs, "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    if not isinstance(scales, SSAValue):
        scales = list(scales or []) or None
    return _resize(cx, x, list(range(len(shape_of(x)))), scales, None, attrs)


@converter("DepthToSpace")
def _depth_to_space(cx, ins, attrs):
    return cx.emit(nn.DepthToSpaceOp(cx.tensor(ins[0]), attrs["blocksize"],
                                     mode=_text(attrs, "mode", "DCR")))


@converter("SpaceToDepth")
def _space_to_depth(cx, ins, attrs):
    return cx.emit(nn.SpaceToDepthOp(cx.tensor(ins[0]), attrs["blocksize"],
                                     mode=_text(attrs, "mode", "DCR")))


@converter("RoiAlign")
def _roi_align(cx, ins, attrs):
    x = cx.tensor(ins[0])
    rois = cx.tensor(ins[1], like=x)
    batch_indices = cx.tensor(ins[2])
    # Opset 10 had no half-pixel shift (opset 16 named that "output_half_pixel").
    default = "half_pixel" if cx.opset >= 16 else "output_half_pixel"
    return cx.emit(nn.RoiAlignOp(
        x, rois, batch_indices, mode=_text(attrs, "mode", "avg"),
        coordinate_transformation_mode=_text(attrs, "coordinate_transformation_mode", default),
        output_height=attrs.get("output_height", 1), output_width=attrs.get("output_width", 1),
        sampling_ratio=attrs.get("sampling_ratio", 0), spatial_scale=attrs.get("spatial_scale", 1.0)))


@converter("GridSample")
def _grid_sample(cx, ins, attrs):
    x = cx.tensor(ins[0])
    grid = cx.tensor(ins[1], like=x)
    # Opset 16 named the modes after 2-D images; opset 20 generalized them to N-D.
    mode = _text(attrs, "mode", "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    return cx.emit(nn.GridSampleOp(x, grid, mode=mode, padding_mode=_text(attrs, "padding_mode", "zeros"),
                                   align_corners=bool(attrs.get("align_corners", 0))))


@converter("AffineGrid")
def _affine_grid(cx, ins, attrs):
    theta = cx.tensor(ins[0])
    align_corners = bool(attrs.get("align_corners", 0))
    size = ins[1]
    if isinstance(size, SSAValue):  # the grid's shape is bound when the plan reads the values
        rank = static_length(size, "size")
        if rank not in (4, 5):
            fail(f"size must hold 4 or 5 values (N, C, (D,) H, W), got {rank}")
        return dyn(cx, "affine_grid", [theta], {"size": size}, rank, theta.type.element_type, "size",
                   align_corners=align_corners)
    values = const_ints(size, "size")
    batch = shape_of(theta)[0]
    if len(values) not in (4, 5) or batch not in (nn.DYN, values[0]):
        fail(f"size {values} must be [N, C, (D,) H, W] with N = {batch}, theta's batch")
    return cx.emit(nn.AffineGridOp(theta, values[2:], align_corners=align_corners))
