"""The ONNX importer's core: values, the node loop, constant folding and the converter table.

The importer walks the graph in order and dispatches each node to a converter registered in
``CONVERTERS`` (one function per op type, in the family modules beside this one). Values are
either IR values (``SSAValue``) or compile-time constants (NumPy arrays): initializers,
``Constant`` nodes and everything computed from constants only stay NumPy until an nn op
needs them, then become one ``nn.constant``. A node whose inputs are all constants is folded
by converting it as usual and evaluating the ops it produced with the project's own NumPy
references (``partita.runtime.reference``), so folding and execution share one semantics.
Shape-computing subgraphs (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` as PyTorch
exports them) fold this way too; a dynamic dimension inside such a shape is a ``SymDim``
(object arrays), which a ``Reshape`` turns into a ``?`` result dimension. Arithmetic on
dynamic dims keeps its structure (``SymDim(("mul", batch, sequence))``), so a later
``Reshape`` can cancel it and a shape used as data (``Range`` bounds, the index arithmetic
of attention masks) is rebuilt at run time from ``nn.shape_of`` of the tensors it was read
from (``Importer.materialize``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, NameLoc, StringAttr, TensorType, UnknownLoc
from xdsl.ir import Block, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from partita.dialects import nn
from partita.frontends.onnx.gelu import match_gelu
from partita.ir import PartitaError
from partita.ir.abi import name_attrs
from partita.ir.constants import cast
from partita.runtime.reference.nn import NN_FUNCTIONS

MIN_OPSET = 9
MAX_OPSET = onnx.defs.onnx_opset_version()
OLDEST_OPSET = 1
"""Models of opsets ``OLDEST_OPSET`` to ``MIN_OPSET - 1`` import when each of their ops is
the version it is at ``MIN_OPSET`` (``And``-7, ``Not``-1): the converters then see the
semantics they were written for (``legacy_version_check``)."""

ONNX_DTYPES = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16),
    onnx.TensorProto.BFLOAT16: nn.numpy_dtype(nn.BFloat16Type()),
    onnx.TensorProto.DOUBLE: np.dtype(np.float64),
    onnx.TensorProto.BOOL: np.dtype(np.bool_),
    onnx.TensorProto.INT8: np.dtype(np.int8),
    onnx.TensorProto.INT16: np.dtype(np.int16),
    onnx.TensorProto.INT32: np.dtype(np.int32),
    onnx.TensorProto.INT64: np.dtype(np.int64),
    onnx.TensorProto.UINT8: np.dtype(np.uint8),
    onnx.TensorProto.UINT16: np.dtype(np.uint16),
    onnx.TensorProto.UINT32: np.dtype(np.uint32),
    onnx.TensorProto.UINT64: np.dtype(np.uint64),
    onnx.TensorProto.FLOAT8E4M3FN: nn.NUMPY_DTYPES["f8E4M3FN"],
    onnx.TensorProto.FLOAT8E4M3FNUZ: nn.NUMPY_DTYPES["f8E4M3FNUZ"],
    onnx.TensorProto.FLOAT8E5M2: nn.NUMPY_DTYPES["f8E5M2"],
    onnx.TensorProto.FLOAT8E5M2FNUZ: nn.NUMPY_DTYPES["f8E5M2FNUZ"],
}


@dataclass(frozen=True)
class SymDim:
    """A dimension known only at run time inside a folded shape computation; ``label``
    is the ONNX symbolic name (``dim_param``) when shape inference knows one."""

    label: object

    def __repr__(self) -> str:
        return f"?{self.label}"


Value = SSAValue | np.ndarray | None

_SYM_ARITH = {"add", "sub", "mul", "div"}


def sym_arith(kind: str, x: SymDim | int, y: SymDim | int) -> SymDim | int:
    """``x kind y`` on dims where one side may be dynamic, as a structural ``SymDim``
    (identities simplified, so ``Shape(x)[0] * 1`` is ``Shape(x)[0]`` again)."""
    if not isinstance(x, SymDim) and not isinstance(y, SymDim):
        x, y = int(x), int(y)
        return {"add": x + y, "sub": x - y, "mul": x * y, "div": x // y if y else 0}[kind]
    if kind == "mul" and not isinstance(x, SymDim) and int(x) == 1:
        return y
    if (kind in ("mul", "div") and not isinstance(y, SymDim) and int(y) == 1) or \
            (kind in ("add", "sub") and not isinstance(y, SymDim) and int(y) == 0):
        return x
    if kind == "add" and not isinstance(x, SymDim) and int(x) == 0:
        return y
    norm = lambda d: d if isinstance(d, SymDim) else int(d)  # noqa: E731
    return SymDim((kind, norm(x), norm(y)))


def sym_linear(d: SymDim | int) -> tuple[frozenset, int]:
    """``d`` as a sum of integer multiples of dims plus a constant, so ``(past + 1) - past``
    is the constant 1 and ``seq + past`` the same dim as ``past + seq``; a product or
    quotient of two dynamic dims is one term of its own."""
    terms: dict[object, int] = {}

    def walk(x: SymDim | int, scale: int) -> int:
        if not isinstance(x, SymDim):
            return scale * int(x)
        label = x.label
        if isinstance(label, tuple) and label[:1] in (("add",), ("sub",)):
            return walk(label[1], scale) + walk(label[2], scale if label[0] == "add" else -scale)
        if isinstance(label, tuple) and label[:1] == ("mul",) and not isinstance(label[1], SymDim):
            return walk(label[2], scale * int(label[1]))
        if isinstance(label, tuple) and label[:1] == ("mul",) and not isinstance(label[2], SymDim):
            return walk(label[1], scale * int(label[2]))
        terms[x] = terms.get(x, 0) + scale
        return 0

    constant = walk(d, 1)
    return frozenset((k, v) for k, v in terms.items() if v), constant


def sym_factors(dims: list[object]) -> list[object]:
    """The factors of a product of dims: ``mul`` expressions split, ones dropped."""
    out: list[object] = []
    for d in dims:
        if isinstance(d, SymDim) and isinstance(d.label, tuple) and d.label[:1] == ("mul",):
            out += sym_factors([d.label[1], d.label[2]])
        elif isinstance(d, SymDim) or int(d) != 1:
            out.append(d)
    return out


class Unsupported(Exception):
    """Raised by converters; the importer adds the node's name."""


