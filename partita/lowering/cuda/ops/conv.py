"""CUDA lowering rules of the ``nn.conv`` family: direct convolutions (grouped and
depthwise included), transposed convolutions, windowed pools and LRN, as ``window`` rules.

One thread computes one output element with a loop over its window (TVM's naive direct
schedule): correct for every group count, dilation, padding and layout, with the
accumulation in the compute type (float for f16 / bf16 / f32, double for f64) and one
rounding to the storage type at the end, as the references do. Plain NHWC convolutions
still go to CUTLASS when Collage finds that cheaper (tensor cores); these kernels give
the rest (grouped, depthwise, 1-d / 3-d, NCHW left on a native target) a device
placement. Spatial and channel dims must be static; the batch may be dynamic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import Operation, SSAValue

from partita.dialects import nn
from partita.lowering.cuda.cexpr import _paren, _product
from partita.lowering.cuda.ops.indexing import derived_dims
from partita.lowering.cuda.rules import window


def _shape(v: SSAValue) -> tuple[int, ...]:
    return tuple(v.type.get_shape())


def _dtype(v: SSAValue) -> str:
    return str(v.type.element_type)


def static_but_batch(op: Operation) -> bool:
    """Every dim of the operands and result is static, except maybe the batch (axis 0)
    of the first operand and of the result."""
    first = op.operands[0]
    for v in (*op.operands, *op.results):
        dims = _shape(v)[1:] if v is first or v in op.results else _shape(v)
        if DYNAMIC_INDEX in dims:
            return False
    return True


def static_weights(op: Operation) -> bool:
    """A window op whose operands but the data are static (a convolution's weights): the
    data's dims, and so the result's, may be run-time dims (images of any size), which
    the kernel reads as such: its loops are bound by the data's dims and its result's come
    from ``op.result_dims`` (a convolution's channels from its weights)."""
    return all(DYNAMIC_INDEX not in _shape(v) for v in op.operands[1:])


def batch_dims(emitter, op: Operation) -> list:
    """The result dims: the input's batch (maybe a run-time dim), static otherwise."""
    return [emitter.dims[op.operands[0]][0], *_shape(op.results[0])[1:]]


def _cmath(ctype: str, name: str) -> str:
    return f"{name}f" if ctype == "float" else name


def _literal(ctype: str, value: float) -> str:
    text = repr(float(value))
    return f"{text}f" if ctype == "float" else text


def y_decl(emitter, op: Operation, expr: str) -> str:
    result = op.results[0]
    return f"    const {emitter.ctype(result)} y = {emitter._round(expr, _dtype(result))};"


def _spatial_loops(emitter, kernel: Sequence[int], starts: Sequence[str],
                   dilation: Sequence[int], bounds: Sequence, body: Sequence[str],
                   indent: str = "    ") -> list[str]:
    """Nested loops over a window: axis ``k`` reads input index ``i<k> = start + k *
    dilation``, skipping cells outside ``[0, bound)`` (the padding); ``body`` reads
    ``i0``, ``i1``, ... and ``k0``, ``k1``, ..."""
    T = emitter.index_type
    lines: list[str] = []
    for k, (size, start, d, bound) in enumerate(zip(kernel, starts, dilation, bounds)):
        pad = indent + "  " * k
        step = f"k{k}" if d == 1 else f"k{k} * {d}"
        lines += [f"{pad}for (int k{k} = 0; k{k} < {size}; ++k{k}) {{",
                  f"{pad}  const {T} i{k} = {start} + {step};",
                  f"{pad}  if (i{k} < 0 || i{k} >= {bound}) continue;"]
    inner = indent + "  " * len(kernel)
    lines += [inner + line for line in body]
    lines += [indent + "  " * k + "}" for k in range(len(kernel) - 1, -1, -1)]
    return lines


def _start(index: str, stride: int, pad: int) -> str:
    scaled = index if stride == 1 else f"{index} * {stride}"
    return scaled if pad == 0 else f"{scaled} - {pad}"


def _axes(layout: str, rank: int) -> tuple[int, tuple[int, ...]]:
    return nn.layout_axes(layout, rank)


# -- convolutions ---------------------------------------------------------------------

@window(nn.Conv1DOp, nn.Conv2DOp, nn.Conv3DOp, supports=static_weights, dims=derived_dims)
def conv(emitter, op: nn.ConvOp) -> list[str]:
    """Direct convolution: output channel ``oc`` reads the ``C_in / groups`` channels of
    its group."""
    rank, o, acc_t = op.SPATIAL, emitter.out_index, emitter.ctype(op.result)
    x, w = op.input, op.weight
    c_ax, spatial = _axes(op.data_layout, rank)
    wshape = _shape(w)
    k_layout = op.kernel_layout
    kernel = [wshape[k_layout.index(c)] for c in nn.SPATIAL_LETTERS[rank]]
    cin_g = wshape[k_layout.index("I")]
    cout_g = wshape[0] // op.groups
    xd = emitter.dims[x]
    oc = o[c_ax]
    group_base = "0" if op.groups == 1 else f"({oc} / {cout_g}) * {cin_g}"
    x_at = ["0"] * (rank + 2)
    x_at[0] = o[0]
    x_at[c_ax] = "ci" if group_base == "0" else "(cb + ci)"
    w_at = ["0"] * (rank + 2)
    w_at[0], w_at[k_layout.index("I")] = oc, "ci"
    for k, ax in enumerate(spatial):
        x_at[ax] = f"i{k}"
        w_at[k_layout.index(nn.SPATIAL_LETTERS[rank][k])] = f"k{k}"
    body = [f"acc += {emitter.load(x, x_at)} * {emitter.load(w, w_at)};"]
    starts = [_start(o[ax], op.strides[k], op.padding[k]) for k, ax in enumerate(spatial)]
    return [
        f"    {acc_t} acc = 0;",
        *([] if group_base == "0" else [f"    const {emitter.index_type} cb = {group_base};"]),
        f"    for (int ci = 0; ci < {cin_g}; ++ci) {{",
        *_spatial_loops(emitter, kernel, starts, op.dilation, [xd[ax] for ax in spatial], body,
                        "      "),
        "    }",
        y_decl(emitter, op, "acc"),
    ]


def _deform_supported(op: nn.DeformConv2DOp) -> bool:
    """Static dims but the batch of the input, offset, mask and result."""
    return all(DYNAMIC_INDEX not in (_shape(v)[1:] if v is not op.weight else _shape(v))
               for v in (*op.operands, op.result))


@window(nn.DeformConv2DOp, supports=_deform_supported, dims=batch_dims)
def deform_conv2d(emitter, op: nn.DeformConv2DOp) -> list[str]:
    """Deformable convolution, one output element per thread: for each input channel of
    its group and each tap, the tap's position moved by its offset, sampled bilinearly
    (a neighbour outside the image adds nothing: each load is guarded), scaled by the
    mask, times the weight. A tap whose sample lies a whole pixel or more outside the
    image (or is NaN) is skipped before any conversion to an index."""
    o, acc_t, T = emitter.out_index, emitter.ctype(op.result), emitter.index_type
    x, w, off, mask = op.input, op.weight, op.offset, op.mask
    _, c, h, wd = emitter.dims[x]
    out_c, cin_g, kh, kw = _shape(w)
    cog = c // op.offset_groups
    (sh, sw), (dh, dw), (ph, pw) = op.strides, op.dilation, op.padding[:2]
    n, oc, oy, ox = o
    floor = _cmath(acc_t, "floor")
    one = _literal(acc_t, 1.0)

    def at(v, *index):
        return emitter.load(v, [n, *index] if v is not w else list(index))

    def corner(dy: int, dx: int, weight: str) -> str:
        yy, xx = f"(y0 + {dy})" if dy else "y0", f"(x0 + {dx})" if dx else "x0"
        return (f"if ({yy} >= 0 && {yy} < {h} && {xx} >= 0 && {xx} < {wd}) "
                f"v += {weight} * ({acc_t}){at(x, 'c', yy, xx)};")

    return [
        f"    {acc_t} acc = 0;",
        f"    const {T} cb = ({oc} / {out_c // op.groups}) * {cin_g};",
        f"    for (int ci = 0; ci < {cin_g}; ++ci) {{",
        f"      const {T} c = cb + ci;",
        f"      const {T} g = c / {cog};",
        f"      for (int kh = 0; kh < {kh}; ++kh) {{",
        f"        for (int kw = 0; kw < {kw}; ++kw) {{",
        f"          const {T} tap = (g * {kh} + kh) * {kw} + kw;",
        f"          const {acc_t} py = ({acc_t})({oy} * {sh} - {ph} + kh * {dh}) + ({acc_t}){at(off, '(2 * tap)', oy, ox)};",
        f"          const {acc_t} px = ({acc_t})({ox} * {sw} - {pw} + kw * {dw}) + ({acc_t}){at(off, '(2 * tap + 1)', oy, ox)};",
        f"          if (!(py > -{one} && py < {h} && px > -{one} && px < {wd})) continue;",
        f"          const {acc_t} fy = {floor}(py), fx = {floor}(px);",
        "          const int y0 = (int)fy, x0 = (int)fx;",
        f"          const {acc_t} ly = py - fy, lx = px - fx;",
        f"          {acc_t} v = 0;",
        "          " + corner(0, 0, f"({one} - ly) * ({one} - lx)"),
        "          " + corner(0, 1, f"({one} - ly) * lx"),
        "          " + corner(1, 0, f"ly * ({one} - lx)"),
        "          " + corner(1, 1, "ly * lx"),
        *([] if mask is None else [f"          v *= ({acc_t}){at(mask, 'tap', oy, ox)};"]),
        f"          acc += v * ({acc_t}){at(w, oc, 'ci', 'kh', 'kw')};",
        "        }",
        "      }",
        "    }",
        y_decl(emitter, op, "acc"),
    ]


@window(nn.ConvIntegerOp, supports=static_but_batch, dims=batch_dims)
def conv_integer(emitter, op: nn.ConvIntegerOp) -> list[str]:
    """Integer convolution (either layout): the shifted operands multiplied and summed in
    ``int``; a padding cell is skipped (it holds the input zero point: it adds nothing)."""
    rank, o = op.SPATIAL, emitter.out_index
    x, w = op.input, op.weight
    c_ax, spatial = _axes(op.data_layout, rank)
    wshape, k_layout = _shape(w), op.kernel_layout
    kernel = [wshape[k_layout.index(c)] for c in nn.SPATIAL_LETTERS[rank]]
    cin_g, cout_g = wshape[k_layout.index("I")], wshape[0] // op.groups
    xd = emitter.dims[x]
    oc = o[c_ax]
    zx = emitter.load(op.input_zero_point, ["0"] * len(_shape(op.input_zero_point)))
    zw_shape = _shape(op.weight_zero_point)
    zw_at = [oc if zw_shape and zw_shape[0] > 1 else "0"] * len(zw_shape)
    zw = emitter.load(op.weight_zero_point, zw_at)
    x_at, w_at = ["0"] * (rank + 2), ["0"] * (rank + 2)
    x_at[0], x_at[c_ax] = o[0], "ci" if op.groups == 1 else "(cb + ci)"
    w_at[0], w_at[k_layout.index("I")] = oc, "ci"
    for k, ax in enumerate(spatial):
        x_at[ax] = f"i{k}"
        w_at[k_layout.index(nn.SPATIAL_LETTERS[rank][k])] = f"k{k}"
    body = [f"acc += ((int){emitter.load(x, x_at)} - zx) * ((int){emitter.load(w, w_at)} - zw);"]
    starts = [_start(o[ax], op.strides[k], op.padding[k]) for k, ax in enumerate(spatial)]
    return [
        "    int acc = 0;",
        f"    const int zx = (int){zx};",
        f"    const int zw = (int){zw};",
        *([] if op.groups == 1 else [f"    const {emitter.index_type} cb = ({oc} / {cout_g}) * {cin_g};"]),
        f"    for (int ci = 0; ci < {cin_g}; ++ci) {{",
        *_spatial_loops(emitter, kernel, starts, op.dilation, [xd[ax] for ax in spatial], body, "      "),
        "    }",
        "    const int y = acc;",
    ]


@window(nn.Conv1DTransposeOp, nn.Conv2DTransposeOp, nn.Conv3DTransposeOp,
        supports=static_but_batch, dims=batch_dims)
def conv_transpose(emitter, op: nn.ConvTransposeOp) -> list[str]:
    """Transposed convolution as a gather: output cell ``o`` (shifted by the leading
    pad) takes input cell ``i`` through kernel tap ``k`` when ``o + pad = i * stride + k *
    dilation``."""
    rank, o, acc_t, T = op.SPATIAL, emitter.out_index, emitter.ctype(op.result), emitter.index_type
    x, w = op.input, op.weight
    wshape = _shape(w)
    cin_g, cout_g, kernel = wshape[0] // op.groups, wshape[1], wshape[2:]
    xd = emitter.dims[x]
    oc = o[1]
    x_at = [o[0], "ci" if op.groups == 1 else "(cb + ci)", *(f"i{k}" for k in range(rank))]
    w_at = ["ci" if op.groups == 1 else "(cb + ci)",
            oc if op.groups == 1 else f"({oc} % {cout_g})", *(f"k{k}" for k in range(rank))]
    lines = [f"    {acc_t} acc = 0;"]
    if op.groups > 1:
        lines.append(f"    const {T} cb = ({oc} / {cout_g}) * {cin_g};")
    lines.append(f"    for (int ci = 0; ci < {cin_g}; ++ci) {{")
    indent = "      "
    lines += _strided_taps(op, o[2:], kernel, [xd[2 + k] for k in range(rank)], "i", T, indent)
    lines.append(indent + "  " * rank + f"acc += {emitter.load(x, x_at)} * {emitter.load(w, w_at)};")
    lines += [indent + "  " * k + "}" for k in range(rank - 1, -1, -1)]
    lines += ["    }", y_decl(emitter, op, "acc")]
    return lines


def _strided_taps(op, out: Sequence[str], taps: Sequence[int], extents: Sequence[object], name: str, T: str,
                  indent: str) -> list[str]:
    """The nested loops of a gather that inverts a strided window (a transposed
    convolution, col2im): for each spatial dim, tap ``k<d>`` of ``taps[d]`` and the source
    cell ``<name><d>`` with ``out[d] + pad = <name><d> * stride + k<d> * dilation``, the
    taps that land on no cell of ``extents`` skipped. The caller closes the loops."""
    lines = []
    for k in range(len(taps)):
        pad = indent + "  " * k
        s, d, p = op.strides[k], op.dilation[k], op.padding[k]
        shifted = out[k] if p == 0 else f"{out[k]} + {p}"
        tap = f"k{k}" if d == 1 else f"k{k} * {d}"
        lines += [f"{pad}for (int k{k} = 0; k{k} < {taps[k]}; ++k{k}) {{",
                  f"{pad}  const {T} t{k} = {shifted} - {tap};"]
        if s == 1:
            lines += [f"{pad}  if (t{k} < 0 || t{k} >= {extents[k]}) continue;", f"{pad}  const {T} {name}{k} = t{k};"]
        else:
            lines += [f"{pad}  if (t{k} < 0 || t{k} % {s} != 0) continue;", f"{pad}  const {T} {name}{k} = t{k} / {s};",
                      f"{pad}  if ({name}{k} >= {extents[k]}) continue;"]
    return lines


@window(nn.Col2ImOp, supports=static_but_batch, dims=batch_dims)
def col2im(emitter, op: nn.Col2ImOp) -> list[str]:
    """Col2im as a gather (no atomics): image cell ``o`` (shifted by the leading pad)
    takes, for each block offset ``k`` in row-major order, the column entry of block ``b``
    when ``o + pad = b * stride + k * dilation``, summed in the compute type."""
    o, acc_t, T = emitter.out_index, emitter.ctype(op.result), emitter.index_type
    block, blocks = list(op.block_shape), op.blocks()
    rank, window = len(block), math.prod(block)
    lines = [f"    {acc_t} acc = 0;"]
    indent = "    "
    lines += _strided_taps(op, o[2:], block, blocks, "b", T, indent)
    offset, column = "0", "0"
    for k in range(rank):
        offset = f"k{k}" if offset == "0" else f"({offset}) * {block[k]} + k{k}"
        column = f"b{k}" if column == "0" else f"({column}) * {blocks[k]} + b{k}"
    channel = f"{o[1]} * {window} + {offset}" if o[1] != "0" else offset
    lines.append(indent + "  " * rank + f"acc += {emitter.load(op.input, [o[0], f'({channel})', f'({column})'])};")
    lines += [indent + "  " * k + "}" for k in range(rank - 1, -1, -1)]
    lines.append(y_decl(emitter, op, "acc"))
    return lines


MAX_UNPOOL_SCAN = 1 << 16
"""The most input elements the max-unpooling kernel scans for each output element: past it
(a segmentation network's decoder) the scan is quadratic work, and the host's linear scatter
is the faster step."""


def _max_unpool_supported(op: nn.MaxUnpoolOp) -> bool:
    """A static input of at most ``MAX_UNPOOL_SCAN`` elements."""
    shape = _shape(op.input)
    return DYNAMIC_INDEX not in shape and math.prod(shape) <= MAX_UNPOOL_SCAN


@window(nn.MaxUnpoolOp, supports=_max_unpool_supported, dims=batch_dims)
def max_unpool(emitter, op: nn.MaxUnpoolOp) -> list[str]:
    """Max-unpooling as a gather (no atomics, no zero-fill pass): output element ``o``
    scans the indices from the last to the first and takes the input element of the first
    that names its flat offset, so the last write wins as in a sequential scatter (two
    threads never write one element). ONNX's indices are arbitrary offsets into the whole
    result, not bound to a pooling window, so no element can rule out the others: the
    scan is ``numel(input)`` per output element, stopping at the hit."""
    T, o = emitter.index_type, emitter.out_index
    out_dims, in_dims = emitter.dims[op.result], emitter.dims[op.input]
    flat = "0"
    for index, d in zip(o, out_dims):
        flat = index if flat == "0" else f"({flat}) * {_paren(d)} + {index}"
    at = emitter._decompose("src", in_dims)
    return [f"    const {T} at = {flat};",
            f"    {emitter.ctype(op.result)} y = 0;",
            f"    for ({T} src = ({T})({_product(in_dims)}) - 1; src >= 0; --src) {{",
            f"      if ((long long){emitter.load(op.indices, at)} == (long long)at) {{ y = {emitter.load(op.input, at)}; break; }}",
            "    }"]


# -- pools ------------------------------------------------------------------------------

_INT_LOWEST = {"i8": "-128", "i16": "-32768", "i32": "(-2147483647 - 1)",
               "i64": "(-9223372036854775807LL - 1)", "ui8": "0u", "ui16": "0u", "ui32": "0u",
               "ui64": "0ull"}


@window(nn.MaxPool1DOp, nn.MaxPool2DOp, nn.MaxPool3DOp, nn.AvgPool1DOp, nn.AvgPool2DOp,
        nn.AvgPool3DOp, nn.LpPool1DOp, nn.LpPool2DOp, nn.LpPool3DOp,
        supports=static_weights, dims=derived_dims)
def pool(emitter, op: nn.PoolOp) -> list[str]:
    """Max (cells of the padding never win), average (divided by the cells in the input,
    or in input and declared padding with ``count_include_pad``, never the extra cells
    ``ceil_mode`` reads past it) and Lp pooling (padding cells are 0)."""
    rank, o, T = op.SPATIAL, emitter.out_index, emitter.index_type
    x = op.input
    acc_t = emitter.ctype(op.result)
    c_ax, spatial = _axes(op.layout, rank)
    xd = emitter.dims[x]
    at = ["0"] * (rank + 2)
    at[0], at[c_ax] = o[0], o[c_ax]
    for k, ax in enumerate(spatial):
        at[ax] = f"i{k}"
    v = emitter.load(x, at)
    starts = [_start(o[ax], op.strides[k], op.padding[k]) for k, ax in enumerate(spatial)]
    bounds = [xd[ax] for ax in spatial]
    if isinstance(op, nn.MaxPoolOp):
        dtype = _dtype(op.result)
        if acc_t in ("float", "double"):
            init = "__int_as_float(0xff800000)"  # -inf (widened for double)
            update = f"acc = {_cmath(acc_t, 'fmax')}(acc, {v});"
        else:
            init = _INT_LOWEST[dtype]
            update = f"{{ const {acc_t} v = {v}; if (v > acc) acc = v; }}"
        return [f"    {acc_t} acc = {init};",
                *_spatial_loops(emitter, op.pool_size, starts, op.dilation, bounds, [update]),
                y_decl(emitter, op, "acc")]
    if isinstance(op, nn.LpPoolOp):
        p = float(op.p)
        if p == 2.0:
            term, final = f"{{ const {acc_t} v = {v}; acc += v * v; }}", f"{_cmath(acc_t, 'sqrt')}(acc)"
        elif p == 1.0:
            term, final = f"acc += {_cmath(acc_t, 'fabs')}({v});", "acc"
        else:
            term = f"acc += {_cmath(acc_t, 'pow')}({_cmath(acc_t, 'fabs')}({v}), {_literal(acc_t, p)});"
            final = f"{_cmath(acc_t, 'pow')}(acc, {_literal(acc_t, 1.0 / p)})"
        return [f"    {acc_t} acc = 0;",
                *_spatial_loops(emitter, op.pool_size, starts, op.dilation, bounds, [term]),
                y_decl(emitter, op, final)]
    assert isinstance(op, nn.AvgPoolOp)
    if not op.count_include_pad:
        return [f"    {acc_t} acc = 0;",
                "    int count = 0;",
                *_spatial_loops(emitter, op.pool_size, starts, op.dilation, bounds,
                                [f"acc += {v};", "++count;"]),
                y_decl(emitter, op, f"acc / ({acc_t})count")]
    # The divisor counts the window's cells inside [-pad_lo, size + pad_hi) on every axis.
    lines = [f"    {acc_t} acc = 0;", f"    {T} count = 1;"]
    for k in range(len(spatial)):
        lo, hi = op.padding[k], op.padding[rank + k]
        d = op.dilation[k]
        step = f"q * {d}" if d != 1 else "q"
        lines.append(f"    {{ int n = 0; for (int q = 0; q < {op.pool_size[k]}; ++q) {{ "
                     f"const {T} j = {starts[k]} + {step}; "
                     f"n += j >= -{lo} && j < {bounds[k]} + {hi}; }} count *= n; }}")
    lines += _spatial_loops(emitter, op.pool_size, starts, op.dilation, bounds, [f"acc += {v};"])
    lines.append(y_decl(emitter, op, f"acc / ({acc_t})count"))
    return lines


@window(nn.MaxPool1DIndicesOp, nn.MaxPool2DIndicesOp, nn.MaxPool3DIndicesOp,
        supports=static_but_batch, dims=batch_dims)
def max_pool_indices(emitter, op: nn.MaxPoolIndicesOp) -> list[str]:
    """The channels-first row-major (or column-major spatial) offset of the window's
    first maximum."""
    rank, o = op.SPATIAL, emitter.out_index
    x = op.input
    v_t = emitter.ctype(x)
    c_ax, spatial = _axes(op.layout, rank)
    xd = emitter.dims[x]
    at = ["0"] * (rank + 2)
    at[0], at[c_ax] = o[0], o[c_ax]
    for k, ax in enumerate(spatial):
        at[ax] = f"i{k}"
    sizes = [xd[ax] for ax in spatial]
    order = range(rank) if op.column_major else range(rank - 1, -1, -1)
    terms, stride = [], 1
    for k in order:
        terms.append(f"i{k}" if stride == 1 else f"i{k} * {stride}")
        stride *= sizes[k]
    offset = f"({o[0]} * {xd[c_ax]} + {o[c_ax]}) * {stride} + " + " + ".join(terms)
    starts = [_start(o[ax], op.strides[k], op.padding[k]) for k, ax in enumerate(spatial)]
    update = [f"const {v_t} v = {emitter.load(x, at)};",
              f"if (!found || v > best) {{ best = v; index = {offset}; found = true; }}"]
    return [f"    {v_t} best = 0;", "    bool found = false;", "    long long index = 0;",
            *_spatial_loops(emitter, op.pool_size, starts, op.dilation, sizes, update),
            y_decl(emitter, op, "index")]


# -- local response normalization -------------------------------------------------------

@window(nn.LRNOp, supports=static_but_batch, dims=batch_dims)
def lrn(emitter, op: nn.LRNOp) -> list[str]:
    """``x / (bias + alpha / size * sum of x^2 over the channel window) ^ beta`` (the
    window runs from ``c - (size - 1) / 2`` to ``c + size / 2``, cut at the edges)."""
    o, T = emitter.out_index, emitter.index_type
    x = op.input
    acc_t = emitter.ctype(op.result)
    rank = len(_shape(x))
    axis = op.axis % rank
    lo, hi = (op.size - 1) // 2, op.size // 2
    at = list(o)
    at[axis] = "j"
    center = emitter.load(x, o)
    size = emitter.dims[x][axis]
    scale = _literal(acc_t, op.alpha / op.size)
    return [
        f"    {acc_t} acc = 0;",
        f"    for ({T} j = {o[axis]} - {lo}; j <= {o[axis]} + {hi}; ++j) {{",
        f"      if (j < 0 || j >= {size}) continue;",
        f"      const {acc_t} v = {emitter.load(x, at)};",
        "      acc += v * v;",
        "    }",
        y_decl(emitter, op, f"{center} / {_cmath(acc_t, 'pow')}({_literal(acc_t, op.bias)} + "
                            f"{scale} * acc, {_literal(acc_t, op.beta)})"),
    ]
