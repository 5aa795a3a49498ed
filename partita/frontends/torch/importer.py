"""A ``torch.export`` ``ExportedProgram`` as a ``func.func @main`` of ``nn`` ops.

The ATen graph is converted node by node, as TVM's ``from_exported_program`` does (no
ONNX in between): parameters and buffers become ``nn.constant``s, user inputs become the
function's arguments (a ``torch.export.Dim`` dimension is a ``?``), and each ATen op one or
a few nn ops, each located at the node it came from (``aten.linear.default @ linear_1``).
An ATen op with no conversion is an error naming it and where it is, not a crash.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, NameLoc, StringAttr, TensorType, UnknownLoc
from xdsl.ir import Block, Operation, Region, SSAValue

from partita.dialects import nn
from partita.dialects.nn.base import element_type_of, numpy_dtype
from partita.ir.budget import charge
from partita.ir.diagnostics import PartitaError

__all__ = ["ATEN_CONVERTERS", "import_exported_program"]

Converter = Callable[["_Importer", Any, list[Any], dict[str, Any]], Any]


def _np_dtype(torch_dtype: Any) -> np.dtype:
    import torch

    return torch.empty((), dtype=torch_dtype).numpy().dtype


def _dims(shape: Sequence[Any]) -> list[int]:
    """Static dims as ints, symbolic ones (``torch.export.Dim``) as ``?``."""
    return [int(d) if isinstance(d, int) or str(d).isdigit() else nn.DYN for d in shape]


class _Importer:
    def __init__(self, program: Any, source: str):
        self.program = program
        self.source = source
        self.block = Block()
        self.values: dict[str, Any] = {}
        self.location: NameLoc | None = None

    def emit(self, op: Operation) -> SSAValue:
        if self.location is not None:
            op.location = self.location
        self.block.add_op(op)
        return op.results[0]

    def constant(self, value: Any, like: SSAValue | None = None) -> SSAValue:
        """A tensor, a Python number (of ``like``'s element type) as an nn.constant."""
        if hasattr(value, "detach"):
            array = value.detach().cpu().contiguous().numpy()
        else:
            dtype = np.float32
            if like is not None:
                dtype = numpy_dtype(like.type.element_type)  # type: ignore[attr-defined]
            array = np.asarray(value, dtype=dtype)
        try:  # the constant's attribute is a copy: charged like the ONNX import's folds
            charge(array.nbytes, "materializing it as a constant at import")
        except PartitaError as err:
            raise PartitaError(err.message, self.location or self.source) from None
        return self.emit(nn.ConstantOp(np.ascontiguousarray(array)))

    def tensor(self, value: Any, like: SSAValue | None = None) -> SSAValue:
        return value if isinstance(value, SSAValue) else self.constant(value, like)

    def arg(self, value: Any) -> Any:
        """A node argument: graph nodes become their values, lists are mapped."""
        import torch.fx

        if isinstance(value, torch.fx.Node):
            return self.values[value.name]
        if isinstance(value, (list, tuple)):
            return type(value)(self.arg(v) for v in value)
        return value

    def output_shape(self, node: Any) -> list[int]:
        return _dims(node.meta["val"].shape)

    def run(self) -> ModuleOp:
        import torch

        program = self.program
        specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
        user_inputs, arg_types = [], []
        for node in program.graph.nodes:
            if node.op != "placeholder":
                continue
            spec = specs.get(node.name)
            kind = spec.kind.name if spec is not None else "USER_INPUT"
            if kind == "USER_INPUT":
                fake = node.meta["val"]
                if not isinstance(fake, torch.Tensor):
                    raise PartitaError(f"input '{node.name}' is not a tensor ({type(fake).__name__}); "
                                       "pass only tensors as example inputs")
                typ = TensorType(element_type_of(_np_dtype(fake.dtype)), _dims(fake.shape))
                arg = self.block.insert_arg(typ, len(self.block.args))
                arg.name_hint = node.name
                self.values[node.name] = arg
                user_inputs.append(node.name)
                arg_types.append(typ)
            else:  # PARAMETER, BUFFER, CONSTANT_TENSOR: weights, folded into the module
                target = spec.target
                value = program.state_dict.get(target)
                if value is None:
                    value = program.constants.get(target)
                if value is None:
                    raise PartitaError(f"the exported program has no value for '{target}'")
                self.location = NameLoc(StringAttr(f"{self.source}: {target}"), UnknownLoc())
                self.values[node.name] = self.constant(value)
        results: list[SSAValue] = []
        for node in program.graph.nodes:
            if node.op == "call_function":
                self.location = NameLoc(StringAttr(f"{self.source}: {_describe(node)}"), UnknownLoc())
                convert = ATEN_CONVERTERS.get(_target_name(node.target))
                if convert is None:
                    raise PartitaError(f"ATen op '{_target_name(node.target)}' has no conversion to nn yet",
                                       f"{self.source}: {_describe(node)}")
                try:
                    self.values[node.name] = convert(self, node, list(self.arg(node.args)), self.arg(dict(node.kwargs)))
                except PartitaError:
                    raise
                except (ValueError, TypeError, NotImplementedError) as err:
                    raise PartitaError(f"cannot convert '{_target_name(node.target)}': {err}",
                                       f"{self.source}: {_describe(node)}") from None
            elif node.op == "output":
                outputs = node.args[0]
                results = [self.values[o.name] for o in outputs]
        for value in results:
            if not isinstance(value, SSAValue):
                raise PartitaError("the model returns something that is not a tensor computed from its inputs")
        self.block.add_op(func.ReturnOp(*results))
        function = func.FuncOp("main", (arg_types, [r.type for r in results]), Region(self.block))
        return ModuleOp([function])


def _target_name(target: Any) -> str:
    if target is operator.getitem:
        return "getitem"
    return str(target)


def _describe(node: Any) -> str:
    return f"{_target_name(node.target)} @ {node.name}"


# -- converters -------------------------------------------------------------------------


def _unary(cls: type[Operation], **props: Any) -> Converter:
    return lambda cx, node, args, kwargs: cx.emit(cls(args[0], **props))


def _binary(cls: type[Operation]) -> Converter:
    def convert(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
        lhs, rhs = args[0], args[1]
        alpha = kwargs.get("alpha", 1)
        if not isinstance(lhs, SSAValue):
            lhs = cx.constant(lhs, rhs)
        rhs = cx.tensor(rhs, lhs)
        if alpha != 1:
            rhs = cx.emit(nn.MultiplyOp(rhs, cx.constant(alpha, lhs)))
        return cx.emit(cls(lhs, rhs))

    return convert


def _identity(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    return args[0]


def _linear(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    x, weight = args[0], args[1]
    bias = args[2] if len(args) > 2 else kwargs.get("bias")
    out = cx.emit(nn.DenseOp(x, weight))
    return out if bias is None else cx.emit(nn.AddOp(out, bias))


def _addmm(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    bias, x, weight = args[:3]
    return cx.emit(nn.AddOp(cx.emit(nn.MatmulOp(x, weight)), bias))


def _matmul(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    return cx.emit(nn.MatmulOp(args[0], args[1]))


def _conv2d(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    x, weight = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    stride = _pair(args[3] if len(args) > 3 else 1)
    padding = args[4] if len(args) > 4 else 0
    if isinstance(padding, str):
        raise NotImplementedError(f"padding='{padding}' (give the padding as numbers)")
    padding = _pair(padding)
    dilation = _pair(args[5] if len(args) > 5 else 1)
    groups = args[6] if len(args) > 6 else 1
    out = cx.emit(nn.Conv2DOp(x, weight, strides=stride, padding=[padding[0], padding[1], padding[0], padding[1]],
                              dilation=dilation, groups=groups))
    return out if bias is None else cx.emit(nn.BiasAddOp(out, bias, axis=1))


def _pair(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value, value]
    values = list(value)
    return values * 2 if len(values) == 1 else values


def _batch_norm(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    x, weight, bias, mean, var = args[:5]
    training = args[5] if len(args) > 5 else False
    eps = args[7] if len(args) > 7 else 1e-5
    if training:
        raise NotImplementedError("batch norm in training mode (call model.eval() before exporting)")
    channels = cx.output_shape(node)[1]
    weight = weight if weight is not None else cx.constant(np.ones(channels, np.float32))
    bias = bias if bias is not None else cx.constant(np.zeros(channels, np.float32))
    return cx.emit(nn.BatchNormOp(x, weight, bias, mean, var, axis=1, epsilon=float(eps)))


def _layer_norm(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    x, shape = args[0], args[1]
    weight = args[2] if len(args) > 2 else None
    bias = args[3] if len(args) > 3 else None
    eps = args[4] if len(args) > 4 else 1e-5
    rank = len(x.type.get_shape())  # type: ignore[attr-defined]
    size = list(shape)
    if weight is None:
        weight = cx.constant(np.ones(size, np.float32))
    if bias is None:
        bias = cx.constant(np.zeros(size, np.float32))
    return cx.emit(nn.LayerNormOp(x, weight, bias, axis=rank - len(size), epsilon=float(eps)))


def _softmax(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    return cx.emit(nn.SoftmaxOp(args[0], axis=int(args[1])))


def _gelu(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    return cx.emit(nn.GeluOp(args[0], approximate=kwargs.get("approximate", "none")))


def _max_pool2d(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    kernel = _pair(args[1])
    stride = _pair(args[2]) if len(args) > 2 and args[2] else kernel
    padding = _pair(args[3] if len(args) > 3 else 0)
    dilation = _pair(args[4] if len(args) > 4 else 1)
    ceil = bool(args[5]) if len(args) > 5 else False
    return cx.emit(nn.MaxPool2DOp(args[0], kernel, strides=stride, padding=[padding[0], padding[1]] * 2,
                                  dilation=dilation, ceil_mode=ceil))


def _avg_pool2d(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    kernel = _pair(args[1])
    stride = _pair(args[2]) if len(args) > 2 and args[2] else kernel
    padding = _pair(args[3] if len(args) > 3 else 0)
    ceil = bool(args[4]) if len(args) > 4 else False
    include_pad = bool(args[5]) if len(args) > 5 else True
    return cx.emit(nn.AvgPool2DOp(args[0], kernel, strides=stride, padding=[padding[0], padding[1]] * 2,
                                  ceil_mode=ceil, count_include_pad=include_pad))


def _adaptive_avg_pool2d(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    if list(_pair(args[1])) != [1, 1]:
        raise NotImplementedError("adaptive average pooling to a size other than 1x1")
    return cx.emit(nn.GlobalAvgPool2DOp(args[0]))


def _reshape(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    shape = cx.output_shape(node)
    if list(args[0].type.get_shape()) == shape and nn.DYN not in shape:
        return args[0]
    if shape.count(nn.DYN) > 1:
        raise NotImplementedError("a reshape with more than one dynamic dimension")
    return cx.emit(nn.ReshapeOp(args[0], shape))


def _permute(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    rank = len(args[0].type.get_shape())
    return cx.emit(nn.TransposeOp(args[0], [d % rank for d in args[1]]))


def _transpose(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    rank = len(args[0].type.get_shape())
    perm = list(range(rank))
    a, b = args[1] % rank, args[2] % rank
    perm[a], perm[b] = perm[b], perm[a]
    return cx.emit(nn.TransposeOp(args[0], perm))


def _t(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    return cx.emit(nn.TransposeOp(args[0], [1, 0]))


def _unbind(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> list[SSAValue]:
    x = args[0]
    dim = args[1] if len(args) > 1 else 0
    shape = list(x.type.get_shape())
    dim %= len(shape)
    pieces = []
    for index in range(shape[dim]):
        begin = [0] * len(shape)
        end = [d if d != nn.DYN else np.iinfo(np.int64).max for d in shape]
        begin[dim], end[dim] = index, index + 1
        sliced = cx.emit(nn.StridedSliceOp(x, begin, end, [1] * len(shape)))
        pieces.append(cx.emit(nn.ReshapeOp(sliced, shape[:dim] + shape[dim + 1:])))
    return pieces


def _getitem(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    return args[0][args[1]]


def _cat(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    rank = len(args[0][0].type.get_shape())
    return cx.emit(nn.ConcatenateOp(list(args[0]), dim % rank))


def _reduction(cls: type[Operation]) -> Converter:
    def convert(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
        x = args[0]
        rank = len(x.type.get_shape())
        dims = args[1] if len(args) > 1 and args[1] is not None else list(range(rank))
        dims = [dims] if isinstance(dims, int) else list(dims)
        keepdim = bool(args[2]) if len(args) > 2 else bool(kwargs.get("keepdim", False))
        return cx.emit(cls(x, [d % rank for d in dims], keepdims=keepdim))

    return convert


def _sdpa(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """softmax(q kᵀ · scale + mask) v, as nn ops the partitioner can fuse or place."""
    q, k, v = args[:3]
    mask = args[3] if len(args) > 3 else kwargs.get("attn_mask")
    dropout = args[4] if len(args) > 4 else kwargs.get("dropout_p", 0.0)
    causal = args[5] if len(args) > 5 else kwargs.get("is_causal", False)
    scale = kwargs.get("scale") if len(args) <= 6 else args[6]
    if dropout:
        raise NotImplementedError("attention dropout (export the model in eval mode)")
    if kwargs.get("enable_gqa"):
        raise NotImplementedError("grouped-query attention through enable_gqa")
    q_shape, k_shape = list(q.type.get_shape()), list(k.type.get_shape())
    rank = len(k_shape)
    depth = q_shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(depth)
    perm = list(range(rank))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    scores = cx.emit(nn.MatmulOp(q, cx.emit(nn.TransposeOp(k, perm))))
    scores = cx.emit(nn.MultiplyOp(scores, cx.constant(float(scale), q)))
    if causal:
        rows, cols = q_shape[-2], k_shape[-2]
        if nn.DYN in (rows, cols):
            raise NotImplementedError("causal attention with a dynamic sequence length")
        dtype = np.float32
        bias = np.triu(np.full((rows, cols), -np.inf, dtype=dtype), k=1)
        scores = cx.emit(nn.AddOp(scores, cx.constant(bias.astype(dtype))))
    if mask is not None:
        mask_type = mask.type.element_type  # type: ignore[attr-defined]
        if str(mask_type) == "i1":  # True keeps a position
            neg = cx.constant(np.asarray(-np.inf, np.float32))
            scores = cx.emit(nn.WhereOp(mask, scores, neg))
        else:
            scores = cx.emit(nn.AddOp(scores, mask))
    probs = cx.emit(nn.SoftmaxOp(scores, axis=rank - 1))
    return cx.emit(nn.MatmulOp(probs, v))


def _flatten(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    return _reshape(cx, node, args, kwargs)


ATEN_CONVERTERS: dict[str, Converter] = {
    "aten.linear.default": _linear,
    "aten.addmm.default": _addmm,
    "aten.mm.default": _matmul,
    "aten.bmm.default": _matmul,
    "aten.matmul.default": _matmul,
    "aten.conv2d.default": _conv2d,
    "aten.batch_norm.default": _batch_norm,
    "aten._native_batch_norm_legit_no_training.default": lambda cx, node, args, kwargs: [
        _batch_norm(cx, node, [*args[:5], False, args[5], args[6]], kwargs)],
    "aten.layer_norm.default": _layer_norm,
    "aten.softmax.int": _softmax,
    "aten._softmax.default": _softmax,
    "aten.gelu.default": _gelu,
    "aten.relu.default": _unary(nn.ReluOp),
    "aten.relu_.default": _unary(nn.ReluOp),
    "aten.sigmoid.default": _unary(nn.SigmoidOp),
    "aten.tanh.default": _unary(nn.TanhOp),
    "aten.exp.default": _unary(nn.ExpOp),
    "aten.sqrt.default": _unary(nn.SqrtOp),
    "aten.rsqrt.default": lambda cx, node, args, kwargs: cx.emit(nn.ReciprocalOp(cx.emit(nn.SqrtOp(args[0])))),
    "aten.neg.default": _unary(nn.NegOp),
    "aten.silu.default": _unary(nn.SwishOp),
    "aten.hardtanh.default": lambda cx, node, args, kwargs: cx.emit(
        nn.ClipOp(args[0], args[1] if len(args) > 1 else -1.0, args[2] if len(args) > 2 else 1.0)),
    "aten.add.Tensor": _binary(nn.AddOp),
    "aten.sub.Tensor": _binary(nn.SubtractOp),
    "aten.mul.Tensor": _binary(nn.MultiplyOp),
    "aten.div.Tensor": _binary(nn.DivideOp),
    "aten.maximum.default": _binary(nn.MaximumOp),
    "aten.minimum.default": _binary(nn.MinimumOp),
    "aten.max_pool2d.default": _max_pool2d,
    "aten.avg_pool2d.default": _avg_pool2d,
    "aten.adaptive_avg_pool2d.default": _adaptive_avg_pool2d,
    "aten.reshape.default": _reshape,
    "aten.view.default": _reshape,
    "aten._unsafe_view.default": _reshape,
    "aten.flatten.using_ints": _flatten,
    "aten.squeeze.dim": _reshape,
    "aten.unsqueeze.default": _reshape,
    "aten.permute.default": _permute,
    "aten.transpose.int": _transpose,
    "aten.t.default": _t,
    "aten.unbind.int": _unbind,
    "getitem": _getitem,
    "aten.cat.default": _cat,
    "aten.mean.dim": _reduction(nn.ReduceMeanOp),
    "aten.sum.dim_IntList": _reduction(nn.ReduceSumOp),
    "aten.amax.default": _reduction(nn.ReduceMaxOp),
    "aten.sum.default": _reduction(nn.ReduceSumOp),
    "aten.mean.default": _reduction(nn.ReduceMeanOp),
    "aten.scaled_dot_product_attention.default": _sdpa,
    "aten.dropout.default": _identity,
    "aten.contiguous.default": _identity,
    "aten.clone.default": _identity,
    "aten.alias.default": _identity,
    "aten.detach.default": _identity,
}


def import_exported_program(program: Any, source: str = "torch.export") -> ModuleOp:
    """The ``nn`` module of an ``ExportedProgram`` (its entry is ``@main``)."""
    return _Importer(program, source).run()
