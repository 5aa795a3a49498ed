"""Named parameters: weights that stay in their storage, referred to by the IR (issue 25).

A large constant is not held in the IR as a dense attribute (every pass that clones,
folds, digests or prints the module would touch its bytes). It is an ``#nn.parameter``:
its name, its tensor type and where its bytes lie (a file and a byte offset: the ONNX
external-data file, or the weights section of a compiled-model file), as IREE's parameter
archives (``#flow.parameter.named<"scope"::"key">``) and MLIR's ``dense_resource`` do::

    %w = nn.constant #nn.parameter<"fc1.weight" : tensor<1024x1024xf32>, file "model.onnx.data" at 4096>

Passes see the type and the name; printing shows the reference, never the bytes, so a
module prints, parses and digests in time independent of its weights. The bytes are
reached through one accessor, ``parameter_values``, which maps the file lazily (a
read-only ``np.memmap``: the page cache holds the bytes, not the process).

A parameter may be stored at another element type than it is computed in (``as f32``):
``to-mixed-precision`` turns an f32 weight into an f16 parameter without converting
anything; the conversion happens once, streamed in chunks, where the bytes are needed (the
compiled-model file is written at the computed type, so it and device memory halve).

xDSL 0.74's builtin ``DenseResourceAttr`` keeps its blobs as hex strings on the
process-wide builtin dialect object: neither the bytes nor the storage can live there.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator, Sequence
from math import prod
from pathlib import Path

import numpy as np
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IndexType,
    IntAttr,
    IntegerType,
    NoneAttr,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer

from partita.ir.diagnostics import PartitaError

PARAMETER_THRESHOLD_BYTES = 1024
"""Constants of at least this many bytes become parameters when their bytes lie in a file
(ONNX's own external-data threshold); smaller ones stay dense attributes, and fold."""

CONVERT_CHUNK_BYTES = 4 << 20
"""A stored-at-another-type parameter is converted this many source bytes at a time."""


_ML_DTYPES = {"f8E4M3FN": "float8_e4m3fn", "f8E4M3FNUZ": "float8_e4m3fnuz", "f8E5M2": "float8_e5m2",
              "f8E5M2FNUZ": "float8_e5m2fnuz", "f4E2M1FN": "float4_e2m1fn", "f8E8M0FNU": "float8_e8m0fnu"}
"""The one-byte floats a dense payload stores in ``ml_dtypes``' layouts."""


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
    if element_type.name in _ML_DTYPES:  # one byte each, in ml_dtypes' layouts
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, _ML_DTYPES[element_type.name]))
    if isinstance(element_type, IntegerType):
        width = element_type.width.data
        bytes_ = element_type.compile_time_size
        if width == 1:
            return np.dtype(np.uint8)
        # i4, ui2...: a byte each, the value sign-extended (as MLIR prints it); read back
        # as ml_dtypes' int4 / uint2... by ``narrow_integer_dtype``.
        signed = not element_type.signedness.data.name == "UNSIGNED"
        return np.dtype(f"<{'i' if signed else 'u'}{bytes_}")
    raise ValueError(f"no dense payload for element type {element_type}")


def narrow_integer_dtype(element_type: Attribute) -> np.dtype | None:
    """``ml_dtypes``' int4 / uint4 / int2 / uint2 for those element types (whose dense
    payload is a byte each, see ``storage_dtype``); None for any other."""
    if not isinstance(element_type, IntegerType) or not 1 < element_type.width.data < 8:
        return None
    import ml_dtypes

    unsigned = element_type.signedness.data.name == "UNSIGNED"
    return np.dtype(getattr(ml_dtypes, f"{'u' if unsigned else ''}int{element_type.width.data}"))