def fail(message: str) -> None:
    raise Unsupported(message)


def is_const(v: Value) -> bool:
    return isinstance(v, np.ndarray)


def is_symbolic(v: Value) -> bool:
    return isinstance(v, np.ndarray) and v.dtype == object


def shape_of(v: SSAValue) -> tuple[int, ...]:
    return tuple(v.type.get_shape())


def const_ints(v: Value, what: str) -> list[int]:
    if not is_const(v) or is_symbolic(v):
        fail(f"{what} must be a constant")
    return [int(i) for i in np.asarray(v).reshape(-1)]


def const_scalar(v: Value, what: str) -> float:
    if not is_const(v) or is_symbolic(v) or np.asarray(v).size != 1:
        fail(f"{what} must be a constant scalar")
    return float(np.asarray(v).reshape(-1)[0])


class Importer:
    def __init__(self, model: onnx.ModelProto, source: str = "<onnx>", external_dir: Path | None = None):
        self.model = model
        self.source = source
        self.external_dir = external_dir  # where external data lives: the model's folder
        self.location: NameLoc | None = None
        self.graph = model.graph
        self.opset = _default_opset(model)
        self.values: dict[str, Value] = {}
        self.block = Block()
        self.node: onnx.NodeProto | None = None
        self.dim_labels = _dim_labels(model)
        self.gelu: dict[int, str] = {}  # final node index -> input name of x
        self.absorbed: set[int] = set()
        self.names: dict[int, str] = {}  # id(SSAValue) -> ONNX value name
        self.sym_sources: dict[SymDim, tuple[SSAValue, int]] = {}  # a tensor dim it sizes
        self.sym_labels: dict[SSAValue, list[object]] = {}  # dims a converter or shape rule knows
        self._materialized: dict[object, SSAValue] = {}  # SymDim / source -> run-time value
        self._folder = None
        self.folded_bytes = 0  # what import-time folding has built so far (FOLD_TOTAL_BYTES)

    # -- values ------------------------------------------------------------------------
    def emit(self, op: nn.NNOp) -> SSAValue:
        # Like MLIR's importers: each op is located at the ONNX node it came from.
        if self.location is not None:
            op.location = self.location
        self.block.add_op(op)
        result = op.results[0]
        if nn.DYN in shape_of(result):
            derived = self._derived_labels(op)
            if derived is not None:
                self.sym_labels[result] = derived
        return result

    def _derived_labels(self, op: nn.NNOp) -> list[object] | None:
        """The dynamic dims of ``op``'s result in terms of its operands' (the shape rules of
        the ops that carry dims through), so a shape read from it later still names the
        dims it came from; ``None`` at a position the rule cannot tell."""
        if isinstance(op, nn.TransposeOp):
            labels = self.labels(op.input)
            return [labels[p] for p in op.perm]
        if isinstance(op, nn.DenseOp):
            return [*self.labels(op.operands[0])[:-1], shape_of(op.results[0])[-1]]
        if isinstance(op, nn.MatmulOp | nn.BatchMatmulOp):
            lhs, rhs = (self.labels(v) for v in op.operands[:2])
            if len(lhs) < 2 or len(rhs) < 2:
                return None
            batch = _broadcast_labels([lhs[:-2], rhs[:-2]], shape_of(op.results[0])[:-2])
            return [*batch, lhs[-2], rhs[-1]]
        if isinstance(op, nn.TakeOp):
            data, indices = self.labels(op.data), self.labels(op.indices)
            axis = op.axis % len(data)
            return [*data[:axis], *indices, *data[axis + 1:]]
        if isinstance(op, nn.StridedSliceOp):  # axes sliced whole keep their dims
            labels = self.labels(op.input)
            whole = [(b, e, st) == (0, 2**63 - 1, 1) and a not in op.targets
                     for a, (b, e, st) in enumerate(zip(op.begin, op.end, op.strides))]
            return [d if keep else None for d, keep in zip(labels, whole)]
        if isinstance(op, nn.ReduceOp):  # the axes not reduced keep their dims
            labels = self.labels(op.input)
            axes = {a % len(labels) for a in op.axes} if op.axes else set(range(len(labels)))
            return [1 if k in axes else d for k, d in enumerate(labels) if op.keepdims or k not in axes]
        if isinstance(op, nn.ReshapeOp) and not op.refs:
            # One dynamic dim in and out with equal static products: the same dim (a head
            # split [1, seq, 8] -> [1, seq, 2, 4]).
            labels, out = self.labels(op.input), list(shape_of(op.result))
            dyn_in = [d for d in labels if isinstance(d, SymDim)]
            static_in = [d for d in labels if not isinstance(d, SymDim)]
            if len(dyn_in) == 1 and out.count(nn.DYN) == 1 and \
                    math.prod(static_in) == math.prod(d for d in out if d != nn.DYN):
                return [dyn_in[0] if d == nn.DYN else d for d in out]
            return None
        if isinstance(op, nn.ConcatenateOp):  # the other axes are the inputs' (all equal)
            axis = op.axis % len(shape_of(op.results[0]))
            inputs = [self.labels(v) for v in op.inputs]
            out = _broadcast_labels(inputs, shape_of(op.results[0]))
            # The concatenated axis is the sum of the inputs' (a KV cache's past + new).
            total: SymDim | int | None = 0
            for labels in inputs:
                total = sym_arith("add", total, labels[axis]) if total is not None and labels[axis] is not None else None
            return [total if k == axis else d for k, d in enumerate(out)]
        if isinstance(op, nn.ElementwiseUnaryOp | nn.ElementwiseBinaryOp | nn.WhereOp | nn.AxisNormOp
                      | nn.LayerNormOp | nn.RMSNormOp):
            operands = [v for v in op.operands if isinstance(v.type, TensorType)]
            return _broadcast_labels([self.labels(v) for v in operands], shape_of(op.results[0]))
        return None

    def tensor(self, v: Value, like: SSAValue | None = None) -> SSAValue:
        """An IR value for ``v``; constants become ``nn.constant`` (in ``like``'s dtype)."""
        if isinstance(v, SSAValue):
            return v
        if v is None:
            fail("a required input is missing")
        if is_symbolic(v):
            return self.materialize(v, like)
        array = np.asarray(v)
        if like is not None:
            array = cast(array, nn.numpy_dtype(like.type.element_type))
        elif array.dtype not in ONNX_DTYPES.values():
            fail(f"constant of element type {array.dtype} used as tensor data")
        return self.emit(nn.ConstantOp(array))

    def materialize(self, v: np.ndarray, like: SSAValue | None = None) -> SSAValue:
        """A shape computation over dynamic dims used as data: each dim is read at run time
        with ``nn.shape_of`` of a tensor it sizes (arithmetic on dims becomes element-wise
        ops), the entries are joined into ``v``'s shape, as ``i64`` (or ``like``'s type)."""
        array = np.asarray(v, dtype=object)
        scalars = [self._dim_value(d) for d in array.reshape(-1)]
        if len(scalars) == 1:
            out = self.emit(nn.ReshapeOp(scalars[0], list(array.shape)))
        else:
            out = self.emit(nn.ConcatenateOp([self.emit(nn.ReshapeOp(d, [1])) for d in scalars], 0))
            if array.ndim != 1:
                out = self.emit(nn.ReshapeOp(out, list(array.shape)))
        if like is not None and like.type.element_type != out.type.element_type:
            out = self.emit(nn.CastOp(out, like.type.element_type))
        return out

    def _dim_value(self, d: object) -> SSAValue:
        """A rank-0 ``i64`` tensor holding dim ``d`` (an int or a ``SymDim``) at run time."""
        if not isinstance(d, SymDim):
            return self.emit(nn.ConstantOp(np.asarray(int(d), dtype=np.int64)))
        known = self._materialized.get(d)
        if known is not None and known.owner.parent is self.block:
            return known
        if d in self.sym_sources:
            source, axis = self.sym_sources[d]
            shape = self._materialized.get(("shape_of", source))
            if shape is None or shape.owner.parent is not self.block:
                shape = self.emit(nn.ShapeOfOp(source))
                self._materialized[("shape_of", source)] = shape
            index = self.emit(nn.ConstantOp(np.asarray(axis, dtype=np.int64)))
            value = self.emit(nn.TakeOp(shape, index, 0))
        elif isinstance(d.label, tuple) and d.label[:1] and d.label[0] in _SYM_ARITH:
            kind, x, y = d.label
            op = {"add": nn.AddOp, "sub": nn.SubtractOp, "mul": nn.MultiplyOp, "div": nn.DivideOp}[kind]
            value = self.emit(op(self._dim_value(x), self._dim_value(y)))
        else:
            fail("a shape computation uses a dynamic dimension that is not a dimension of a "
                 "tensor (nor arithmetic on such dimensions) as data")
        self._materialized[d] = value
        return value

    def operands(self, *vals: Value) -> list[SSAValue]:
        like = next((v for v in vals if isinstance(v, SSAValue)), None)
        return [self.tensor(v, like) for v in vals]

    # -- driver ------------------------------------------------------------------------
    def run(self, name: str) -> ModuleOp:
        _check_single_assignment(self.graph)
        for init in self.graph.initializer:
            self.values[init.name] = tensor_array(init, "initializer", self.external_dir)
        if self.graph.sparse_initializer:
            raise PartitaError("sparse initializers are not supported")
        arg_types, arg_names = [], []
        for inp in self.graph.input:
            if inp.name in self.values:  # pre-IR-v4 models list initializers as inputs
                continue
            typ = _value_type(inp, "graph input")
            arg = self.block.insert_arg(typ, len(self.block.args))
            _set_name(arg, inp.name)
            self.values[inp.name] = arg
            self.names[id(arg)] = inp.name
            arg_types.append(typ)
            arg_names.append(inp.name)
        gelu, absorbed = match_gelu(self.graph, {k: v for k, v in self.values.items() if is_const(v)},
                                    lambda t, what: tensor_array(t, what, self.external_dir))
        self.gelu.update(gelu)
        self.absorbed.update(absorbed)
        release = _initializer_last_uses(self.graph)
        for index, node in enumerate(self.graph.node):
            self.node = node
            self.location = NameLoc(StringAttr(f"{self.source}: {_describe(index, node)}"), UnknownLoc())
            try:
                self.convert(index, node)
            except (Unsupported, VerifyException, ValueError) as err:
                raise PartitaError(f"{_describe(index, node)}: {err}") from None
            for done in release.get(index, ()):
                # No later node reads it: a weight transformed on import (MatMul's
                # transpose) is not held twice until the import ends.
                self.values.pop(done, None)
        results = []
        for out in self.graph.output:
            if out.name not in self.values:
                raise PartitaError(f"graph output '{out.name}' is never computed")
            try:
                results.append(self.tensor(self.values[out.name]))
            except Unsupported as err:
                raise PartitaError(f"graph output '{out.name}': {err}") from None
        self.block.add_op(func.ReturnOp(*results))
        fn = func.FuncOp(name, (arg_types, [r.type for r in results]), Region(self.block),
                         arg_attrs=name_attrs(arg_names),
                         res_attrs=name_attrs([o.name for o in self.graph.output]))
        return ModuleOp([fn])

    def convert(self, index: int, node: onnx.NodeProto) -> None:
        if node.domain not in ("", "ai.onnx"):
            fail(f"unsupported op domain '{node.domain}'")
        if index in self.absorbed:
            return
        if index in self.gelu:
            x = self.tensor(self.values[self.gelu[index]])
            self.values[node.output[0]] = self.emit(nn.GeluOp(x))
            return
        ins = [self.values.get(n) if n else None for n in node.input]
        for n in node.input:
            if n and n not in self.values:
                fail(f"input '{n}' is not defined before use")
        if self.opset < MIN_OPSET:
            legacy_version_check(node, self.opset)
        _check_attributes(node, self.opset)
        _check_inputs(node, self.opset)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        present = [v for v in ins if v is not None]
        foldable = bool(present) and all(is_const(v) for v in present) and \
            node.op_type not in _NO_FOLD
        converter = CONVERTERS.get(node.op_type)
        symbolic = any(is_symbolic(v) for v in present)
        if foldable and symbolic and node.op_type in SYMBOLIC_CONVERTERS:
            outs = converter(self, ins, attrs)  # shapes over dynamic dims: real ops
        elif foldable and (converter is None or symbolic):
            outs = _fold(self, node, ins, attrs)
        elif converter is None:
            fail(f"unsupported op type '{node.op_type}'")
        elif foldable:
            try:
                outs = self.fold_converted(converter, ins, attrs)
            except Unsupported:  # TODO(issue 10): drop once every converter folds
                outs = _fold(self, node, ins, attrs)
        else:
            outs = converter(self, ins, attrs)
        if not isinstance(outs, list | tuple):
            outs = [outs]
        for i, name in enumerate(node.output):
            if not name:
                continue
            if i >= len(outs):
                if self._used(name):
                    fail(f"output {i} ('{name}') is not supported")
                continue
            self.values[name] = outs[i]
            if isinstance(outs[i], SSAValue):
                self.names.setdefault(id(outs[i]), name)

    def fold_converted(self, converter: Converter, ins: list[Value], attrs: dict) -> list:
        """Convert a node whose inputs are all constants, then evaluate the ops it emitted
        with the NumPy references and drop them: the node's outputs become constants."""
        before = self.block.last_op
        emitted = []
        keep = False
        try:
            outs = converter(self, ins, attrs)
            outs = list(outs) if isinstance(outs, list | tuple) else [outs]
            op = self.block.first_op if before is None else before.next_op
            while op is not None:
                emitted.append(op)
                op = op.next_op
            # Never materialize what the import cannot afford (an 86-byte Expand of 10^8
            # elements): over budget, the ops stay in the graph and run at run time.
            sizes = [_static_bytes(r.type) for op in emitted for r in op.results]
            if any(size is None or size > FOLD_LIMIT_BYTES for size in sizes) or \
                    self.folded_bytes + sum(s or 0 for s in sizes) > FOLD_TOTAL_BYTES:
                keep = True
                return outs
            self.folded_bytes += sum(s or 0 for s in sizes)
            values: dict[SSAValue, np.ndarray] = {}
            for op in emitted:
                args = tuple(values[v] for v in op.operands)
                values.update(zip(op.results, self.folder.run_op(op, args)))
            return [values[v] if isinstance(v, SSAValue) else v for v in outs]
        finally:
            op = None if keep else self.block.last_op
            while op is not None and op is not before:
                prev = op.prev_op
                op.detach()
                op.erase(safe_erase=False)
                op = prev

    @property
    def folder(self):
        """An interpreter with the nn references, for constant folding."""
        if self._folder is None:
            from xdsl.interpreter import Interpreter


            self._folder = Interpreter(ModuleOp([]))
            for cls in NN_FUNCTIONS:
                self._folder.register_implementations(cls())
        return self._folder

    def _used(self, name: str) -> bool:
        return any(name in n.input for n in self.graph.node) or any(
            o.name == name for o in self.graph.output)

    def _used_output(self, index: int) -> bool:
        """Whether output ``index`` of the current node is consumed anywhere."""
        outs = self.node.output
        return index < len(outs) and bool(outs[index]) and self._used(outs[index])

    def labels(self, v: Value) -> list[object]:
        """Per-dimension labels of an IR value: the static size, or a symbol."""
        known = self.dim_labels.get(self.names.get(id(v), ""), [])
        recorded = self.sym_labels.get(v, [])
        out: list[object] = []
        for i, d in enumerate(shape_of(v)):
            if d != nn.DYN:
                out.append(d)
                continue
            if i < len(recorded) and isinstance(recorded[i], SymDim):
                sym = recorded[i]  # what the converter computed beats ONNX's unk__ names
            elif i < len(known) and isinstance(known[i], str):
                sym = SymDim(known[i])
            else:
                sym = SymDim((id(v), i))
            self.sym_sources.setdefault(sym, (v, i))
            out.append(sym)
        return out

    def dim_source(self, sym: SymDim, what: str) -> tuple[SSAValue, int]:
        """A tensor and axis whose run-time size is ``sym`` (ops take it as a shape
        reference, ``nn.indexing``)."""
        if sym in self.sym_sources:
            return self.sym_sources[sym]
        # A dim computed from others (``past + seq``) sizes a tensor when some tensor's dim
        # is the same sum, however it was spelled (a concatenated KV cache).
        key = sym_linear(sym)
        candidates = list(self.sym_sources.items()) + [
            (d, (v, i)) for v, labels in self.sym_labels.items() for i, d in enumerate(labels) if isinstance(d, SymDim)]
        for known, (value, axis) in candidates:
            if shape_of(value)[axis] == nn.DYN and (value.owner is self.block or getattr(value.owner, "parent", None) is self.block) and sym_linear(known) == key:
                self.sym_sources[sym] = (value, axis)
                return value, axis
        fail(f"{what} depends on a dynamic dimension computed from other dimensions that sizes "
             "no tensor of the graph")


