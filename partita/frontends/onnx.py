"""ONNX frontend: an ``onnx.ModelProto`` becomes one public ``func.func @main`` of nn ops.

The importer walks the graph in order and dispatches each node to a small converter in
``_CONVERTERS`` (one function per op type). Values are either IR values (``SSAValue``) or
compile-time constants (NumPy arrays): initializers, ``Constant`` nodes and everything
computed from constants only stay NumPy until an nn op needs them, then become one
``nn.constant``. Shape-computing subgraphs (``Shape -> Gather -> Unsqueeze -> Concat ->
Reshape`` as PyTorch exports them) fold this way; a dynamic dimension inside such a shape
is a ``_SymDim`` (object arrays), which a ``Reshape`` turns into a ``?`` result dimension.

Decisions worth knowing:
- ``MatMul`` by a 2-D constant becomes ``nn.dense`` with the weight transposed at import
  (``w[N, K]``), the form CUTLASS/cuBLAS dense patterns match; other MatMuls are
  ``nn.matmul``. ``Gemm`` is always ``nn.dense`` (+ ``nn.add`` for ``C``).
- The Erf form of GELU, ``x * 0.5 * (1 + Erf(x / sqrt(2)))`` and its usual reorderings, is
  matched on the ONNX graph before conversion and becomes one ``nn.gelu``; any other
  ``Erf`` is an error.
- Unsupported ops, opsets, attributes or element types raise ``PartitaError`` naming the
  node (``node 3 'attn/Erf' (Erf)``); nothing is skipped silently.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
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
from partita.ir import PartitaError

MIN_OPSET = 9
MAX_OPSET = onnx.defs.onnx_opset_version()

_ELEMENT_TYPES = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16),
    onnx.TensorProto.BFLOAT16: nn.numpy_dtype(nn.BFloat16Type()),
}


@dataclass(frozen=True)
class _SymDim:
    """A dimension known only at run time inside a folded shape computation; ``label``
    is the ONNX symbolic name (``dim_param``) when shape inference knows one."""

    label: object

    def __repr__(self) -> str:
        return f"?{self.label}"


Value = SSAValue | np.ndarray | None


class _Unsupported(Exception):
    """Raised by converters; the importer adds the node's name."""


def _fail(message: str) -> None:
    raise _Unsupported(message)


def _is_const(v: Value) -> bool:
    return isinstance(v, np.ndarray)


def _is_symbolic(v: Value) -> bool:
    return isinstance(v, np.ndarray) and v.dtype == object


def _shape(v: SSAValue) -> tuple[int, ...]:
    return tuple(v.type.get_shape())


def _ints(v: Value, what: str) -> list[int]:
    if not _is_const(v) or _is_symbolic(v):
        _fail(f"{what} must be a constant")
    return [int(i) for i in np.asarray(v).reshape(-1)]


def _scalar(v: Value, what: str) -> float:
    if not _is_const(v) or _is_symbolic(v) or np.asarray(v).size != 1:
        _fail(f"{what} must be a constant scalar")
    return float(np.asarray(v).reshape(-1)[0])


