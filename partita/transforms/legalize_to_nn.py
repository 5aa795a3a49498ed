"""``legalize-to-nn``: IR in MLIR's standard dialects (``linalg``, ``tensor``, ``arith`` /
``math`` on tensors, ``tosa``) becomes ``nn`` ops, so that what other MLIR / xDSL
pipelines produce is partitioned and run like an imported model.

Converted: ``linalg`` named ops (matmul, the element-wise ones, transpose, fill, copy,
broadcast, reduce,
conv_2d_nchw_fchw / nhwc_fhwc, pooling_nchw_max), ``linalg.generic`` whose body is an
element-wise expression (identity or broadcast maps) or a sum / max / min reduction,
``tensor`` (empty, reshape, expand / collapse_shape, extract_slice, insert_slice, pad with
a constant, concat), element-wise ``arith`` / ``math`` on tensors and tensor constants, and the
``tosa`` ops xDSL 0.74 has (add, sub, mul, clamp, sin, cos, reciprocal, const, matmul,
concat, reduce_sum/max/min/product, max_pool2d, avg_pool2d). Destination operands
(``outs``) that start from zero (``tensor.empty``, a zero ``linalg.fill``) are dropped;
others are added, as the linalg op accumulates into them.

Anything from those dialects left afterwards (a strided ``tensor.insert_slice``, a ``linalg.generic``
with a body that is not element-wise, dynamic slices...) is a located error here, at
compile time: no launch plan can run it, and the user should not learn that at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import (
    AffineMapAttr,
    ArrayAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)
from xdsl.utils.exceptions import VerifyException

from partita.dialects import nn
from partita.dialects.nn.base import dense_to_numpy, numpy_dtype
from partita.ir.diagnostics import op_error

__all__ = ["LegalizeToNN", "needs_legalization"]

_UNARY: dict[str, type[Operation]] = {
    "math.exp": nn.ExpOp, "math.log": nn.LogOp, "math.sqrt": nn.SqrtOp, "math.tanh": nn.TanhOp,
    "math.sin": nn.SinOp, "math.cos": nn.CosOp, "math.absf": nn.AbsOp, "math.floor": nn.FloorOp,
    "math.ceil": nn.CeilOp, "math.erf": nn.ErfOp, "math.tan": nn.TanOp, "math.round": nn.RoundOp,
    "arith.negf": nn.NegOp,
    "linalg.exp": nn.ExpOp, "linalg.log": nn.LogOp, "linalg.sqrt": nn.SqrtOp,
    "tosa.sin": nn.SinOp, "tosa.cos": nn.CosOp, "tosa.reciprocal": nn.ReciprocalOp,
}
_BINARY: dict[str, type[Operation]] = {
    "arith.addf": nn.AddOp, "arith.subf": nn.SubtractOp, "arith.mulf": nn.MultiplyOp, "arith.divf": nn.DivideOp,
    "arith.maximumf": nn.MaximumOp, "arith.minimumf": nn.MinimumOp, "arith.maxnumf": nn.MaximumOp,
    "arith.minnumf": nn.MinimumOp, "arith.addi": nn.AddOp, "arith.subi": nn.SubtractOp, "arith.muli": nn.MultiplyOp,
    "math.powf": nn.PowOp,
    "linalg.add": nn.AddOp, "linalg.sub": nn.SubtractOp, "linalg.mul": nn.MultiplyOp,
    "linalg.max": nn.MaximumOp, "linalg.min": nn.MinimumOp,
    "tosa.add": nn.AddOp, "tosa.sub": nn.SubtractOp, "tosa.mul": nn.MultiplyOp,
}
_REDUCTIONS: dict[str, type[Operation]] = {
    "arith.addf": nn.ReduceSumOp, "arith.addi": nn.ReduceSumOp, "arith.maximumf": nn.ReduceMaxOp,
    "arith.maxnumf": nn.ReduceMaxOp, "arith.minimumf": nn.ReduceMinOp, "arith.minnumf": nn.ReduceMinOp,
    "arith.mulf": nn.ReduceProdOp,
}
_TOSA_REDUCTIONS: dict[str, type[Operation]] = {
    "tosa.reduce_sum": nn.ReduceSumOp, "tosa.reduce_max": nn.ReduceMaxOp,
    "tosa.reduce_min": nn.ReduceMinOp, "tosa.reduce_product": nn.ReduceProdOp,
}


class Unsupported(Exception):
    """A foreign op this pass recognises but cannot express in nn (the reason says why)."""


def _is_tensor(value: SSAValue) -> bool:
    return isinstance(value.type, TensorType)


def _shape(value: SSAValue) -> tuple[int, ...]:
    return tuple(value.type.get_shape())  # type: ignore[attr-defined]


def _ints(attr: Attribute | None) -> list[int]:
    if attr is None:
        return []
    if isinstance(attr, DenseArrayBase):
        return [int(v) for v in attr.get_values()]
    if isinstance(attr, DenseIntOrFPElementsAttr):
        return [int(v) for v in dense_to_numpy(attr).reshape(-1)]
    if isinstance(attr, ArrayAttr):
        return [int(a.value.data) for a in attr.data]  # type: ignore[attr-defined]
    raise Unsupported(f"cannot read integers from {attr}")


def _prop(op: Operation, *names: str) -> Attribute | None:
    """The first of ``names`` among the op's properties or attributes (never ``or``:
    some attributes, zero integers among them, are falsy)."""
    for name in names:
        for table in (op.properties, op.attributes):
            if name in table:
                return table[name]
    return None


def _scalar_constant(value: SSAValue) -> float | int | None:
    """The value of a scalar ``arith.constant``, else None."""
    owner = value.owner
    if isinstance(owner, Operation) and owner.name == "arith.constant":
        attr = _prop(owner, "value")
        if isinstance(attr, (FloatAttr, IntegerAttr)):
            return attr.value.data
    return None


def _fill_value(value: SSAValue) -> float | int | None:
    """The one value a destination operand holds everywhere (a ``linalg.fill`` of a
    constant, or a splat constant, converted or not), else None."""
    owner = value.owner
    if not isinstance(owner, Operation):
        return None
    if owner.name == "linalg.fill":
        return _scalar_constant(owner.operands[0])
    if owner.name in ("arith.constant", "nn.constant", "tosa.const"):
        attr = _prop(owner, "value", "values")
        if isinstance(attr, DenseIntOrFPElementsAttr):
            array = dense_to_numpy(attr)
            if array.size and np.all(array == array.flat[0]):
                return array.flat[0].item()
    return None


def _starts_at_zero(value: SSAValue) -> bool:
    """Whether a destination operand holds zeros (or nothing defined) before the op."""
    owner = value.owner
    if isinstance(owner, Operation) and owner.name == "tensor.empty":
        return True
    return _fill_value(value) == 0


def _splat(value: float, like: SSAValue) -> nn.ConstantOp:
    """A rank-0 constant of ``like``'s element type (nn ops broadcast it)."""
    dtype = numpy_dtype(like.type.element_type)  # type: ignore[attr-defined]
    return nn.ConstantOp(np.asarray(value, dtype=dtype))


