"""CUDA lowering rules of the ``nn.image`` ops: depth / space rearrangements are
injective (an index remapping), ``nn.resize`` is a ``window`` rule (each output element
weighs the 1 / 2 / 4 taps of every resized axis, in double precision like the reference,
so nearest-mode ties and cubic weights agree with it exactly); RoiAlign and GridSample are
``window`` rules too, ``nn.affine_grid`` an injective one (each element reads ``k + 1``
values of ``theta``)."""

from __future__ import annotations

from xdsl.dialects.builtin import DYNAMIC_INDEX

from partita.dialects import nn
from partita.lowering.cuda.cexpr import _paren
from partita.lowering.cuda.ops.conv import batch_dims, static_but_batch, y_decl
from partita.lowering.cuda.ops.indexing import derived_dims
from partita.lowering.cuda.rules import injective, window


def _c(value: float) -> str:
    """A double literal."""
    text = repr(float(value))
    return text if any(c in text for c in ".e") else text + ".0"


@injective(nn.DepthToSpaceOp, supports=static_but_batch, dims=batch_dims)
def depth_to_space(emitter, op: nn.DepthToSpaceOp, index: list[str]) -> str:
    """``out[n, c, h, w] = x[n, channel(c, h % b, w % b), h / b, w / b]``."""
    n, c, h, w = index
    b = op.block_size
    channels = op.result.type.get_shape()[1]
    bh, bw = f"({h} % {b})", f"({w} % {b})"
    if op.mode == "DCR":
        ch = f"(({bh} * {b} + {bw}) * {channels} + {c})"
    else:
        ch = f"({c} * {b * b} + {bh} * {b} + {bw})"
    return emitter.value(op.input, [n, ch, f"({h} / {b})", f"({w} / {b})"])


@injective(nn.SpaceToDepthOp, supports=static_but_batch, dims=batch_dims)
def space_to_depth(emitter, op: nn.SpaceToDepthOp, index: list[str]) -> str:
    """``out[n, channel(c, bh, bw), h, w] = x[n, c, h * b + bh, w * b + bw]``."""
    n, c, h, w = index
    b = op.block_size
    channels = op.input.type.get_shape()[1]
    if op.mode == "DCR":
        bh, bw, ch = f"({c} / {b * channels})", f"(({c} / {channels}) % {b})", f"({c} % {channels})"
    else:
        bh, bw, ch = f"(({c} / {b}) % {b})", f"({c} % {b})", f"({c} / {b * b})"
    return emitter.value(op.input, [n, ch, f"({h} * {b} + {bh})", f"({w} * {b} + {bw})"])


def _resize_supported(op: nn.ResizeOp) -> bool:
    floating = nn.is_float(op.result.type.element_type)
    # an antialiased filter's taps follow the scale: the kernel unrolls them, so its scales
    # must be known when it is built (with run-time scales it is a host step)
    static_taps = not (op.antialias and op.dynamic_scales is not None)
    return static_but_batch(op) and (floating or op.mode == "nearest") and static_taps


