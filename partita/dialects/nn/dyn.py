"""``nn.dyn``: an nn op whose parameters are run-time tensors (TVM's ``relay.dyn`` ops).

ONNX passes pads, target shapes, slice bounds, split sizes, ``k`` or a one-hot depth as
inputs; when such an input is no constant, the result's dims depend on its values.
``nn.dyn`` keeps those inputs as ``params`` operands and names the op they parameterize
(``kind``); a launch plan binds the params' values (graph inputs are part of a run's shape
signature: ``SIZED_BY``) and builds the static op they stand for (``specialize``), which
gives the result shape and the semantics. The static op's own verifier checks the values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import DictionaryAttr, TensorType
from xdsl.ir import Attribute, Block, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    ParsePropInAttrDict,
    irdl_op_definition,
    prop_def,
    result_def,
    var_operand_def,
)
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    ELEMENT_TYPES,
    NNOp,
    OpKind,
    Shape,
    _props,
    _shape,
    _str_prop,
    _tensor,
    _value,
    kind_trait,
    numpy_dtype,
)
from partita.dialects.nn.conv import Col2ImOp, MaxUnpoolOp, check_max_unpool_size, max_unpool_sizes
from partita.dialects.nn.image import AffineGridOp, ResizeOp, resize_geometry
from partita.dialects.nn.indexing import ArangeOp, BroadcastToOp, OneHotOp, StridedSliceOp, TileOp
from partita.dialects.nn.reduction import TopKIndicesOp, TopKValuesOp
from partita.dialects.nn.spectral import DFTOp, STFTOp, dft_axis, mel_weight_matrix
from partita.dialects.nn.transform import ConstantOp, PadOp, ReshapeOp

INT64_MAX = 2**63 - 1

Specializer = Callable[[list[SSAValue], dict[str, np.ndarray], dict[str, Any]], NNOp]
"""(data operands, param values by name, options with the declared ``element_type``) ->
the static op."""


def _ints(values: np.ndarray) -> list[int]:
    return [int(v) for v in np.asarray(values).reshape(-1)]


def _reshape(inputs, params, options):
    (x,) = inputs
    shape = _shape(x)
    target = _ints(params["shape"])
    if not options.get("allowzero", False):
        target = [shape[i] if t == 0 and i < len(shape) else t for i, t in enumerate(target)]
    if target.count(-1) > 1:
        raise VerifyException(f"the target shape {target} has more than one -1")
    if -1 in target:
        rest = math.prod(t for t in target if t != -1)
        if rest == 0 or math.prod(shape) % rest:
            raise VerifyException(f"cannot reshape {list(shape)} into {target}")
        target[target.index(-1)] = math.prod(shape) // rest
    if math.prod(target) != math.prod(shape) or any(t < 0 for t in target):
        raise VerifyException(f"cannot reshape {list(shape)} into {target}")
    return ReshapeOp(x, target)


def _unsqueeze(inputs, params, options):
    (x,) = inputs
    shape = list(_shape(x))
    axes = _ints(params["axes"])
    rank = len(shape) + len(axes)
    normalized = sorted(a + rank if a < 0 else a for a in axes)
    if len(set(normalized)) != len(normalized) or any(not 0 <= a < rank for a in normalized):
        raise VerifyException(f"unsqueeze axes {axes} are out of range or repeat for rank {rank}")
    for a in normalized:
        shape.insert(a, 1)
    return ReshapeOp(x, shape)


def _squeeze(inputs, params, options):
    (x,) = inputs
    shape = _shape(x)
    if "axes" not in params:  # ONNX's default: every dim of 1
        return ReshapeOp(x, [d for d in shape if d != 1])
    axes = {a % len(shape) for a in _ints(params["axes"])} if shape else set()
    if any(shape[a] != 1 for a in axes):
        raise VerifyException(f"cannot squeeze axes {sorted(axes)} of shape {list(shape)}")
    return ReshapeOp(x, [d for i, d in enumerate(shape) if i not in axes])


def _slice(inputs, params, options):
    (x,) = inputs
    rank = len(_shape(x))
    starts, ends = _ints(params["starts"]), _ints(params["ends"])
    axes = _ints(params["axes"]) if "axes" in params else list(range(len(starts)))
    steps = _ints(params["steps"]) if "steps" in params else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise VerifyException("starts, ends, axes and steps must have the same length")
    begin, end, strides = [0] * rank, [INT64_MAX] * rank, [1] * rank
    for s, e, a, st in zip(starts, ends, axes, steps):
        if not -rank <= a < rank or st == 0:
            raise VerifyException(f"slice axis {a} (rank {rank}) or step {st} is invalid")
        begin[a % rank], end[a % rank], strides[a % rank] = s, e, st
    return StridedSliceOp(x, begin, end, strides)


def _split(inputs, params, options):
    (x,) = inputs
    shape = _shape(x)
    axis = options["axis"] % len(shape)
    split = _ints(params["split"])
    if sum(split) != shape[axis] or any(s < 0 for s in split):
        raise VerifyException(f"split sizes {split} do not add up to the size {shape[axis]} of axis {axis}")
    index = options["index"]
    begin, end, strides = [0] * len(shape), [INT64_MAX] * len(shape), [1] * len(shape)
    begin[axis] = sum(split[:index])
    end[axis] = begin[axis] + split[index]
    return StridedSliceOp(x, begin, end, strides)


def _topk(indices: bool):
    def build(inputs, params, options):
        (x,) = inputs
        (k,) = _ints(params["k"])
        op = TopKIndicesOp if indices else TopKValuesOp
        return op(x, k, axis=options["axis"], largest=options["largest"])

    return build


def _pad(inputs, params, options):
    (x,) = inputs
    rank = len(_shape(x))
    pads = _ints(params["pads"])
    if "axes" in params:
        axes = [a % rank for a in _ints(params["axes"])]
        full = [0] * (2 * rank)
        for j, a in enumerate(axes):
            full[a], full[rank + a] = pads[j], pads[len(axes) + j]
        pads = full
    if len(pads) != 2 * rank or any(p < 0 for p in pads):
        raise VerifyException(f"expected {2 * rank} non-negative pads, got {pads}")
    value = params.get("constant_value")
    value = float(np.asarray(value).reshape(-1)[0]) if value is not None and np.asarray(value).size else 0.0
    return PadOp(x, pads[:rank], pads[rank:], pad_value=value, mode=options.get("mode", "constant"))


def _tile(inputs, params, options):
    (x,) = inputs
    return TileOp(x, _ints(params["repeats"]))


def _expand(inputs, params, options):
    (x,) = inputs
    shape, target = list(_shape(x)), _ints(params["shape"])
    rank = max(len(shape), len(target))
    shape, target = [1] * (rank - len(shape)) + shape, [1] * (rank - len(target)) + target
    out = []
    for a, b in zip(shape, target):
        if a != b and 1 not in (a, b):
            raise VerifyException(f"cannot expand {list(_shape(x))} to {_ints(params['shape'])}")
        out.append(a if b == 1 else b)
    return BroadcastToOp(x, out)


def _scalar(values: np.ndarray):
    return np.asarray(values).reshape(-1)[0].item()


def _range(inputs, params, options):
    start, limit, delta = (_scalar(params[k]) for k in ("start", "limit", "delta"))
    if delta == 0:
        raise VerifyException("the delta of a range must be non-zero")
    size = max(math.ceil((limit - start) / delta), 0)
    return ArangeOp(start, delta, size, options["element_type"])


def _one_hot(inputs, params, options):
    (indices,) = inputs
    off, on = (float(v) for v in np.asarray(params["values"]).reshape(-1)[:2])
    return OneHotOp(indices, int(_scalar(params["depth"])), options["axis"], on, off, options["element_type"])


def _affine_grid(inputs, params, options):
    (theta,) = inputs
    size = _ints(params["size"])
    batch = _shape(theta)[0]
    if len(size) not in (4, 5) or size[0] != batch:
        raise VerifyException(f"size {size} must be [N, C, (D,) H, W] with N = {batch}, theta's batch")
    return AffineGridOp(theta, size[2:], align_corners=options.get("align_corners", False))


def _col2im(inputs, params, options):
    (x,) = inputs
    return Col2ImOp(x, _ints(params["image_shape"]), _ints(params["block_shape"]), options.get("strides"),
                    options.get("padding"), options.get("dilation"))


def _max_unpool(inputs, params, options):
    x, indices = inputs
    shape, given = list(_shape(x)), _ints(params["output_shape"])
    if len(given) != len(shape) or given[:2] != shape[:2]:
        raise VerifyException(f"output_shape {given} must be [N, C, ...] of the input's {shape[:2]}")
    default = max_unpool_sizes(shape, options["kernel"], options["strides"], options["padding"])
    try:
        check_max_unpool_size(given[2:], default)
    except ValueError as err:
        raise VerifyException(str(err)) from None
    return MaxUnpoolOp(x, indices, default)


def _mel_weight_matrix(inputs, params, options):
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    counts, edges = [int(_scalar(params[n])) for n in names[:3]], [float(_scalar(params[n])) for n in names[3:]]
    return ConstantOp(mel_weight_matrix(*counts, *edges, numpy_dtype(options["element_type"])))


def _dft(inputs, params, options):
    (x,) = inputs
    axis = dft_axis(int(_scalar(params["axis"])) if "axis" in params else options["axis"], len(_shape(x)))
    length = int(_scalar(params["dft_length"])) if "dft_length" in params else 0
    if "dft_length" in params and length < 1:
        raise VerifyException(f"dft_length must be positive, got {length}")
    return DFTOp(x, axis=axis, length=length, inverse=options["inverse"], onesided=options["onesided"])


def _stft(inputs, params, options):
    signal, *window = inputs
    step = int(_scalar(params["frame_step"]))
    frame = int(_scalar(params["frame_length"])) if "frame_length" in params else \
        _shape(window[0])[0] if window else _shape(signal)[1]
    return STFTOp(signal, window[0] if window else None, frame_step=step, frame_length=frame,
                  onesided=options["onesided"])


def _resize(inputs, params, options):
    """A Resize to run-time ``sizes`` or by run-time ``scales`` (Mask R-CNN pastes each
    mask at its box's size; a detector's transform scales the image to its ``min_size``)."""
    (x,) = inputs
    shape = _shape(x)
    axes = list(options.pop("axes", ())) or list(range(len(shape)))
    sizes = _ints(params["sizes"]) if "sizes" in params else None
    scales = [float(v) for v in np.asarray(params["scales"]).reshape(-1)] if sizes is None else None
    full_sizes, full_scales = resize_geometry(shape, axes, scales, sizes,
                                              options.pop("keep_aspect_ratio_policy", "stretch"))
    options.pop("element_type", None)
    return ResizeOp(x, full_sizes, full_scales, **options)


SPECIALIZERS: dict[str, Specializer] = {
    "affine_grid": _affine_grid,
    "col2im": _col2im,
    "dft": _dft,
    "max_unpool": _max_unpool,
    "mel_weight_matrix": _mel_weight_matrix,
    "range": _range,
    "one_hot": _one_hot,
    "reshape": _reshape,
    "resize": _resize,
    "unsqueeze": _unsqueeze,
    "squeeze": _squeeze,
    "slice": _slice,
    "split": _split,
    "stft": _stft,
    "topk_values": _topk(False),
    "topk_indices": _topk(True),
    "pad": _pad,
    "tile": _tile,
    "expand": _expand,
}
"""Each kind of ``nn.dyn``: (data operands, param values by name, options) -> the static op
(built on the given values, never inserted anywhere)."""


def _unwrap(attr: Attribute) -> Any:
    holder = type("_Holder", (), {"properties": {"v": attr}})()
    return _value("v").fget(holder)


@irdl_op_definition
class DynOp(NNOp):
    """``kind`` with run-time ``params`` (named by ``param_names``, comma-separated) over the
    data ``inputs``; ``options`` hold its static attributes. The result's dims are ``?``
    until the params' values are bound. Runs as a host step."""

    name = "nn.dyn"
    traits = kind_trait(OpKind.OPAQUE)
    ALLOWED_TYPES: ClassVar = ELEMENT_TYPES
    SIZED_BY: ClassVar = ("params",)
    """The operands whose values (not only shapes) size the result."""
    irdl_options = (ParsePropInAttrDict(), AttrSizedOperandSegments(as_property=True))
    inputs = var_operand_def(TensorType)
    params = var_operand_def(TensorType)
    result = result_def(TensorType)
    kind_attr = _str_prop("kind", "reshape")
    kind = _value("kind")
    param_names_attr = _str_prop("param_names", "")
    options_attr = prop_def(DictionaryAttr, prop_name="options", default_value=DictionaryAttr({}))
    assembly_format = ("`(` $inputs `:` type($inputs) `)` `params` `(` $params `:` type($params) `)` attr-dict "
                       "`->` type($result)")

    def __init__(self, kind: str, inputs: Sequence[SSAValue], params: dict[str, SSAValue],
                 result_type: Attribute, **options: object):
        props = _props(kind=kind, param_names=",".join(params))
        props["options"] = DictionaryAttr(_props(**options))
        NNOp.__init__(self, operands=[list(inputs), list(params.values())], result_types=[result_type],
                      properties=props)

    @property
    def param_names(self) -> list[str]:
        names = self.properties["param_names"].data
        return names.split(",") if names else []

    @property
    def options(self) -> dict[str, Any]:
        return {k: _unwrap(v) for k, v in self.properties["options"].data.items()}

    def verify_element_types(self) -> None:
        if self.kind not in SPECIALIZERS:
            raise VerifyException(f"unknown kind '{self.kind}' (one of {', '.join(SPECIALIZERS)})")
        if len(self.param_names) != len(self.params):
            raise VerifyException(f"{len(self.params)} params but {len(self.param_names)} param names")
        for v in self.params:
            if _tensor(v).element_type not in ELEMENT_TYPES:
                raise VerifyException(f"param of element type {_tensor(v).element_type}")

    def infer_shape(self) -> Shape:
        return tuple(DYN if d == DYN else d for d in _shape(self.result))

    def specialize(self, shape: Callable[[SSAValue], tuple[int, ...]],
                   value: Callable[[SSAValue], Any]) -> NNOp:
        """The static op for the bound values, on scratch values of the inputs' shapes."""
        scratch = Block(arg_types=[TensorType(_tensor(v).element_type, shape(v)) for v in self.inputs])
        values = {n: np.asarray(value(v)) for n, v in zip(self.param_names, self.params)}
        declared = _tensor(self.result)
        options = {**self.options, "element_type": declared.element_type}
        op = SPECIALIZERS[self.kind](list(scratch.args), values, options)
        op.verify_()
        got = _tensor(op.results[0])
        if got.element_type != declared.element_type or len(got.get_shape()) != len(declared.get_shape()):
            raise VerifyException(f"the bound values give a {got} result where {declared} was declared")
        return op

    def result_shape_from_values(self, shape: Callable[[SSAValue], tuple[int, ...]],
                                 value: Callable[[SSAValue], Any]) -> tuple[int, ...]:
        op = self.specialize(shape, value)
        try:
            return tuple(_tensor(op.results[0]).get_shape())
        finally:
            op.drop_all_references()