class _Builder:
    """Inserts nn ops before the op being rewritten and remembers them for ``replace``."""

    def __init__(self, rewriter: PatternRewriter):
        self.rewriter = rewriter
        self.ops: list[Operation] = []

    def __call__(self, op: Operation) -> SSAValue:
        self.ops.append(op)
        return op.results[0]

    def accumulate(self, value: SSAValue, init: SSAValue) -> SSAValue:
        """``value`` plus what the destination held, as linalg's contractions compute."""
        return value if _starts_at_zero(init) else self(nn.AddOp(value, init))

    def finish(self, op: Operation, results: Sequence[SSAValue]) -> None:
        self.rewriter.replace(op, self.ops, list(results))


@dataclass
class _Conversion(RewritePattern):
    """One conversion function per op name; an ``Unsupported`` leaves the op for the
    final check, which reports it with the reason."""

    table: dict[str, Callable[[Operation, _Builder], Sequence[SSAValue]]]
    reasons: dict[Operation, str]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        convert = self.table.get(op.name)
        if convert is None or op in self.reasons:
            return
        if op.name.startswith(("arith.", "math.")) and not any(_is_tensor(r) for r in op.results):
            return  # scalar arithmetic (a linalg body, an index computation) stays
        build = _Builder(rewriter)
        try:
            results = convert(op, build)
        except (Unsupported, VerifyException, ValueError) as why:  # nn's checks of shapes and types too
            self.reasons[op] = str(why)
            return
        build.finish(op, results)