class _Importer:
    def __init__(self, model: onnx.ModelProto, source: str = "<onnx>"):
        self.model = model
        self.source = source
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

    # -- values ------------------------------------------------------------------------
    def emit(self, op: nn.NNOp) -> SSAValue:
        # Like MLIR's importers: each op is located at the ONNX node it came from.
        if self.location is not None:
            op.location = self.location
        self.block.add_op(op)
        return op.results[0]

    def tensor(self, v: Value, like: SSAValue | None = None) -> SSAValue:
        """An IR value for ``v``; constants become ``nn.constant`` (in ``like``'s dtype)."""
        if isinstance(v, SSAValue):
            return v
        if v is None:
            _fail("a required input is missing")
        if _is_symbolic(v):
            _fail("a shape computation depending on a dynamic dimension is used as data")
        array = np.asarray(v)
        if like is not None:
            array = array.astype(nn.numpy_dtype(like.type.element_type))
        elif array.dtype not in _ELEMENT_TYPES.values():
            if array.dtype != np.float64:
                _fail(f"constant of element type {array.dtype} used as tensor data "
                      "(nn supports f32, f16 and bf16)")
        return self.emit(nn.ConstantOp(array))

    def operands(self, *vals: Value) -> list[SSAValue]:
        like = next((v for v in vals if isinstance(v, SSAValue)), None)
        return [self.tensor(v, like) for v in vals]

    # -- driver ------------------------------------------------------------------------
    def run(self, name: str) -> ModuleOp:
        for init in self.graph.initializer:
            self.values[init.name] = tensor_array(init, "initializer")
        if self.graph.sparse_initializer:
            raise PartitaError("sparse initializers are not supported")
        arg_types = []
        for inp in self.graph.input:
            if inp.name in self.values:  # pre-IR-v4 models list initializers as inputs
                continue
            typ = _value_type(inp, "graph input")
            arg = self.block.insert_arg(typ, len(self.block.args))
            _set_name(arg, inp.name)
            self.values[inp.name] = arg
            self.names[id(arg)] = inp.name
            arg_types.append(typ)
        _match_gelu(self)
        for index, node in enumerate(self.graph.node):
            self.node = node
            self.location = NameLoc(StringAttr(f"{self.source}: {_describe(index, node)}"), UnknownLoc())
            try:
                self.convert(index, node)
            except (_Unsupported, VerifyException, ValueError) as err:
                raise PartitaError(f"{_describe(index, node)}: {err}") from None
        results = []
        for out in self.graph.output:
            if out.name not in self.values:
                raise PartitaError(f"graph output '{out.name}' is never computed")
            try:
                results.append(self.tensor(self.values[out.name]))
            except _Unsupported as err:
                raise PartitaError(f"graph output '{out.name}': {err}") from None
        self.block.add_op(func.ReturnOp(*results))
        fn = func.FuncOp(name, (arg_types, [r.type for r in results]), Region(self.block))
        return ModuleOp([fn])

    def convert(self, index: int, node: onnx.NodeProto) -> None:
        if node.domain not in ("", "ai.onnx"):
            _fail(f"unsupported op domain '{node.domain}'")
        if index in self.absorbed:
            return
        if index in self.gelu:
            x = self.tensor(self.values[self.gelu[index]])
            self.values[node.output[0]] = self.emit(nn.GeluOp(x))
            return
        ins = [self.values.get(n) if n else None for n in node.input]
        for n, v in zip(node.input, ins):
            if n and n not in self.values:
                _fail(f"input '{n}' is not defined before use")
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        present = [v for v in ins if v is not None]
        if present and all(_is_const(v) for v in present) and node.op_type not in _NO_FOLD:
            outs = _fold(self, node, ins, attrs)
        else:
            converter = _CONVERTERS.get(node.op_type)
            if converter is None:
                _fail(f"unsupported op type '{node.op_type}'")
            outs = converter(self, ins, attrs)
        if not isinstance(outs, list | tuple):
            outs = [outs]
        for i, name in enumerate(node.output):
            if not name:
                continue
            if i >= len(outs):
                if self._used(name):
                    _fail(f"output {i} ('{name}') is not supported")
                continue
            self.values[name] = outs[i]
            if isinstance(outs[i], SSAValue):
                self.names.setdefault(id(outs[i]), name)

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
        out: list[object] = []
        for i, d in enumerate(_shape(v)):
            if d != nn.DYN:
                out.append(d)
            elif i < len(known) and isinstance(known[i], str):
                out.append(_SymDim(known[i]))
            else:
                out.append(_SymDim((id(v), i)))
        return out


# ---------------------------------------------------------------------------------------
# Model-level helpers
# ---------------------------------------------------------------------------------------


def _default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            version = entry.version
            if not MIN_OPSET <= version <= MAX_OPSET:
                raise PartitaError(f"unsupported ONNX opset {version} (supported: "
                                   f"{MIN_OPSET} to {MAX_OPSET})")
            return version
    raise PartitaError("the model imports no default-domain (ai.onnx) opset")


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
    if elem not in _ELEMENT_TYPES:
        raise PartitaError(f"{what} '{info.name}' has unsupported element type "
                           f"{onnx.TensorProto.DataType.Name(elem)} (supported: FLOAT, "
                           "FLOAT16, BFLOAT16)")
    if not t.tensor_type.HasField("shape"):
        raise PartitaError(f"{what} '{info.name}' has no shape (rank must be known)")
    dims = [d.dim_value if d.HasField("dim_value") else nn.DYN
            for d in t.tensor_type.shape.dim]
    negative = [d.dim_value for d in t.tensor_type.shape.dim if d.HasField("dim_value") and d.dim_value < 0]
    if negative:
        raise PartitaError(f"{what} '{info.name}' has a negative dimension {negative[0]} (dims must be >= 0, "
                           "or symbolic for a dynamic size)")
    return TensorType(nn.element_type_of(_ELEMENT_TYPES[elem]), dims)


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


