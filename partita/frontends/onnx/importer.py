"""The ONNX importer's core: the node loop (``Importer``) that turns a graph into one function.
Its parts live beside it: values and symbolic dims (``values``), the converter table
(``registry``), constant folding (``folding``) and the model's checks and tensors (``model``).

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
from onnx import helper
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, NameLoc, StringAttr, TensorType, UnknownLoc
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from partita.dialects import nn
from partita.frontends.onnx.folding import (
    _NO_FOLD,
    FOLD_LIMIT_BYTES,
    FOLD_TOTAL_BYTES,
    _fold,
    _static_bytes,
    folds_symbolically,
)
from partita.frontends.onnx.functions import function_body
from partita.frontends.onnx.gelu import match_gelu
from partita.frontends.onnx.model import (
    MIN_OPSET,
    _check_attributes,
    _check_inputs,
    _check_sequence_inputs,
    _check_single_assignment,
    _default_opset,
    _describe,
    _inferred_values,
    _initializer_last_uses,
    _value_type,
    legacy_version_check,
    tensor_array,
)
from partita.frontends.onnx.registry import (
    CONVERTERS,
    DOMAIN_CONVERTERS,
    SYMBOLIC_CONVERTERS,
    UNCONVERTED,
    Converter,
)
from partita.frontends.onnx.values import (
    _SYM_ARITH,
    ONNX_DTYPES,
    QuantizedConstant,
    SequenceValue,
    SymDim,
    Unsupported,
    UnsupportedVariant,
    Value,
    _broadcast_labels,
    fail,
    is_const,
    is_symbolic,
    shape_of,
    sym_arith,
    sym_linear,
)
from partita.ir import PartitaError
from partita.ir.abi import SequenceSpan, element_name, name_attrs, set_sequence_spans
from partita.ir.budget import charge
from partita.ir.constants import cast
from partita.runtime.reference.nn import NN_FUNCTIONS

__all__ = ["Importer"]

SequenceShapes = int | Sequence[Sequence[int | None]]
"""What the user says of a sequence input: its length (each element of the model's element
type), or each element's shape (``None`` for a run-time dim)."""