# ---------------------------------------------------------------------------------------
# Model-level helpers
# ---------------------------------------------------------------------------------------


def _broadcast_labels(operands: list[list[object]], result: tuple[int, ...]) -> list[object]:
    """NumPy broadcasting on dim labels, right-aligned: a dynamic result dim is the one
    symbol its operands have there besides 1s (``None`` when they name several)."""
    out: list[object] = []
    for k, d in enumerate(result):
        if d != nn.DYN:
            out.append(d)
            continue
        at = {ls[len(ls) - len(result) + k] for ls in operands if len(ls) - len(result) + k >= 0}
        named = {x for x in at if not (not isinstance(x, SymDim) and x == 1)}
        out.append(next(iter(named)) if len(named) == 1 and isinstance(next(iter(named)), SymDim) else None)
    return out


def _default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            version = entry.version
            if not OLDEST_OPSET <= version <= MAX_OPSET:
                raise PartitaError(f"unsupported ONNX opset {version} (supported: "
                                   f"{OLDEST_OPSET} to {MAX_OPSET})")
            return version
    raise PartitaError("the model imports no default-domain (ai.onnx) opset")


def legacy_version_check(node: onnx.NodeProto, opset: int) -> None:
    """An op of an opset older than ``MIN_OPSET`` is accepted only when its schema did not
    change between the model's opset and ``MIN_OPSET`` (the registry's ``since_version``)."""
    try:
        old = onnx.defs.get_schema(node.op_type, opset, node.domain or "").since_version
        new = onnx.defs.get_schema(node.op_type, MIN_OPSET, node.domain or "").since_version
    except onnx.defs.SchemaError:
        return  # unknown ops are reported by the converter look-up
    if old != new:
        fail(f"unsupported ONNX opset {opset} for {node.op_type}: its version {old} changed in "
             f"opset {new} (models older than opset {MIN_OPSET} import when their ops are the "
             f"versions of opset {MIN_OPSET})")


