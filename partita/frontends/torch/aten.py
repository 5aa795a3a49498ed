"""ATen ops of a ``torch.export`` graph as ``nn`` ops: one converter per ATen overload,
``(importer, node, args, kwargs) -> value(s)``, in ``ATEN_CONVERTERS`` by the overload's
name (``aten.add.Tensor``). Arguments arrive converted: graph nodes as their IR values,
Python numbers and lists as they are. Dtypes follow torch's promotion: each converter reads
its result's dtype and shape from the node's fake tensor (``node.meta["val"]``), so a mixed
``int * float`` or ``mask == 0`` computes in the type torch computes in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Operation, SSAValue

from partita.dialects import nn
from partita.dialects.nn.base import element_type_of, numpy_dtype
from partita.frontends.einsum import lower_einsum

if TYPE_CHECKING:  # pragma: no cover
    from partita.frontends.torch.importer import _Importer

__all__ = ["ATEN_CONVERTERS", "first_result", "np_dtype", "static_dims"]

Converter = Callable[["_Importer", Any, list[Any], dict[str, Any]], Any]

INT64_MAX = 2**63 - 1


def np_dtype(torch_dtype: Any) -> np.dtype:
    """The NumPy dtype of a torch dtype."""
    import torch

    return torch.empty((), dtype=torch_dtype).numpy().dtype


def static_dims(shape: Sequence[Any]) -> list[int]:
    """Static dims as ints, symbolic ones (``torch.export.Dim``) as ``?``."""
    return [int(d) if isinstance(d, int) or str(d).isdigit() else nn.DYN for d in shape]


def first_result(node: Any) -> Any:
    """The fake tensor of the node's result, the first of several (``native_batch_norm``'s)."""
    val = node.meta["val"]
    return val[0] if isinstance(val, (list, tuple)) else val


def _out_dtype(node: Any) -> np.dtype:
    """The dtype of the node's (first) result, as torch computed it."""
    return np_dtype(first_result(node).dtype)


def _dtype_of(v: SSAValue) -> np.dtype:
    return numpy_dtype(v.type.element_type)  # type: ignore[attr-defined]


def _shape(v: SSAValue) -> list[int]:
    return list(v.type.get_shape())  # type: ignore[attr-defined]


def _bound(index: int, size: int, low: int = 0) -> int:
    """A Python slice bound along an axis of ``size``: a negative one counts from the
    end, and it is clamped into ``[low, size]``."""
    return max(low, min(size, index + size if index < 0 else index))


def _axis_slice(cx: _Importer, x: SSAValue, dim: int, lo: int, hi: int, step: int = 1,
                shape: list[int] | None = None) -> SSAValue:
    """``x[..., lo:hi:step, ...]`` along ``dim``, the other axes whole; ``shape`` is the
    result's (by default the axis ``hi - lo`` long: a unit step between static bounds)."""
    full = _shape(x)
    begin, stop, strides = [0] * len(full), [d if d != nn.DYN else INT64_MAX for d in full], [1] * len(full)
    begin[dim], stop[dim], strides[dim] = lo, hi, step
    if shape is None:
        shape = list(full)
        shape[dim] = hi - lo
    return cx.emit(nn.StridedSliceOp(x, begin, stop, strides,
                                     result_type=TensorType(x.type.element_type, shape)))  # type: ignore[attr-defined]


def _splat(cx: _Importer, node: Any, value: Any) -> SSAValue:
    """``value`` in the node's shape and dtype: a constant where the shape is static, else a
    broadcast to the input dims its run-time dims are."""
    shape, refs = cx.sized_shape(node)
    dtype = _out_dtype(node)
    if nn.DYN not in shape:
        return cx.constant(np.full(shape, value, dtype=dtype))
    if shape.count(nn.DYN) > len(refs):
        raise NotImplementedError("a splat of a size that is no input's dim")
    return cx.emit(nn.BroadcastToOp(cx.constant(np.asarray(value, dtype=dtype)), shape, refs=refs))


def _as(cx: _Importer, v: Any, dtype: np.dtype) -> SSAValue:
    """``v`` (an IR value or a Python number) as a tensor of ``dtype``."""
    if not isinstance(v, SSAValue):
        return cx.constant(np.asarray(v, dtype=dtype))
    if _dtype_of(v) == dtype:
        return v
    return cx.emit(nn.CastOp(v, element_type_of(dtype)))