def _fold(cx: _Importer, node: onnx.NodeProto, ins: list[Value], attrs: dict) -> list[Value]:
    """Evaluate a node whose inputs are all constants at import time."""
    if any(_is_symbolic(v) for v in ins if v is not None):
        folder = _SYMBOLIC_FOLDERS.get(node.op_type)
        if folder is None:
            _fail("cannot fold this shape computation over a dynamic dimension")
        out = np.empty((), dtype=object)
        result = folder(cx, ins, attrs)
        if isinstance(result, np.ndarray):
            return [result.astype(object)]
        out[()] = result
        return [out]
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
        _fail(f"constant folding failed: {err}")
    it = iter(results)
    return [np.asarray(next(it)) if n else None for n in node.output]


def _sym_gather(cx, ins, attrs):
    data, idx = ins
    return np.take(data, np.asarray(idx, dtype=np.int64), axis=attrs.get("axis", 0))


def _sym_concat(cx, ins, attrs):
    return np.concatenate([np.asarray(v, dtype=object) for v in ins], axis=attrs["axis"])


def _sym_unsqueeze(cx, ins, attrs):
    axes = attrs["axes"] if cx.opset < 13 else _ints(ins[1], "axes")
    out = np.asarray(ins[0], dtype=object)
    rank = out.ndim + len(axes)
    for a in sorted(a % rank for a in axes):
        out = np.expand_dims(out, a)
    return out


