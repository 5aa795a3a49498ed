"""A compiled model as one self-contained file (``.partita``), like TVM's exported library
or IREE's ``.vmfb``: ``Executable.save(path)`` writes it, ``partita.load(path)`` reads it
back, with no cubin cache, no NVRTC and no ONNX file.

Layout of format 3 (all integers little-endian; format 2 is the same without named
parameters, and still loads)::

    magic       16 bytes  b"PARTITA-MODEL\\0" + format version (u16)
    header_len   8 bytes  length of the JSON header
    header       JSON     entry, pipeline, targets, partition rows, the weights table
                          [offset, size, sha256] (+ the name, for a named parameter) and
                          every other part as {name, offset, size, sha256}
    parts        bytes    module.mlir, one cubin per byoc.binary
    padding      zeros    up to a multiple of 4 KiB (the page size), for ``mmap``
    weights      bytes    each weight at a multiple of 64 bytes, zeros between
    trailer     32 bytes  sha256 of magic, header_len and header

Every offset and size is 64-bit (JSON integers, ``<Q``): files over 4 GiB work. The
header holds the digest of every part and weight, and the trailer the digest of the
header: a changed byte anywhere is caught, and the digests say what is damaged. The file
is written by streaming: each weight is hashed as it is copied, and the header (whose
digests have a fixed length) is written last, over its placeholder, so nothing holds the
whole model in memory.

Weights of ``PARAMETER_THRESHOLD_BYTES`` or more are stored by name, as named parameters
(``partita.ir.parameters``): the module says ``#nn.parameter<"fc1.weight" : tensor<...>,
file "" at N>`` (``""``: this file's weights section, ``N`` the weight's offset in it),
and loading rebinds each to the file's path and absolute offset, from where whoever reads
it maps it (read-only: the page cache holds the bytes, not the process), with the identity
of the file whose digests it checked (a file replaced since is refused, not mapped). A parameter
computed at another type than it is stored at (``to-mixed-precision``) is converted while
it is streamed, a chunk at a time, and stored at the type it is computed in. Smaller
constants are printed as a zero splat and their exact payload is a weight by position
(text would round float constants to 7 digits); loading makes them views of the mapped
file. Loading checks every digest by reading (the page cache, not the process's memory).
Format 1 (one sha256 over the whole file, weights in one unaligned part) still loads.

A ``byoc.binary`` names its cubin by ``sha256`` only (no cache directory of the
machine that saved it): its bytes are the part ``cubin/@symbol``, checked against that
``sha256`` again before the driver sees them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import mmap
import os
import struct
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from io import StringIO
from pathlib import Path
from typing import Any, BinaryIO

from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr, ModuleOp, NoneAttr, StringAttr
from xdsl.ir import Attribute
from xdsl.printer import Printer

from partita.dialects import byoc, make_context
from partita.files import write_atomically
from partita.ir import PartitaError, parse_module, verify_module
from partita.ir.parameters import (
    PARAMETER_THRESHOLD_BYTES,
    ParameterAttr,
    converted_chunks,
    file_identity,
    storage_dtype,
)
from partita.lowering.binaries import CACHE_DIR, binary_images
from partita.report import PartitionRow
from partita.target import CompilationConfig, TargetError

FORMAT_VERSION = 3
"""3: format 2's layout with named parameters (a reader of 2 would not know them)."""
MAGIC = b"PARTITA-MODEL\0" + struct.pack("<H", FORMAT_VERSION)
_MAGIC_V1 = b"PARTITA-MODEL\0" + struct.pack("<H", 1)
_MAGIC_V2 = b"PARTITA-MODEL\0" + struct.pack("<H", 2)
_PREFIX = len(MAGIC) + 8
_TRAILER = 32
SECTION_ALIGNMENT = 4096
"""The weights section starts on a page boundary, so it maps straight into memory."""
WEIGHT_ALIGNMENT = 64
"""Each weight starts on a multiple of 64 bytes: aligned for every element type and for
vector loads of its view."""
_CHUNK = 4 << 20
SUFFIX = ".partita"