@irdl_attr_definition
class ParameterAttr(ParametrizedAttribute):
    """``#nn.parameter<"key" : tensor<...>, file "path" at offset [as f32]>``: a constant
    whose bytes are ``prod(shape) * itemsize(stored)`` bytes of ``file`` from ``offset``."""

    name = "nn.parameter"

    key: StringAttr
    type: TensorType
    file: StringAttr
    offset: IntAttr
    stored: Attribute
    """The element type of the stored bytes, or ``NoneAttr`` when it is the type's."""
    perm: ArrayAttr[IntAttr]
    """Empty, or the permutation that makes the value from the stored array
    (``stored.transpose(perm)``): an ONNX ``MatMul`` weight [K, N] that ``nn.dense`` takes
    as [N, K] is ``perm [1, 0]``, an OIHW convolution weight used as OHWI ``perm [0, 2,
    3, 1]``. Read as a strided view; laid out once where it is saved."""
    checked: StringAttr
    """Empty, or the identity of the file (``file_identity``) when its digests were
    checked (a loaded compiled model): mapping it refuses a file replaced since then."""

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            key = parser.parse_str_literal("parameter name")
            parser.parse_punctuation(":")
            type_ = parser.parse_type()
            if not isinstance(type_, TensorType):
                parser.raise_error(f"a parameter has a tensor type, got {type_}")
            parser.parse_punctuation(",")
            parser.parse_keyword("file")
            file = parser.parse_str_literal("parameter file")
            parser.parse_keyword("at")
            offset = parser.parse_integer(allow_boolean=False, allow_negative=False)
            stored: Attribute = NoneAttr()
            if parser.parse_optional_keyword("as") is not None:
                stored = parser.parse_type()
            perm: list[int] = []
            if parser.parse_optional_keyword("perm") is not None:
                perm = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_integer)
            checked = ""
            if parser.parse_optional_keyword("checked") is not None:
                checked = parser.parse_str_literal("file identity")
        return (StringAttr(key), type_, StringAttr(file), IntAttr(offset), stored, ArrayAttr(IntAttr(p) for p in perm),
                StringAttr(checked))

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string_literal(self.key.data)
            printer.print_string(" : ")
            printer.print_attribute(self.type)
            printer.print_string(", file ")
            printer.print_string_literal(self.file.data)
            printer.print_string(f" at {self.offset.data}")
            if not isinstance(self.stored, NoneAttr):
                printer.print_string(" as ")
                printer.print_attribute(self.stored)
            if self.perm.data:
                printer.print_string(f" perm [{', '.join(str(p.data) for p in self.perm)}]")
            if self.checked.data:
                printer.print_string(" checked ")
                printer.print_string_literal(self.checked.data)

    def verify(self) -> None:
        # Both types must have a little-endian NumPy layout (i1 has none: bytes are not bools).
        from xdsl.utils.exceptions import VerifyException

        for element in (self.type.element_type, self.stored_element):
            try:
                storage_dtype(element)
            except ValueError:
                raise VerifyException(f"a parameter of element type {element} has no stored layout") from None
            if isinstance(element, IntegerType) and element.width.data == 1:
                raise VerifyException("a parameter of i1 elements has no stored layout (use a dense attribute)")
        if self.perm.data and sorted(p.data for p in self.perm) != list(range(len(self.type.get_shape()))):
            raise VerifyException(f"perm {[p.data for p in self.perm]} is not a permutation of the dims of {self.type}")
        if any(d < 0 for d in self.type.get_shape()):
            raise VerifyException(f"a parameter has a static shape, not {self.type}")

    @staticmethod
    def make(key: str, type_: TensorType, file: str | Path, offset: int,
             stored: Attribute | None = None, perm: Sequence[int] = (), checked: str = "") -> ParameterAttr:
        if stored is not None and stored == type_.element_type:
            stored = None
        if list(perm) == list(range(len(perm))):
            perm = ()
        return ParameterAttr(StringAttr(key), type_, StringAttr(os.fspath(file)), IntAttr(offset),
                             NoneAttr() if stored is None else stored, ArrayAttr(IntAttr(p) for p in perm),
                             StringAttr(checked))

    @property
    def stored_element(self) -> Attribute:
        return self.type.element_type if isinstance(self.stored, NoneAttr) else self.stored

    def get_shape(self) -> tuple[int, ...]:
        return tuple(self.type.get_shape())

    def get_element_type(self) -> Attribute:
        return self.type.element_type

    def stored_bytes(self) -> int:
        """Bytes of the parameter in its storage."""
        return prod(self.get_shape()) * storage_dtype(self.stored_element).itemsize

    def retyped(self, element: Attribute) -> ParameterAttr:
        """The same stored bytes computed as ``element`` (converted where they are read)."""
        type_ = TensorType(element, self.type.get_shape())
        return ParameterAttr.make(self.key.data, type_, self.file.data, self.offset.data, self.stored_element,
                                  self.permutation, self.checked.data)

    @property
    def permutation(self) -> tuple[int, ...]:
        """``perm`` as ints (empty: none)."""
        return tuple(p.data for p in self.perm)

    def stored_shape(self) -> tuple[int, ...]:
        """The shape of the stored array (``shape`` before ``perm``)."""
        shape, perm = self.get_shape(), self.permutation
        if not perm:
            return shape
        stored = [0] * len(shape)
        for axis, source in enumerate(perm):
            stored[source] = shape[axis]
        return tuple(stored)