def _coordinate(op: nn.ResizeOp, axis: int, o: str, size: int, out: int,
                scale: str | None, roi: tuple[str, str] | None) -> str:
    """The input coordinate (C double expression) output index ``o`` samples; ``scale``
    is the C variable of a run-time scale, ``roi`` those of the run-time roi start and
    end (``None``: the static ones)."""
    y = f"(double){o}"
    mode = op.coordinate_transformation_mode
    if mode == "tf_crop_and_resize" and roi is not None:
        lo, hi = roi
        length = f"({scale} * {_c(size)})" if scale is not None else _c(op.scales[axis] * size)
        return (f"({length} == 1.0 ? ({hi} - {lo}) * {_c((size - 1) / 2)} : {y} * ({hi} - {lo}) * "
                f"{_c(size - 1)} / ({length} - 1.0)) + {lo} * {_c(size - 1)}")
    if scale is None:  # fold what is static
        s = op.scales[axis]
        length = s * size
        if mode == "align_corners":
            return "0.0" if length == 1 else f"{y} * {_c(size - 1)} / {_c(length - 1)}"
        if mode == "asymmetric":
            return f"{y} / {_c(s)}"
        if mode == "tf_crop_and_resize":
            lo, hi = op.roi[axis], op.roi[len(op.sizes) + axis]
            if length == 1:
                return _c((hi - lo) * (size - 1) / 2 + lo * (size - 1))
            return f"{y} * {_c(hi - lo)} * {_c(size - 1)} / {_c(length - 1)} + {_c(lo * (size - 1))}"
        if mode == "pytorch_half_pixel" and length == 1:
            return "-0.5"
        half = f"({y} + 0.5) / {_c(s)} - 0.5"
        if mode == "half_pixel_symmetric":
            return f"{_c(size / 2 * (1 - out / length))} + {half}"
        return half
    length = f"({scale} * {_c(size)})"
    if mode == "align_corners":
        return f"({length} == 1.0 ? 0.0 : {y} * {_c(size - 1)} / ({length} - 1.0))"
    if mode == "asymmetric":
        return f"{y} / {scale}"
    if mode == "tf_crop_and_resize":
        lo, hi = op.roi[axis], op.roi[len(op.sizes) + axis]
        return (f"({length} == 1.0 ? {_c((hi - lo) * (size - 1) / 2)} : {y} * {_c(hi - lo)} * "
                f"{_c(size - 1)} / ({length} - 1.0)) + {_c(lo * (size - 1))}")
    half = f"({y} + 0.5) / {scale} - 0.5"
    if mode == "pytorch_half_pixel":
        return f"({length} == 1.0 ? -0.5 : {half})"
    if mode == "half_pixel_symmetric":
        return f"{_c(size / 2)} * (1.0 - {_c(out)} / {length}) + {half}"
    return half


def _cubic(t: str, a: float) -> str:
    """Keys' kernel at ``|t|`` (a C double expression of a variable)."""
    return (f"({t} <= 1.0 ? (({_c(a + 2)} * {t} - {_c(a + 3)}) * {t} * {t} + 1.0) : "
            f"({t} < 2.0 ? ((({_c(a)} * {t} - {_c(5 * a)}) * {t} + {_c(8 * a)}) * {t} - {_c(4 * a)}) : 0.0))")