def _constants(module: ModuleOp):
    return [op for op in module.walk() if op.name == "nn.constant"]


def _payload_placeholder(value: DenseIntOrFPElementsAttr) -> DenseIntOrFPElementsAttr:
    """One zero element of the constant's type: it prints as ``dense<0...> : tensor<...>``
    without materializing anything."""
    size = value.get_element_type().compile_time_size
    return DenseIntOrFPElementsAttr(value.type, BytesAttr(bytes(size)))


@dataclasses.dataclass
class CompiledModel:
    """What the file holds: the driver's ``Executable`` is made from it and saves into it."""

    module: ModuleOp
    pipeline: str
    targets: CompilationConfig
    partitions: list[PartitionRow]
    entry: str = "main"
    binaries: dict[str, bytes] = dataclasses.field(default_factory=dict, repr=False)
    """Cubins by ``byoc.binary`` symbol; a binary not here is read from its ``path``."""


def _align(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment


def _copy_hashed(handle: BinaryIO, data: bytes | memoryview, digest: Any = None) -> str:
    """Writes ``data`` in chunks, hashing each chunk as it is copied (into ``digest``, to
    go on with a weight written in several pieces); returns the digest so far."""
    digest = hashlib.sha256() if digest is None else digest
    view = memoryview(data).cast("B")
    for at in range(0, len(view), _CHUNK):
        chunk = view[at : at + _CHUNK]
        digest.update(chunk)
        handle.write(chunk)
    return digest.hexdigest()


def _stored(key: str, value, keys: dict) -> str:
    """A name for ``value`` in the weights section unique in the file: ``key``, or ``key``
    with a suffix when another parameter of that name is stored already."""
    name, n = key, 1
    while name in keys and keys[name] != value:
        name, n = f"{key}#{n}", n + 1
    return name


def writer(exe: CompiledModel) -> Callable[[BinaryIO], None]:
    """What writes the compiled-model file of ``exe`` to a seekable binary handle, by
    streaming (see the module docstring)."""
    module = exe.module.clone()  # attributes are shared, not copied: no weight is copied
    sources: list[Callable[[], Iterable[bytes | memoryview]]] = []
    table: list[list] = []
    offset = 0
    named: dict[str, Any] = {}  # stored name -> the parameter (or bytes' owner) it holds
    placed: dict[Any, Attribute] = {}  # a value already stored -> its attribute in the file

    def place(size: int, chunks: Callable[[], Iterable[bytes | memoryview]], name: str | None) -> int:
        nonlocal offset
        offset = _align(offset, WEIGHT_ALIGNMENT)
        start = offset
        table.append([start, size, "0" * 64] + ([name] if name is not None else []))
        sources.append(chunks)
        offset += size
        return start

    for index, op in enumerate(_constants(module)):
        value = op.properties["value"]
        if isinstance(value, ParameterAttr):
            if value not in placed:
                # Stored at the type it is computed in (converted while streamed, one chunk at a time).
                name = _stored(value.key.data, value, named)
                named[name] = value
                size = _elements(value) * storage_dtype(value.get_element_type()).itemsize
                start = place(size, lambda value=value: converted_chunks(value), name)
                placed[value] = ParameterAttr.make(name, value.type, "", start)
            op.properties["value"] = placed[value]
            continue
        data = value.data.data
        if len(data) >= PARAMETER_THRESHOLD_BYTES:  # a large dense constant is stored by name too
            # By identity (the module keeps it alive): hashing an attribute would read its bytes.
            key = (id(data), value.type)
            if key not in placed:  # one payload used twice is stored once
                hint = op.results[0].name_hint
                name = _stored(hint or f"constant{index}", id(data), named)
                named[name] = id(data)
                start = place(len(data), lambda data=data: (data,), name)
                placed[key] = ParameterAttr.make(name, value.type, "", start)
            op.properties["value"] = placed[key]
            continue
        place(len(data), lambda data=data: (data,), None)
        op.properties["value"] = _payload_placeholder(value)
    cubins: dict[str, bytes] = {}
    for symbol, image in binary_images(exe.module, exe.binaries).items():
        cubins[symbol] = image.read()  # verified against the recorded sha256
    for op in module.ops:
        if isinstance(op, byoc.BinaryOp) and op.sym_name.data in cubins:
            # The bytes travel in the file: no cache of this machine is named.
            for name in ("path", CACHE_DIR):
                op.attributes.pop(name, None)
    text = StringIO()
    Printer(stream=text).print_op(module)
    parts = [("module.mlir", text.getvalue().encode())]
    parts += [(f"cubin/@{symbol}", data) for symbol, data in sorted(cubins.items())]
    entries, at = [], 0
    for name, data in parts:
        entries.append({"name": name, "offset": at, "size": len(data), "sha256": "0" * 64})
        at += len(data)

    def header() -> bytes:
        return json.dumps(
            {
                "entry": exe.entry,
                "pipeline": exe.pipeline,
                "targets": str(exe.targets),
                "partitions": [dataclasses.asdict(row) for row in exe.partitions],
                "weights": table,
                "parts": entries,
            },
            sort_keys=True,
        ).encode()

    def write(handle: BinaryIO) -> None:
        placeholder = header()  # digests are fixed-length hex: the real header is as long
        handle.write(MAGIC + struct.pack("<Q", len(placeholder)) + placeholder)
        for entry, (_, data) in zip(entries, parts):
            entry["sha256"] = _copy_hashed(handle, data)
        section = _align(_PREFIX + len(placeholder) + at, SECTION_ALIGNMENT)
        written = _PREFIX + len(placeholder) + at
        for row, chunks in zip(table, sources):
            handle.write(bytes(section + row[0] - written))
            digest, size = hashlib.sha256(), 0
            for chunk in chunks():
                _copy_hashed(handle, chunk, digest)
                size += len(chunk)
            assert size == row[1], (row, size)
            row[2] = digest.hexdigest()
            written = section + row[0] + row[1]
        final = header()
        assert len(final) == len(placeholder)
        prefix = MAGIC + struct.pack("<Q", len(final)) + final
        handle.write(hashlib.sha256(prefix).digest())
        handle.seek(0)
        handle.write(prefix)

    return write


def _check_path(path: Any) -> None:
    """``path`` must be a non-empty file path: anything else is the caller's mistake,
    named as one (never a TypeError from ``open``)."""
    if not isinstance(path, str | os.PathLike) or not isinstance(os.fspath(path), str) or not os.fspath(path):
        raise PartitaError(f"path={path!r} must be a file path (a non-empty str or os.PathLike)")


def save(exe: CompiledModel, path: str | Path) -> None:
    _check_path(path)
    try:
        write_atomically(path, writer(exe), durable=True)
    except OSError as err:  # an API error is a PartitaError, naming the file
        raise PartitaError(f"cannot write '{err.filename or path}': {err.strerror or err}") from None


def _damaged(path: str | Path, why: str) -> PartitaError:
    return PartitaError(f"'{path}' is not a usable compiled model: {why}")


def read_parts(data: bytes, path: str | Path) -> tuple[dict, dict[str, bytes]]:
    """The header and the parts of a format-1 compiled-model file, every digest checked."""
    if not data.startswith(MAGIC[:-2]):
        raise _damaged(path, "it is not a Partita compiled model (bad magic)")
    if len(data) < _PREFIX + _TRAILER:
        raise _damaged(path, f"it is truncated ({len(data)} bytes)")
    if data[: len(MAGIC)] != _MAGIC_V1:
        (version,) = struct.unpack("<H", data[len(MAGIC) - 2 : len(MAGIC)])
        raise _damaged(path, f"format version {version} is not supported (this Partita reads 1 to {FORMAT_VERSION})")
    if len(data) < _PREFIX + _TRAILER or hashlib.sha256(data[:-_TRAILER]).digest() != data[-_TRAILER:]:
        raise _damaged(path, "its sha256 does not match its content (the file is truncated or changed)")
    (header_len,) = struct.unpack("<Q", data[len(MAGIC) : _PREFIX])
    try:
        header = json.loads(data[_PREFIX : _PREFIX + header_len])
        base = _PREFIX + header_len
        parts = {}
        for entry in header["parts"]:
            start, size = base + int(entry["offset"]), int(entry["size"])
            blob = data[start : start + size] if start >= base and size >= 0 else b""
            if len(blob) != size or start < base or start + size > len(data) - _TRAILER:
                raise _damaged(path, f"part '{entry['name']}' lies outside the file")
            if hashlib.sha256(blob).hexdigest() != entry["sha256"]:
                raise _damaged(path, f"part '{entry['name']}' does not match its sha256")
            parts[entry["name"]] = blob
    except (ValueError, KeyError, TypeError) as err:
        raise _damaged(path, f"its header is malformed ({err})") from None
    return header, parts


def _read_v2(handle: BinaryIO, path: str | Path, prefix: bytes) -> tuple[dict, dict[str, bytes], list[memoryview]]:
    """The header, the parts and the weights (read-only views of the mapped file) of a
    format-2 file, every digest checked by reading through the file once."""
    header, parts, weights, _ = _read_v2_section(handle, path, prefix)
    return header, parts, weights


def _read_v2_section(handle: BinaryIO, path: str | Path,
                     prefix: bytes) -> tuple[dict, dict[str, bytes], list[memoryview], int]:
    """``_read_v2``, and the file offset of the weights section (named parameters are
    rebound to it)."""
    size = os.fstat(handle.fileno()).st_size
    (header_len,) = struct.unpack("<Q", prefix[len(MAGIC) : _PREFIX]) if len(prefix) == _PREFIX else (size,)
    if size < _PREFIX + header_len + _TRAILER:
        raise _damaged(path, "its sha256 does not match its content (the file is truncated or changed)")
    header_bytes = handle.read(header_len)
    handle.seek(size - _TRAILER)
    if hashlib.sha256(prefix + header_bytes).digest() != handle.read(_TRAILER):
        raise _damaged(path, "its sha256 does not match its content (the file is truncated or changed)")
    limit = size - _TRAILER
    try:
        header = json.loads(header_bytes)
        base = end = _PREFIX + header_len
        parts = {}
        for entry in header["parts"]:
            start, length = base + int(entry["offset"]), int(entry["size"])
            if start < base or length < 0 or start + length > limit:
                raise _damaged(path, f"part '{entry['name']}' lies outside the file")
            handle.seek(start)
            blob = handle.read(length)
            if hashlib.sha256(blob).hexdigest() != entry["sha256"]:
                raise _damaged(path, f"part '{entry['name']}' does not match its sha256")
            parts[entry["name"]] = blob
            end = max(end, start + length)
        rows = [(int(row[0]), int(row[1]), str(row[2])) for row in header["weights"]]
    except (ValueError, KeyError, TypeError) as err:
        raise _damaged(path, f"its header is malformed ({err})") from None
    section = _align(end, SECTION_ALIGNMENT)
    position = end
    ordered = sorted(rows)
    fd = handle.fileno()
    for index, (offset, length, _) in enumerate(ordered):
        start = section + offset
        if start < position or length < 0 or start + length > limit:
            raise _damaged(path, f"weight {index} lies outside the weights section")
        if os.pread(fd, start - position, position).count(0) != start - position:
            raise _damaged(path, "the padding before a weight is not zeros (the file is changed)")
        position = start + length
    # Every weight's sha256 at once, a thread each (hashlib lets go of the GIL while it
    # hashes): loading is bound by the disk and the cores, not by one core's sha256.
    with ThreadPoolExecutor(max_workers=max(1, min(len(ordered), os.cpu_count() or 1))) as pool:
        digests = list(pool.map(lambda row: _hash_region(fd, section + row[0], row[1]), ordered))
    for index, ((_, _, digest), found) in enumerate(zip(ordered, digests)):
        if found != digest:
            raise _damaged(path, f"weight {index} does not match its sha256")
    if position != limit:
        raise _damaged(path, f"it has {limit - position} bytes after its last weight")
    if not rows:
        return header, parts, [], section
    mapping = memoryview(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
    return header, parts, [mapping[section + offset : section + offset + length] for offset, length, _ in rows], section


def _hash_region(fd: int, start: int, length: int) -> str:
    """The sha256 of ``length`` bytes of file ``fd`` at ``start``, read a chunk at a time
    into one buffer (read, not mapped: the page cache holds the bytes, not this process;
    one buffer, so no thread's heap keeps a chunk per read)."""
    hashed, done = hashlib.sha256(), 0
    buffer = bytearray(min(length, _CHUNK))
    view = memoryview(buffer)
    while done < length:
        n = os.preadv(fd, [view[: min(length - done, _CHUNK)]], start + done)
        if n <= 0:
            break
        hashed.update(view[:n])
        done += n
    return hashed.hexdigest()


def load(path: str | Path) -> CompiledModel:
    """The compiled model saved in ``path``; any damage is a ``PartitaError``."""
    _check_path(path)
    try:
        with open(path, "rb") as handle:
            prefix = handle.read(_PREFIX)
            if prefix[: len(MAGIC)] in (MAGIC, _MAGIC_V2):
                header, parts, weights, section = _read_v2_section(handle, path, prefix)
                identity = file_identity(os.fstat(handle.fileno()))  # of the file whose digests were checked
            else:  # format 1 (or not a compiled model: read_parts says which)
                section, identity = 0, ""
                handle.seek(0)
                header, parts = read_parts(handle.read(), path)
                if "weights.bin" not in parts:
                    raise _damaged(path, "it has no part 'weights.bin'")
                blob = parts["weights.bin"]
                weights = []
                try:
                    for offset, size in header.get("weights", []):
                        if offset < 0 or offset + size > len(blob):
                            raise _damaged(path, f"a weight of {size} bytes lies outside 'weights.bin'")
                        weights.append(blob[offset : offset + size])
                except (ValueError, TypeError) as err:
                    raise _damaged(path, f"its header is malformed ({err})") from None
    except OSError as err:
        raise PartitaError(f"cannot read '{path}': {err.strerror or err}") from None
    _check_header(header, path)
    if "module.mlir" not in parts:
        raise _damaged(path, "it has no part 'module.mlir'")
    try:
        text = parts["module.mlir"].decode()
    except UnicodeDecodeError:
        raise _damaged(path, "its module is not UTF-8 text") from None
    module = parse_module(text, make_context(), f"{path}:module.mlir", verify=False)
    rows = header.get("weights", [])
    named = {row[3]: (row, data) for row, data in zip(rows, weights) if len(row) > 3}
    unnamed = [data for row, data in zip(rows, weights) if len(row) <= 3]
    constants = [op for op in _constants(module) if not isinstance(op.properties["value"], ParameterAttr)]
    if len(unnamed) != len(constants) or len(named) != sum(len(row) > 3 for row in rows):
        raise _damaged(path, f"it has {len(unnamed)} unnamed weights for {len(constants)} constants")
    for op in _constants(module):
        value = op.properties["value"]
        if isinstance(value, ParameterAttr):
            # A parameter names its weight in this file's weights section: it is mapped
            # from there (lazily, by whoever reads it), every byte already checked.
            key = value.key.data
            if (key not in named or value.file.data or not isinstance(value.stored, NoneAttr) or value.perm.data
                    or value.checked.data):
                raise _damaged(path, f"parameter '{key}' is not a weight of the file")
            row, _ = named[key]
            if row[0] != value.offset.data or row[1] != value.stored_bytes():
                raise _damaged(path, f"parameter '{key}' of type {value.type} does not match its weight "
                                     f"({row[1]} bytes at {row[0]})")
            op.properties["value"] = ParameterAttr.make(key, value.type, os.path.abspath(path),
                                                        section + row[0], checked=identity)
    for op, data in zip(constants, unnamed):
        value = op.properties["value"]
        itemsize = value.get_element_type().compile_time_size
        # A splat constant keeps its one element (partita.ir.constants.is_splat).
        if len(data) not in (_elements(value) * itemsize, itemsize):
            raise _damaged(path, f"a weight of type {value.type} has {len(data)} bytes")
        op.properties["value"] = DenseIntOrFPElementsAttr(value.type, BytesAttr(data))
    verify_module(module)
    binaries = {}
    for op in module.ops:
        if isinstance(op, byoc.BinaryOp):
            # Everything a compiled model loads is embedded and digest-checked: a path
            # (a host file the loader would read) is refused whatever the format says.
            path_attr = op.attributes.get("path")
            embedded = f"embedded:@{op.sym_name.data}"
            if path_attr is not None and (op.is_inline or not isinstance(path_attr, StringAttr)
                                          or path_attr.data != embedded):
                raise _damaged(path, f"byoc.binary @{op.sym_name.data} names a host path ({path_attr}); "
                                     "a compiled model embeds everything it loads")
            if CACHE_DIR in op.attributes:
                raise _damaged(path, f"byoc.binary @{op.sym_name.data} names a host cache "
                                     f"({op.attributes[CACHE_DIR]}); a compiled model embeds everything it loads")
        if isinstance(op, byoc.BinaryOp) and not op.is_inline:  # library records are in the IR
            if op.attributes.get(byoc.DIGEST) is None:
                raise _damaged(path, f"byoc.binary @{op.sym_name.data} records no sha256")
            blob = parts.get(f"cubin/@{op.sym_name.data}")
            if blob is None:
                raise _damaged(path, f"it has no cubin for @{op.sym_name.data}")
            binaries[op.sym_name.data] = blob
    rows = [PartitionRow(**{**row, "ops": tuple(row["ops"])}) for row in header.get("partitions", [])]
    try:
        config = CompilationConfig(header["targets"])
    except TargetError as err:
        raise _damaged(path, f"its targets are unusable ({err})") from None
    return CompiledModel(module, header.get("pipeline", ""), config, rows,
                         entry=header.get("entry", "main"), binaries=binaries)


_ROW_TYPES = {"symbol": (str,), "target": (str,), "ops": (list,), "composite": (str, type(None)),
              "cost": (int, float, type(None)), "bound": (str, type(None)), "kernel": (str, type(None)),
              "calls": (int,)}


def _check_header(header, path) -> None:
    """Every header field of the type ``load`` uses, before any is used."""
    if not isinstance(header, dict):
        raise _damaged(path, "its header is not a JSON object")
    for key, kind in (("entry", str), ("pipeline", str), ("targets", str), ("partitions", list), ("weights", list)):
        if key in header and not isinstance(header[key], kind) or (key == "targets" and key not in header):
            raise _damaged(path, f"its header's '{key}' is not a {kind.__name__}")
    for row in header.get("partitions", []):
        if not isinstance(row, dict) or not {"symbol", "target", "ops"} <= set(row) or not set(row) <= set(_ROW_TYPES) \
                or any(not isinstance(v, _ROW_TYPES[k]) or isinstance(v, bool) for k, v in row.items()) \
                or not all(isinstance(op, str) for op in row["ops"]):
            raise _damaged(path, f"its header has a malformed partition row {str(row)[:80]}")
    names = set()
    for item in header.get("weights", []):  # [offset, size], its sha256 from format 2, a parameter's name
        if not (isinstance(item, list) and len(item) in (2, 3, 4) and all(type(v) is int and v >= 0 for v in item[:2])
                and all(isinstance(v, str) for v in item[2:]) and (len(item) < 4 or item[3] not in names)):
            raise _damaged(path, f"its header has a malformed weight entry {str(item)[:80]}")
        names.update(item[3:])


def _elements(value: DenseIntOrFPElementsAttr) -> int:
    count = 1
    for dim in value.get_shape():
        count *= dim
    return count


def is_compiled_model(path: str | Path) -> bool:
    """Whether ``path`` starts like a compiled-model file (or is named like one)."""
    if str(path).endswith(SUFFIX):
        return True
    try:
        with open(path, "rb") as handle:
            return handle.read(len(MAGIC) - 2) == MAGIC[:-2]
    except OSError:
        return False


__all__ = ["FORMAT_VERSION", "SUFFIX", "CompiledModel", "is_compiled_model", "load", "save", "writer"]