class Importer:
    def __init__(self, model: onnx.ModelProto, source: str = "<onnx>", external_dir: Path | None = None,
                 sequence_lengths: Mapping[str, SequenceShapes] | None = None):
        self.model = model
        self.sequence_lengths = dict(sequence_lengths or {})
        """Per sequence graph input, its length or its elements' shapes: the model has no length."""
        self.source = source
        self.external_dir = external_dir  # where external data lives: the model's folder
        self.location: NameLoc | None = None
        self.graph = model.graph
        self.opset = _default_opset(model)
        self.domain_opsets = {entry.domain: entry.version for entry in model.opset_import}
        self.values: dict[str, Value] = {}
        self.block = Block()
        self.node: onnx.NodeProto | None = None
        self.expansions = 0  # function bodies imported so far (their values' name prefixes)
        self.dim_labels, self.element_types = _inferred_values(model)
        self.gelu: dict[int, tuple[str, str]] = {}  # final node index -> (input name of x, approximate)
        self.absorbed: set[int] = set()
        self.names: dict[int, str] = {}  # id(SSAValue) -> ONNX value name
        self.sym_sources: dict[SymDim, tuple[SSAValue, int]] = {}  # a tensor dim it sizes
        self.sym_labels: dict[SSAValue, list[object]] = {}  # dims a converter or shape rule knows
        self._materialized: dict[object, SSAValue] = {}  # SymDim / source -> run-time value
        self._folder = None
        self.folded_bytes = 0  # what import-time folding has built so far (FOLD_TOTAL_BYTES)
        self._used_names: dict[int, tuple[onnx.GraphProto, set[str]]] = {}  # id(graph) -> it, the names it reads
        self.dequantized: dict[str, QuantizedConstant] = {}
        """Constants a DequantizeLinear folded, by output name, with their integers kept: a
        MatMul or Conv of two dequantized operands is built as the integer product
        (``linalg``, ``conv``)."""
        self.orphans: list[Operation] = []
        """Ops a converter bypassed (a dequantize whose integers it reads instead): erased at
        the end of the import when nothing else reads them."""
        self.function_name = "main"
        self.functions: list[func.FuncOp] = []
        """Functions the module holds besides the imported graph's (the bodies of the loops
        the host runs, ``nn.loop``)."""

    # -- values ------------------------------------------------------------------------
    def emit(self, op: nn.NNOp) -> SSAValue:
        self.emit_op(op)
        result = op.results[0]
        if nn.DYN in shape_of(result):
            derived = self._derived_labels(op)
            if derived is not None:
                self.sym_labels[result] = derived
        return result

    def emit_op(self, op: Operation) -> None:
        """Appends ``op`` to the block being imported (any number of results)."""
        # Like MLIR's importers: each op is located at the ONNX node it came from.
        if self.location is not None:
            op.location = self.location
        self.block.add_op(op)

    @contextmanager
    def emitting_into(self, block: Block) -> Iterator[Block]:
        """Emits into ``block`` instead (a body imported once, into a function of its own);
        what the caches learn there of values' names, dims and their run-time values is
        forgotten after, since the values they name live in ``block``."""
        outer = self.block, self._caches()
        self.block = block
        try:
            yield block
        finally:
            self.block, caches = outer
            self._restore(caches)

    def _caches(self) -> tuple:
        """Copies of what the import remembers about IR values (keyed by them, or by ``id``)."""
        return dict(self.names), dict(self.sym_sources), dict(self._materialized), dict(self.sym_labels)

    def _restore(self, caches: tuple) -> None:
        self.names, self.sym_sources, self._materialized, self.sym_labels = caches

    def mark(self) -> tuple:
        """Where the import stands, for ``rewind``."""
        return self.block.last_op, len(self.functions), self._caches()

    def rewind(self, mark: tuple) -> None:
        """Drops what the import built since ``mark`` (an unroll given up for a loop the
        host runs): the ops emitted and the functions added, and the caches' entries."""
        last, functions, caches = mark
        erase_ops_after(self.block, last)
        del self.functions[functions:]
        self._restore(caches)

    def _derived_labels(self, op: nn.NNOp) -> list[object] | None:
        """The dynamic dims of ``op``'s result in terms of its operands' (the shape rules of
        the ops that carry dims through), so a shape read from it later still names the
        dims it came from; ``None`` at a position the rule cannot tell."""
        if isinstance(op, nn.TransposeOp):
            labels = self.labels(op.input)
            return [labels[p] for p in op.perm]
        if isinstance(op, nn.DenseOp):
            return [*self.labels(op.operands[0])[:-1], shape_of(op.results[0])[-1]]
        if isinstance(op, nn.BiasAddOp):  # a Conv's bias: the input's shape
            return self.labels(op.operands[0])
        if isinstance(op, nn.ConvOp | nn.ConvTransposeOp | nn.PoolOp):
            # The batch (axis 0 of every data layout) is the input's; ONNX shape inference
            # names a strided convolution's batch afresh (unk__), which a reshape of the
            # result to [batch, ..., -1] could not cancel.
            return [self.labels(op.operands[0])[0], *(None if d == nn.DYN else d for d in shape_of(op.results[0])[1:])]
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
        if isinstance(v, SequenceValue):
            fail(f"{v.describe()} is used where a tensor is needed")
        if is_symbolic(v):
            return self.materialize(v, like)
        array = np.asarray(v)
        if like is not None:
            array = cast(array, nn.numpy_dtype(like.type.element_type))
        elif array.dtype not in ONNX_DTYPES.values():
            fail(f"constant of element type {array.dtype} used as tensor data")
        return self.emit(nn.ConstantOp(array, getattr(v, "parameter_name", None)))

    def _run_time(self, name: str, v: np.ndarray) -> SSAValue:
        """A folded shape computation as the run-time tensor of the type the model gives
        ``name`` (an i64 of dims cast to the float of a position the model computes with)."""
        value = self.materialize(v)
        code = self.element_types.get(name)
        if code in ONNX_DTYPES:
            element = nn.element_type_of(ONNX_DTYPES[code])
            if element != value.type.element_type:
                value = self.emit(nn.CastOp(value, element))
        return value

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
        self.function_name = name
        _check_single_assignment(self.graph)
        for init in self.graph.initializer:
            self.values[init.name] = tensor_array(init, "initializer", self.external_dir)
        if self.graph.sparse_initializer:
            raise PartitaError("sparse initializers are not supported")
        arg_types, arg_names, input_spans = [], [], []
        self._check_sequence_lengths()
        for inp in self.graph.input:
            if inp.name in self.values:  # pre-IR-v4 models list initializers as inputs
                continue
            if inp.type.HasField("sequence_type"):  # one argument per element
                elements, position = [], len(arg_types)
                for k, typ in enumerate(self._element_types(inp)):
                    arg = self.block.insert_arg(typ, len(self.block.args))
                    label = element_name(inp.name, k)
                    _set_name(arg, label)
                    self.names[id(arg)] = label
                    elements.append(arg)
                    arg_types.append(typ)
                    arg_names.append(label)
                code = inp.type.sequence_type.elem_type.tensor_type.elem_type
                self.values[inp.name] = SequenceValue(tuple(elements), code)
                input_spans.append(SequenceSpan(inp.name, position, len(elements)))
                continue
            typ = _value_type(inp, "graph input")
            arg = self.block.insert_arg(typ, len(self.block.args))
            _set_name(arg, inp.name)
            self.values[inp.name] = arg
            self.names[id(arg)] = inp.name
            arg_types.append(typ)
            arg_names.append(inp.name)
        for arg in self.block.args:
            # A dynamic dim is read from a graph input where one has it: a shape reference
            # to a computed tensor would keep its producer from fusing into a consumer
            # (BERT's embedding sum into its LayerNorm), a use that reads no data.
            self.labels(arg)
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
                self.dequantized.pop(done, None)
        results, result_names, output_spans = [], [], []
        for out in self.graph.output:
            if out.name not in self.values:
                raise PartitaError(f"graph output '{out.name}' is never computed")
            value = self.values[out.name]
            declared = out.type.WhichOneof("value")
            try:
                if isinstance(value, SequenceValue):  # one result per element
                    if declared not in (None, "sequence_type"):
                        fail(f"the model declares it a {declared.removesuffix('_type')}, but it is {value.describe()}")
                    output_spans.append(SequenceSpan(out.name, len(results), len(value)))
                    results += [self.tensor(e) for e in value.elements]
                    result_names += [element_name(out.name, k) for k in range(len(value))]
                    continue
                if declared == "sequence_type":
                    fail("the model declares it a sequence, but it is a tensor")
                results.append(self.tensor(value))
                result_names.append(out.name)
            except Unsupported as err:
                raise PartitaError(f"graph output '{out.name}': {err}") from None
        self.block.add_op(func.ReturnOp(*results))
        self._erase_orphans()
        fn = func.FuncOp(name, (arg_types, [r.type for r in results]), Region(self.block),
                         arg_attrs=name_attrs(arg_names),
                         res_attrs=name_attrs(result_names))
        set_sequence_spans(fn, input_spans, output_spans)
        return ModuleOp([fn, *self.functions])

    def _check_sequence_lengths(self) -> None:
        """``sequence_lengths`` names sequence inputs of the model only."""
        sequences = [i.name for i in self.graph.input if i.type.HasField("sequence_type")]
        for name in self.sequence_lengths:
            if name not in sequences:
                raise PartitaError(f"sequence_lengths names '{name}', which is not a sequence input of the model "
                                   f"(its sequence inputs: {', '.join(sequences) or 'none'})")

    def _element_types(self, info: onnx.ValueInfoProto) -> list[TensorType]:
        """The types of a sequence input's elements: as many as the user's length says, of
        the model's element type, each shape the user gave filling in what the model leaves
        open (its ``?`` dims, or the whole shape where it gives none)."""
        what = f"graph input '{info.name}'"
        element = info.type.sequence_type.elem_type
        if not element.HasField("tensor_type"):
            raise PartitaError(f"{what} is a sequence of {element.WhichOneof('value') or 'untyped values'}; "
                               "only sequences of tensors are supported")
        given = self.sequence_lengths.get(info.name)
        if given is None:
            raise PartitaError(f"{what} is a sequence, whose length the model does not give: compile with "
                               f"sequence_lengths={{'{info.name}': n}} (n elements), or a list of the elements' shapes")
        shapes: list[Sequence[int | None] | None]
        if isinstance(given, int | np.integer) and not isinstance(given, bool) and given >= 0:
            shapes = [None] * int(given)
        elif isinstance(given, Sequence) and not isinstance(given, str) and \
                all(isinstance(s, Sequence) and not isinstance(s, str) for s in given):
            shapes = list(given)
        else:
            raise PartitaError(f"sequence_lengths['{info.name}'] must be a length (an int >= 0) or a list of the "
                               f"elements' shapes, not {given!r}")
        model_shape = element.tensor_type.HasField("shape")
        types = []
        for k, shape in enumerate(shapes):
            proto = onnx.ValueInfoProto(name=element_name(info.name, k))
            proto.type.CopyFrom(element)
            if shape is not None:
                if model_shape and len(shape) != len(element.tensor_type.shape.dim):
                    raise PartitaError(f"{what}: element {k} given rank {len(shape)}, the model's elements have rank "
                                       f"{len(element.tensor_type.shape.dim)}")
                dims = proto.type.tensor_type.shape
                if not model_shape:
                    dims.dim.extend([onnx.TensorShapeProto.Dimension() for _ in shape])
                for d, size in zip(dims.dim, shape):
                    if size is None:
                        continue
                    if d.HasField("dim_value") and d.dim_value != size:
                        raise PartitaError(f"{what}: element {k} given shape {list(shape)}, the model's elements have "
                                           f"{d.dim_value} at that dimension")
                    d.dim_value = int(size)
            elif not model_shape:
                raise PartitaError(f"{what}: the model gives its elements no shape: give each element's shape, "
                                   f"sequence_lengths={{'{info.name}': [shape, ...]}}")
            types.append(_value_type(proto, f"element {k} of {what}"))
        return types

    def _erase_orphans(self) -> None:
        """Erases the bypassed ops nothing reads (the return included), then the constants
        only they read."""
        pending = list(self.orphans)
        while pending:
            op = pending.pop()
            if op.parent is None or any(r.uses for r in op.results):
                continue
            operands = [v.owner for v in op.operands if isinstance(v.owner, nn.ConstantOp)]
            op.detach()
            op.erase()
            pending.extend(operands)
        self.orphans = []

    def convert(self, index: int | None, node: onnx.NodeProto) -> None:
        """Converts ``node``. An op without a converter, or a variant its converter does not
        build (``UnsupportedVariant``), is imported as its ONNX function body
        (``functions.function_body``) where it has one; else the converter's reason is the
        error (and invalid input always is)."""
        try:
            self._convert(index, node)
        except Unsupported as err:
            known = node.domain in ("", "ai.onnx") and node.op_type in CONVERTERS
            if known and not isinstance(err, UnsupportedVariant):
                raise
            body = self._function_body(node)
            if body is None:
                raise
            # The op's own reason says more than its body's.
            self._convert_inside(body, lambda index, inner: f"in its ONNX function: {inner.op_type}",
                                 lambda index, inner, why, own=err: f"{own} (its ONNX function body: {inner.op_type}: {why})")

    def _convert_inside(self, nodes, label: Callable[[int, onnx.NodeProto], str],
                        error: Callable[[int, onnx.NodeProto, Exception], str]) -> None:
        """Converts the nodes of a body the current node stands for (its ONNX function, a
        control-flow op's graph), each located at the current node and ``label(index,
        node)``; a failure is ``Unsupported(error(index, node, reason))``."""
        node, where = self.node, self.location
        outer = where.name if where is not None else node.op_type
        try:
            for index, inner in enumerate(nodes):
                self.node = inner
                self.location = NameLoc(StringAttr(f"{outer}, {label(index, inner)}"), UnknownLoc())
                try:
                    self.convert(None, inner)
                except (Unsupported, VerifyException, ValueError) as err:
                    raise Unsupported(error(index, inner, err)) from None
        finally:
            self.node, self.location = node, where

    def run_subgraph(self, graph: onnx.GraphProto, inputs: list[Value | None], what: str) -> list[Value]:
        """Imports ``graph``, a control-flow op's body, in line: its inputs bound to
        ``inputs`` (``None`` leaves one unbound), the enclosing scopes' values visible (ONNX's
        outer-scope references), and its own names dropped again afterwards, so an unrolled
        body can run once per iteration. Returns the values of its outputs."""
        if len(inputs) != len(graph.input):
            fail(f"its {what} takes {len(graph.input)} inputs, given {len(inputs)}")
        outer_values, outer_graph = self.values, self.graph
        scope = dict(outer_values)
        for init in graph.initializer:
            scope[init.name] = tensor_array(init, "initializer", self.external_dir)
        for info, value in zip(graph.input, inputs):
            if value is None:
                scope.pop(info.name, None)
            else:
                scope[info.name] = value
        self.values, self.graph = scope, graph
        try:
            self._convert_inside(graph.node, lambda index, inner: f"in its {what}: {_describe(index, inner)}",
                                 lambda index, inner, why: f"its {what}: {_describe(index, inner)}: {why}")
            missing = [out.name for out in graph.output if out.name not in scope]
            if missing:
                fail(f"its {what} never computes its output '{missing[0]}'")
            return [scope[out.name] for out in graph.output]
        finally:
            self.values, self.graph = outer_values, outer_graph

    def _function_body(self, node: onnx.NodeProto) -> list[onnx.NodeProto] | None:
        types = []
        for name in node.input:
            value = self.values.get(name) if name else None
            if isinstance(value, SSAValue) and isinstance(value.type, TensorType):
                dtype, shape = nn.numpy_dtype(value.type.element_type), value.type.get_shape()
                shape = [d if d != nn.DYN else None for d in shape]
            elif isinstance(value, np.ndarray):
                dtype, shape = (np.dtype(np.int64) if value.dtype == object else value.dtype), value.shape
            else:
                types.append(onnx.TypeProto())
                continue
            try:
                elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
            except (KeyError, TypeError, ValueError):
                return None
            types.append(helper.make_tensor_type_proto(elem, shape))
        self.expansions += 1
        opset = self.opset if node.domain in ("", "ai.onnx") else self.domain_opsets.get(node.domain)
        if opset is None:
            return None
        return function_body(node, opset, types, f"{node.op_type}.{self.expansions}/")

    def _convert(self, index: int | None, node: onnx.NodeProto) -> None:
        # onnxruntime's contrib ops that its own tools write have converters of their own
        # (no ONNX schema checks them: their converters do)
        contrib = node.domain not in ("", "ai.onnx")
        if contrib and (node.domain, node.op_type) not in DOMAIN_CONVERTERS:
            fail(f"unsupported op domain '{node.domain}'")
        if index in self.absorbed:
            return
        if index in self.gelu:
            name, approximate = self.gelu[index]
            self.values[node.output[0]] = self.emit(nn.GeluOp(self.tensor(self.values[name]), approximate))
            return
        ins = [self.values.get(n) if n else None for n in node.input]
        for n in node.input:
            if n and n not in self.values:
                fail(f"input '{n}' is not defined before use")
        if not contrib:
            if self.opset < MIN_OPSET:
                legacy_version_check(node, self.opset)
            _check_attributes(node, self.opset)
            _check_inputs(node, self.opset)
        _check_sequence_inputs(node, self.opset, [None if v is None else isinstance(v, SequenceValue) for v in ins])
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        present = [v for v in ins if v is not None]
        foldable = bool(present) and all(is_const(v) for v in present) and \
            node.op_type not in _NO_FOLD and not contrib
        converter = DOMAIN_CONVERTERS[node.domain, node.op_type] if contrib else CONVERTERS.get(node.op_type)
        symbolic = any(is_symbolic(v) for v in present)
        if foldable and symbolic and node.op_type in SYMBOLIC_CONVERTERS:
            outs = converter(self, ins, attrs)  # shapes over dynamic dims: real ops
        elif foldable and symbolic and converter is not None and not folds_symbolically(node, ins, attrs):
            # A shape value used as data (a decode step's position, past + 0, into the
            # rotary angles' Mul and Cos): computed at run time, each dim read with
            # nn.shape_of where the converter takes the tensor (Importer.materialize).
            outs = converter(self, [self._run_time(n, v) if is_symbolic(v) else v for n, v in zip(node.input, ins)],
                             attrs)
        elif foldable and (converter is None or symbolic):
            outs = _fold(self, node, ins, attrs)
        elif converter is None:
            why = UNCONVERTED.get(node.op_type)
            fail(f"unsupported op type '{node.op_type}'" + (f": {why}" if why else ""))
        elif foldable:
            try:
                outs = self.fold_converted(converter, ins, attrs)
            except Unsupported:  # TODO(issue 10): drop once every converter folds
                outs = _fold(self, node, ins, attrs)
        else:
            outs = converter(self, ins, attrs)
        if not isinstance(outs, list | tuple):
            outs = [outs]
        # Folded values built here (not views of initializers, nor splats) count against
        # the model's one memory budget, within the per-fold caps.
        built = sum(v.nbytes for v in outs if isinstance(v, np.ndarray) and v.flags.owndata)
        if built:
            try:
                charge(built, "folding it at import")
            except PartitaError as err:
                fail(err.message)
        for i, name in enumerate(node.output):
            if not name:
                continue
            if i >= len(outs):
                if self._used(name):
                    fail(f"output {i} ('{name}') is not supported")
                continue
            self.values[name] = outs[i]
            if node.op_type != "DequantizeLinear":  # a name a body binds again
                self.dequantized.pop(name, None)
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
            if not keep:
                erase_ops_after(self.block, before)

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
        """Whether a node of the current graph, or of a subgraph of one, reads ``name``."""
        graph, names = self._used_names.get(id(self.graph), (None, None))
        if graph is not self.graph:  # the graph is kept with its names: its id stays its own
            graph, names = self.graph, _read_names(self.graph)
            self._used_names[id(graph)] = graph, names
        return name in names

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


def erase_ops_after(block: Block, before: Operation | None) -> None:
    """Erases the ops of ``block`` after ``before`` (all of them when it is ``None``), last
    first, so that the values they read lose those uses."""
    op = block.last_op
    while op is not None and op is not before:
        prev = op.prev_op
        op.detach()
        op.erase(safe_erase=False)
        op = prev


def _read_names(graph: onnx.GraphProto) -> set[str]:
    """The names ``graph``'s nodes read, nested bodies included (they may read any enclosing
    scope's values), and its outputs."""
    names = {out.name for out in graph.output}
    for node in graph.node:
        names.update(node.input)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else
                        attr.graphs if attr.type == onnx.AttributeProto.GRAPHS else []):
                names |= _read_names(sub)
    return names


def _set_name(value: SSAValue, name: str) -> None:
    hint = re.sub(r"[^A-Za-z0-9_$.]", "_", name)
    if hint and not hint[0].isalpha() and hint[0] != "_":
        hint = "v" + hint
    try:
        value.name_hint = hint or None
    except Exception:  # an invalid hint only costs readability
        pass