def _sym_squeeze(cx, ins, attrs):
    axes = attrs.get("axes") if cx.opset < 13 else (
        _ints(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else None)
    data = np.asarray(ins[0], dtype=object)
    if axes is None:
        return data.squeeze()
    return data.squeeze(axis=tuple(a % data.ndim for a in axes))


def _sym_slice(cx, ins, attrs):
    if cx.opset < 10:
        starts, ends, axes = attrs["starts"], attrs["ends"], attrs.get("axes")
        steps = None
    else:
        starts, ends = _ints(ins[1], "starts"), _ints(ins[2], "ends")
        axes = _ints(ins[3], "axes") if len(ins) > 3 and ins[3] is not None else None
        steps = _ints(ins[4], "steps") if len(ins) > 4 and ins[4] is not None else None
    data = np.asarray(ins[0], dtype=object)
    axes = axes or list(range(len(starts)))
    steps = steps or [1] * len(starts)
    index = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[a] = slice(s, e, st)
    return data[tuple(index)]


def _sym_binary(fn):
    def fold(cx, ins, attrs):
        a, b = np.broadcast_arrays(np.asarray(ins[0], dtype=object),
                                   np.asarray(ins[1], dtype=object))
        out = np.empty(a.shape, dtype=object)
        for i in np.ndindex(a.shape):
            x, y = a[i], b[i]
            out[i] = _SymDim(("expr", id(out), i)) if isinstance(x, _SymDim) or isinstance(
                y, _SymDim) else fn(int(x), int(y))
        return out

    return fold


_SYMBOLIC_FOLDERS: dict[str, Callable[..., np.ndarray]] = {
    "Gather": _sym_gather,
    "Concat": _sym_concat,
    "Unsqueeze": _sym_unsqueeze,
    "Squeeze": _sym_squeeze,
    "Slice": _sym_slice,
    "Cast": lambda cx, ins, attrs: ins[0],
    "Identity": lambda cx, ins, attrs: ins[0],
    "Mul": _sym_binary(lambda x, y: x * y),
    "Add": _sym_binary(lambda x, y: x + y),
    "Sub": _sym_binary(lambda x, y: x - y),
    "Div": _sym_binary(lambda x, y: x // y),
}


# ---------------------------------------------------------------------------------------
# GELU (Erf form) matching
# ---------------------------------------------------------------------------------------


def _match_gelu(cx: _Importer) -> None:
    """Find ``x * 0.5 * (1 + Erf(x / sqrt 2))`` (any Mul order, Div by sqrt 2 or Mul by
    1/sqrt 2) and record it as one GELU at the index of its last node."""
    nodes = list(cx.graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    users: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for name in n.input:
            users.setdefault(name, []).append(i)
    outputs = {o.name for o in cx.graph.output}
    consts = {k: v for k, v in cx.values.items() if _is_const(v)}
    for n in nodes:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = tensor_array(n.attribute[0].t, f"constant '{n.output[0]}'")

    def const_is(name: str, value: float) -> bool:
        v = consts.get(name)
        if v is None or v.size != 1 or not np.issubdtype(v.dtype, np.floating):
            return False
        # Equal up to the rounding of the constant's own type (sqrt 2 in f16 is 1.414).
        return math.isclose(float(v.reshape(-1)[0]), value, rel_tol=2 * float(np.finfo(v.dtype).eps))

    def single_user(name: str) -> int | None:
        u = users.get(name, [])
        return u[0] if len(u) == 1 and name not in outputs else None

    def other(node: onnx.NodeProto, name: str) -> str | None:
        ins = list(node.input)
        if len(ins) != 2 or name not in ins:
            return None
        return ins[1] if ins[0] == name else ins[0]

    for ei, erf in enumerate(nodes):
        if erf.op_type != "Erf" or erf.input[0] not in producer:
            continue
        si = producer[erf.input[0]]
        scale = nodes[si]
        if scale.op_type == "Div" and const_is(scale.input[1], math.sqrt(2)):
            x = scale.input[0]
        elif scale.op_type == "Mul" and len(scale.input) == 2:
            a, b = scale.input
            x = a if const_is(b, 1 / math.sqrt(2)) else b if const_is(a, 1 / math.sqrt(2)) \
                else None
        else:
            x = None
        if x is None or single_user(scale.output[0]) != ei:
            continue
        ai = single_user(erf.output[0])
        if ai is None or nodes[ai].op_type != "Add" or not const_is(
                other(nodes[ai], erf.output[0]) or "", 1.0):
            continue
        mi = single_user(nodes[ai].output[0])
        if mi is None or nodes[mi].op_type != "Mul":
            continue
        m = nodes[mi]
        t = other(m, nodes[ai].output[0])
        pattern = [si, ei, ai, mi]
        if t == x:  # (x * (1 + erf)) * 0.5
            fi = single_user(m.output[0])
            if fi is None or nodes[fi].op_type != "Mul" or not const_is(
                    other(nodes[fi], m.output[0]) or "", 0.5):
                continue
            pattern.append(fi)
        elif t is not None and const_is(t, 0.5):  # x * ((1 + erf) * 0.5)
            fi = single_user(m.output[0])
            if fi is None or nodes[fi].op_type != "Mul" or other(nodes[fi], m.output[0]) != x:
                continue
            pattern.append(fi)
        elif t in producer and nodes[producer[t]].op_type == "Mul":  # (x * 0.5) * (1 + erf)
            hi = producer[t]
            if other(nodes[hi], x) is None or not const_is(other(nodes[hi], x), 0.5) or \
                    single_user(t) != mi:
                continue
            pattern.append(hi)
            fi = mi
        else:
            continue
        final = max(pattern)
        cx.gelu[final] = x
        cx.absorbed.update(i for i in pattern if i != final)


# ---------------------------------------------------------------------------------------
# Converters: (importer, inputs, attributes) -> output value(s)
# ---------------------------------------------------------------------------------------

Converter = Callable[[_Importer, list[Value], dict[str, Any]], Any]
_CONVERTERS: dict[str, Converter] = {}


def _converter(*op_types: str):
    def register(fn: Converter) -> Converter:
        for t in op_types:
            _CONVERTERS[t] = fn
        return fn

    return register


def _binary(op_cls):
    def convert(cx: _Importer, ins, attrs):
        if cx.opset < 7 and attrs.get("broadcast"):
            _fail("legacy broadcast attribute")
        a, b = cx.operands(ins[0], ins[1])
        return cx.emit(op_cls(a, b))

    return convert


for _t, _cls in (("Add", nn.AddOp), ("Sub", nn.SubtractOp), ("Mul", nn.MultiplyOp),
                 ("Div", nn.DivideOp)):
    _CONVERTERS[_t] = _binary(_cls)


@_converter("Sum")
def _sum(cx, ins, attrs):
    vals = cx.operands(*ins)
    out = vals[0]
    for v in vals[1:]:
        out = cx.emit(nn.AddOp(out, v))
    return out


def _unary(op_cls):
    return lambda cx, ins, attrs: cx.emit(op_cls(cx.tensor(ins[0])))


for _t, _cls in (("Relu", nn.ReluOp), ("Tanh", nn.TanhOp), ("Sigmoid", nn.SigmoidOp)):
    _CONVERTERS[_t] = _unary(_cls)


@_converter("Gelu")
def _gelu(cx, ins, attrs):
    approximate = attrs.get("approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    return cx.emit(nn.GeluOp(cx.tensor(ins[0]), approximate=approximate))


@_converter("Erf")
def _erf(cx, ins, attrs):
    _fail("Erf is only supported inside a GELU subgraph x * 0.5 * (1 + Erf(x / sqrt(2)))")


@_converter("Identity")
def _identity(cx, ins, attrs):
    return ins[0]


@_converter("Dropout")
def _dropout(cx, ins, attrs):
    if len(ins) > 2 and ins[2] is not None:
        if not _is_const(ins[2]) or bool(np.asarray(ins[2]).reshape(-1)[0]):
            _fail("training_mode must be a constant false")
    if cx._used_output(1):
        _fail("the mask output is not supported (inference only)")
    return [ins[0]]


@_converter("Constant")
def _constant(cx, ins, attrs):
    if "value" in attrs:
        return tensor_array(attrs["value"], "Constant value")
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    _fail(f"unsupported Constant attribute(s) {sorted(attrs)}")


@_converter("ConstantOfShape")
def _constant_of_shape(cx, ins, attrs):
    _fail("the shape input must be a constant")  # constant shapes are folded


@_converter("Cast")
def _cast(cx, ins, attrs):
    x = cx.tensor(ins[0])
    to = attrs["to"]
    if _ELEMENT_TYPES.get(to) != nn.numpy_dtype(x.type.element_type):
        _fail(f"cast of a non-constant tensor to "
              f"{onnx.TensorProto.DataType.Name(to)} is not supported (only identity casts)")
    return x


@_converter("Softmax")
def _softmax(cx, ins, attrs):
    x = cx.tensor(ins[0])
    rank = len(_shape(x))
    axis = attrs.get("axis", 1 if cx.opset < 13 else -1)
    if cx.opset < 13 and axis % rank != rank - 1:
        _fail(f"opset {cx.opset} Softmax flattens to 2-D at axis {axis}; only the last "
              "axis is supported")
    return cx.emit(nn.SoftmaxOp(x, axis=axis))


@_converter("LayerNormalization")
def _layer_norm(cx, ins, attrs):
    x = cx.tensor(ins[0])
    axis = attrs.get("axis", -1)
    if attrs.get("stash_type", 1) != 1:
        _fail("stash_type other than float is not supported")
    if cx._used_output(1) or cx._used_output(2):
        _fail("the Mean / InvStdDev outputs are not supported")
    norm_shape = _shape(x)[axis % len(_shape(x)):]
    scale = ins[1]
    bias = ins[2] if len(ins) > 2 and ins[2] is not None else np.zeros(norm_shape, np.float32)
    if _is_const(scale):
        scale = np.broadcast_to(scale, norm_shape).copy()
    if _is_const(bias):
        bias = np.broadcast_to(bias, norm_shape).copy()
    gamma, beta = cx.tensor(scale, x), cx.tensor(bias, x)
    return cx.emit(nn.LayerNormOp(x, gamma, beta, axis=axis,
                                  epsilon=attrs.get("epsilon", 1e-5)))


def _transpose_value(cx: _Importer, v: Value, like: SSAValue | None = None) -> SSAValue:
    """A 2-D value transposed: constants at import time, others by ``nn.transpose``."""
    if _is_const(v):
        return cx.tensor(np.ascontiguousarray(np.asarray(v).T), like)
    return cx.emit(nn.TransposeOp(cx.tensor(v), [1, 0]))


@_converter("Gemm")
def _gemm(cx, ins, attrs):
    a = cx.tensor(ins[0])
    if len(_shape(a)) != 2:
        _fail("Gemm input A must have rank 2")
    if attrs.get("transA", 0):
        a = cx.emit(nn.TransposeOp(a, [1, 0]))
    b = ins[1]
    w = cx.tensor(b, a) if attrs.get("transB", 0) else _transpose_value(cx, b, a)
    out = cx.emit(nn.DenseOp(a, w))
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if alpha != 1.0:
        out = cx.emit(nn.MultiplyOp(out, cx.tensor(np.asarray(alpha, np.float32), a)))
    if len(ins) > 2 and ins[2] is not None and beta != 0.0:
        c = ins[2]
        if _is_const(c):
            c = np.asarray(c, np.float32) * np.float32(beta)
        elif beta != 1.0:
            c = cx.emit(nn.MultiplyOp(c, cx.tensor(np.asarray(beta, np.float32), a)))
        out = cx.emit(nn.AddOp(out, cx.tensor(c, a)))
    return out


@_converter("MatMul")
def _matmul(cx, ins, attrs):
    a, b = ins
    if isinstance(a, SSAValue) and _is_const(b) and np.asarray(b).ndim == 2:
        if len(_shape(a)) < 2:
            _fail("MatMul with a rank-1 lhs is not supported")
        return cx.emit(nn.DenseOp(a, _transpose_value(cx, b, a)))
    a, b = cx.operands(a, b)
    if len(_shape(a)) < 2 or len(_shape(b)) < 2:
        _fail("MatMul with rank-1 operands is not supported")
    return cx.emit(nn.MatmulOp(a, b))


def _spatial_attrs(cx, attrs, x_shape, kernel):
    """(strides, [t, l, b, r] padding, dilations) of a 2-d Conv/Pool node."""
    if len(x_shape) != 4 or len(kernel) != 2:
        _fail(f"only 2-d spatial ops are supported (input rank {len(x_shape)})")
    strides = list(attrs.get("strides", [1, 1]))
    dilations = list(attrs.get("dilations", [1, 1]))
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad == "NOTSET":
        pads = list(attrs.get("pads", [0, 0, 0, 0]))
    elif auto_pad == "VALID":
        pads = [0, 0, 0, 0]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for size, k, s, d in zip(x_shape[2:], kernel, strides, dilations):
            if size == nn.DYN:
                _fail(f"auto_pad {auto_pad} needs static spatial dimensions")
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, big = total // 2, total - total // 2
            lo.append(small if auto_pad == "SAME_UPPER" else big)
            hi.append(big if auto_pad == "SAME_UPPER" else small)
        pads = lo + hi
    else:
        _fail(f"unsupported auto_pad '{auto_pad}'")
    return strides, pads, dilations


@_converter("Conv")
def _conv(cx, ins, attrs):
    x = cx.tensor(ins[0])
    w = cx.tensor(ins[1], x)
    kernel = attrs.get("kernel_shape", list(_shape(w)[2:]))
    strides, pads, dilations = _spatial_attrs(cx, attrs, _shape(x), kernel)
    out = cx.emit(nn.Conv2DOp(x, w, strides=strides, padding=pads, dilation=dilations,
                              groups=attrs.get("group", 1)))
    if len(ins) > 2 and ins[2] is not None:
        out = cx.emit(nn.BiasAddOp(out, cx.tensor(ins[2], x), axis=1))
    return out


@_converter("BatchNormalization")
def _batch_norm(cx, ins, attrs):
    if attrs.get("training_mode", 0):
        _fail("training_mode is not supported (inference only)")
    if any(cx._used_output(i) for i in range(1, 5)):
        _fail("the running-statistics outputs are not supported (inference only)")
    if cx.opset < 9 or attrs.get("spatial", 1) != 1:
        _fail("non-spatial batch normalization is not supported")
    x = cx.tensor(ins[0])
    rest = [cx.tensor(v, x) for v in ins[1:5]]
    return [cx.emit(nn.BatchNormOp(x, *rest, axis=1, epsilon=attrs.get("epsilon", 1e-5)))]


def _pool(op_cls):
    def convert(cx, ins, attrs):
        if cx._used_output(1):
            _fail("the Indices output is not supported")
        if attrs.get("storage_order", 0):
            _fail("storage_order 1 is not supported")
        x = cx.tensor(ins[0])
        kernel = list(attrs["kernel_shape"])
        strides, pads, dilations = _spatial_attrs(cx, attrs, _shape(x), kernel)
        extra = {}
        if op_cls is nn.AvgPool2DOp:
            extra["count_include_pad"] = bool(attrs.get("count_include_pad", 0))
        return [cx.emit(op_cls(x, kernel, strides=strides, padding=pads, dilation=dilations,
                               ceil_mode=bool(attrs.get("ceil_mode", 0)), **extra))]

    return convert


_CONVERTERS["MaxPool"] = _pool(nn.MaxPool2DOp)
_CONVERTERS["AveragePool"] = _pool(nn.AvgPool2DOp)


@_converter("GlobalAveragePool")
def _global_avg_pool(cx, ins, attrs):
    return cx.emit(nn.GlobalAvgPool2DOp(cx.tensor(ins[0])))


@_converter("LRN")
def _lrn(cx, ins, attrs):
    return cx.emit(nn.LRNOp(cx.tensor(ins[0]), size=attrs["size"], axis=1,
                            alpha=attrs.get("alpha", 1e-4), beta=attrs.get("beta", 0.75),
                            bias=attrs.get("bias", 1.0)))


@_converter("Pad")
def _pad(cx, ins, attrs):
    mode = attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "constant":
        _fail(f"pad mode '{mode}' is not supported (only constant)")
    x = cx.tensor(ins[0])
    rank = len(_shape(x))
    if cx.opset < 11:
        pads, value = list(attrs["pads"]), attrs.get("value", 0.0)
    else:
        pads = _ints(ins[1], "pads")
        value = _scalar(ins[2], "constant_value") if len(ins) > 2 and ins[2] is not None \
            else 0.0
        if len(ins) > 3 and ins[3] is not None:
            axes = [a % rank for a in _ints(ins[3], "axes")]
            full = [0] * (2 * rank)
            for j, a in enumerate(axes):
                full[a], full[rank + a] = pads[j], pads[len(axes) + j]
            pads = full
    if len(pads) != 2 * rank:
        _fail(f"expected {2 * rank} pads, got {len(pads)}")
    if any(p < 0 for p in pads):
        _fail("negative pads are not supported")
    return cx.emit(nn.PadOp(x, pads[:rank], pads[rank:], pad_value=value))


@_converter("Clip")
def _clip(cx, ins, attrs):
    x = cx.tensor(ins[0])
    big = float(np.finfo(np.float32).max)
    if cx.opset < 11:
        lo, hi = attrs.get("min", -big), attrs.get("max", big)
    else:
        lo = _scalar(ins[1], "min") if len(ins) > 1 and ins[1] is not None else -big
        hi = _scalar(ins[2], "max") if len(ins) > 2 and ins[2] is not None else big
    lo, hi = max(lo, -big), min(hi, big)
    return cx.emit(nn.ClipOp(x, lo, hi))


def _reshape_to(cx: _Importer, x: SSAValue, target: list[object]) -> SSAValue:
    """``nn.reshape`` to entries that are ints (``0`` copy, ``-1`` infer) or ``_SymDim``s."""
    in_labels = cx.labels(x)
    out: list[object] = []
    for i, t in enumerate(target):
        if isinstance(t, _SymDim):
            out.append(t)
        elif int(t) == 0:
            if i >= len(in_labels):
                _fail(f"shape entry {i} is 0 but the input has rank {len(in_labels)}")
            out.append(in_labels[i])
        else:
            out.append(int(t))
    if out.count(-1) > 1:
        _fail("more than one -1 in the target shape")
    if -1 in out:
        # Cancel symbols common to input and output, then infer -1 from the static rest.
        remaining = [d for d in in_labels]
        static_out = 1
        for d in out:
            if isinstance(d, _SymDim):
                if d in remaining:
                    remaining.remove(d)
                else:
                    _fail("cannot infer -1: the target shape has a dynamic dimension that "
                          "does not match the input")
            elif d != -1:
                static_out *= d
        if any(isinstance(d, _SymDim) for d in remaining):
            out[out.index(-1)] = _SymDim("inferred")
        else:
            total = math.prod(remaining)
            if static_out == 0 or total % static_out:
                _fail(f"cannot reshape {total} elements into {target}")
            out[out.index(-1)] = total // static_out
    shape = [nn.DYN if isinstance(d, _SymDim) else d for d in out]
    if shape.count(nn.DYN) > 1:
        _fail(f"the target shape has {shape.count(nn.DYN)} dynamic dimensions; nn.reshape "
              "allows one")
    if shape == list(_shape(x)):
        return x
    return cx.emit(nn.ReshapeOp(x, shape))


@_converter("Reshape")
def _reshape(cx, ins, attrs):
    if not _is_const(ins[1]):
        _fail("the shape input must be a constant (or a foldable shape computation)")
    target = list(np.asarray(ins[1]).reshape(-1))
    if attrs.get("allowzero", 0) and any(not isinstance(t, _SymDim) and t == 0 for t in target):
        _fail("allowzero with a 0 in the shape is not supported")
    return _reshape_to(cx, cx.tensor(ins[0]), target)


@_converter("Flatten")
def _flatten(cx, ins, attrs):
    x = cx.tensor(ins[0])
    labels = cx.labels(x)
    axis = attrs.get("axis", 1) % (len(labels) + 1) if labels else 0

    def prod(dims):
        syms = [d for d in dims if isinstance(d, _SymDim)]
        if len(syms) == 1 and all(d == 1 for d in dims if not isinstance(d, _SymDim)):
            return syms[0]
        return _SymDim(("flat", id(x))) if syms else math.prod(dims)

    return _reshape_to(cx, x, [prod(labels[:axis]), prod(labels[axis:])])


@_converter("Transpose")
def _transpose(cx, ins, attrs):
    x = cx.tensor(ins[0])
    perm = attrs.get("perm", list(range(len(_shape(x))))[::-1])
    return cx.emit(nn.TransposeOp(x, perm))


@_converter("Concat")
def _concat(cx, ins, attrs):
    vals = cx.operands(*ins)
    return cx.emit(nn.ConcatenateOp(vals, axis=attrs["axis"]))


@_converter("Unsqueeze")
def _unsqueeze(cx, ins, attrs):
    x = cx.tensor(ins[0])
    axes = attrs.get("axes") if cx.opset < 13 else _ints(ins[1], "axes")
    labels: list[object] = cx.labels(x)
    rank = len(labels) + len(axes)
    for a in sorted(a % rank for a in axes):
        labels.insert(a, 1)
    return _reshape_to(cx, x, labels)


@_converter("Squeeze")
def _squeeze(cx, ins, attrs):
    x = cx.tensor(ins[0])
    if cx.opset < 13:
        axes = attrs.get("axes")
    else:
        axes = _ints(ins[1], "axes") if len(ins) > 1 and ins[1] is not None else None
    labels = cx.labels(x)
    if axes is None:
        if any(isinstance(d, _SymDim) for d in labels):
            _fail("Squeeze without axes on a tensor with dynamic dimensions")
        axes = [i for i, d in enumerate(labels) if d == 1]
    axes = {a % len(labels) for a in axes}
    for a in axes:
        if labels[a] != 1 and not isinstance(labels[a], _SymDim):
            _fail(f"cannot squeeze axis {a} of size {labels[a]}")
    return _reshape_to(cx, x, [d for i, d in enumerate(labels) if i not in axes])


@_converter("Shape")
def _shape_op(cx, ins, attrs):
    x = cx.tensor(ins[0])
    labels = cx.labels(x)
    start, end = attrs.get("start", 0), attrs.get("end", len(labels))
    dims = labels[start:end]
    if any(isinstance(d, _SymDim) for d in dims):
        return np.asarray(dims, dtype=object)
    return np.asarray(dims, dtype=np.int64)


SUPPORTED_OPS = tuple(sorted(_CONVERTERS))


# ---------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------


def tensor_array(tensor: onnx.TensorProto, what: str) -> np.ndarray:
    """The NumPy value of a TensorProto; a payload that does not fit its dims and dtype
    (or external data that cannot be read) is a ``PartitaError`` naming the tensor."""
    if any(d < 0 for d in tensor.dims):
        raise PartitaError(f"{what} '{tensor.name}' has a negative dimension in {list(tensor.dims)}")
    try:
        return numpy_helper.to_array(tensor)
    except Exception as err:  # ValueError from a reshape of raw_data, TypeError, OSError
        elements = math.prod(tensor.dims)
        raise PartitaError(
            f"{what} '{tensor.name}' does not hold its declared {list(tensor.dims)} "
            f"{onnx.TensorProto.DataType.Name(tensor.data_type)} tensor ({elements} elements, "
            f"{len(tensor.raw_data)} bytes of raw_data): {err}"
        ) from None


def load_model(model: onnx.ModelProto | str | Path) -> onnx.ModelProto:
    """An ONNX model from a proto or a file; errors are ``PartitaError``s."""
    if isinstance(model, onnx.ModelProto):
        return model
    path = Path(model)
    if not path.is_file():
        raise PartitaError(f"cannot read '{path}': no such file")
    try:
        proto = onnx.load(str(path))
    except Exception as err:  # onnx raises DecodeError, ValidationError, OSError...
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PartitaError(f"'{path}' is not an ONNX model: {why}") from None
    if not proto.HasField("graph") or not proto.opset_import:
        raise PartitaError(f"'{path}' is not an ONNX model (no graph or opset)")
    return proto


def import_onnx(model: onnx.ModelProto | str | Path, *, name: str = "main") -> ModuleOp:
    """Import an ONNX model as a module with one public ``func.func @name`` of nn ops."""
    proto = load_model(model)
    source = "<onnx>" if isinstance(model, onnx.ModelProto) else str(model)
    module = _Importer(proto, source).run(name)
    from partita.ir import verify_module

    verify_module(module)
    return module


__all__ = ["MAX_OPSET", "MIN_OPSET", "SUPPORTED_OPS", "import_onnx", "load_model"]