def file_identity(stat: os.stat_result) -> str:
    """What tells one file version from another without reading it: device, inode, size
    and modification time."""
    return f"{stat.st_dev}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"


def stored_values(attr: ParameterAttr) -> np.ndarray:
    """The stored bytes of ``attr`` as a read-only array mapped from its file, in its shape
    (a strided view for a permuted parameter) at the stored element type; a file that
    does not hold them is a ``PartitaError``."""

    dtype = storage_dtype(attr.stored_element)
    path, offset, size = attr.file.data, attr.offset.data, attr.stored_bytes()
    try:
        length = os.stat(path).st_size
    except OSError as err:
        raise PartitaError(f"parameter '{attr.key.data}': cannot read its file '{path}': "
                           f"{err.strerror or err}") from None
    if attr.checked.data and file_identity(os.stat(path)) != attr.checked.data:
        raise PartitaError(f"parameter '{attr.key.data}': '{path}' was replaced or changed since it was loaded "
                           "(its digests were checked then); load it again")
    if offset + size > length:
        raise PartitaError(f"parameter '{attr.key.data}': its {size} bytes at offset {offset} lie beyond the end "
                           f"of '{path}' ({length} bytes)")
    if size == 0:
        return np.zeros(attr.get_shape(), dtype)
    # np.memmap maps from the page below ``offset``; the array starts at ``offset``.
    mapped = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=attr.stored_shape())
    # A pass that makes a constant of this view (a transpose) names the same parameter.
    mapped.parameter_name, mapped.parameter_file = attr.key.data, path  # type: ignore[attr-defined]
    return mapped.transpose(attr.permutation) if attr.perm.data else mapped


def _stored_layout(attr: ParameterAttr) -> np.ndarray:
    """The mapped bytes in the order they are stored (C order of ``stored_shape``)."""
    values = stored_values(attr)
    return values.transpose(np.argsort(attr.permutation)) if attr.perm.data else values


def narrowed(values: np.ndarray, dtype: np.dtype | type) -> np.ndarray:
    """``values`` as ``dtype``; into a float type of a smaller range (f32 to f16), a finite
    value past its largest one becomes that value, as TensorRT clamps fp16 weights, not an
    infinity, which a product with 0 turns into NaN (Funnel's attention mask: ``(1 - mask)
    * 1e6``). Infinities and NaN stay."""
    dtype = np.dtype(dtype)
    values = np.asarray(values)
    if values.dtype.kind == "f" and dtype != values.dtype:
        import ml_dtypes

        try:
            top = float(ml_dtypes.finfo(dtype).max)
        except (TypeError, ValueError):  # not a float type
            top = None
        if top is not None and top < float(np.finfo(values.dtype).max):
            values = np.where(np.isinf(values), values, np.clip(values, -top, top))
    return values.astype(dtype, copy=False)