def _describe(index: int, node: onnx.NodeProto) -> str:
    label = node.name or (node.output[0] if node.output else "")
    return f"node {index} '{label}' ({node.op_type})"


def _set_name(value: SSAValue, name: str) -> None:
    hint = re.sub(r"[^A-Za-z0-9_$.]", "_", name)
    if hint and not hint[0].isalpha() and hint[0] != "_":
        hint = "v" + hint
    try:
        value.name_hint = hint or None
    except Exception:  # an invalid hint only costs readability
        pass


def _value_type(info: onnx.ValueInfoProto, what: str) -> TensorType:
    t = info.type
    if not t.HasField("tensor_type"):
        raise PartitaError(f"{what} '{info.name}' is not a tensor")
    elem = t.tensor_type.elem_type
    if elem not in ONNX_DTYPES:
        supported = ", ".join(onnx.TensorProto.DataType.Name(t) for t in ONNX_DTYPES)
        known = elem in onnx.TensorProto.DataType.values()
        raise PartitaError(f"{what} '{info.name}' has unsupported element type "
                           f"{onnx.TensorProto.DataType.Name(elem) if known else elem} (supported: {supported})")
    if not t.tensor_type.HasField("shape"):
        raise PartitaError(f"{what} '{info.name}' has no shape (rank must be known)")
    dims = [d.dim_value if d.HasField("dim_value") else nn.DYN
            for d in t.tensor_type.shape.dim]
    negative = [d.dim_value for d in t.tensor_type.shape.dim if d.HasField("dim_value") and d.dim_value < 0]
    if negative:
        raise PartitaError(f"{what} '{info.name}' has a negative dimension {negative[0]} (dims must be >= 0, "
                           "or symbolic for a dynamic size)")
    return TensorType(nn.element_type_of(ONNX_DTYPES[elem]), dims)