# -- element-wise ------------------------------------------------------------------------


def _elementwise(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    inputs = list(op.operands)
    if op.name.startswith("linalg."):
        inputs = list(op.inputs)  # type: ignore[attr-defined]
    if op.name == "tosa.mul" and len(inputs) == 3:
        if _fill_value(inputs[2]) != 0:
            raise Unsupported("tosa.mul converts with a zero shift only")
        inputs = inputs[:2]  # a zero shift: a plain product
    if op.name in _UNARY:
        return [build(_UNARY[op.name](inputs[0]))]
    return [build(_BINARY[op.name](inputs[0], inputs[1]))]


def _tensor_constant(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    attr = _prop(op, "value", "values")
    if not isinstance(attr, DenseIntOrFPElementsAttr):
        raise Unsupported("only dense tensor constants convert to nn.constant")
    return [build(nn.ConstantOp(dense_to_numpy(attr)))]


def _clamp(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    low, high = op.properties["min_val"], op.properties["max_val"]
    return [build(nn.ClipOp(op.operands[0], float(low.value.data), float(high.value.data)))]  # type: ignore[attr-defined]


# -- linalg ------------------------------------------------------------------------------


def _matmul(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    a, b = op.inputs  # type: ignore[attr-defined]
    (init,) = op.outputs  # type: ignore[attr-defined]
    if len(_shape(a)) != 2 or len(_shape(b)) != 2:
        raise Unsupported("linalg.matmul converts for 2-d operands only")
    return [build.accumulate(build(nn.MatmulOp(a, b)), init)]


def _fill(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    (init,) = op.outputs  # type: ignore[attr-defined]
    value = _scalar_constant(op.inputs[0])  # type: ignore[attr-defined]
    shape = _shape(init)
    if value is None or any(d < 0 for d in shape):
        raise Unsupported("linalg.fill converts for a constant value and a static shape only")
    dtype = numpy_dtype(init.type.element_type)  # type: ignore[attr-defined]
    return [build(nn.ConstantOp(np.full(shape, value, dtype=dtype)))]


def _transpose(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    return [build(nn.TransposeOp(op.inputs[0], _ints(op.properties["permutation"])))]  # type: ignore[attr-defined]


def _conv(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    x, w = op.inputs  # type: ignore[attr-defined]
    (init,) = op.outputs  # type: ignore[attr-defined]
    strides = _ints(op.properties.get("strides")) or [1, 1]
    dilation = _ints(op.properties.get("dilations")) or [1, 1]
    layouts = {"linalg.conv_2d_nchw_fchw": ("NCHW", "OIHW"), "linalg.conv_2d_nhwc_fhwc": ("NHWC", "OHWI")}[op.name]
    conv = nn.Conv2DOp(x, w, strides=strides, dilation=dilation, data_layout=layouts[0], kernel_layout=layouts[1])
    return [build.accumulate(build(conv), init)]


def _max_pool(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    x, window = op.inputs  # type: ignore[attr-defined]
    (init,) = op.outputs  # type: ignore[attr-defined]
    strides = _ints(op.properties.get("strides")) or [1, 1]
    dilation = _ints(op.properties.get("dilations")) or [1, 1]
    pooled = build(nn.MaxPool2DOp(x, list(_shape(window)), strides=strides, dilation=dilation))
    owner = init.owner
    if (isinstance(owner, Operation) and owner.name == "tensor.empty") or _fill_value(init) == float("-inf"):
        return [pooled]
    return [build(nn.MaximumOp(pooled, init))]  # the max includes what the destination held


def _affine_results(attr: Attribute) -> list[int | None]:
    """A map's results as dim positions (None for anything but a plain dim)."""
    from xdsl.ir.affine import AffineDimExpr

    amap = attr.data if isinstance(attr, AffineMapAttr) else attr  # type: ignore[attr-defined]
    return [e.position if isinstance(e, AffineDimExpr) else None for e in amap.results]


def _generic(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    inputs, outputs = list(op.inputs), list(op.outputs)  # type: ignore[attr-defined]
    if len(outputs) != 1:
        raise Unsupported("linalg.generic converts with one output only")
    iterators = [str(getattr(i, "data", i)).lower() for i in op.iterator_types.data]  # type: ignore[attr-defined]
    reduction_dims = [k for k, kind in enumerate(iterators) if "reduction" in kind]
    maps = [_affine_results(m) for m in op.indexing_maps.data]  # type: ignore[attr-defined]
    rank = len(iterators)
    out_map = maps[-1]
    if None in out_map or any(m is None for in_map in maps[:-1] for m in in_map):
        raise Unsupported("linalg.generic converts with indexing maps that are plain dims only")
    parallel = [k for k in range(rank) if k not in reduction_dims]
    if out_map != parallel:
        raise Unsupported("linalg.generic converts when the output map lists the parallel dims in order")
    block = op.body.block  # type: ignore[attr-defined]
    values: dict[SSAValue, SSAValue] = {}
    for arg, operand, in_map in zip(block.args, inputs, maps):
        if in_map == list(range(rank)):
            values[arg] = operand
        elif in_map == sorted(in_map) and len(set(in_map)) == len(in_map) and not set(in_map) & set(reduction_dims):
            # A broadcast operand (a bias over the last dim): reshape it to broadcast in nn.
            shape = [(_shape(operand)[in_map.index(k)] if k in in_map else 1) for k in range(rank)]
            values[arg] = build(nn.ReshapeOp(operand, shape))
        else:
            raise Unsupported("linalg.generic converts with identity or broadcast input maps only")
    out_arg = block.args[len(inputs)]
    yield_op = block.last_op
    body = [o for o in block.ops if o is not yield_op]
    if reduction_dims:
        return [_generic_reduction(op, build, body, yield_op, values, out_arg, outputs[0], reduction_dims)]
    if out_arg.uses:
        raise Unsupported("an element-wise linalg.generic must not read its output")
    for inner in body:
        if inner.name == "arith.constant":
            constant = _scalar_constant(inner.results[0])
            if constant is None:
                raise Unsupported("linalg.generic body constants must be scalars")
            values[inner.results[0]] = build(_splat(constant, outputs[0]))
        elif inner.name in _UNARY:
            values[inner.results[0]] = build(_UNARY[inner.name](values[inner.operands[0]]))
        elif inner.name in _BINARY:
            values[inner.results[0]] = build(_BINARY[inner.name](values[inner.operands[0]], values[inner.operands[1]]))
        else:
            raise Unsupported(f"'{inner.name}' in a linalg.generic body has no nn equivalent")
    result = values.get(yield_op.operands[0])
    if result is None:
        raise Unsupported("linalg.generic yields a value from outside its body")
    if _shape(result) != _shape(outputs[0]):
        result = build(nn.BroadcastToOp(result, list(_shape(outputs[0]))))
    return [result]


def _generic_reduction(op: Operation, build: _Builder, body: list[Operation], yield_op: Operation,
                       values: dict[SSAValue, SSAValue], out_arg: SSAValue, init: SSAValue,
                       dims: list[int]) -> SSAValue:
    if len(body) != 1 or body[0].name not in _REDUCTIONS or yield_op.operands[0] is not body[0].results[0]:
        raise Unsupported(f"a reducing {op.name} converts when its body is one add, mul, max or min")
    combine = body[0]
    ins = [v for v in combine.operands if v is not out_arg]
    if len(ins) != 1 or out_arg not in combine.operands or ins[0] not in values:
        raise Unsupported(f"a reducing {op.name} must combine one input with its output")
    reduced = build(_REDUCTIONS[combine.name](values[ins[0]], dims, keepdims=False))
    if _starts_at_zero(init) and _REDUCTIONS[combine.name] is nn.ReduceSumOp:
        return reduced
    binary = {nn.ReduceSumOp: nn.AddOp, nn.ReduceProdOp: nn.MultiplyOp, nn.ReduceMaxOp: nn.MaximumOp,
              nn.ReduceMinOp: nn.MinimumOp}[_REDUCTIONS[combine.name]]
    return build(binary(reduced, init))


def _copy(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    return [op.operands[0]]  # values, not buffers: a copy is the value itself


def _broadcast(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    source, init = op.operands[0], op.operands[1]
    added = set(_ints(op.properties["dimensions"]))
    shape = _shape(init)
    if any(d < 0 for d in shape):
        raise Unsupported("linalg.broadcast converts with a static result shape only")
    source_dims = iter(_shape(source))
    expanded = [1 if k in added else next(source_dims) for k in range(len(shape))]
    return [build(nn.BroadcastToOp(build(nn.ReshapeOp(source, expanded)), list(shape)))]


def _reduce(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    if len(op.operands) != 2:
        raise Unsupported("linalg.reduce converts with one input and one init only")
    source, init = op.operands
    block = op.regions[0].block
    yield_op = block.last_op
    body = [o for o in block.ops if o is not yield_op]
    dims = _ints(op.properties["dimensions"])
    return [_generic_reduction(op, build, body, yield_op, {block.args[0]: source}, block.args[1], init, dims)]


# -- tensor ------------------------------------------------------------------------------


def _static_result(op: Operation) -> list[int]:
    shape = list(_shape(op.results[0]))
    if any(d < 0 for d in shape):
        raise Unsupported(f"{op.name} converts with a static result shape only")
    return shape


def _reshape(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    return [build(nn.ReshapeOp(op.operands[0], _static_result(op)))]


def _extract_slice(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    if len(op.operands) != 1:
        raise Unsupported("tensor.extract_slice converts with static offsets, sizes and strides only")
    offsets, sizes = _ints(op.properties["static_offsets"]), _ints(op.properties["static_sizes"])
    strides = _ints(op.properties["static_strides"])
    end = [o + (s - 1) * st + 1 for o, s, st in zip(offsets, sizes, strides)]
    sliced = build(nn.StridedSliceOp(op.operands[0], offsets, end, strides))
    if list(_shape(sliced)) != list(_shape(op.results[0])):  # a rank-reducing slice
        sliced = build(nn.ReshapeOp(sliced, _static_result(op)))
    return [sliced]


def _insert_slice(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    """``dest`` with ``source`` written at the offsets: the source padded to the
    destination's shape, chosen by a constant mask (static shapes, unit strides)."""
    if len(op.operands) != 2:
        raise Unsupported("tensor.insert_slice converts with static offsets, sizes and strides only")
    source, dest = op.operands
    offsets, sizes = _ints(op.properties["static_offsets"]), _ints(op.properties["static_sizes"])
    strides = _ints(op.properties["static_strides"])
    shape = _shape(dest)
    if any(st != 1 for st in strides) or any(d < 0 for d in shape):
        raise Unsupported("tensor.insert_slice converts with unit strides and a static destination only")
    if list(_shape(source)) != sizes:  # a rank-reducing insert: restore the unit dims first
        source = build(nn.ReshapeOp(source, sizes))
    after = [d - o - n for d, o, n in zip(shape, offsets, sizes)]
    padded = build(nn.PadOp(source, offsets, after, pad_value=0.0))
    mask = np.zeros(shape, dtype=np.bool_)
    mask[tuple(slice(o, o + n) for o, n in zip(offsets, sizes))] = True
    return [build(nn.WhereOp(build(nn.ConstantOp(mask)), padded, dest))]


def _pad(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    if len(op.operands) != 1:
        raise Unsupported("tensor.pad converts with static padding only")
    block = op.regions[0].block
    value = _scalar_constant(block.last_op.operands[0]) if block.last_op is not None else None
    if value is None:
        raise Unsupported("tensor.pad converts when it pads with a constant")
    low, high = _ints(op.properties["static_low"]), _ints(op.properties["static_high"])
    return [build(nn.PadOp(op.operands[0], low, high, pad_value=float(value)))]


def _concat(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    axis_attr = _prop(op, "dim", "axis")
    return [build(nn.ConcatenateOp(list(op.operands), int(axis_attr.value.data)))]  # type: ignore[union-attr]


# -- tosa --------------------------------------------------------------------------------


def _tosa_matmul(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    return [build(nn.BatchMatmulOp(op.operands[0], op.operands[1], transpose_a=False, transpose_b=False))]


def _tosa_reduce(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    axis = int(op.properties["axis"].value.data)  # type: ignore[attr-defined]
    return [build(_TOSA_REDUCTIONS[op.name](op.operands[0], [axis], keepdims=True))]


def _tosa_pool(op: Operation, build: _Builder) -> Sequence[SSAValue]:
    kernel, stride = _ints(op.properties["kernel"]), _ints(op.properties["stride"])
    top, bottom, left, right = _ints(op.properties["pad"])
    cls = nn.MaxPool2DOp if op.name == "tosa.max_pool2d" else nn.AvgPool2DOp
    options = {"strides": stride, "padding": [top, left, bottom, right], "layout": "NHWC"}
    if cls is nn.AvgPool2DOp:
        options["count_include_pad"] = False  # TOSA averages over the elements inside only
    return [build(cls(op.operands[0], kernel, **options))]


def _conversions() -> dict[str, Callable[[Operation, _Builder], Sequence[SSAValue]]]:
    table: dict[str, Callable[[Operation, _Builder], Sequence[SSAValue]]] = {}
    table.update({name: _elementwise for name in (*_UNARY, *_BINARY)})
    table.update({name: _tosa_reduce for name in _TOSA_REDUCTIONS})
    table.update({
        "arith.constant": _tensor_constant, "tosa.const": _tensor_constant, "tosa.clamp": _clamp,
        "linalg.matmul": _matmul, "linalg.fill": _fill, "linalg.transpose": _transpose,
        "linalg.conv_2d_nchw_fchw": _conv, "linalg.conv_2d_nhwc_fhwc": _conv,
        "linalg.pooling_nchw_max": _max_pool, "linalg.generic": _generic,
        "linalg.copy": _copy, "linalg.broadcast": _broadcast, "linalg.reduce": _reduce,
        "tensor.reshape": _reshape, "tensor.expand_shape": _reshape, "tensor.collapse_shape": _reshape,
        "tensor.extract_slice": _extract_slice, "tensor.insert_slice": _insert_slice, "tensor.pad": _pad,
        "tensor.concat": _concat,
        "tosa.concat": _concat, "tosa.matmul": _tosa_matmul,
        "tosa.max_pool2d": _tosa_pool, "tosa.avg_pool2d": _tosa_pool,
    })
    return table


_RUNNABLE_DIALECTS = ("nn", "byoc", "func", "builtin")


def _is_foreign(op: Operation) -> bool:
    """Whether the launch plan could not run ``op``: it runs nn and byoc ops, calls,
    ``tensor.dim`` and scalar ``arith`` (shape arithmetic), nothing else."""
    dialect = op.name.split(".", 1)[0]
    if dialect in _RUNNABLE_DIALECTS or op.name == "tensor.dim":
        return False
    if dialect == "arith":
        return any(_is_tensor(v) for v in (*op.operands, *op.results))
    return True


def _inside_foreign(op: Operation) -> bool:
    parent = op.parent_op()
    while parent is not None:
        if _is_foreign(parent):
            return True
        parent = parent.parent_op()
    return False


def needs_legalization(module: ModuleOp) -> bool:
    """Whether ``module`` holds ops the launch plan could not run (this pass converts
    them or reports them)."""
    return any(_is_foreign(op) for op in module.walk())


@dataclass(frozen=True)
class LegalizeToNN(ModulePass):
    """Convert linalg, tensor, arith/math on tensors and tosa ops to nn ops; anything
    left of those dialects is a located error."""

    name = "legalize-to-nn"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        reasons: dict[Operation, str] = {}
        PatternRewriteWalker(
            GreedyRewritePatternApplier([_Conversion(_conversions(), reasons)], dce_enabled=False),
            apply_recursively=True,
        ).rewrite_module(op)
        # Destinations (tensor.empty, zero fills) nothing reads any more.
        for dead in reversed(list(op.walk())):
            if dead.name in ("tensor.empty", "linalg.fill", "arith.constant", "tosa.const", "nn.constant") and not any(
                r.uses for r in dead.results
            ) and (_is_foreign(dead) or dead.name in ("nn.constant", "arith.constant")):
                dead.detach()
                dead.erase()
        left = [o for o in op.walk() if _is_foreign(o) and not _inside_foreign(o)]
        if left:
            # The op the user wrote the computation with, not the destination it fills.
            first = next((o for o in left if o in reasons), None) or next(
                (o for o in left if o.name not in ("tensor.empty", "linalg.fill")), left[0])
            reason = reasons.get(first, "it has no conversion to nn")
            raise op_error(first, f"cannot be lowered by Partita: {reason}")
