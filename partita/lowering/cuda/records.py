"""Kernel records of fused kernels: what a ``byoc.binary`` keeps to launch each one.

A record is a dictionary ``{kind = "fused", entry, block, inputs, dtypes, output,
output_dtype, dims, params, ops}``: shapes use ``-1`` for ``?``, ``dims`` lists the
``[argument, axis]`` of each run-time ``int`` parameter, ``params`` spells the parameter
list (``name:kind:size``) like the CUTLASS records. The runtime reads it without the IR.

Anchored kernels add their schedule's launch geometry, computed from the output shape:

* ``kind = "rowwise"`` adds ``anchor`` (``nn.softmax`` / ``nn.layer_norm`` /
  ``nn.rms_norm``, or a reduction / arg-reduction over the input's last axes), ``rows``,
  the number of leading output axes that are rows, ``schedule`` and ``rows_per_block``:
  ``block-per-row`` is one block of ``block`` threads per row (a reduction's row is the
  input's reduced trailing axes; 32 to 1024 threads by the rows' count and length),
  ``warp-per-row`` a warp per row, ``rows_per_block`` rows a block of ``block`` threads;
  ``grid = (min(ceil(rows / rows_per_block), 65535), 1, 1)`` (the kernel strides over
  the rest);
* ``kind = "gemm"`` adds ``anchor`` and ``batch`` (leading output axes of the batch; the
  axes up to the last are M, the last is N) and ``tile``: blocks of ``tile x tile``
  threads (SIMT), or of ``block`` threads when that is not ``tile * tile`` (tensor cores:
  8 warps for a 128x128 tile), ``grid = (ceil(N / tile), min(ceil(M / tile), 65535),
  min(batch, 65535))``; ``gemv_rows``: up to that many rows the kernel runs its
  warp-per-output schedule instead (a weight-only quantized GEMV), ``grid =
  (min(ceil(32 numel / block), 65535), 1, 1)``; and ``split_k`` (tensor-core tiles: the
  most K slices, 0 for none) with ``k_source`` (``[input, axis]`` of K, or ``[-1, K]``):
  a call of few tiles launches twice (``GemmRecord.launches``), its slices (``k_slices =
  s``, grid z times ``s``) into a workspace and then their sum (``k_slices = -s``); the
  kernel's last parameters are the workspace and ``k_slices``;
* ``kind = "window"`` adds ``anchor`` (``nn.max_pool2d`` / ``nn.avg_pool2d`` /
  ``nn.global_avg_pool2d``): one thread per output element like ``fused`` (each loops
  over its window), ``grid = (min(ceil(numel / block), 65535), 1, 1)``;
  ``threads_per_output`` (32: a warp per output), ``block_rows`` (``[axis, rows]``: a
  block per tile of rows, attention's query tiles) and ``smem``, the bytes of dynamic
  shared memory each block takes (opted in at load past 48 KiB);
* ``kind = "scatter"`` adds ``source``, the shape of what the kernel stores into the
  argument its result is tied to (``byoc.tied_operand``): one thread per element of it,
  ``grid = (min(ceil(numel(source) / block), 65535), 1, 1)`` (the output's numel when a
  dim of ``source`` is known at run time only).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from math import prod
from typing import ClassVar, Self

import numpy as np
from xdsl.dialects.builtin import DictionaryAttr

from partita.dialects import nn
from partita.lowering.cuda.kernel import FusedKernel
from partita.lowering.cuda.schedules import SPLIT_K_MAX, SPLIT_K_MIN_K, SPLIT_K_SLOT_WORDS, SPLIT_K_SLOTS
from partita.lowering.records import dataclass_from, register_record_kind, to_attr

__all__ = ["KIND", "KINDS", "MAX_GRID", "FusedRecord", "GemmRecord", "RowwiseRecord", "ScatterRecord", "WindowRecord",
           "fused_record", "split_k_slices"]

KIND = "fused"
KINDS = ("fused", "rowwise", "gemm", "window", "scatter")
"""Record kinds ``cuda-codegen`` writes."""
MAX_GRID = 65535
"""Blocks per launch at most; the grid-stride loop covers the rest."""
NUMPY_DTYPES = {name: dtype.name for name, dtype in nn.NUMPY_DTYPES.items()}
"""NumPy dtype name of each element type, by its MLIR spelling (``i1`` is ``bool``)."""


def split_k_slices(tiles: int, k: int, slots: int = SPLIT_K_SLOTS, most: int = SPLIT_K_MAX) -> int:
    """K slices of a tensor-core tile GEMM of ``tiles`` output tiles and depth ``k`` on a
    device that runs ``slots`` tiles at once: when the tiles fill less than half of the
    slots, as many as fill them, each at least ``SPLIT_K_MIN_K`` deep, at most ``most``;
    else 1. What ``GemmRecord.slices`` launches and the roofline prices."""
    if not tiles or 2 * tiles > slots:
        return 1
    return max(1, min(most, slots // tiles, k // SPLIT_K_MIN_K))


def fused_record(kernel: FusedKernel) -> DictionaryAttr:
    """The record of ``kernel``: ``kind``, then the fields of its kind's record class."""
    names = [f.name for f in dataclasses.fields(RECORDS[kernel.kind])]
    return DictionaryAttr({"kind": to_attr(kernel.kind),
                           **{n: to_attr(getattr(kernel, _KERNEL_FIELD.get(n, n))) for n in names}})