@window(nn.ResizeOp, supports=_resize_supported, dims=batch_dims)
def resize(emitter, op: nn.ResizeOp) -> list[str]:
    o, T = emitter.out_index, emitter.index_type
    x = op.input
    in_shape, out_shape = op.input.type.get_shape(), op.result.type.get_shape()
    acc_t = "double" if nn.is_float(op.result.type.element_type) else emitter.ctype(op.result)
    lines: list[str] = []
    at = list(o)
    loops: list[tuple[str, int]] = []
    outside: list[str] = []
    for axis in op.resized_axes():
        size, out = in_shape[axis], out_shape[axis]
        assert size != DYNAMIC_INDEX
        xa, ia, wa = f"x{axis}", f"i{axis}", f"w{axis}"
        scale = roi = None
        axes = op.operand_axes()
        k = axes.index(axis) if axis in axes else None
        if op.dynamic_scales is not None:
            scale = f"s{axis}"
            lines.append(f"    const double {scale} = (double){emitter.load(op.dynamic_scales, [str(k)])};")
        if op.dynamic_roi is not None:
            roi = (f"lo{axis}", f"hi{axis}")
            if k is None:  # an axis the roi does not name: the whole extent
                lines += [f"    const double lo{axis} = 0.0;", f"    const double hi{axis} = 1.0;"]
            else:
                lines += [f"    const double lo{axis} = (double){emitter.load(op.dynamic_roi, [str(k)])};",
                          f"    const double hi{axis} = (double){emitter.load(op.dynamic_roi, [str(len(axes) + k)])};"]
        lines += [f"    const double {xa} = {_coordinate(op, axis, o[axis], size, out, scale, roi)};",
                  f"    const {T} b{axis} = ({T})floor({xa});",
                  f"    const double r{axis} = {xa} - (double)b{axis};"]
        if op.coordinate_transformation_mode == "tf_crop_and_resize":
            outside.append(f"{xa} < 0.0 || {xa} > {_c(size - 1)}")
        if op.mode == "nearest":
            up = {"round_prefer_floor": f"r{axis} > 0.5", "round_prefer_ceil": f"r{axis} >= 0.5",
                  "floor": "false", "ceil": f"r{axis} > 0.0"}[op.nearest_mode]
            lines += [f"    {T} {ia} = b{axis} + (({up}) ? 1 : 0);",
                      f"    {ia} = {ia} < 0 ? 0 : ({ia} > {size - 1} ? {size - 1} : {ia});"]
            at[axis] = ia
            continue
        taps, first = (2, 0) if op.mode == "linear" else (4, -1)
        antialias = op.antialias and op.scales[axis] < 1
        if antialias:  # the filter widened by 1 / scale, its weights normalized
            first, taps = nn.antialias_window(op.mode, op.scales[axis])
        lines += [f"    {T} {ia}[{taps}];", f"    double {wa}[{taps}];"]
        if antialias:
            weight = "d < 1.0 ? 1.0 - d : 0.0" if op.mode == "linear" else _cubic("d", op.cubic_coeff_a)
            lines += ["    { double s = 0.0;",
                      f"      for (int t = 0; t < {taps}; ++t) {{",
                      f"        const double d = fabs(((double)({first} + t) - r{axis}) * {_c(op.scales[axis])});",
                      f"        {wa}[t] = {weight}; s += {wa}[t]; }}",
                      f"      for (int t = 0; t < {taps}; ++t) {wa}[t] /= s; }}"]
        elif op.mode == "linear":
            lines += [f"    {wa}[0] = 1.0 - r{axis}; {wa}[1] = r{axis};"]
        else:
            for t, arg in enumerate(("r{0} + 1.0", "r{0}", "1.0 - r{0}", "2.0 - r{0}")):
                lines.append(f"    {{ const double t = {arg.format(axis)}; "
                             f"{wa}[{t}] = {_cubic('t', op.cubic_coeff_a)}; }}")
        lines += [f"    for (int t = 0; t < {taps}; ++t) {{",
                  f"      const {T} j = b{axis} + ({first}) + t;"]
        if op.exclude_outside:
            lines.append(f"      if (j < 0 || j >= {size}) {wa}[t] = 0.0;")
        lines += [f"      {ia}[t] = j < 0 ? 0 : (j > {size - 1} ? {size - 1} : j);", "    }"]
        if op.exclude_outside:
            lines += [f"    {{ double s = 0.0; for (int t = 0; t < {taps}; ++t) s += {wa}[t];",
                      f"      for (int t = 0; t < {taps}; ++t) {wa}[t] /= s; }}"]
        loops.append((f"t{axis}", taps))
        at[axis] = f"{ia}[t{axis}]"
    value = emitter.load(x, at)
    if not loops:
        lines.append(f"    {acc_t} acc = {value};")
    else:
        weight = " * ".join(f"w{name[1:]}[{name}]" for name, _ in loops)
        lines.append(f"    {acc_t} acc = 0;")
        for k, (name, taps) in enumerate(loops):
            lines.append("    " + "  " * k + f"for (int {name} = 0; {name} < {taps}; ++{name})")
        lines.append("    " + "  " * len(loops) + f"acc += {weight} * (double){value};")
    if outside:
        lines.append(f"    if ({' || '.join(outside)}) acc = {_c(op.extrapolation_value)};")
    y_type = emitter.ctype(op.result)
    lines.append(y_decl(emitter, op, f"({y_type})acc"))
    return lines


