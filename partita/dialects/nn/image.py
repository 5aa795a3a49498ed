"""``nn`` image ops: resize (nearest / linear / cubic, ONNX's coordinate modes), the
depth / space rearrangements (Relay's ``image.resize<n>d``, ``nn.depth_to_space``,
``nn.space_to_depth``), RoiAlign, GridSample and the affine grid that feeds it (Relay's
``image.affine_grid``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import DenseArrayBase, Float32Type, TensorType, f64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    var_operand_def,
)
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    ELEMENT_TYPES,
    FLOATS,
    INTEGERS,
    Dims,
    NNOp,
    OpKind,
    Shape,
    ShapeArith,
    UnaryOp,
    _bool_prop,
    _float_prop,
    _init,
    _int_prop,
    _ints_prop,
    _shape,
    _str_prop,
    _value,
    is_float,
    kind_trait,
)

DEPTH_SPACE_MODES = ("DCR", "CRD")


def infer_depth_to_space_shape(x: Shape, block: int, mode: str) -> Shape:
    """``[N, C, H, W] -> [N, C / b^2, H * b, W * b]``."""
    if len(x) != 4:
        raise VerifyException(f"depth_to_space expects a rank 4 input, got rank {len(x)}")
    if block < 1:
        raise VerifyException(f"block_size must be >= 1, got {block}")
    if mode not in DEPTH_SPACE_MODES:
        raise VerifyException(f"mode must be DCR or CRD, got {mode!r}")
    n, c, h, w = x
    if c != DYN and c % (block * block):
        raise VerifyException(f"channels {c} are not a multiple of block_size^2 = {block * block}")
    return (n, DYN if c == DYN else c // (block * block), DYN if h == DYN else h * block,
            DYN if w == DYN else w * block)


def infer_space_to_depth_shape(x: Shape, block: int, mode: str) -> Shape:
    """``[N, C, H, W] -> [N, C * b^2, H / b, W / b]``."""
    if len(x) != 4:
        raise VerifyException(f"space_to_depth expects a rank 4 input, got rank {len(x)}")
    if block < 1:
        raise VerifyException(f"block_size must be >= 1, got {block}")
    if mode not in DEPTH_SPACE_MODES:
        raise VerifyException(f"mode must be DCR or CRD, got {mode!r}")
    n, c, h, w = x
    for d, what in ((h, "height"), (w, "width")):
        if d != DYN and d % block:
            raise VerifyException(f"{what} {d} is not a multiple of block_size {block}")
    return (n, DYN if c == DYN else c * block * block, DYN if h == DYN else h // block,
            DYN if w == DYN else w // block)


class DepthSpaceOp(UnaryOp):
    traits = kind_trait(OpKind.INJECTIVE)
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES
    block_size_attr = _int_prop("block_size")
    mode_attr = _str_prop("mode", "DCR")
    block_size = _value("block_size")
    mode = _value("mode")

    def __init__(self, input: SSAValue | Operation, block_size: int, mode: str | None = None,
                 result_type: Attribute | None = None):
        super().__init__(input, result_type, block_size=block_size, mode=mode)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        """Symbolic result dims (shape functions): the batch may be dynamic."""
        shape = self.result.type.get_shape()
        if DYN in shape[1:]:
            raise VerifyException(f"{self.name} with dynamic channel or spatial dims has no "
                                  "shape function")
        return [dims(self.input)[0], *shape[1:]]


@irdl_op_definition
class DepthToSpaceOp(DepthSpaceOp):
    """Moves ``b x b`` blocks of channels into space; ``DCR`` takes the block index from
    the leading channel bits (depth, column, row), ``CRD`` from the trailing ones."""

    name = "nn.depth_to_space"

    def infer_shape(self) -> Shape:
        return infer_depth_to_space_shape(_shape(self.input), self.block_size, self.mode)


@irdl_op_definition
class SpaceToDepthOp(DepthSpaceOp):
    """The inverse of ``depth_to_space`` (same ``mode``)."""

    name = "nn.space_to_depth"

    def infer_shape(self) -> Shape:
        return infer_space_to_depth_shape(_shape(self.input), self.block_size, self.mode)


RESIZE_MODES = ("nearest", "linear", "cubic")


def antialias_window(mode: str, scale: float) -> tuple[int, int]:
    """The taps of an antialiased ``linear`` / ``cubic`` filter downsampling by ``scale``
    (< 1), as offsets from ``floor(x)``: the first and how many. The filter's support (1 or
    2 input cells) widens by ``1 / scale``."""
    first = math.floor(-(1 if mode == "linear" else 2) / scale) + 1
    return first, 2 - 2 * first
COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _floats(values: Sequence[float]) -> DenseArrayBase:
    return DenseArrayBase.from_list(f64, [float(v) for v in values])


def resize_geometry(shape: Sequence[int], axes: Sequence[int], scales: Sequence[float] | None,
                    sizes: Sequence[int] | None, policy: str = "stretch") -> tuple[list[int], list[float]]:
    """Full-rank ``(sizes, scales)`` of a Resize of ``axes`` by ONNX's rules: ``floor(in *
    scale)`` from scales; ``out / in`` from sizes, or one scale for every axis and rounded
    sizes with ``keep_aspect_ratio_policy``. A dynamic dim keeps its size (``-1``): it
    takes scale 1, or a size of ``-1``."""
    rank = len(shape)
    full_scales = [1.0] * rank
    full_sizes = list(shape)
    if sizes is not None:
        if len(sizes) != len(axes):
            raise VerifyException(f"sizes has {len(sizes)} values for {len(axes)} axes")
        for a, size in zip(axes, sizes):
            if shape[a] == DYN:
                if int(size) != -1:  # -1 is not ONNX; a dynamic dim must keep its size
                    raise VerifyException("Resize with sizes needs static dimensions on the resized axes")
                continue
            if int(size) < 0:
                raise VerifyException(f"sizes must be non-negative, got {list(sizes)}")
            full_sizes[a] = int(size)
            full_scales[a] = int(size) / shape[a] if shape[a] else 1.0
        if policy in ("not_larger", "not_smaller"):
            pick = min if policy == "not_larger" else max
            scale = pick(full_scales[a] for a in axes)
            for a in axes:
                full_scales[a] = scale
                full_sizes[a] = int(scale * shape[a] + 0.5)
        elif policy != "stretch":
            raise VerifyException(f"unsupported keep_aspect_ratio_policy '{policy}'")
    else:
        if scales is None or len(scales) != len(axes):
            raise VerifyException("Resize needs scales or sizes for every resized axis")
        for a, scale in zip(axes, scales):
            if scale <= 0:
                raise VerifyException(f"scales must be positive, got {list(scales)}")
            if shape[a] == DYN:
                if scale != 1.0:
                    raise VerifyException("a dynamic dimension can only be resized by scale 1")
                continue
            full_scales[a] = float(scale)
            full_sizes[a] = int(math.floor(shape[a] * scale))
    return [-1 if d == DYN else d for d in full_sizes], full_scales


@irdl_op_definition
class ResizeOp(NNOp):
    """Resize every axis (ONNX Resize without antialias): output cell ``i`` of axis ``a``
    samples input coordinate ``x = f(i)`` (``coordinate_transformation_mode``, with the
    axis' ``scales`` factor, ``roi`` for ``tf_crop_and_resize``), then ``nearest`` rounds
    it (``nearest_mode``), ``linear`` and ``cubic`` (``cubic_coeff_a``) weigh 2 / 4 taps,
    clamped to the edge (``exclude_outside`` drops and renormalizes the outside taps).
    Separable, so each axis is independent. ``sizes`` is the result shape; ``-1``
    keeps the input's dim (a dynamic batch, scale 1). The scales are a property, or an
    optional rank-1 f32 operand read at run time (then ``scales`` is empty); so is the
    ``roi`` (a rank-1 operand of the starts then the ends, then the property is empty).
    The operands hold one value per axis of ``axes`` (default: every axis; the others
    have scale 1 and roi ``[0, 1]``)."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.resize"
    ALLOWED_TYPES: ClassVar = FLOATS + INTEGERS[:4]
    irdl_options = (ParsePropInAttrDict(), AttrSizedOperandSegments(as_property=True))
    input = operand_def(TensorType)
    scales_input = var_operand_def(TensorType)
    roi_input = var_operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = ("$input (`scales` `(` $scales_input^ `:` type($scales_input) `)`)? "
                       "(`roi` `(` $roi_input^ `:` type($roi_input) `)`)? "
                       "attr-dict `:` type($input) `->` type($result)")
    scales_attr = prop_def(DenseArrayBase.constr(f64), prop_name="scales")
    roi_attr = prop_def(DenseArrayBase.constr(f64), prop_name="roi",
                        default_value=_floats(()))
    mode_attr = _str_prop("mode", "nearest")
    coordinate_transformation_mode_attr = _str_prop("coordinate_transformation_mode",
                                                    "half_pixel")
    nearest_mode_attr = _str_prop("nearest_mode", "round_prefer_floor")
    cubic_coeff_a_attr = _float_prop("cubic_coeff_a", -0.75)
    exclude_outside_attr = _bool_prop("exclude_outside", False)
    antialias_attr = _bool_prop("antialias", False)
    extrapolation_value_attr = _float_prop("extrapolation_value", 0.0)
    sizes_attr = _ints_prop("sizes")
    axes_attr = _ints_prop("axes", ())
    axes = _value("axes")
    scales = _value("scales")
    roi = _value("roi")
    sizes = _value("sizes")
    mode = _value("mode")
    coordinate_transformation_mode = _value("coordinate_transformation_mode")
    nearest_mode = _value("nearest_mode")
    cubic_coeff_a = _value("cubic_coeff_a")
    exclude_outside = _value("exclude_outside")
    antialias = _value("antialias")
    """Downsampling (scale < 1) by linear or cubic interpolation widens the filter by
    ``1 / scale`` and normalizes its weights (ONNX Resize-18's ``antialias``, PIL's and
    torchvision's antialiased resize): every input cell under an output cell contributes."""
    extrapolation_value = _value("extrapolation_value")

    def __init__(self, input: SSAValue | Operation, sizes: Sequence[int],
                 scales: Sequence[float] | SSAValue, mode: str | None = None,
                 coordinate_transformation_mode: str | None = None,
                 nearest_mode: str | None = None, cubic_coeff_a: float | None = None,
                 exclude_outside: bool | None = None, extrapolation_value: float | None = None,
                 roi: Sequence[float] | SSAValue | None = None,
                 axes: Sequence[int] | None = None, result_type: Attribute | None = None,
                 antialias: bool | None = None):
        dynamic = isinstance(scales, SSAValue | Operation)
        dynamic_roi = isinstance(roi, SSAValue | Operation)
        _init(
            self, [input, [scales] if dynamic else [], [roi] if dynamic_roi else []],
            result_type, sizes=sizes,
            scales=_floats(() if dynamic else scales), mode=mode,
            coordinate_transformation_mode=coordinate_transformation_mode,
            nearest_mode=nearest_mode,
            cubic_coeff_a=None if cubic_coeff_a is None else float(cubic_coeff_a),
            exclude_outside=exclude_outside, antialias=antialias,
            extrapolation_value=None if extrapolation_value is None else float(extrapolation_value),
            roi=None if roi is None or dynamic_roi else _floats(roi), axes=axes)

    @property
    def dynamic_scales(self) -> SSAValue | None:
        return self.scales_input[0] if self.scales_input else None

    @property
    def dynamic_roi(self) -> SSAValue | None:
        return self.roi_input[0] if self.roi_input else None

    def operand_axes(self) -> list[int]:
        """The axis of each value of the scales operand (and of each roi start / end)."""
        return list(self.axes) or list(range(len(_shape(self.input))))

    def verify_element_types(self) -> None:
        if self.input.type.element_type != self.result.type.element_type:
            raise VerifyException("input and result must share one element type")
        self.check_element_type(self.input.type.element_type, "element type")
        rank, n = len(_shape(self.input)), len(self.operand_axes())
        if sorted(self.operand_axes()) != sorted(set(self.operand_axes())) or any(
                not 0 <= a < rank for a in self.operand_axes()):
            raise VerifyException(f"axes {list(self.axes)} must be distinct axes of rank {rank}")
        if self.dynamic_scales is not None:
            t = self.dynamic_scales.type
            if t.element_type != Float32Type() or t.get_shape() != (n,):
                raise VerifyException(f"the scales operand must be a tensor<{n}xf32>, got {t}")
        if self.dynamic_roi is not None:
            t = self.dynamic_roi.type
            if not is_float(t.element_type) or t.get_shape() != (2 * n,):
                raise VerifyException(f"the roi operand must be a rank-1 float tensor of "
                                      f"{2 * n} values, got {t}")

    def scale(self, axis: int) -> float:
        """The static scale of ``axis`` (the output / input ratio when the scales come at
        run time)."""
        if self.dynamic_scales is None:
            return self.scales[axis]
        return self.sizes[axis] / _shape(self.input)[axis]

    def infer_shape(self) -> Shape:
        x = _shape(self.input)
        rank = len(x)
        if len(self.scales_input) > 1 or len(self.roi_input) > 1:
            raise VerifyException("expected at most one scales and one roi operand")
        expected = 0 if self.dynamic_scales is not None else rank
        if len(self.sizes) != rank or len(self.scales) != expected:
            raise VerifyException(f"sizes and scales must have {rank} and {expected} values, got "
                                  f"{len(self.sizes)} and {len(self.scales)}")
        if any(s <= 0 for s in self.scales):
            raise VerifyException(f"scales must be positive, got {list(self.scales)}")
        for what, value, allowed in (("mode", self.mode, RESIZE_MODES),
                                     ("coordinate_transformation_mode",
                                      self.coordinate_transformation_mode, COORDINATE_MODES),
                                     ("nearest_mode", self.nearest_mode, NEAREST_MODES)):
            if value not in allowed:
                raise VerifyException(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
        if self.antialias and self.mode == "nearest":
            raise VerifyException("antialias needs linear or cubic mode (nearest has no filter to widen)")
        if (self.coordinate_transformation_mode == "tf_crop_and_resize" and self.dynamic_roi is None
                and len(self.roi) != 2 * rank):
            raise VerifyException(f"tf_crop_and_resize needs a roi of {2 * rank} values")
        out = []
        for a, (d, size) in enumerate(zip(x, self.sizes)):
            if size == -1:
                if self.dynamic_scales is None and self.scales[a] != 1.0:
                    raise VerifyException("a dynamic output size needs scale 1")
                out.append(d)
            elif size < 1:
                raise VerifyException(f"sizes must be positive, got {list(self.sizes)}")
            else:
                out.append(size)
        return tuple(out)

    def resized_axes(self) -> list[int]:
        """Axes that resample (the others copy the input index)."""
        x = _shape(self.input)
        if self.dynamic_scales is not None:  # any axis of the operand may resample
            return [a for a in sorted(self.operand_axes()) if self.sizes[a] != -1]
        return [a for a, (d, size, scale) in enumerate(zip(x, self.sizes, self.scales))
                if size != -1 and not (size == d and scale == 1.0
                                       and self.coordinate_transformation_mode != "tf_crop_and_resize")]

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        """Symbolic result dims (shape functions): the static sizes, the input's where
        dynamic."""
        return [d if size == -1 else size for d, size in zip(dims(self.input), self.sizes)]


ROI_ALIGN_MODES = ("avg", "max")
ROI_COORDINATE_MODES = ("half_pixel", "output_half_pixel")


@irdl_op_definition
class RoiAlignOp(NNOp):
    """ONNX RoiAlign (Mask R-CNN's pooling): for each region ``r`` of ``rois``
    (``R x 4``: ``x1, y1, x2, y2`` in input pixels times ``spatial_scale``) on image
    ``batch_indices[r]`` of ``input`` (NCHW), an ``output_height x output_width`` grid of
    bins, each the average (``avg``) or maximum (``max``, of the weighted taps) of
    ``sampling_ratio``² bilinear samples (``0``: ``ceil(bin size)`` per axis, per region).
    ``half_pixel`` shifts coordinates by half a pixel (opset 16's default); without it, a
    region is at least one pixel wide. Result ``R x C x output_height x output_width``."""
    traits = kind_trait(OpKind.OUT_EWISE_FUSABLE)

    name = "nn.roi_align"
    ALLOWED_TYPES: ClassVar = FLOATS
    input = operand_def(TensorType)
    rois = operand_def(TensorType)
    batch_indices = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "operands attr-dict `:` functional-type(operands, results)"
    mode_attr = _str_prop("mode", "avg")
    coordinate_transformation_mode_attr = _str_prop("coordinate_transformation_mode", "half_pixel")
    output_height_attr = _int_prop("output_height", 1)
    output_width_attr = _int_prop("output_width", 1)
    sampling_ratio_attr = _int_prop("sampling_ratio", 0)
    spatial_scale_attr = _float_prop("spatial_scale", 1.0)
    mode = _value("mode")
    coordinate_transformation_mode = _value("coordinate_transformation_mode")
    output_height = _value("output_height")
    output_width = _value("output_width")
    sampling_ratio = _value("sampling_ratio")
    spatial_scale = _value("spatial_scale")

    def __init__(self, input: SSAValue | Operation, rois: SSAValue | Operation,
                 batch_indices: SSAValue | Operation, *, mode: str = "avg",
                 coordinate_transformation_mode: str = "half_pixel", output_height: int = 1,
                 output_width: int = 1, sampling_ratio: int = 0, spatial_scale: float = 1.0):
        _init(self, [input, rois, batch_indices], None, mode=mode,
              coordinate_transformation_mode=coordinate_transformation_mode,
              output_height=output_height, output_width=output_width,
              sampling_ratio=sampling_ratio, spatial_scale=float(spatial_scale))

    @property
    def half_pixel(self) -> bool:
        return self.coordinate_transformation_mode == "half_pixel"

    @property
    def pixel_offset(self) -> float:
        """Subtracted from every scaled region coordinate (half a pixel, or none)."""
        return 0.5 if self.half_pixel else 0.0

    def verify_element_types(self) -> None:
        element = self.input.type.element_type
        self.check_element_type(element, "element type")
        for what, value in (("rois", self.rois), ("result", self.result)):
            if value.type.element_type != element:
                raise VerifyException(f"{what} must be {element} like the input, got {value.type.element_type}")
        self.check_element_type(self.batch_indices.type.element_type, "batch_indices element type",
                                INTEGERS)

    def infer_shape(self) -> Shape:
        x, rois, batch = _shape(self.input), _shape(self.rois), _shape(self.batch_indices)
        if len(x) != 4:
            raise VerifyException(f"the input must be NCHW (rank 4), got rank {len(x)}")
        if len(rois) != 2 or rois[1] not in (4, DYN):
            raise VerifyException(f"rois must be regions x 4, got {list(rois)}")
        if len(batch) != 1 or DYN not in (batch[0], rois[0]) and batch[0] != rois[0]:
            raise VerifyException(f"batch_indices must hold one index per region ({rois[0]}), got {list(batch)}")
        for what, value, allowed in (("mode", self.mode, ROI_ALIGN_MODES),
                                     ("coordinate_transformation_mode", self.coordinate_transformation_mode,
                                      ROI_COORDINATE_MODES)):
            if value not in allowed:
                raise VerifyException(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
        if self.output_height < 1 or self.output_width < 1 or self.sampling_ratio < 0:
            raise VerifyException("output sizes must be positive and sampling_ratio non-negative")
        return (rois[0], x[1], self.output_height, self.output_width)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        return [dims(self.rois)[0], dims(self.input)[1], self.output_height, self.output_width]


GRID_SAMPLE_MODES = ("nearest", "linear", "cubic")
GRID_SAMPLE_PADDING = ("zeros", "border", "reflection")


@irdl_op_definition
class GridSampleOp(NNOp):
    """ONNX GridSample (PyTorch's ``grid_sample``): ``result[n, c, o...]`` samples
    ``input[n, c]`` (``N x C x D1 ... Dk``) at the point ``grid[n, o...]`` (``N x O1 ... Ok
    x k``, normalized to ``[-1, 1]``, the last axis first: ``x, y(, z)``), by ``nearest``
    (half to even), ``linear`` or ``cubic`` (Keys, ``a = -0.75``) interpolation.
    ``align_corners``: -1 and 1 are the centres of the corner pixels (else their outer
    edges). ``padding_mode``: ``zeros`` outside, or the ``border`` / ``reflection`` of the
    coordinate and of every tap. Result ``N x C x O1 ... Ok``."""
    traits = kind_trait(OpKind.OUT_EWISE_FUSABLE)

    name = "nn.grid_sample"
    ALLOWED_TYPES: ClassVar = FLOATS
    input = operand_def(TensorType)
    grid = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "operands attr-dict `:` functional-type(operands, results)"
    mode_attr = _str_prop("mode", "linear")
    padding_mode_attr = _str_prop("padding_mode", "zeros")
    align_corners_attr = _bool_prop("align_corners", False)
    mode = _value("mode")
    padding_mode = _value("padding_mode")
    align_corners = _value("align_corners")

    def __init__(self, input: SSAValue | Operation, grid: SSAValue | Operation, *, mode: str = "linear",
                 padding_mode: str = "zeros", align_corners: bool = False):
        _init(self, [input, grid], None, mode=mode, padding_mode=padding_mode, align_corners=align_corners)

    def verify_element_types(self) -> None:
        element = self.input.type.element_type
        self.check_element_type(element, "element type")
        self.check_element_type(self.grid.type.element_type, "grid element type")
        if self.result.type.element_type != element:
            raise VerifyException(f"result must be {element} like the input, got {self.result.type.element_type}")

    def infer_shape(self) -> Shape:
        x, grid = _shape(self.input), _shape(self.grid)
        spatial = len(x) - 2
        if spatial < 1 or len(grid) != spatial + 2:
            raise VerifyException(f"input N x C x D1..Dk needs a grid N x O1..Ok x k, got ranks {len(x)} and "
                                  f"{len(grid)}")
        if grid[-1] not in (spatial, DYN):
            raise VerifyException(f"the grid's last axis must hold {spatial} coordinates, got {grid[-1]}")
        if DYN not in (x[0], grid[0]) and x[0] != grid[0]:
            raise VerifyException(f"input and grid batches differ ({x[0]} and {grid[0]})")
        if self.mode == "cubic" and spatial != 2:
            raise VerifyException(f"cubic sampling takes 2 spatial axes (N x C x H x W), got {spatial}")
        for what, value, allowed in (("mode", self.mode, GRID_SAMPLE_MODES),
                                     ("padding_mode", self.padding_mode, GRID_SAMPLE_PADDING)):
            if value not in allowed:
                raise VerifyException(f"{what} must be one of {', '.join(allowed)}, got {value!r}")
        return (grid[0] if x[0] == DYN else x[0], x[1], *grid[1:-1])

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        return [dims(self.input)[0], dims(self.input)[1], *dims(self.grid)[1:-1]]

    CUBIC_A: ClassVar[float] = -0.75
    """Keys' cubic convolution parameter of the ``cubic`` mode (PyTorch's)."""

    def bounds(self, size: int) -> tuple[float, float]:
        """Along an axis of ``size``, the coordinates of the outer edges of its end pixels
        (with ``align_corners``, their centres): where padding starts."""
        return (0.0, size - 1.0) if self.align_corners else (-0.5, size - 0.5)


@irdl_op_definition
class AffineGridOp(NNOp):
    """ONNX AffineGrid (PyTorch's ``affine_grid``, Relay's ``image.affine_grid``): the
    sampling grid of a batch of affine maps. ``theta`` is ``N x k x (k + 1)`` (``k`` = 2
    or 3 spatial axes), ``size`` the spatial extent ``[H, W]`` or ``[D, H, W]`` of the
    grid; ``result[n, o..., j] = sum_a theta[n, j, a] * p_a + theta[n, j, k]`` where ``p``
    is the normalized position of output cell ``o`` (the last axis first: ``x, y(, z)``)
    in ``[-1, 1]``: ``-1 + 2 i / (s - 1)`` with ``align_corners`` (``1`` when ``s`` is 1,
    as onnxruntime has it: onnx's reference takes -1 there, PyTorch 0), ``-1 + (2 i + 1) /
    s`` without. Result ``N x O1 .. Ok x k``, what
    ``nn.grid_sample`` reads.

    Its own op rather than a constant base grid times ``theta`` (a batched matmul): each
    element reads ``k + 1`` values of ``theta``, so it is injective, needs no
    ``H * W * (k + 1)`` constant, and the shape stays a property a run-time ``size``
    (``nn.dyn`` kind ``affine_grid``) can bind."""
    traits = kind_trait(OpKind.INJECTIVE)

    name = "nn.affine_grid"
    ALLOWED_TYPES: ClassVar = FLOATS
    theta = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$theta attr-dict `:` functional-type(operands, results)"
    size_attr = _ints_prop("size")
    align_corners_attr = _bool_prop("align_corners", False)
    size = _value("size")
    align_corners = _value("align_corners")

    def __init__(self, theta: SSAValue | Operation, size: Sequence[int], *, align_corners: bool = False):
        _init(self, [theta], None, size=size, align_corners=align_corners)

    def infer_shape(self) -> Shape:
        theta, size = _shape(self.theta), list(self.size)
        k = len(size)
        if k not in (2, 3):
            raise VerifyException(f"size must hold 2 or 3 spatial extents, got {size}")
        if any(s < 1 for s in size):
            raise VerifyException(f"size must be positive, got {size}")
        if len(theta) != 3 or theta[1] not in (k, DYN) or theta[2] not in (k + 1, DYN):
            raise VerifyException(f"theta must be N x {k} x {k + 1} for {k} spatial axes, got {list(theta)}")
        return (theta[0], *size, k)

    def result_dims(self, dims: Dims, arith: ShapeArith) -> list:
        return [dims(self.theta)[0], *self.size, len(self.size)]

    def position(self, index: int, size: int) -> float:
        """The normalized coordinate of cell ``index`` of an axis of ``size``."""
        if self.align_corners:
            return 1.0 if size == 1 else -1.0 + 2.0 * index / (size - 1)
        return -1.0 + (2.0 * index + 1.0) / size
