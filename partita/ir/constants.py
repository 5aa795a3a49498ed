"""Splat constants that stay splat, and the one way to read a constant's values.

xDSL 0.74 parses ``dense<1.0> : tensor<30000000x4xf32>`` by building a Python list of
120 million floats (10-19 GB) before packing it. Partita keeps a splat as MLIR stores it:
a ``DenseIntOrFPElementsAttr`` whose payload holds one element while its type holds many
(xDSL prints such an attribute as ``dense<v>``, so it round-trips unchanged). The
``LocatingParser`` builds splats that way (``splat_attr``), and so does
``nn.ConstantOp(np.broadcast_to(...))`` (``dense_from_numpy`` sees the zero strides).

Whoever needs the values asks ``constant_values``: a read-only view, never a copy of a
weight. A splat comes back as an ``np.broadcast_to`` view (no memory) unless a real buffer
is needed (a host pass that writes into it), and a buffer over ``MATERIALIZE_LIMIT_BYTES``
is an error located at the op. The launch plan never asks for one: it fills a splat
weight's device buffer from ``splat_element`` (a driver memset), so device memory is the
only limit there.
Works for every element type of the builtin dense attribute (floats, integers, ``i1``,
``index``); the dtype comes from the element type, never a fixed list of floats.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from math import prod

import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    BytesAttr,
    DenseIntOrFPElementsAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntegerType,
)
from xdsl.ir import Attribute, Operation

from partita.ir.diagnostics import op_error

MATERIALIZE_LIMIT_BYTES = 256 << 20
"""The largest buffer Partita builds from a splat (256 MiB, several times the largest
weight of the bundled models); larger ones are errors."""

MATERIALIZE_TOTAL_BYTES = 1 << 30
"""What all the splats of one module may take together once materialized (1 GiB): each
under ``MATERIALIZE_LIMIT_BYTES`` is not enough, a 5 KB file holds thousands."""


def check_splat_budget(ops: list[Operation], total: int = MATERIALIZE_TOTAL_BYTES) -> None:
    """A located error, before any is built, when materializing the splat constants
    ``ops`` would take more than ``total`` bytes together."""
    spent = 0
    for op in ops:
        attr = op.properties["value"]
        if isinstance(attr, DenseIntOrFPElementsAttr) and is_splat(attr):
            spent += splat_bytes(attr)
            if spent > total:
                raise op_error(op, f"splat constants would take {spent / 2**20:.0f} MiB once materialized "
                                   f"(this one included), over the total of {total / 2**20:.0f} MiB")


_limit: ContextVar[int | None] = ContextVar("partita_materialize_limit", default=MATERIALIZE_LIMIT_BYTES)


@contextmanager
def materialize_limit(limit: int | None) -> Iterator[None]:
    """Within the block, splats are materialized up to ``limit`` bytes (None: no limit)."""
    token = _limit.set(limit)
    try:
        yield
    finally:
        _limit.reset(token)


_FLOAT8 = {"f8E4M3FN": "float8_e4m3fn", "f8E4M3FNUZ": "float8_e4m3fnuz", "f8E5M2": "float8_e5m2",
           "f8E5M2FNUZ": "float8_e5m2fnuz"}


def storage_dtype(element_type: Attribute) -> np.dtype:
    """The little-endian NumPy dtype of a dense attribute's payload."""
    if isinstance(element_type, Float16Type):
        return np.dtype("<f2")
    if isinstance(element_type, Float32Type):
        return np.dtype("<f4")
    if isinstance(element_type, Float64Type):
        return np.dtype("<f8")
    if isinstance(element_type, BFloat16Type):
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    if isinstance(element_type, IndexType):
        return np.dtype("<i8")
    if element_type.name in _FLOAT8:  # one byte each, in ml_dtypes' layouts
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, _FLOAT8[element_type.name]))
    if isinstance(element_type, IntegerType):
        width = element_type.width.data
        bytes_ = element_type.compile_time_size
        if width == 1:
            return np.dtype(np.uint8)
        signed = not element_type.signedness.data.name == "UNSIGNED"
        return np.dtype(f"<{'i' if signed else 'u'}{bytes_}")
    raise ValueError(f"no dense payload for element type {element_type}")