def parameter_values(attr: ParameterAttr) -> np.ndarray:
    """The values of ``attr`` in its shape and type, read-only: a view of the mapped file
    (permuted: a strided view), or, for a parameter stored at another type, one array
    converted chunk by chunk (never a whole-size temporary of the stored type)."""
    source = stored_values(attr)
    dtype = storage_dtype(attr.get_element_type())
    if source.dtype == dtype:
        return source
    stored = _stored_layout(attr)
    out = np.empty(stored.shape, dtype)
    flat_in, flat_out = stored.reshape(-1), out.reshape(-1)  # views: both are C order
    step = max(1, CONVERT_CHUNK_BYTES // max(1, stored.dtype.itemsize))
    for at in range(0, flat_in.size, step):
        flat_out[at : at + step] = narrowed(flat_in[at : at + step], dtype)
    out.flags.writeable = False
    return out.transpose(attr.permutation) if attr.perm.data else out


def converted_chunks(attr: ParameterAttr) -> Iterator[memoryview]:
    """The bytes of ``attr`` in C order of its type, a chunk at a time (what a file
    writer streams: at most one chunk is converted, or laid out from a permuted
    parameter, at once)."""
    source = stored_values(attr)
    dtype = storage_dtype(attr.get_element_type())
    if source.ndim == 0 or source.size == 0:
        yield memoryview(np.ascontiguousarray(source, dtype).reshape(-1).view(np.uint8))
        return
    # Whole rows of the result per chunk (one row at least); a row of a permuted
    # parameter is a column of the mapped bytes.
    row = max(1, source[0].size * source.dtype.itemsize)
    rows = max(1, CONVERT_CHUNK_BYTES // row)
    for at in range(0, source.shape[0], rows):
        chunk = source[at : at + rows]
        if chunk.dtype != dtype or not chunk.flags.c_contiguous:
            # Converted or laid out; otherwise the mapped bytes themselves, aligned or not
            # (a weight embedded in an .onnx file lies at any offset, and ascontiguousarray
            # would copy an unaligned chunk only to align it).
            chunk = narrowed(np.ascontiguousarray(chunk), dtype)
        yield memoryview(chunk.reshape(-1).view(np.uint8))  # f16 / bf16 have no buffer-protocol format


def mapped_region(array: np.ndarray) -> tuple[str, int, tuple[int, ...], str | None] | None:
    """(file, offset, perm, name) when ``array`` is exactly a whole ``np.memmap`` of a
    file (little-endian, as mapped), or a permutation of its axes (``perm``, empty for
    none): such an array can be named rather than copied. ``name``: the one its reader
    gave the mapping (a ``parameter_name`` attribute), if any."""
    owner = array  # views of a memmap are memmaps too: the mapping is the one over the mmap
    while isinstance(owner, np.ndarray) and not isinstance(owner.base, mmap.mmap):
        owner = owner.base
    if not isinstance(owner, np.memmap) or owner.filename is None:
        return None
    if (array.ctypes.data != owner.ctypes.data or array.dtype != owner.dtype or not owner.flags.c_contiguous
            or array.ndim != owner.ndim or array.dtype != array.dtype.newbyteorder("<")):
        return None
    # Axes by decreasing stride (ties, from size-1 axes, by position): then checked.
    order = sorted(range(array.ndim), key=lambda i: (-array.strides[i], i))
    perm = tuple(order.index(i) for i in range(array.ndim))  # array = owner.transpose(perm)
    if owner.transpose(perm).shape != array.shape or owner.transpose(perm).strides != array.strides:
        return None
    if perm == tuple(range(array.ndim)):
        perm = ()
    return (getattr(owner, "parameter_file", owner.filename), int(owner.offset), perm,
            getattr(owner, "parameter_name", None))


__all__ = ["PARAMETER_THRESHOLD_BYTES", "ParameterAttr", "converted_chunks", "mapped_region", "narrowed", "parameter_values",
           "file_identity", "storage_dtype", "stored_values"]