def _roi_align_dims(emitter, op: nn.RoiAlignOp) -> list:
    return [emitter.dims[op.rois][0], emitter.dims[op.input][1], op.output_height, op.output_width]


@window(nn.RoiAlignOp, dims=_roi_align_dims)
def roi_align(emitter, op: nn.RoiAlignOp) -> list[str]:
    """One output bin per thread: its region's ``gh x gw`` bilinear samples (the grid from
    ``sampling_ratio`` or the region's size, so a loop bound read at run time), in double
    precision like the reference; a batch index out of range reads image 0 (the reference
    reports it). The regions and images may be run-time many, the images of any size and
    channels (run-time dims of the kernel)."""
    r, ch, ph, pw = emitter.out_index
    T = emitter.index_type
    images, _, h, w = emitter.dims[op.input]
    oh, ow = op.output_height, op.output_width
    offset = op.pixel_offset
    scale = _c(op.spatial_scale)
    corner = [f"((double){emitter.load(op.rois, [r, str(k)])} * {scale} - {_c(offset)})" for k in range(4)]
    lines = [f"    const double rx1 = {corner[0]}, ry1 = {corner[1]};",
             f"    double rw = {corner[2]} - rx1, rh = {corner[3]} - ry1;"]
    if not op.half_pixel:
        lines.append("    rw = fmax(rw, 1.0); rh = fmax(rh, 1.0);")
    ratio = op.sampling_ratio
    lines += [f"    const double bh = rh / {_c(oh)}, bw = rw / {_c(ow)};",
              f"    const int gh = {ratio if ratio > 0 else f'(int)ceil(rh / {_c(oh)})'};",
              f"    const int gw = {ratio if ratio > 0 else f'(int)ceil(rw / {_c(ow)})'};",
              f"    {T} b = ({T}){emitter.load(op.batch_indices, [r])};",
              f"    if (b < 0 || b >= {images}) b = 0;",
              "    double acc = 0.0;",
              *(["    bool first = true;"] if op.mode == "max" else []),
              "    for (int iy = 0; iy < gh; ++iy) {",
              f"      const double sy = ry1 + {ph} * bh + (iy + 0.5) * bh / gh;",
              "      for (int ix = 0; ix < gw; ++ix) {",
              f"        const double sx = rx1 + {pw} * bw + (ix + 0.5) * bw / gw;",
              "        double v = 0.0;",
              f"        if (sy >= -1.0 && sy <= (double){_paren(h)} && sx >= -1.0 && sx <= (double){_paren(w)}) {{"]
    for axis, size, s in (("y", h, "sy"), ("x", w, "sx")):
        last = size - 1 if isinstance(size, int) else f"({size} - 1)"
        lines += [f"          double c{axis} = fmax({s}, 0.0);",
                  f"          {T} {axis}0 = ({T})floor(c{axis}), {axis}1;",
                  f"          if ({axis}0 >= {last}) {{ {axis}0 = {axis}1 = {last}; c{axis} = (double){axis}0; }}",
                  f"          else {{ {axis}1 = {axis}0 + 1; }}",
                  f"          const double l{axis} = c{axis} - (double){axis}0, h{axis} = 1.0 - l{axis};"]
    taps = [("hy * hx", "y0", "x0"), ("hy * lx", "y0", "x1"), ("ly * hx", "y1", "x0"), ("ly * lx", "y1", "x1")]
    values = [f"({wt}) * (double){emitter.load(op.input, ['b', ch, yi, xi])}" for wt, yi, xi in taps]
    if op.mode == "avg":
        lines.append(f"          v = {' + '.join(values)};")
    else:
        lines.append(f"          v = fmax(fmax(fmax({values[0]}, {values[1]}), {values[2]}), {values[3]});")
    lines.append("        }")
    if op.mode == "avg":
        lines.append("        acc += v;")
    else:
        lines.append("        acc = first ? v : fmax(acc, v); first = false;")
    lines += ["      }", "    }"]
    if op.mode == "avg":
        lines.append("    if (gh > 0 && gw > 0) acc /= (double)(gh * gw);")
    lines.append(y_decl(emitter, op, f"({emitter.ctype(op.result)})acc"))
    return lines