def splat_attr(type_: Attribute, element: bytes) -> DenseIntOrFPElementsAttr:
    """The dense attribute of shaped ``type_`` with every element equal to the packed
    ``element``: one element of payload, whatever the shape (none for an empty shape)."""
    count = prod(type_.get_shape())  # type: ignore[attr-defined]
    return DenseIntOrFPElementsAttr(type_, BytesAttr(element if count > 1 else element * count))  # type: ignore[arg-type]


def is_splat(attr: DenseIntOrFPElementsAttr) -> bool:
    """Whether ``attr`` is stored as a splat (one element standing for several)."""
    return len(attr.data.data) == attr.get_element_type().compile_time_size and prod(attr.get_shape()) > 1


def dense_values(attr: DenseIntOrFPElementsAttr) -> np.ndarray:
    """The values of ``attr`` in its shape (``i1`` as bool), read-only. A splat is a
    broadcast view of its one element; anything else a view of the attribute's own bytes
    where the host is little-endian (a weight is never copied to be read), else a copy."""
    dtype = storage_dtype(attr.get_element_type())
    flat = np.frombuffer(attr.data.data, dtype=dtype)
    if dtype.itemsize > 1:
        if dtype != dtype.newbyteorder("="):
            flat = flat.astype(dtype.newbyteorder("="))
            flat.flags.writeable = False
    elif isinstance(attr.get_element_type(), IntegerType) and attr.get_element_type().width.data == 1:
        flat = flat != 0
        flat.flags.writeable = False
    shape = tuple(attr.get_shape())
    if is_splat(attr):
        return np.broadcast_to(flat.reshape(()), shape)
    return flat.reshape(shape)


def splat_bytes(attr: DenseIntOrFPElementsAttr) -> int:
    """Bytes ``attr`` takes once every element is stored."""
    return prod(attr.get_shape()) * storage_dtype(attr.get_element_type()).itemsize


def constant_values(op: Operation, attr: DenseIntOrFPElementsAttr | None = None, *, buffer: bool = False) -> np.ndarray:
    """The values of the constant ``op`` (its ``value`` property, or ``attr``).

    The result is read-only: a view of the attribute's bytes, never a copy of a weight
    (enough for NumPy arithmetic, references and folding; copy it to write into it).
    Without ``buffer`` a splat is a broadcast view that costs no memory. With ``buffer``
    every element is stored: a splat is materialized into an array of its own,
    and one over the materialization limit is an error naming ``op``, at its location."""
    if attr is None:
        attr = op.properties["value"]  # type: ignore[assignment]
        assert isinstance(attr, DenseIntOrFPElementsAttr)
    values = dense_values(attr)
    if not buffer or not is_splat(attr):
        return values
    size, limit = splat_bytes(attr), _limit.get()
    if limit is not None and size > limit:
        raise op_error(
            op,
            f"splat constant of type {attr.type} would take {size / 2**20:.0f} MiB once materialized, over the "
            f"limit of {limit / 2**20:.0f} MiB",
        )
    return np.full(values.shape, values[(0,) * values.ndim], values.dtype)


def splat_element(array: np.ndarray) -> np.ndarray | None:
    """The one element (a 0-d array) a splat view stands for, or None for an array that
    holds its elements: a device fills the buffer of a splat from this element instead of
    receiving a host buffer of its size."""
    if array.size > 1 and not any(array.strides):
        return np.array(array[(0,) * array.ndim], array.dtype)
    return None


def cast(array: np.ndarray, dtype: np.dtype | type) -> np.ndarray:
    """``array.astype(dtype)`` that keeps a broadcast (splat) view a view, and returns
    ``array`` itself when it has ``dtype`` already (a weight is not copied to be kept)."""
    if array.size > 1 and not any(array.strides):
        return np.broadcast_to(np.asarray(array[(0,) * array.ndim], dtype), array.shape)
    return array.astype(dtype, copy=False)