#: Record field -> ``FusedKernel`` field where they differ.
_KERNEL_FIELD = {"rows": "split", "batch": "split"}


@dataclass(frozen=True)
class FusedRecord:
    """A fused kernel's launch interface, read back from its record."""

    entry: str
    block: int
    inputs: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    output: tuple[int, ...]
    output_dtype: str
    dims: tuple[tuple[int, int], ...]
    params: tuple[str, ...]
    ops: tuple[str, ...]

    OLDER: ClassVar[dict[str, object]] = {}
    """Fields that records written before them lack, each with the value that reads such a
    record as the kernel it names ran."""

    @classmethod
    def from_attr(cls, record: DictionaryAttr) -> Self:
        missing = {name: to_attr(value) for name, value in cls.OLDER.items() if name not in record.data}
        if missing:
            record = DictionaryAttr({**record.data, **missing})
        return dataclass_from(cls, record, ignore=("kind",))

    def __post_init__(self) -> None:
        # A record is read back from untrusted text: sizes the geometry divides by, or
        # launches with, must be ones a block can have (the kernel's own bound is checked
        # against its cubin at load).
        for name in ("block", "tile"):
            value = getattr(self, name, 1)
            if not isinstance(value, int) or not 1 <= value <= 1024:
                raise ValueError(f"'{name}' = {value} is not a block size (1..1024)")

    def _split_args(self, workspace: int, k_slices: int) -> list[int]:
        return []

    def check_inputs(self, shapes, dtypes) -> str | None:
        """Why these input arrays do not fit the kernel (``None`` when they do)."""
        if len(shapes) != len(self.inputs):
            return f"takes {len(self.inputs)} inputs, got {len(shapes)}"
        for k, (shape, dtype, want, want_dtype) in enumerate(zip(shapes, dtypes, self.inputs, self.numpy_dtypes)):
            if len(shape) != len(want) or any(w >= 0 and w != s for s, w in zip(shape, want)):
                return f"input #{k} has shape {tuple(shape)}, the kernel takes {want}"
            if dtype != want_dtype:
                return f"input #{k} is {dtype}, the kernel takes {want_dtype}"
        return None

    @functools.cached_property
    def numpy_dtypes(self) -> tuple[np.dtype, ...]:
        """The inputs' element types as NumPy dtypes (what a bind compares, once per call)."""
        return tuple(np.dtype(NUMPY_DTYPES[t]) for t in self.dtypes)

    def runtime_dims(self, shapes) -> list[int]:
        return [int(shapes[arg][axis]) for arg, axis in self.dims]

    def grid(self, numel: int) -> tuple[int, int, int]:
        return (max(1, min(MAX_GRID, -(-numel // self.block))), 1, 1)

    def geometry(self, out_shape) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """``(grid, block)`` of a launch writing an output of ``out_shape``."""
        return self.grid(prod(out_shape)), (self.block, 1, 1)

    @property
    def dynamic_smem(self) -> int:
        """Bytes of dynamic shared memory each launch gives a block: none, but where a
        ``window`` kernel's record asks (``WindowRecord.smem``)."""
        return 0

    def launches(self, shapes, out_shape, slots: int = SPLIT_K_SLOTS
                 ) -> list[tuple[tuple[int, int, int], tuple[int, int, int], int]]:
        """``(grid, block, k_slices)`` of each launch of a call at these input shapes
        writing ``out_shape`` on a device running ``slots`` tensor-core tiles at once
        (``schedules.split_k_slots``): one, but for a split-K GEMM (``GemmRecord``)."""
        return [(*self.geometry(out_shape), 1)]

    def workspace_bytes(self, shapes, out_shape, slots: int = SPLIT_K_SLOTS) -> int:
        """Device scratch a call at these shapes takes (a split-K GEMM's partial tiles)."""
        return 0

    @property
    def arg_kinds(self) -> tuple[str, ...]:
        """The kernel's parameter kinds, known without a launch: what ``args`` packs."""
        return ("ptr",) * (len(self.inputs) + 1) + ("int",) * len(self.dims)

    def args(self, inputs: list[int], out: int, dims: list[int], workspace: int = 0,
             k_slices: int = 1) -> list[tuple[str, int]]:
        """Kernel arguments for ``CudaModule.launch``: input pointers, output, int dims (and
        a split-K GEMM's workspace and ``k_slices``)."""
        values = [*inputs, out, *dims, *self._split_args(workspace, k_slices)]
        if len(values) != len(self.arg_kinds):
            raise ValueError(f"{len(values)} arguments for the kernel's {len(self.arg_kinds)} parameters")
        return list(zip(self.arg_kinds, values))

    def check_output(self, shape, dtype) -> str | None:
        """Why an output array does not fit the kernel (``None`` when it does)."""
        if len(shape) != len(self.output) or any(w >= 0 and w != s for s, w in zip(shape, self.output)):
            return f"output has shape {tuple(shape)}, the kernel writes {self.output}"
        if np.dtype(dtype) != np.dtype(NUMPY_DTYPES[self.output_dtype]):
            return f"output is {dtype}, the kernel writes {NUMPY_DTYPES[self.output_dtype]}"
        return None


@dataclass(frozen=True)
class RowwiseRecord(FusedRecord):
    """A ``rowwise`` kernel: rows of the output's trailing axes, ``rows_per_block`` a block
    (one: a block per row; more: a warp per row), by its named ``schedule``."""

    anchor: str
    rows: int
    rows_per_block: int
    schedule: str

    OLDER: ClassVar[dict[str, object]] = {"rows_per_block": 1, "schedule": "block-per-row"}  # before named schedules

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.rows_per_block, int) or not 1 <= self.rows_per_block <= self.block // 32 + 1:
            raise ValueError(f"'rows_per_block' = {self.rows_per_block} does not fit a block of {self.block} threads")

    def geometry(self, out_shape) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        rows = -(-prod(out_shape[: self.rows]) // self.rows_per_block)
        return (max(1, min(MAX_GRID, rows)), 1, 1), (self.block, 1, 1)


@dataclass(frozen=True)
class GemmRecord(FusedRecord):
    """A ``gemm`` kernel: ``tile x tile`` output tiles, batch on grid z; a warp per output
    for at most ``gemv_rows`` rows."""

    anchor: str
    batch: int
    tile: int
    gemv_rows: int
    split_k: int
    k_source: tuple[int, ...]

    # before a gemm kernel could hold a GEMV, and before split-K
    OLDER: ClassVar[dict[str, object]] = {"gemv_rows": 0, "split_k": 0, "k_source": ()}

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.gemv_rows, int) or self.gemv_rows < 0:
            raise ValueError(f"'gemv_rows' = {self.gemv_rows} is not a row count")
        if not isinstance(self.split_k, int) or not 0 <= self.split_k <= SPLIT_K_MAX:
            raise ValueError(f"'split_k' = {self.split_k} is not a slice count (0..{SPLIT_K_MAX})")
        if self.split_k and not self._names_k():
            raise ValueError(f"'k_source' = {self.k_source} names no input axis nor a static K")

    def _names_k(self) -> bool:
        """Whether ``k_source`` is ``(input, axis)`` of an input, or ``(-1, K)``."""
        if len(self.k_source) != 2:
            return False
        source, axis = self.k_source
        if source == -1:
            return axis > 0
        return 0 <= source < len(self.inputs) and 0 <= axis < len(self.inputs[source])

    @property
    def arg_kinds(self) -> tuple[str, ...]:
        return super().arg_kinds + (("ptr", "int") if self.split_k else ())

    def _split_args(self, workspace: int, k_slices: int) -> list[int]:
        return [workspace, k_slices] if self.split_k else []

    def _problem(self, out_shape) -> tuple[int, int, int]:
        """The output's batch, M (its axes between the batch and the last) and N."""
        return prod(out_shape[: self.batch]), prod(out_shape[self.batch : -1]), out_shape[-1]

    def _tiles(self, out_shape) -> tuple[int, int, int]:
        """The output's batch, and its tiles along M and along N."""
        batch, m, n = self._problem(out_shape)
        return batch, -(-m // self.tile), -(-n // self.tile)

    def slices(self, shapes, out_shape, slots: int = SPLIT_K_SLOTS) -> int:
        """K slices of a call at these input shapes (split-K: ``split_k_slices`` on a
        device of ``slots`` tiles at once, an H100's by default, at most ``split_k``); 1 for
        a GEMV's rows, and where the slices' grid would pass ``MAX_GRID``."""
        if not self.split_k:
            return 1
        batch, m, _ = self._problem(out_shape)
        if batch * m <= self.gemv_rows:
            return 1
        source, axis = self.k_source
        k = axis if source < 0 else shapes[source][axis]
        slices = split_k_slices(prod(self._tiles(out_shape)), k, slots, self.split_k)
        return slices if batch * slices <= MAX_GRID else 1

    def launches(self, shapes, out_shape, slots: int = SPLIT_K_SLOTS
                 ) -> list[tuple[tuple[int, int, int], tuple[int, int, int], int]]:
        grid, block = self.geometry(out_shape)
        slices = self.slices(shapes, out_shape, slots)
        if slices == 1:
            return [(grid, block, 1)]
        # the slices' pass over grid z = batch x slices, then the pass adding them
        return [((grid[0], grid[1], grid[2] * slices), block, slices), (grid, block, -slices)]

    def workspace_bytes(self, shapes, out_shape, slots: int = SPLIT_K_SLOTS) -> int:
        slices = self.slices(shapes, out_shape, slots)
        return 0 if slices == 1 else prod(self._tiles(out_shape)) * slices * SPLIT_K_SLOT_WORDS * 4

    def geometry(self, out_shape) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        batch, m, n = self._problem(out_shape)
        if batch * m <= self.gemv_rows:  # the kernel's branch: a warp per output
            return self.grid(32 * batch * m * n), (self.block, 1, 1)
        tiles = (max(1, -(-n // self.tile)), max(1, min(MAX_GRID, -(-m // self.tile))), max(1, min(MAX_GRID, batch)))
        # SIMT kernels: a thread per output of the tile; tensor-core ones: ``block`` threads
        # (4 warps of register tiles)
        return tiles, ((self.tile, self.tile, 1) if self.block == self.tile * self.tile else (self.block, 1, 1))


@dataclass(frozen=True)
class WindowRecord(FusedRecord):
    """A ``window`` kernel (a pool and its epilogue): one thread per output element, the
    launch geometry of a ``fused`` kernel; or, with the warp-per-output schedule
    (``Rule.warp``, a GEMV), ``threads_per_output`` of 32, the grid sized by their count;
    or, with a whole-kernel schedule of row tiles (``block_rows``: attention's query tiles),
    a block per tile, with ``smem`` bytes of dynamic shared memory a block."""

    anchor: str
    threads_per_output: int
    block_rows: tuple[int, ...]
    smem: int

    # before the warp-per-output schedule; before tile-sized grids; before dynamic shared memory
    OLDER: ClassVar[dict[str, object]] = {"threads_per_output": 1, "block_rows": (), "smem": 0}

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.threads_per_output, int) or not 1 <= self.threads_per_output <= self.block:
            raise ValueError(f"'threads_per_output' = {self.threads_per_output} does not fit a block of "
                             f"{self.block} threads")
        rows = self.block_rows
        if rows and (len(rows) != 2 or not 0 <= rows[0] < len(self.output) - 1 or rows[1] < 1):
            raise ValueError(f"'block_rows' = {rows} is not (an output axis before the last, rows >= 1)")
        if not isinstance(self.smem, int) or self.smem < 0:  # the device's limit is checked at load
            raise ValueError(f"'smem' = {self.smem} is not a byte count")

    @property
    def dynamic_smem(self) -> int:
        return self.smem

    def geometry(self, out_shape) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        if self.block_rows:  # a block per tile of rows: every index of the other axes but the last
            axis, rows = self.block_rows
            tiles = prod(d for k, d in enumerate(out_shape[:-1]) if k != axis) * -(-out_shape[axis] // rows)
            return self.grid(tiles * self.block), (self.block, 1, 1)
        return self.grid(prod(out_shape) * self.threads_per_output), (self.block, 1, 1)


@dataclass(frozen=True)
class ScatterRecord(FusedRecord):
    """A ``scatter`` kernel (an update written in place into its tied argument): one
    thread per element of ``source``; a run-time dim there sizes the grid by the output
    instead (the kernel strides over what it stores and lets the rest of the blocks go)."""

    source: tuple[int, ...]

    def geometry(self, out_shape) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        numel = prod(self.source) if all(d >= 0 for d in self.source) else prod(out_shape)
        return self.grid(numel), (self.block, 1, 1)


RECORDS: dict[str, type[FusedRecord]] = {
    "fused": FusedRecord, "rowwise": RowwiseRecord, "gemm": GemmRecord, "window": WindowRecord,
    "scatter": ScatterRecord,
}
"""Record class of each kind."""


register_record_kind("fused", FusedRecord.from_attr)