def _dim_labels(model: onnx.ModelProto) -> dict[str, list[object]]:
    """Symbolic dimension names per value, from ONNX shape inference (best effort)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        inferred = model
    labels: dict[str, list[object]] = {}
    g = inferred.graph
    for info in [*g.input, *g.value_info, *g.output]:
        tt = info.type.tensor_type
        if tt.HasField("shape"):
            labels[info.name] = [
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in tt.shape.dim
            ]
    return labels


# ---------------------------------------------------------------------------------------
# Constant folding
# ---------------------------------------------------------------------------------------

# Ops converted even when all their inputs are constant (they produce or pass data).
_NO_FOLD = {"Constant", "Identity", "Dropout"}


def _fold(cx: Importer, node: onnx.NodeProto, ins: list[Value], attrs: dict) -> list[Value]:
    """Evaluate a node whose inputs are all constants at import time."""
    if any(is_symbolic(v) for v in ins if v is not None):
        folder = _SYMBOLIC_FOLDERS.get(node.op_type)
        if folder is None:
            fail("cannot fold this shape computation over a dynamic dimension")
        out = np.empty((), dtype=object)
        result = folder(cx, ins, attrs)
        if isinstance(result, np.ndarray):
            return [settle(result)]
        out[()] = result
        return [settle(out)]
    from onnx.reference import ReferenceEvaluator

    names = [n if n else "" for n in node.input]
    inputs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
              for n in names if n]
    outputs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
               for n in node.output if n]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", cx.opset)])
    try:
        results = ReferenceEvaluator(model).run(
            None, {n: np.asarray(v) for n, v in zip(names, ins) if n})
    except Exception as err:
        fail(f"constant folding failed: {err}")
    it = iter(results)
    return [np.asarray(next(it)) if n else None for n in node.output]


def settle(v: np.ndarray) -> np.ndarray:
    """A folded shape computation: object dtype while it holds a ``SymDim``, plain NumPy
    (``int64``, ``bool``) once every entry is known (``Shape(x)[3]`` of a static dim)."""
    flat = np.asarray(v, dtype=object).reshape(-1)
    if any(isinstance(d, SymDim) for d in flat):
        return np.asarray(v, dtype=object)
    if v.dtype != object:
        return v
    kinds = {type(d) for d in flat}
    dtype = np.bool_ if kinds and all(issubclass(k, bool | np.bool_) for k in kinds) else np.int64
    return np.asarray(v.tolist() if v.ndim else v[()], dtype=dtype)


def _sym_gather(cx, ins, attrs):
    data, idx = ins
    return np.take(data, np.asarray(idx, dtype=np.int64), axis=attrs.get("axis", 0))


def _sym_concat(cx, ins, attrs):
    return np.concatenate([np.asarray(v, dtype=object) for v in ins], axis=attrs["axis"])


def _sym_unsqueeze(cx, ins, attrs):
    axes = attrs["axes"] if cx.opset < 13 else const_ints(ins[1], "axes")
    out = np.asarray(ins[0], dtype=object)
    rank = out.ndim + len(axes)
    for a in sorted(a % rank for a in axes):
        out = np.expand_dims(out, a)
    return out


def _sym_squeeze(cx, ins, attrs):
    axes = attrs.get("axes") if cx.opset < 13 else (
        const_ints(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else None)
    data = np.asarray(ins[0], dtype=object)
    if axes is None:
        return data.squeeze()
    return data.squeeze(axis=tuple(a % data.ndim for a in axes))


def _sym_slice(cx, ins, attrs):
    if cx.opset < 10:
        starts, ends, axes = attrs["starts"], attrs["ends"], attrs.get("axes")
        steps = None
    else:
        starts, ends = const_ints(ins[1], "starts"), const_ints(ins[2], "ends")
        axes = const_ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else None
        steps = const_ints(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else None
    data = np.asarray(ins[0], dtype=object)
    axes = axes or list(range(len(starts)))
    steps = steps or [1] * len(starts)
    index = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a] = slice(s, e, st)
    return data[tuple(index)]


def _sym_binary(kind: str):
    def fold(cx, ins, attrs):
        a, b = np.broadcast_arrays(np.asarray(ins[0], dtype=object),
                                   np.asarray(ins[1], dtype=object))
        out = np.empty(a.shape, dtype=object)
        for i in np.ndindex(a.shape):
            out[i] = sym_arith(kind, a[i], b[i])
        return out

    return fold


def _sym_reshape(cx, ins, attrs):
    data = np.asarray(ins[0], dtype=object)
    shape = const_ints(ins[1], "shape")
    shape = [data.shape[i] if s == 0 and not attrs.get("allowzero", 0) else s
             for i, s in enumerate(shape)]
    return data.reshape(shape)


def _sym_equal(cx, ins, attrs):
    """``Equal`` on shape vectors: a dim is never negative (``Where(Equal(s, -1), ...)``
    in PyTorch's Expand exports), and equals itself; other comparisons are unknown."""
    a, b = np.broadcast_arrays(np.asarray(ins[0], dtype=object), np.asarray(ins[1], dtype=object))
    out = np.empty(a.shape, dtype=np.bool_)
    for i in np.ndindex(a.shape):
        x, y = a[i], b[i]
        if isinstance(x, SymDim) and isinstance(y, SymDim) and x == y:
            out[i] = True
        elif isinstance(x, SymDim) or isinstance(y, SymDim):
            other = y if isinstance(x, SymDim) else x
            if isinstance(other, SymDim) or int(other) >= 0:
                fail("cannot compare a dynamic dimension at import")
            out[i] = False
        else:
            out[i] = int(x) == int(y)
    return out


def _sym_where(cx, ins, attrs):
    cond = np.asarray(ins[0])
    if any(isinstance(c, SymDim) for c in cond.reshape(-1)):
        fail("a Where condition depending on a dynamic dimension")
    return np.where(cond.astype(bool), np.asarray(ins[1], dtype=object),
                    np.asarray(ins[2], dtype=object))


def _sym_shape(cx, ins, attrs):
    dims = np.asarray(ins[0], dtype=object).shape
    return np.asarray(dims[slice(attrs.get("start", 0), attrs.get("end", len(dims)))], dtype=np.int64)


_SYMBOLIC_FOLDERS: dict[str, Callable[..., np.ndarray]] = {
    "Shape": _sym_shape,
    "Equal": _sym_equal,
    "Where": _sym_where,
    "Gather": _sym_gather,
    "Concat": _sym_concat,
    "Unsqueeze": _sym_unsqueeze,
    "Squeeze": _sym_squeeze,
    "Slice": _sym_slice,
    "Cast": lambda cx, ins, attrs: ins[0],
    "Identity": lambda cx, ins, attrs: ins[0],
    "Reshape": _sym_reshape,
    "Mul": _sym_binary("mul"),
    "Add": _sym_binary("add"),
    "Sub": _sym_binary("sub"),
    "Div": _sym_binary("div"),
}


# ---------------------------------------------------------------------------------------
# Converters: (importer, inputs, attributes) -> output value(s)

Converter = Callable[[Importer, list[Value], dict[str, Any]], Any]
CONVERTERS: dict[str, Converter] = {}
SYMBOLIC_CONVERTERS: set[str] = set()
"""Op types whose converters take shape inputs holding ``SymDim``s (they emit ops with
dynamic dims instead of folding)."""


def converter(*op_types: str, symbolic: bool = False):
    def register(fn: Converter) -> Converter:
        for t in op_types:
            CONVERTERS[t] = fn
            if symbolic:
                SYMBOLIC_CONVERTERS.add(t)
        return fn

    return register




def _node_inputs(node: onnx.NodeProto) -> Iterator[str]:
    """The names ``node`` reads, those of its subgraphs (If, Loop, Scan) included."""
    yield from node.input
    for attr in node.attribute:
        for graph in [attr.g] if attr.HasField("g") else attr.graphs:
            for inner in graph.node:
                yield from _node_inputs(inner)


def _initializer_last_uses(graph: onnx.GraphProto) -> dict[int, list[str]]:
    """For each node index, the initializers no later node (nor a graph output) reads."""
    last: dict[str, int] = {}
    initializers = {init.name for init in graph.initializer}
    for index, node in enumerate(graph.node):
        for name in _node_inputs(node):
            if name in initializers:
                last[name] = index
    outputs = {out.name for out in graph.output}
    release: dict[int, list[str]] = {}
    for name, index in last.items():
        if name not in outputs:
            release.setdefault(index, []).append(name)
    return release


def _external_array(tensor: onnx.TensorProto, what: str, folder: Path) -> np.ndarray | None:
    """The external data of ``tensor`` read once, straight into the bytes a dense
    attribute keeps (a read-only view over them: no copy on the way into the IR), from
    ``folder`` (the model's, never the working directory). None for element types whose
    file layout is not NumPy's (those take ``numpy_helper``'s path)."""
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    if dtype.kind not in "fiub" or tensor.data_type == onnx.TensorProto.BFLOAT16:
        return None
    info = {entry.key: entry.value for entry in tensor.external_data}
    location = Path(info.get("location", ""))
    if not info.get("location") or location.is_absolute() or ".." in location.parts:
        raise PartitaError(f"{what} '{tensor.name}' has external data at '{location}', which is not a file "
                           "beside the model")
    expected = math.prod(tensor.dims) * dtype.itemsize
    offset, length = int(info.get("offset", 0)), int(info.get("length", expected))
    if length != expected:
        raise PartitaError(f"{what} '{tensor.name}' has {length} bytes of external data for its declared "
                           f"{list(tensor.dims)} {dtype} tensor ({expected} bytes)")
    try:
        with open(folder / location, "rb") as handle:
            handle.seek(offset)
            data = handle.read(length)
    except OSError as err:
        raise PartitaError(f"{what} '{tensor.name}': cannot read its external data "
                           f"'{folder / location}': {err.strerror or err}") from None
    if len(data) != length:
        raise PartitaError(f"{what} '{tensor.name}': its external data '{folder / location}' ends before "
                           f"byte {offset + length}")
    return np.frombuffer(data, dtype.newbyteorder("<")).reshape(tuple(tensor.dims))


def _check_attributes(node: onnx.NodeProto, opset: int) -> None:
    """The node's attributes against its ONNX schema: every required one present, every
    one given of the schema's type (a LeakyRelu ``alpha`` given as a list is an invalid
    model, not a crash inside a converter)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except onnx.defs.SchemaError:
        return  # unknown ops are reported by the converter look-up
    given = {a.name: a for a in node.attribute}
    for name, spec in schema.attributes.items():
        if spec.required and name not in given:
            fail(f"missing required attribute '{name}'")
        attr = given.get(name)
        if attr is not None and attr.type != int(spec.type.value):
            want = onnx.AttributeProto.AttributeType.Name(int(spec.type.value))
            have = onnx.AttributeProto.AttributeType.Name(attr.type) \
                if attr.type in onnx.AttributeProto.AttributeType.values() else str(attr.type)
            fail(f"attribute '{name}' must be {want}, not {have}")


def _check_inputs(node: onnx.NodeProto, opset: int) -> None:
    """The node's inputs against its ONNX schema: every required one given (not dropped
    as ``""``), no more than the schema takes; converters may then index them freely."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except onnx.defs.SchemaError:
        return
    single = onnx.defs.OpSchema.FormalParameterOption.Single
    for i, formal in enumerate(schema.inputs):
        if formal.option == single and (i >= len(node.input) or not node.input[i]):
            fail(f"missing required input #{i} ('{formal.name}')")
    if len(node.input) > schema.max_input:
        fail(f"takes at most {schema.max_input} inputs, got {len(node.input)}")


