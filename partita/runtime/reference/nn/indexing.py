"""NumPy references of the ``nn`` ops: gather/scatter, slice, broadcast, tile, trilu,
range, one-hot, reverse-sequence. Data movement is exact in every element type (no compute-type round trip);
indices are wrapped (negative counts from the end) and checked like ONNX runtimes do."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.dialects import nn
from partita.ir import PartitaError
from partita.runtime.reference.nn.base import store


def wrap_indices(indices: np.ndarray, size: int, what: str) -> np.ndarray:
    """Indices into an axis of ``size``: negative ones count from the end; out of range
    is an error (a kernel would read out of bounds)."""
    indices = np.asarray(indices, dtype=np.int64)
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise PartitaError(f"{what}: index out of range for an axis of size {size}")
    return np.where(indices < 0, indices + size, indices)


def with_refs(op, sizes: list[int], ref_arrays) -> list[int]:
    """``sizes`` with the axes ``op``'s shape references size set from the arrays passed
    for its refs (the op's own rule, ``nn.RefDimsMixin.apply_refs``: refs of one target add
    up)."""
    shapes = {ref: array.shape for ref, array in zip(op.refs, ref_arrays)}
    return op.apply_refs(list(sizes), shapes.__getitem__)


@register_impls
class IndexingFunctions(InterpreterFunctions):
    """Reference semantics of gathers, scatters, slices and the shape-producing ops."""

    @impl(nn.TakeOp)
    def run_take(self, interpreter: Interpreter, op: nn.TakeOp, args: tuple[Any, ...]):
        data, indices = args
        axis = op.axis % data.ndim
        return store(op, np.take(data, wrap_indices(indices, data.shape[axis], op.name), axis))

    @impl(nn.GatherElementsOp)
    def run_gather_elements(self, interpreter: Interpreter, op, args):
        data, indices = args
        axis = op.axis % data.ndim
        idx = wrap_indices(indices, data.shape[axis], op.name)
        return store(op, np.take_along_axis(data, idx, axis))

    @impl(nn.GatherNDOp)
    def run_gather_nd(self, interpreter: Interpreter, op, args):
        data, indices = args
        b, k = op.batch_dims, indices.shape[-1]
        batch = int(np.prod(indices.shape[:b]))
        flat_d = data.reshape((batch,) + data.shape[b:])
        flat_i = indices.reshape((batch, -1, k))
        idx = np.stack([wrap_indices(flat_i[..., j], data.shape[b + j], op.name)
                        for j in range(k)], axis=-1)
        out = np.stack([flat_d[n][tuple(idx[n].T)] for n in range(batch)]) if batch else \
            np.zeros((0,) + flat_i.shape[1:2] + data.shape[b + k:], data.dtype)
        return store(op, out.reshape(indices.shape[:-1] + data.shape[b + k:]))

    @impl(nn.ScatterNDOp)
    def run_scatter_nd(self, interpreter: Interpreter, op, args):
        data, indices, updates = args
        out = np.array(data, copy=True)
        k = indices.shape[-1]
        idx = indices.reshape(-1, k)
        idx = np.stack([wrap_indices(idx[:, j], data.shape[j], op.name) for j in range(k)],
                       axis=-1) if idx.size else idx.astype(np.int64)
        upd = updates.reshape((idx.shape[0],) + data.shape[k:])
        for n in range(idx.shape[0]):
            at = tuple(idx[n])
            if op.reduction == "none":
                out[at] = upd[n]
            else:
                out[at] = store(op, _apply(op.reduction, out[at], upd[n]))[0]
        return (out,)

    @impl(nn.ScatterElementsOp)
    def run_scatter_elements(self, interpreter: Interpreter, op, args):
        data, indices, updates = args
        out = np.array(data, copy=True)
        axis = op.axis % data.ndim
        idx = wrap_indices(indices, data.shape[axis], op.name)
        for pos in np.ndindex(idx.shape):
            at = list(pos)
            at[axis] = idx[pos]
            at = tuple(at)
            if op.reduction == "none":
                out[at] = updates[pos]
            else:
                out[at] = store(op, _apply(op.reduction, out[at], updates[pos]))[0]
        return (out,)

    @impl(nn.StridedSliceOp)
    def run_strided_slice(self, interpreter: Interpreter, op, args):
        x, refs = args[0], args[1:]
        end = with_refs(op, op.end, refs)
        for target in {t % x.ndim for t in op.targets}:
            if end[target] > x.shape[target]:
                raise PartitaError(f"{op.name}: slice end {end[target]} is past the size "
                                   f"{x.shape[target]} of axis {target}")
        index = tuple(slice(b, e, s) for b, e, s in zip(op.begin, end, op.strides))
        return (np.ascontiguousarray(x[index]),)

    @impl(nn.BroadcastToOp)
    def run_broadcast_to(self, interpreter: Interpreter, op, args):
        x, refs = args[0], args[1:]
        shape = list(op.result.type.get_shape())
        lead = len(shape) - x.ndim
        for k, s in enumerate(shape):
            if s == nn.DYN and k >= lead:
                shape[k] = x.shape[k - lead]
        return (np.ascontiguousarray(np.broadcast_to(x, with_refs(op, shape, refs))),)

    @impl(nn.TileOp)
    def run_tile(self, interpreter: Interpreter, op, args):
        return (np.tile(args[0], op.repeats),)

    @impl(nn.TriluOp)
    def run_trilu(self, interpreter: Interpreter, op, args):
        x = args[0]
        k = int(np.asarray(args[1]).reshape(-1)[0]) if len(args) > 1 else op.k
        fn = np.triu if op.upper else np.tril
        if x.ndim >= 2:  # NumPy's int64 mask overflows for |k| near 2^63; beyond the extent all k agree
            k = min(max(k, -x.shape[-2]), x.shape[-1])
        return (fn(x, k).astype(x.dtype),)

    @impl(nn.ArangeOp)
    def run_arange(self, interpreter: Interpreter, op, args):
        (size,) = with_refs(op, op.result.type.get_shape(), args)
        dtype = nn.numpy_dtype(op.result.type.element_type)
        if np.issubdtype(dtype, np.integer):
            out = int(op.start) + int(op.delta) * np.arange(size, dtype=np.int64)
        else:
            out = op.start + op.delta * np.arange(size, dtype=np.float64)
        return store(op, out)

    @impl(nn.OneHotOp)
    def run_one_hot(self, interpreter: Interpreter, op, args):
        (indices,) = args
        depth = op.depth
        idx = np.asarray(indices).astype(np.int64)
        idx = np.where(idx < 0, idx + depth, idx)
        axis = op.axis % (idx.ndim + 1)
        hot = np.expand_dims(idx, axis) == np.arange(depth).reshape(
            [depth if k == axis else 1 for k in range(idx.ndim + 1)])
        return store(op, np.where(hot, op.on_value, op.off_value))

    @impl(nn.ReverseSequenceOp)
    def run_reverse_sequence(self, interpreter: Interpreter, op, args):
        data, lens = args
        steps = data.shape[op.time_axis]
        lens = np.asarray(lens, dtype=np.int64)
        if lens.size and (lens.min() < 0 or lens.max() > steps):
            raise PartitaError(f"{op.name}: a sequence length is outside [0, {steps}]")
        t = np.arange(steps).reshape([-1 if a == op.time_axis else 1 for a in range(data.ndim)])
        length = lens.reshape([-1 if a == op.batch_axis else 1 for a in range(data.ndim)])
        source = np.broadcast_to(np.where(t < length, length - 1 - t, t), data.shape)
        return (np.take_along_axis(data, source, op.time_axis),)

    @impl(nn.TensorScatterOp)
    def run_tensor_scatter(self, interpreter: Interpreter, op, args):
        cache, update, write = args
        axis = op.axis % cache.ndim
        extent, rows = cache.shape[axis], update.shape[axis]
        out = np.array(cache, copy=True)
        for b, start in enumerate(np.asarray(write, dtype=np.int64).reshape(-1)):
            at = start + np.arange(rows)
            if op.circular:
                at %= extent
            keep = (at >= 0) & (at < extent)  # a row past the end is dropped (the kernel's rule)
            target = np.moveaxis(out[b], axis - 1, 0)  # a view: writes land in ``out``
            target[at[keep]] = np.moveaxis(update[b], axis - 1, 0)[keep]
        return (out,)


def _apply(reduction: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a`` combined with update ``b`` (the caller rounds to the storage type)."""
    return {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[
        reduction](a, b)