def _grid_sample_supported(op: nn.GridSampleOp) -> bool:
    """The image's spatial dims static (the batch, channels and sampled points may be
    run-time)."""
    return DYNAMIC_INDEX not in op.input.type.get_shape()[2:]


def _grid_sample_dims(emitter, op: nn.GridSampleOp) -> list:
    return [emitter.dims[op.input][0], emitter.dims[op.input][1], *emitter.dims[op.grid][1:-1]]


def _grid_reflect(var: str, lo: float, hi: float) -> list[str]:
    """Lines reflecting the double ``var`` off ``lo`` and ``hi`` until it lies between."""
    span = hi - lo
    if span <= 0:
        return [f"      if ({var} < {_c(lo)} || {var} > {_c(hi)}) {var} = {_c(lo)};"]
    return [f"      if ({var} < {_c(lo)} || {var} > {_c(hi)}) {{",
            f"        const bool below = {var} < {_c(lo)};",
            f"        const double dx = below ? {_c(lo)} - {var} : {var} - {_c(hi)};",
            f"        const double turns = floor(dx / {_c(span)});",
            f"        const double r = dx - turns * {_c(span)};",
            "        const bool even = fmod(turns, 2.0) == 0.0;",
            f"        {var} = below ? (even ? {_c(lo)} + r : {_c(hi)} - r) : (even ? {_c(hi)} - r : {_c(lo)} + r);",
            "      }"]