def _check_single_assignment(graph: onnx.GraphProto) -> None:
    """ONNX graphs are in SSA form: every name is defined once (an input listed again as
    an initializer excepted, as pre-IR-v4 models do). Two graph inputs with one name, or
    two nodes writing one output, are invalid models, refused rather than resolved by
    whichever comes last."""
    defined: dict[str, str] = {}
    for inp in graph.input:
        if inp.name in defined:
            raise PartitaError(f"invalid ONNX model: two graph inputs are named '{inp.name}'")
        defined[inp.name] = "a graph input"
    for init in graph.initializer:
        if init.name in defined and defined[init.name] != "a graph input":
            raise PartitaError(f"invalid ONNX model: two initializers are named '{init.name}'")
        defined[init.name] = "an initializer"
    for index, node in enumerate(graph.node):
        for out in node.output:
            if not out:
                continue
            if out in defined:
                raise PartitaError(f"invalid ONNX model: {_describe(index, node)} writes '{out}', which "
                                   f"{defined[out]} already defines")
            defined[out] = f"{_describe(index, node)}"


FOLD_LIMIT_BYTES = 64 << 20
"""The largest value import-time folding builds; a larger result stays an op of the graph."""
FOLD_TOTAL_BYTES = 512 << 20
"""What folding may build over one import, all values together."""


