"""``combine-parallel-dense``: GEMMs reading the same input become one (TVM's
``CombineParallelDense``).

A transformer layer projects one activation ``x`` several times with weights of the same
``K``: Q, K and V (BERT, ViT, LLaMA), LLaMA's gate and up projections. Each ``nn.dense(x,
W_i)`` with a constant ``W_i`` (``[N_i, K]``), and its bias add when it has one, becomes a
slice of one GEMM::

    y   = nn.dense(x, concat(W_0, W_1, ...))          [..., N_0 + N_1 + ...]
    y   = nn.add(y, concat(b_0, b_1, ...))            when some dense has a constant bias
                                                      (zeros for one without)
    y_i = nn.strided_slice(y, [..., o_i : o_i + N_i])

One GEMM of ``sum N_i`` columns reads ``x`` once and fills more of the GPU than several
small ones (FasterTransformer's and TensorRT-LLM's fused QKV); the slices cost nothing
where their consumers read through them (``nn.attention`` and ``nn.rotary_embedding``
read index views; element-wise kernels inline them). GEMMs of different element types,
``K`` or input stay apart, as does a dense whose weight is computed or read elsewhere too.

Weight-only 4-bit products (``nn.matmul_nbits``: a decode step's Q, K and V GEMVs) combine
the same way when they share the input and the block size: their packed weights, scales
and zero points are concatenated along N, the rows of each.

The combined weight is a new constant. Dense-attribute weights are concatenated in memory;
when any weight is a named parameter (bytes in a file, ``partita.ir.parameters``) the
concatenation is written once, row block by row block, to
``<cache-dir>/parameters/<digest>.bin`` (the digest names the parts and the identity of
their files, so a recompile finds it) and the new constant names that file: compiling
never holds the weights in memory (where that file cannot be written, the GEMMs stay apart).
Biases are small and always become dense attributes.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from partita.dialects import nn
from partita.files import cache_root
from partita.ir.constants import constant_values
from partita.ir.parameters import ParameterAttr, file_identity, storage_dtype
from partita.transforms.chains import tensor_shape

__all__ = ["CombineParallelDense", "has_parallel_dense", "parameter_directory"]

def parameter_directory(cache_dir: str | None) -> Path:
    """Where passes write the parameters they make: ``<cache-dir>/parameters``, by default
    under Partita's cache (``partita.files.cache_root``)."""
    return (Path(cache_dir) if cache_dir else cache_root()) / "parameters"


Product = nn.DenseOp | nn.MatmulNBitsOp
"""The GEMMs the pass combines: weights ``[N, ...]`` whose rows are the output columns."""


def _only_constant(value: SSAValue) -> nn.ConstantOp | None:
    """The constant 2-D ``value`` when nothing else reads it (a weight read elsewhere, a
    tied embedding, would be stored twice)."""
    w = value.owner
    if not isinstance(w, nn.ConstantOp) or len(w.result.type.get_shape()) != 2 or len(list(w.result.uses)) != 1:
        return None
    return w


def _weight(dense: Product) -> nn.ConstantOp | None:
    """The product's constant weight (``[N, K]``, or packed ``[N, K / 2]``), its 4-bit
    product's scales and zero points constants too, each read by it alone."""
    w = _only_constant(dense.weight)
    if isinstance(dense, nn.MatmulNBitsOp) and (_only_constant(dense.scales) is None
                                               or _only_constant(dense.zero_points) is None):
        return None
    return w


def _bias(dense: nn.DenseOp) -> tuple[Operation, nn.ConstantOp] | None:
    """The dense's bias add (its one use: ``add(y, b)`` either order, or ``bias_add`` on the
    last axis) and the constant ``b`` (``[N]`` or ``[1, ..., N]``)."""
    uses = list(dense.result.uses)
    if len(uses) != 1:
        return None
    add = uses[0].operation
    if isinstance(add, nn.BiasAddOp) and add.input is dense.result and add.axis in (-1, len(tensor_shape(add.result)) - 1):
        bias = add.bias
    elif isinstance(add, nn.AddOp) and add.result.type == dense.result.type:
        bias = add.rhs if add.lhs is dense.result else add.lhs
    else:
        return None
    n = tensor_shape(dense.result)[-1]
    shape = tensor_shape(bias)
    if not isinstance(bias.owner, nn.ConstantOp) or not shape or shape[-1] != n or any(d != 1 for d in shape[:-1]):
        return None
    return add, bias.owner


def _groups(block: Block) -> list[list[Product]]:
    """Products of ``block`` sharing their input, constant weights of one type and ``K``
    (and block size), in program order; groups of two or more of one kind."""
    by_input: dict[tuple[SSAValue, object], list[Product]] = {}
    for op in block.ops:
        if isinstance(op, Product) and (w := _weight(op)) is not None:
            block_size = op.block_size if isinstance(op, nn.MatmulNBitsOp) else 0
            key = (op.input, (type(op), block_size, w.result.type.element_type, tensor_shape(w.result)[1],
                              op.result.type.element_type))
            by_input.setdefault(key, []).append(op)
    return [denses for denses in by_input.values() if len(denses) > 1]