@window(nn.GridSampleOp, supports=_grid_sample_supported, dims=_grid_sample_dims)
def grid_sample(emitter, op: nn.GridSampleOp) -> list[str]:
    """One sampled point per thread: per spatial axis, the grid coordinate denormalized and
    padded, then 1 / 2 / 4 taps whose indices are padded again (``zeros``: a tap outside
    reads 0), in double precision and in the reference's order (the first axis outermost)."""
    T = emitter.index_type
    n, c, *points = emitter.out_index
    spatial = op.input.type.get_shape()[2:]
    k = len(spatial)
    taps = {"nearest": 1, "linear": 2, "cubic": 4}[op.mode]
    lines: list[str] = []
    for axis, size in enumerate(spatial):
        lo, hi = op.bounds(size)
        g = f"(double){emitter.load(op.grid, [n, *points, str(k - 1 - axis)])}"
        x = f"x{axis}"
        if op.align_corners:
            lines.append(f"    double {x} = ({g} + 1.0) / 2.0 * {_c(size - 1)};")
        else:
            lines.append(f"    double {x} = (({g} + 1.0) * {_c(size)} - 1.0) / 2.0;")
        if op.mode == "nearest":
            lines.append(f"    {x} = rint({x});")
        lines.append("    {")
        if op.mode == "cubic":
            pass  # the taps alone are padded (PyTorch's and onnxruntime's bicubic)
        elif op.padding_mode == "border":
            lines.append(f"      if ({x} < {_c(lo)} || {x} > {_c(hi)}) {x} = fmin(fmax({x}, 0.0), {_c(size - 1)});")
        elif op.padding_mode == "reflection":
            lines += _grid_reflect(x, lo, hi)
        lines.append("    }")
        lines += [f"    {T} i{axis}[{taps}];", f"    double w{axis}[{taps}];"]
        if op.mode == "nearest":
            lines += [f"    i{axis}[0] = ({T})trunc({x});", f"    w{axis}[0] = 1.0;"]
        else:
            lines += [f"    const double f{axis} = floor({x}), t{axis} = {x} - f{axis};",
                      f"    const {T} b{axis} = ({T})f{axis};"]
            if op.mode == "linear":
                lines += [f"    i{axis}[0] = b{axis}; i{axis}[1] = b{axis} + 1;",
                          f"    w{axis}[0] = 1.0 - t{axis}; w{axis}[1] = t{axis};"]
            else:
                t, a = f"t{axis}", _c(op.CUBIC_A)
                lines += [f"    for (int s = 0; s < 4; ++s) i{axis}[s] = b{axis} - 1 + s;",
                          f"    w{axis}[0] = (({a} * ({t} + 1.0) - 5.0 * {a}) * ({t} + 1.0) + 8.0 * {a}) * ({t} + 1.0) - 4.0 * {a};",
                          f"    w{axis}[1] = (({a} + 2.0) * {t} - ({a} + 3.0)) * {t} * {t} + 1.0;",
                          f"    w{axis}[2] = (({a} + 2.0) * (1.0 - {t}) - ({a} + 3.0)) * (1.0 - {t}) * (1.0 - {t}) + 1.0;",
                          f"    w{axis}[3] = (({a} * (2.0 - {t}) - 5.0 * {a}) * (2.0 - {t}) + 8.0 * {a}) * (2.0 - {t}) - 4.0 * {a};"]
        # The taps' indices padded: clamped (border, and zeros after noting what is outside),
        # or reflected. (Not ``in<k>``: the kernel's arguments are named so.)
        lines += [f"    bool ok{axis}[{taps}];", f"    for (int s = 0; s < {taps}; ++s) {{",
                  f"      ok{axis}[s] = i{axis}[s] >= 0 && i{axis}[s] < {size};"]
        if op.padding_mode == "reflection":
            lines += [f"      double r{axis} = (double)i{axis}[s];", *_grid_reflect(f"r{axis}", lo, hi),
                      f"      i{axis}[s] = ({T})trunc(r{axis});", f"      ok{axis}[s] = true;"]
        elif op.padding_mode == "border":
            lines.append(f"      ok{axis}[s] = true;")
        lines += [f"      i{axis}[s] = i{axis}[s] < 0 ? 0 : (i{axis}[s] > {size - 1} ? {size - 1} : i{axis}[s]);",
                  "    }"]
    lines.append("    double acc = 0.0;")
    for axis in range(k):
        lines.append("    " + "  " * axis + f"for (int s{axis} = 0; s{axis} < {taps}; ++s{axis})")
    weight = " * ".join(f"w{a}[s{a}]" for a in range(k))
    inside = " && ".join(f"ok{a}[s{a}]" for a in range(k))
    value = emitter.load(op.input, [n, c, *(f"i{a}[s{a}]" for a in range(k))])
    lines.append("    " + "  " * k + f"acc += {weight} * (({inside}) ? (double){value} : 0.0);")
    lines.append(y_decl(emitter, op, f"({emitter.ctype(op.result)})acc"))
    return lines


def _position(op: nn.AffineGridOp, index: str, size: int) -> str:
    """``AffineGridOp.position`` as a C double expression of the C index ``index``."""
    if op.align_corners:
        return "1.0" if size == 1 else f"(-1.0 + 2.0 * (double){index} / {_c(size - 1)})"
    return f"(-1.0 + (2.0 * (double){index} + 1.0) / {_c(size)})"


@injective(nn.AffineGridOp, dims=derived_dims)
def affine_grid(emitter, op: nn.AffineGridOp, index: list[str]) -> str:
    """``theta[n, j, :k] . (x, y(, z)) + theta[n, j, k]`` in double, the reference's order,
    rounded once to the compute type."""
    n, *cells, j = index
    size = list(op.size)
    k = len(size)
    terms = [f"{_position(op, cells[k - 1 - a], size[k - 1 - a])} * (double){emitter.value(op.theta, [n, j, str(a)])}"
             for a in range(k)]
    terms.append(f"(double){emitter.value(op.theta, [n, j, str(k)])}")
    return f"({emitter.ctype(op.result)})({' + '.join(terms)})"