def _common_dtype(values: Sequence[Any]) -> np.dtype:
    """torch's promotion of tensors and Python numbers (a number promotes only across
    kinds: an int tensor and a float number compute in the default float)."""
    import torch

    tensors = [torch.empty((), dtype=_torch_dtype(_dtype_of(v))) for v in values if isinstance(v, SSAValue)]
    numbers = [v for v in values if not isinstance(v, SSAValue)]
    return np_dtype(torch.result_type(*(tensors + numbers)) if len(tensors) + len(numbers) > 1 else
                    tensors[0].dtype)


def _torch_dtype(dtype: np.dtype) -> Any:
    import torch

    if dtype.name == "bfloat16":
        return torch.bfloat16
    return torch.from_numpy(np.zeros((), dtype)).dtype


def _binary(cls: type[Operation]) -> Converter:
    """An element-wise binary op in the result's dtype (``alpha`` scales the second
    operand: ``add`` / ``sub``)."""

    def convert(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
        dtype = _out_dtype(node)
        lhs, rhs = _as(cx, args[0], dtype), _as(cx, args[1], dtype)
        alpha = kwargs.get("alpha", 1)
        if alpha != 1:
            rhs = cx.emit(nn.MultiplyOp(rhs, _as(cx, alpha, dtype)))
        return cx.emit(cls(lhs, rhs))

    return convert


def _compare(cls: type[Operation], negate: bool = False) -> Converter:
    """A comparison in the operands' common dtype (``ne``: not ``eq``)."""

    def convert(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
        dtype = _common_dtype(args[:2])
        out = cx.emit(cls(_as(cx, args[0], dtype), _as(cx, args[1], dtype)))
        return cx.emit(nn.NotOp(out)) if negate else out

    return convert


def _bitwise(logical: type[Operation], bitwise: type[Operation]) -> Converter:
    """``&`` / ``|`` / ``^``: logical on booleans (masks), bitwise on integers."""

    def convert(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
        dtype = _out_dtype(node)
        cls = logical if dtype == np.dtype(np.bool_) else bitwise
        return cx.emit(cls(_as(cx, args[0], dtype), _as(cx, args[1], dtype)))

    return convert


def _unary_float(cls: type[Operation]) -> Converter:
    """A float function of one operand (an int tensor computes in the default float, as torch)."""
    return lambda cx, node, args, kwargs: cx.emit(cls(_as(cx, args[0], _out_dtype(node))))


def _unary(cls: type[Operation], **props: Any) -> Converter:
    return lambda cx, node, args, kwargs: cx.emit(cls(args[0], **props))


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
    """A global average at 1x1; the input itself at its own size (VGG's 7x7 of 7x7); an
    average pool of ``in / out`` windows where the output size divides the input's."""
    x, out = args[0], _pair(args[1])
    if out == [1, 1]:
        return cx.emit(nn.GlobalAvgPool2DOp(x))
    h, w = _shape(x)[2:]
    if [h, w] == out:
        return x
    if nn.DYN in (h, w) or h % out[0] or w % out[1]:
        raise NotImplementedError(f"adaptive average pooling of {h}x{w} to {out[0]}x{out[1]}")
    kernel = [h // out[0], w // out[1]]
    return cx.emit(nn.AvgPool2DOp(x, kernel, strides=kernel, padding=[0, 0, 0, 0], ceil_mode=False,
                                  count_include_pad=True))


def _reshape(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``view`` / ``reshape`` / ``squeeze`` / ``unsqueeze`` / ``flatten`` to the node's
    shape; its symbolic dims sized by the inputs' dims they are (one compound dim inferred)."""
    shape, refs = cx.sized_shape(node)
    if _shape(args[0]) == shape and nn.DYN not in shape:
        return args[0]
    if shape.count(nn.DYN) - len(refs) > 1:
        raise NotImplementedError("a reshape with more than one dynamic dimension that is no input's")
    return cx.emit(nn.ReshapeOp(args[0], shape, refs=refs if shape.count(nn.DYN) > 1 else ()))


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
    shape = _shape(x)
    dim %= len(shape)
    return [cx.emit(nn.ReshapeOp(_axis_slice(cx, x, dim, index, index + 1), shape[:dim] + shape[dim + 1:]))
            for index in range(shape[dim])]


def _getitem(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    return args[0][args[1]]


def _cat(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``torch.cat``, which skips 1-D empty tensors beside others (a decoder's empty cache)."""
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    rank = len(cx.output_shape(node))
    tensors = [t for t in args[0] if not (_shape(t) == [0] and rank > 1)]
    if len(tensors) == 1:
        return tensors[0]
    return cx.emit(nn.ConcatenateOp(tensors, dim % rank))


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


def _rsub(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``other - alpha * x`` (``1 - mask``)."""
    dtype = _out_dtype(node)
    x = _as(cx, args[0], dtype)
    alpha = kwargs.get("alpha", 1)
    if alpha != 1:
        x = cx.emit(nn.MultiplyOp(x, _as(cx, alpha, dtype)))
    return cx.emit(nn.SubtractOp(_as(cx, args[1], dtype), x))


def _pow(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    dtype = _out_dtype(node)
    base, exponent = args[0], args[1]
    if not isinstance(exponent, SSAValue) and float(exponent) == 2.0:  # RMSNorm's x * x
        base = _as(cx, base, dtype)
        return cx.emit(nn.MultiplyOp(base, base))
    if not isinstance(exponent, SSAValue) and float(exponent) == 0.5:
        return cx.emit(nn.SqrtOp(_as(cx, base, dtype)))
    return cx.emit(nn.PowOp(_as(cx, base, dtype), _as(cx, exponent, dtype)))


def _rsqrt(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    return cx.emit(nn.ReciprocalOp(cx.emit(nn.SqrtOp(_as(cx, args[0], _out_dtype(node))))))


def _cast(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``to`` / ``_to_copy`` / ``type_as``: a cast to the result's dtype (a device move is none)."""
    return _as(cx, args[0], _out_dtype(node))


def _constant_result(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """A tensor of the node's static shape and dtype whose values torch computed while
    exporting (``zeros``, ``ones``, ``full``, ``arange`` of constant bounds): what the node's
    arguments make of no graph value."""
    import torch

    if any(isinstance(a, SSAValue) for a in [*args, *kwargs.values()]):
        raise NotImplementedError("a tensor factory of run-time arguments")
    shape = cx.output_shape(node)
    if nn.DYN in shape:
        return _sized_factory(cx, node, args, kwargs)
    op = node.target
    kwargs = {k: v for k, v in kwargs.items() if k not in ("device", "pin_memory", "layout")}
    with torch.device("cpu"):
        value = op(*args, **kwargs)
    return cx.constant(value)


def _sized_factory(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """A factory of a symbolic size: ``arange(n)`` of an input's dim (``nn.arange``), or a
    splat (``zeros`` / ``ones`` / ``full``) broadcast to input dims."""
    shape, refs = cx.sized_shape(node)
    if shape.count(nn.DYN) > len(refs):
        raise NotImplementedError("a tensor factory of a size that is no input's dim")
    dtype = _out_dtype(node)
    name = str(node.target)
    if "arange" in name:
        numbers = [a for a in args if not isinstance(a, SSAValue)]
        start, step = (0, 1) if name.endswith("default") else (numbers[0], numbers[2] if len(numbers) > 2 else 1)
        if step != 1 or not isinstance(start, int):
            raise NotImplementedError("an arange of a run-time length with a start or step")
        return cx.emit(nn.ArangeOp(start, 1, nn.DYN, element_type_of(dtype), refs=refs))
    return _splat(cx, node, 0 if "zeros" in name else 1 if "ones" in name else args[1])


def _like(fill: float | None) -> Converter:
    """``zeros_like`` / ``ones_like`` / ``full_like``: a splat of the input's shape."""
    return lambda cx, node, args, kwargs: _splat(cx, node, args[1] if fill is None else fill)


def _full_tensor(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``new_zeros`` / ``new_ones`` / ``new_full``: a splat of the given size (run-time dims
    sized by the input dims they are, as the other factories')."""
    name = str(node.target)
    return _splat(cx, node, 0 if "zeros" in name else 1 if "ones" in name else args[2])


def _slice(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``x[..., start:end:step, ...]`` along ``dim`` (ends past the dim clamp to it)."""
    x = args[0]
    dim = args[1] if len(args) > 1 else 0
    start = args[2] if len(args) > 2 and args[2] is not None else 0
    end = args[3] if len(args) > 3 and args[3] is not None else INT64_MAX
    step = args[4] if len(args) > 4 else 1
    shape = _shape(x)
    dim %= len(shape)
    size = shape[dim]
    if size != nn.DYN:
        start = _bound(start, size)
        end = _bound(end, size, start)
        if (start, end, step) == (0, size, 1):
            return x
    return _axis_slice(cx, x, dim, start, end, step, cx.output_shape(node))


def _select(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``x[..., index, ...]``: a slice of one, the axis dropped."""
    x, dim, index = args[0], args[1], args[2]
    dim %= len(_shape(x))
    shape = _shape(x)
    size = shape[dim]
    if index < 0:
        if size == nn.DYN:
            raise NotImplementedError("a negative index along a run-time dim")
        index += size
    return cx.emit(nn.ReshapeOp(_axis_slice(cx, x, dim, index, index + 1), cx.output_shape(node)))


def _split(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> list[SSAValue]:
    """``split`` / ``split_with_sizes`` / ``chunk``: the pieces torch made, as slices."""
    x = args[0]
    dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
    dim %= len(_shape(x))
    pieces, start = [], 0
    for val in node.meta["val"]:
        size = static_dims(val.shape)[dim]
        if size == nn.DYN:
            raise NotImplementedError("a split of a run-time dim")
        pieces.append(_axis_slice(cx, x, dim, start, start + size, shape=static_dims(val.shape)))
        start += size
    return pieces


def _expand(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    x = args[0]
    shape, refs = cx.sized_shape(node)
    if _shape(x) == shape:
        return x
    if shape.count(nn.DYN) > len(refs):
        raise NotImplementedError("an expand to a size that is no input's dim")
    return cx.emit(nn.BroadcastToOp(x, shape, refs=refs))


def _repeat(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    x, repeats = args[0], list(args[1])
    shape = _shape(x)
    if len(repeats) > len(shape):  # leading new axes first
        x = cx.emit(nn.ReshapeOp(x, [1] * (len(repeats) - len(shape)) + shape))
    return cx.emit(nn.TileOp(x, repeats))


def _embedding(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    weight, indices = args[0], args[1]
    return cx.emit(nn.TakeOp(weight, indices, 0))


def _index_select(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    x, dim, index = args[0], args[1], args[2]
    return cx.emit(nn.TakeOp(x, index, dim % len(_shape(x))))


def _index(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``x[i0, i1, ...]``, advanced indexing by integer tensors (``None``: a full slice): one
    index tensor is a gather along its axis; several broadcast together and gather points
    (``nn.gather_nd`` over the indexed axes moved to the front). As in NumPy, the broadcast
    dims stand where the indexed axes were when those are adjacent, else first."""
    x, indices = args[0], list(args[1])
    rank = len(_shape(x))
    given = [k for k, i in enumerate(indices) if i is not None]
    if any(_dtype_of(indices[k]) == np.dtype(np.bool_) for k in given):
        raise NotImplementedError("indexing by a boolean mask (a data-dependent shape)")
    if len(given) == 1:
        return cx.emit(nn.TakeOp(x, indices[given[0]], given[0]))
    import torch

    fakes = [node.args[1][k].meta["val"] for k in given]
    common, refs = cx.sized_dims(torch.broadcast_shapes(*(f.shape for f in fakes)))
    if common.count(nn.DYN) > len(refs):
        raise NotImplementedError("index tensors broadcast to a size that is no input's dim")
    points = []
    for k in given:
        index = _as(cx, indices[k], np.dtype(np.int64))
        if _shape(index) != common or nn.DYN in common:
            index = cx.emit(nn.BroadcastToOp(index, common, refs=refs))
        points.append(cx.emit(nn.ReshapeOp(index, [*common, 1], refs=refs if common.count(nn.DYN) > 1 else ())))
    rest = [k for k in range(rank) if k not in given]
    if given != list(range(len(given))):
        x = cx.emit(nn.TransposeOp(x, given + rest))
    out = cx.emit(nn.GatherNDOp(x, cx.emit(nn.ConcatenateOp(points, len(common)))))
    adjacent = given == list(range(given[0], given[0] + len(given)))
    if adjacent and given[0] > 0:  # the broadcast dims back where the indexed axes were
        lead, width = given[0], len(common)
        perm = list(range(width, width + lead)) + list(range(width)) + list(range(width + lead, width + len(rest)))
        out = cx.emit(nn.TransposeOp(out, perm))
    return out


def _gather(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    x, dim, index = args[0], args[1], args[2]
    return cx.emit(nn.GatherElementsOp(x, index, dim % len(_shape(x))))


def _where(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    dtype = _out_dtype(node)
    return cx.emit(nn.WhereOp(args[0], _as(cx, args[1], dtype), _as(cx, args[2], dtype)))


def _masked_fill(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    x, mask, value = args[0], args[1], args[2]
    return cx.emit(nn.WhereOp(mask, _as(cx, value, _dtype_of(x)), x))


def _clamp(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``clamp`` / ``clamp_min`` / ``clamp_max`` by numbers."""
    x = _as(cx, args[0], _out_dtype(node))
    name = str(node.target)
    low = args[1] if "max" not in name.split(".")[1] else None
    high = args[2] if len(args) > 2 else (args[1] if "clamp_max" in name else None)
    if isinstance(low, SSAValue) or isinstance(high, SSAValue):
        lo = x if low is None else cx.emit(nn.MaximumOp(x, _as(cx, low, _dtype_of(x))))
        return lo if high is None else cx.emit(nn.MinimumOp(lo, _as(cx, high, _dtype_of(x))))
    return cx.emit(nn.ClipOp(x, None if low is None else float(low), None if high is None else float(high)))


def _tril_triu(upper: bool) -> Converter:
    return lambda cx, node, args, kwargs: cx.emit(nn.TriluOp(args[0], int(args[1]) if len(args) > 1 else 0,
                                                             upper=upper))


def _pad(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``F.pad``: (before, after) pairs from the last axis backwards."""
    x, pads = args[0], list(args[1])
    mode = args[2] if len(args) > 2 else kwargs.get("mode", "constant")
    value = args[3] if len(args) > 3 else kwargs.get("value")
    rank = len(_shape(x))
    before, after = [0] * rank, [0] * rank
    for k in range(len(pads) // 2):
        before[rank - 1 - k], after[rank - 1 - k] = pads[2 * k], pads[2 * k + 1]
    if any(p < 0 for p in before + after):
        raise NotImplementedError("negative padding (a crop)")
    modes = {"constant": None, "reflect": "reflect", "replicate": "edge", "circular": "wrap"}
    if mode not in modes:
        raise NotImplementedError(f"padding mode '{mode}'")
    return cx.emit(nn.PadOp(x, before, after, pad_value=None if value is None else float(value), mode=modes[mode]))


def _constant_pad(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    return _pad(cx, node, [args[0], args[1], "constant", args[2] if len(args) > 2 else 0.0], {})


def _upsample(mode: str) -> Converter:
    """``F.interpolate`` (bilinear / nearest): ``Resize`` to the output's static size."""

    def convert(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
        x = args[0]
        align_corners = bool(args[2]) if mode == "linear" and len(args) > 2 else False
        sizes = cx.output_shape(node)
        if any(o == nn.DYN and i != nn.DYN for o, i in zip(sizes, _shape(x))) or nn.DYN in sizes[2:]:
            raise NotImplementedError("an upsample to a run-time size")
        transform = "align_corners" if align_corners else "half_pixel" if mode == "linear" else "asymmetric"
        scales = [1.0 if o == nn.DYN else o / i for o, i in zip(sizes, _shape(x))]  # a run-time batch copies
        sizes = [-1 if o == nn.DYN else o for o in sizes]  # Resize's copied run-time dim
        return cx.emit(nn.ResizeOp(x, sizes, scales, mode=mode, coordinate_transformation_mode=transform,
                                   nearest_mode="floor" if mode == "nearest" else None))

    return convert


def _stack(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    tensors = list(args[0])
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    rank = len(_shape(tensors[0])) + 1
    dim %= rank
    expanded = [cx.emit(nn.ReshapeOp(t, _shape(t)[:dim] + [1] + _shape(t)[dim:])) for t in tensors]
    return cx.emit(nn.ConcatenateOp(expanded, dim))


def _roll(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``torch.roll``: per axis, the last ``shift`` entries moved to the front (two slices
    and a concatenation)."""
    x = args[0]
    shifts = [args[1]] if isinstance(args[1], int) else list(args[1])
    dims = [args[2]] if len(args) > 2 and isinstance(args[2], int) else list(args[2]) if len(args) > 2 else []
    if not dims:
        raise NotImplementedError("roll of the flattened tensor")
    for shift, dim in zip(shifts, dims):
        shape = _shape(x)
        dim %= len(shape)
        size = shape[dim]
        if size == nn.DYN:
            raise NotImplementedError("a roll along a run-time dim")
        shift %= size
        if shift == 0:
            continue
        parts = [_axis_slice(cx, x, dim, lo, hi) for lo, hi in ((size - shift, size), (0, size - shift))]
        x = cx.emit(nn.ConcatenateOp(parts, dim))
    return x


def _cumsum(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    x = _as(cx, args[0], _out_dtype(node))
    return cx.emit(nn.CumSumOp(x, args[1] % len(_shape(x))))


def _log_softmax(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    return cx.emit(nn.LogSoftmaxOp(args[0], axis=int(args[1]) % len(_shape(args[0]))))


def _vector_norm(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``linalg.vector_norm`` of order 2 (``F.normalize``)."""
    x = args[0]
    order = args[1] if len(args) > 1 else kwargs.get("ord", 2)
    if float(order) != 2.0:
        raise NotImplementedError(f"a vector norm of order {order}")
    rank = len(_shape(x))
    dims = args[2] if len(args) > 2 else kwargs.get("dim")
    dims = list(range(rank)) if dims is None else [dims] if isinstance(dims, int) else list(dims)
    keepdim = bool(args[3]) if len(args) > 3 else bool(kwargs.get("keepdim", False))
    return cx.emit(nn.ReduceL2Op(x, [d % rank for d in dims], keepdims=keepdim))


def _group_norm(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    x, groups = args[0], int(args[1])
    channels = _shape(x)[1]
    weight = args[2] if len(args) > 2 and args[2] is not None else cx.constant(np.ones(channels, _dtype_of(x)))
    bias = args[3] if len(args) > 3 and args[3] is not None else cx.constant(np.zeros(channels, _dtype_of(x)))
    eps = args[4] if len(args) > 4 else 1e-5
    return cx.emit(nn.GroupNormOp(x, weight, bias, groups, epsilon=float(eps)))


def _argmax(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    if dim is None:
        x = cx.emit(nn.ReshapeOp(x, [math.prod(_shape(x))]))
        dim = 0
    keepdim = bool(args[2]) if len(args) > 2 else bool(kwargs.get("keepdim", False))
    return cx.emit(nn.ArgMaxOp(x, axis=dim % len(_shape(x)), keepdims=keepdim))


def _leaky_relu(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    return cx.emit(nn.LeakyReluOp(args[0], alpha=float(args[1]) if len(args) > 1 else 0.01))


def _elu(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    return cx.emit(nn.EluOp(args[0], alpha=float(args[1]) if len(args) > 1 else 1.0))


def _adaptive_avg_pool1d(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    size = args[1] if isinstance(args[1], int) else list(args[1])[0]
    if size != 1:
        raise NotImplementedError("adaptive average pooling to a size other than 1")
    x = args[0]
    return cx.emit(nn.ReduceMeanOp(x, [len(_shape(x)) - 1], keepdims=True))


def _slice_scatter(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``x`` with ``x[..., start:end, ...]`` (step 1) replaced by ``src``: the slices before
    and after, concatenated around ``src`` (what a functionalized in-place write is)."""
    x, src = args[0], args[1]
    dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
    start = args[3] if len(args) > 3 else kwargs.get("start")
    end = args[4] if len(args) > 4 else kwargs.get("end")
    step = args[5] if len(args) > 5 else kwargs.get("step", 1)
    shape = _shape(x)
    dim %= len(shape)
    size = shape[dim]
    if size == nn.DYN or step != 1:
        raise NotImplementedError("a slice_scatter along a run-time dim or with a step")
    start = 0 if start is None else _bound(start, size)
    end = size if end is None else _bound(end, size, start)
    src = _as(cx, src, _dtype_of(x))
    pieces = ([_axis_slice(cx, x, dim, 0, start)] if start > 0 else []) + [src] + \
        ([_axis_slice(cx, x, dim, end, size)] if end < size else [])
    return pieces[0] if len(pieces) == 1 else cx.emit(nn.ConcatenateOp(pieces, dim))


def _select_scatter(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``x`` with ``x[..., index, ...]`` replaced by ``src`` (one axis fewer): a slice scatter
    of ``src`` with the axis back."""
    x, src, dim, index = args[0], args[1], args[2], args[3]
    shape = _shape(x)
    dim %= len(shape)
    if shape[dim] == nn.DYN:
        raise NotImplementedError("a select_scatter along a run-time dim")
    index %= shape[dim]
    src = cx.emit(nn.ReshapeOp(src, _shape(src)[:dim] + [1] + _shape(src)[dim:]))
    return _slice_scatter(cx, node, [x, src, dim, index, index + 1], {})


def _fill(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``x.fill_(v)`` made functional: ``v`` (a number or a 0-d tensor) in ``x``'s shape."""
    x, value = args[0], args[1]
    shape, refs = cx.sized_shape(node)
    if shape.count(nn.DYN) > len(refs):
        raise NotImplementedError("a fill of a size that is no input's dim")
    return cx.emit(nn.BroadcastToOp(_as(cx, value, _dtype_of(x)), shape, refs=refs))


def _max_pool2d_with_indices(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> list[Any]:
    """The pooled values (the indices, for a backward pass, are not computed)."""
    return [_max_pool2d(cx, node, args, kwargs), None]


def _repeat_interleave(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """Each entry along ``dim`` ``repeats`` times in a row (GQA's KV heads): a new axis after
    ``dim`` broadcast to ``repeats``, merged back."""
    x, repeats = args[0], args[1]
    dim = args[2] if len(args) > 2 and args[2] is not None else kwargs.get("dim")
    if isinstance(repeats, SSAValue) or dim is None:
        raise NotImplementedError("repeat_interleave by a tensor of counts, or of the flattened tensor")
    shape = _shape(x)
    dim %= len(shape)
    if nn.DYN in shape:
        raise NotImplementedError("repeat_interleave of a tensor of run-time size")
    spread = shape[:dim + 1] + [1] + shape[dim + 1:]
    wide = shape[:dim + 1] + [int(repeats)] + shape[dim + 1:]
    y = cx.emit(nn.BroadcastToOp(cx.emit(nn.ReshapeOp(x, spread)), wide))
    return cx.emit(nn.ReshapeOp(y, cx.output_shape(node)))


def _einsum(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> SSAValue:
    """``torch.einsum``: the lowering the ONNX frontend shares (``partita.frontends.einsum``)."""
    return lower_einsum(args[0], list(args[1]), cx.emit, cx.constant)


def _no_result(cx: _Importer, node: Any, args: list[Any], kwargs: dict[str, Any]) -> None:
    """A check torch.export leaves in the graph (``_assert_tensor_metadata``): nothing to run."""
    return None


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
    "aten.add.Scalar": _binary(nn.AddOp),
    "aten.sub.Scalar": _binary(nn.SubtractOp),
    "aten.mul.Scalar": _binary(nn.MultiplyOp),
    "aten.div.Scalar": _binary(nn.DivideOp),
    "aten.rsub.Scalar": _rsub,
    "aten.rsub.Tensor": _rsub,
    "aten.pow.Tensor_Scalar": _pow,
    "aten.pow.Tensor_Tensor": _pow,
    "aten.eq.Tensor": _compare(nn.EqualOp),
    "aten.eq.Scalar": _compare(nn.EqualOp),
    "aten.ne.Tensor": _compare(nn.EqualOp, negate=True),
    "aten.ne.Scalar": _compare(nn.EqualOp, negate=True),
    "aten.lt.Tensor": _compare(nn.LessOp),
    "aten.lt.Scalar": _compare(nn.LessOp),
    "aten.le.Tensor": _compare(nn.LessEqualOp),
    "aten.le.Scalar": _compare(nn.LessEqualOp),
    "aten.gt.Tensor": _compare(nn.GreaterOp),
    "aten.gt.Scalar": _compare(nn.GreaterOp),
    "aten.ge.Tensor": _compare(nn.GreaterEqualOp),
    "aten.ge.Scalar": _compare(nn.GreaterEqualOp),
    "aten.logical_not.default": _unary(nn.NotOp),
    "aten.bitwise_not.default": lambda cx, node, args, kwargs: cx.emit(
        (nn.NotOp if _dtype_of(args[0]) == np.dtype(np.bool_) else nn.BitwiseNotOp)(args[0])),
    "aten.logical_and.default": _binary(nn.AndOp),
    "aten.logical_or.default": _binary(nn.OrOp),
    "aten.bitwise_and.Tensor": _bitwise(nn.AndOp, nn.BitwiseAndOp),
    "aten.bitwise_and.Scalar": _bitwise(nn.AndOp, nn.BitwiseAndOp),
    "aten.__and__.Tensor": _bitwise(nn.AndOp, nn.BitwiseAndOp),
    "aten.bitwise_or.Tensor": _bitwise(nn.OrOp, nn.BitwiseOrOp),
    "aten.bitwise_or.Scalar": _bitwise(nn.OrOp, nn.BitwiseOrOp),
    "aten.__or__.Tensor": _bitwise(nn.OrOp, nn.BitwiseOrOp),
    "aten.__and__.Scalar": _bitwise(nn.AndOp, nn.BitwiseAndOp),
    "aten.__or__.Scalar": _bitwise(nn.OrOp, nn.BitwiseOrOp),
    "aten.__xor__.Tensor": _bitwise(nn.XorOp, nn.BitwiseXorOp),
    "aten.bitwise_xor.Scalar": _bitwise(nn.XorOp, nn.BitwiseXorOp),
    "aten.bitwise_xor.Tensor": _bitwise(nn.XorOp, nn.BitwiseXorOp),
    "aten.cos.default": _unary_float(nn.CosOp),
    "aten.sin.default": _unary_float(nn.SinOp),
    "aten.log.default": _unary_float(nn.LogOp),
    "aten.erf.default": _unary_float(nn.ErfOp),
    "aten.reciprocal.default": _unary_float(nn.ReciprocalOp),
    "aten.abs.default": _unary(nn.AbsOp),
    "aten.floor.default": _unary(nn.FloorOp),
    "aten.ceil.default": _unary(nn.CeilOp),
    "aten.sign.default": _unary(nn.SignOp),
    "aten.hardswish.default": _unary(nn.HardSwishOp),
    "aten.hardsigmoid.default": lambda cx, node, args, kwargs: cx.emit(nn.HardSigmoidOp(args[0], alpha=1 / 6, beta=0.5)),
    "aten.softplus.default": _unary(nn.SoftplusOp),
    "aten.mish.default": _unary(nn.MishOp),
    "aten.leaky_relu.default": _leaky_relu,
    "aten.elu.default": _elu,
    "aten.clamp.default": _clamp,
    "aten.clamp.Tensor": _clamp,
    "aten.clamp_min.default": _clamp,
    "aten.clamp_max.default": _clamp,
    "aten.where.self": _where,
    "aten.where.ScalarOther": _where,
    "aten.where.ScalarSelf": _where,
    "aten.masked_fill.Scalar": _masked_fill,
    "aten.masked_fill.Tensor": _masked_fill,
    "aten.to.dtype": _cast,
    "aten.to.device": _cast,
    "aten.pow.Scalar": _pow,
    "aten.detach_.default": _identity,
    "aten.adaptive_avg_pool1d.default": _adaptive_avg_pool1d,
    "aten.to.dtype_layout": _cast,
    "aten._to_copy.default": _cast,
    "aten.type_as.default": _cast,
    "aten.zeros.default": _constant_result,
    "aten.ones.default": _constant_result,
    "aten.full.default": _constant_result,
    "aten.arange.default": _constant_result,
    "aten.arange.start": _constant_result,
    "aten.arange.start_step": _constant_result,
    "aten.scalar_tensor.default": _constant_result,
    "aten.zeros_like.default": _like(0),
    "aten.ones_like.default": _like(1),
    "aten.full_like.default": _like(None),
    "aten.new_zeros.default": _full_tensor,
    "aten.new_ones.default": _full_tensor,
    "aten.new_full.default": _full_tensor,
    "aten.slice.Tensor": _slice,
    "aten.select.int": _select,
    "aten.split.Tensor": _split,
    "aten.split_with_sizes.default": _split,
    "aten.chunk.default": _split,
    "aten.expand.default": _expand,
    "aten.expand_as.default": _expand,
    "aten.repeat.default": _repeat,
    "aten.embedding.default": _embedding,
    "aten.index_select.default": _index_select,
    "aten.index.Tensor": _index,
    "aten.gather.default": _gather,
    "aten.tril.default": _tril_triu(False),
    "aten.triu.default": _tril_triu(True),
    "aten.pad.default": _pad,
    "aten.constant_pad_nd.default": _constant_pad,
    "aten.upsample_bilinear2d.vec": _upsample("linear"),
    "aten.upsample_nearest2d.vec": _upsample("nearest"),
    "aten.stack.default": _stack,
    "aten.roll.default": _roll,
    "aten.cumsum.default": _cumsum,
    "aten.einsum.default": _einsum,
    "aten.repeat_interleave.self_int": _repeat_interleave,
    "aten.slice_scatter.default": _slice_scatter,
    "aten.select_scatter.default": _select_scatter,
    "aten.fill.Scalar": _fill,
    "aten.fill.Tensor": _fill,
    "aten.max_pool2d_with_indices.default": _max_pool2d_with_indices,
    "aten.copy.default": lambda cx, node, args, kwargs: _as(cx, args[1], _dtype_of(args[0])) if _shape(args[1]) == _shape(args[0])
    else cx.emit(nn.BroadcastToOp(_as(cx, args[1], _dtype_of(args[0])), _shape(args[0]))),
    "aten.log_softmax.int": _log_softmax,
    "aten._log_softmax.default": _log_softmax,
    "aten.linalg_vector_norm.default": _vector_norm,
    "aten.group_norm.default": _group_norm,
    "aten.argmax.default": _argmax,
    "aten.squeeze.dims": _reshape,
    "aten.squeeze.default": _reshape,
    "aten.view_as.default": _reshape,
    "aten.unflatten.int": _reshape,
    "aten.lift_fresh_copy.default": _identity,
    "aten._assert_tensor_metadata.default": _no_result,
    "aten.sym_constrain_range_for_size.default": _no_result,
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
    "aten.swapaxes.default": _transpose,
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