def _parameter_file(parts: list[nn.ConstantOp], directory: Path, dtype: np.dtype, shape: tuple[int, int]) -> Path:
    """The concatenation of ``parts`` (rows) written to a file named by their digest."""
    digest = hashlib.sha256(f"{dtype.str}{shape}".encode())
    for part in parts:
        attr = part.value
        if isinstance(attr, ParameterAttr):
            identity = file_identity(os.stat(attr.file.data))
            digest.update(f"{attr}|{identity}".encode())
        else:
            digest.update(np.ascontiguousarray(constant_values(part)).tobytes())
    path = directory / f"{digest.hexdigest()[:32]}.bin"
    size = int(np.prod(shape)) * dtype.itemsize
    if path.is_file() and path.stat().st_size == size:
        return path
    directory.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        out = np.memmap(partial, dtype=dtype, mode="w+", shape=shape)
        row = 0
        for part in parts:
            values = constant_values(part)  # a mapped (maybe permuted) view: streamed through the page cache
            out[row : row + values.shape[0]] = values
            row += values.shape[0]
        out.flush()
        del out
        os.replace(partial, path)  # whole or absent: a concurrent compile sees one or the other
    finally:
        partial.unlink(missing_ok=True)
    return path


def _combined_weight(parts: list[nn.ConstantOp], directory: Path, name: str) -> nn.ConstantOp | None:
    """The concatenated weight, or None when its file cannot be written (a read-only
    cache: the GEMMs then stay apart, the compile goes on)."""
    t = parts[0].result.type
    assert isinstance(t, TensorType)
    dtype = storage_dtype(t.element_type)
    shape = (sum(tensor_shape(p.result)[0] for p in parts), tensor_shape(parts[0].result)[1])
    if not any(isinstance(p.value, ParameterAttr) for p in parts):
        return nn.ConstantOp(np.concatenate([constant_values(p) for p in parts]).astype(dtype, copy=False))
    try:
        path = _parameter_file(parts, directory, dtype, shape)
    except OSError:
        return None
    return nn.ConstantOp(np.memmap(path, dtype=dtype, mode="r", shape=shape), name=name)


def _blocks(module: ModuleOp) -> list[Block]:
    return [b for o in module.walk() for r in o.regions for b in r.blocks]


def has_parallel_dense(module: ModuleOp) -> bool:
    """Whether the pass has denses to combine in ``module``."""
    return any(_groups(b) for b in _blocks(module))


@dataclass(frozen=True)
class CombineParallelDense(ModulePass):
    """Denses sharing their input -> one dense and slices (see the module docstring)."""

    name = "combine-parallel-dense"

    cache_dir: str | None = None
    """Where combined parameters are written (``<cache-dir>/parameters``); default
    ``$PARTITA_CACHE_DIR`` or ``~/.cache/partita`` (``partita.files.cache_root``)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        directory = parameter_directory(self.cache_dir)
        for block in _blocks(op):
            for denses in _groups(block):
                self._combine(denses, directory)

    @staticmethod
    def _combine(denses: list[Product], directory: Path) -> None:
        first = denses[0]
        weights = [_weight(d) for d in denses]
        biases = [_bias(d) for d in denses]
        names = [w.value.key.data for w in weights if isinstance(w.value, ParameterAttr)]  # type: ignore[union-attr]
        weight = _combined_weight(weights, directory, "+".join(names))  # type: ignore[arg-type]
        if weight is None:
            return
        new: list[Operation] = [weight]
        # a 4-bit product's scales and zero points, erased with the products
        tables = [v.owner for d in denses if isinstance(d, nn.MatmulNBitsOp) for v in (d.scales, d.zero_points)]
        if isinstance(first, nn.MatmulNBitsOp):
            # per-block scales and zero points: small, concatenated in memory, rows as the weight's
            scales, zeros = (nn.ConstantOp(np.concatenate([constant_values(getattr(d, what).owner) for d in denses]))
                             for what in ("scales", "zero_points"))
            new += [scales, zeros, dense := nn.MatmulNBitsOp(first.input, weight, scales, zeros, first.block_size)]
        else:
            new.append(dense := nn.DenseOp(first.input, weight))
        dense.location = first.location
        y = dense.result
        if any(b is not None for b in biases):
            dtype = storage_dtype(first.result.type.element_type)
            rows = [constant_values(b[1]).reshape(-1) if b is not None else np.zeros(tensor_shape(d.result)[-1], dtype)
                    for d, b in zip(denses, biases)]
            bias = nn.ConstantOp(np.concatenate(rows).astype(dtype, copy=False))
            new += [bias, add := nn.AddOp(y, bias)]
            y = add.result
        rank, offset = len(tensor_shape(y)), 0
        slices = []
        for d in denses:
            n = tensor_shape(d.result)[-1]
            part = nn.StridedSliceOp(y, [0] * (rank - 1) + [offset], [nn.SLICE_END] * (rank - 1) + [offset + n], [1] * rank,
                                     result_type=d.result.type)
            part.location = d.location
            slices.append(part)
            offset += n
        Rewriter.insert_op([*new, *slices], InsertPoint.before(first))
        for d, b, part in zip(denses, biases, slices):
            out = b[0] if b is not None else d
            out.results[0].replace_all_uses_with(part.result)
            if b is not None:
                Rewriter.erase_op(b[0])
            Rewriter.erase_op(d)
        for w in weights:
            if w is not None and not w.result.uses:
                Rewriter.erase_op(w)
        for owner in tables:
            if not owner.result.uses:
                Rewriter.erase_op(owner)
        for b in biases:
            if b is not None and not b[1].result.uses:
                Rewriter.erase_op(b[1])
