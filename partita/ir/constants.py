"""Splat constants that stay splat, and the one way to read a constant's values.

xDSL 0.74 parses ``dense<1.0> : tensor<30000000x4xf32>`` by building a Python list of
120 million floats (10-19 GB) before packing it. Partita keeps a splat as MLIR stores it:
a ``DenseIntOrFPElementsAttr`` whose payload holds one element while its type holds many
(xDSL prints such an attribute as ``dense<v>``, so it round-trips unchanged). The
``LocatingParser`` builds splats that way (``splat_attr``), and so does
``nn.ConstantOp(np.broadcast_to(...))`` (``dense_from_numpy`` sees the zero strides).

Whoever needs the values asks ``constant_values``: a read-only view, never a copy of a
weight. A named parameter (``#nn.parameter``, ``partita.ir.parameters``) is mapped from its
file there, on first use. A splat comes back as an ``np.broadcast_to`` view (no memory) unless a real buffer
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
    BytesAttr,
    DenseIntOrFPElementsAttr,
    IntegerType,
)
from xdsl.ir import Attribute, Operation

from partita.ir.budget import charge
from partita.ir.diagnostics import PartitaError, op_error
from partita.ir.parameters import ParameterAttr, narrow_integer_dtype, parameter_values, storage_dtype

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
    elif (narrow := narrow_integer_dtype(attr.get_element_type())) is not None:
        flat = flat.astype(narrow)  # a byte each either way: the copy is the payload's size
        flat.flags.writeable = False
    shape = tuple(attr.get_shape())
    if is_splat(attr):
        return np.broadcast_to(flat.reshape(()), shape)
    return flat.reshape(shape)


def splat_bytes(attr: DenseIntOrFPElementsAttr) -> int:
    """Bytes ``attr`` takes once every element is stored."""
    return prod(attr.get_shape()) * storage_dtype(attr.get_element_type()).itemsize


def constant_values(op: Operation, attr: DenseIntOrFPElementsAttr | ParameterAttr | None = None, *,
                    buffer: bool = False) -> np.ndarray:
    """The values of the constant ``op`` (its ``value`` property, or ``attr``): the one
    accessor of a constant's bytes, dense attribute or named parameter alike.

    The result is read-only: a view of the attribute's bytes, never a copy of a weight
    (enough for NumPy arithmetic, references and folding; copy it to write into it).
    Without ``buffer`` a splat is a broadcast view that costs no memory. With ``buffer``
    every element is stored: a splat is materialized into an array of its own,
    and one over the materialization limit is an error naming ``op``, at its location."""
    if attr is None:
        attr = op.properties["value"]  # type: ignore[assignment]
    if isinstance(attr, ParameterAttr):  # mapped from its file on first use (partita.ir.parameters)
        try:
            return parameter_values(attr)
        except PartitaError as err:
            raise op_error(op, err.message) from None
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
    charge(size, f"materializing splat constant of type {attr.type}", op)
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