def _static_bytes(typ) -> int | None:
    """Bytes of a static tensor type (None for a dynamic one, 0 for no tensor)."""
    if not isinstance(typ, TensorType):
        return 0
    if nn.DYN in typ.get_shape():
        return None
    return math.prod(typ.get_shape()) * nn.numpy_dtype(typ.element_type).itemsize


def tensor_array(tensor: onnx.TensorProto, what: str, external_dir: Path | None = None) -> np.ndarray:
    """The NumPy value of a TensorProto; a payload that does not fit its dims and dtype
    (or external data that cannot be read) is a ``PartitaError`` naming the tensor.
    External data not loaded yet is read from ``external_dir``."""
    if any(d < 0 for d in tensor.dims):
        raise PartitaError(f"{what} '{tensor.name}' has a negative dimension in {list(tensor.dims)}")
    if tensor.data_type not in ONNX_DTYPES:
        known = tensor.data_type in onnx.TensorProto.DataType.values()
        raise PartitaError(f"{what} '{tensor.name}' has unsupported element type "
                           f"{onnx.TensorProto.DataType.Name(tensor.data_type) if known else tensor.data_type}")
    external = tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.external_data)
    if external and not tensor.HasField("raw_data") and external_dir is not None:
        array = _external_array(tensor, what, external_dir)
        if array is not None:
            return array
        from onnx.external_data_helper import load_external_data_for_tensor

        try:
            load_external_data_for_tensor(tensor, str(external_dir))
        except (OSError, ValueError, onnx.checker.ValidationError) as err:
            raise PartitaError(f"{what} '{tensor.name}': cannot read its external data: {err}") from None
    elif external and not tensor.HasField("raw_data"):
        # onnx.load(path) reads external data beside the model file; left unread here it
        # would be read relative to the working directory, never the model's own folder.
        location = next((e.value for e in tensor.external_data if e.key == "location"), "?")
        raise PartitaError(f"{what} '{tensor.name}' keeps its data in an external file ('{location}') that was "
                           "not loaded; pass the model's path, or onnx.load it from its folder with its "
                           "external data")
    try:
        return numpy_helper.to_array(tensor)
    except Exception as err:  # ValueError from a reshape of raw_data, TypeError, OSError
        elements = math.prod(tensor.dims)
        raise PartitaError(
            f"{what} '{tensor.name}' does not hold its declared {list(tensor.dims)} "
            f"{onnx.TensorProto.DataType.Name(tensor.data_type)} tensor ({elements} elements, "
            f"{len(tensor.raw_data)} bytes of raw_data): {err}"
        ) from None
