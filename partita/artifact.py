"""A compiled model as one self-contained file (``.partita``), like TVM's exported library
or IREE's ``.vmfb``: ``Executable.save(path)`` writes it, ``partita.load(path)`` reads it
back, with no cubin cache, no NVRTC and no ONNX file.

Layout (all integers little-endian)::

    magic       16 bytes  b"PARTITA-MODEL\\0" + format version (u16)
    header_len   8 bytes  length of the JSON header
    header       JSON     entry, pipeline, targets, partition rows, weights table,
                          and every part as {name, offset, size, sha256}
    parts        bytes    module.mlir, weights.bin, one cubin per byoc.binary
    trailer     32 bytes  sha256 of everything before it

The trailer catches any changed or missing byte (a truncated copy, a flipped bit); the
per-part digests say which part is damaged. The module is the lowered IR as text, with
every ``nn.constant`` printed as a zero splat and its exact payload in ``weights.bin``
(text would round small float constants to 7 digits). A ``byoc.binary`` names its cubin by
``sha256`` only (no cache directory of the machine that saved it): its bytes are the part
``cubin/@symbol``, checked against that ``sha256`` again before the driver sees them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
from io import StringIO
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr, ModuleOp, StringAttr
from xdsl.printer import Printer

from partita.dialects import byoc, make_context
from partita.files import write_atomically
from partita.ir import PartitaError, parse_module, verify_module
from partita.lowering.binaries import CACHE_DIR, binary_images
from partita.report import PartitionRow
from partita.target import CompilationConfig, TargetError

FORMAT_VERSION = 1
MAGIC = b"PARTITA-MODEL\0" + struct.pack("<H", FORMAT_VERSION)
_PREFIX = len(MAGIC) + 8
_TRAILER = 32
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


def serialize(exe: CompiledModel) -> bytes:
    """The bytes of the compiled-model file for ``exe``."""
    module = exe.module.clone()
    weights: list[bytes] = []
    table: list[list[int]] = []
    offset = 0
    for op in _constants(module):
        data = op.properties["value"].data.data
        table.append([offset, len(data)])
        weights.append(data)
        offset += len(data)
        op.properties["value"] = _payload_placeholder(op.properties["value"])
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
    parts = [("module.mlir", text.getvalue().encode()), ("weights.bin", b"".join(weights))]
    parts += [(f"cubin/@{symbol}", data) for symbol, data in sorted(cubins.items())]
    entries, at = [], 0
    for name, data in parts:
        entries.append({"name": name, "offset": at, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        at += len(data)
    header = json.dumps(
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
    body = b"".join([MAGIC, struct.pack("<Q", len(header)), header, *(data for _, data in parts)])
    return body + hashlib.sha256(body).digest()


def _check_path(path: Any) -> None:
    """``path`` must be a non-empty file path: anything else is the caller's mistake,
    named as one (never a TypeError from ``open``)."""
    if not isinstance(path, str | os.PathLike) or not isinstance(os.fspath(path), str) or not os.fspath(path):
        raise PartitaError(f"path={path!r} must be a file path (a non-empty str or os.PathLike)")


def save(exe: CompiledModel, path: str | Path) -> None:
    _check_path(path)
    data = serialize(exe)
    try:
        write_atomically(path, data, durable=True)
    except OSError as err:  # an API error is a PartitaError, naming the file
        raise PartitaError(f"cannot write '{err.filename or path}': {err.strerror or err}") from None


def _damaged(path: str | Path, why: str) -> PartitaError:
    return PartitaError(f"'{path}' is not a usable compiled model: {why}")


def read_parts(data: bytes, path: str | Path) -> tuple[dict, dict[str, bytes]]:
    """The header and the parts of a compiled-model file, every digest checked."""
    if not data.startswith(MAGIC[:-2]):
        raise _damaged(path, "it is not a Partita compiled model (bad magic)")
    if len(data) < _PREFIX + _TRAILER:
        raise _damaged(path, f"it is truncated ({len(data)} bytes)")
    if data[: len(MAGIC)] != MAGIC:
        (version,) = struct.unpack("<H", data[len(MAGIC) - 2 : len(MAGIC)])
        raise _damaged(path, f"format version {version} is not supported (this Partita reads {FORMAT_VERSION})")
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


def load(path: str | Path) -> CompiledModel:
    """The compiled model saved in ``path``; any damage is a ``PartitaError``."""
    _check_path(path)
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise PartitaError(f"cannot read '{path}': {err.strerror or err}") from None
    header, parts = read_parts(data, path)
    _check_header(header, path)
    for name in ("module.mlir", "weights.bin"):
        if name not in parts:
            raise _damaged(path, f"it has no part '{name}'")
    try:
        text = parts["module.mlir"].decode()
    except UnicodeDecodeError:
        raise _damaged(path, "its module is not UTF-8 text") from None
    module = parse_module(text, make_context(), f"{path}:module.mlir", verify=False)
    constants = _constants(module)
    weights, table = parts["weights.bin"], header.get("weights", [])
    if len(table) != len(constants):
        raise _damaged(path, f"it has {len(table)} weights for {len(constants)} constants")
    for op, (offset, size) in zip(constants, table):
        value = op.properties["value"]
        itemsize = value.get_element_type().compile_time_size
        # A splat constant keeps its one element (partita.ir.constants.is_splat).
        if size not in (_elements(value) * itemsize, itemsize) or offset + size > len(weights):
            raise _damaged(path, f"a weight of type {value.type} has {size} bytes")
        op.properties["value"] = DenseIntOrFPElementsAttr(value.type, BytesAttr(weights[offset : offset + size]))
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
              "cost": (int, float, type(None)), "kernel": (str, type(None)), "calls": (int,)}


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
    for item in header.get("weights", []):
        if not (isinstance(item, list) and len(item) == 2 and all(type(v) is int and v >= 0 for v in item)):
            raise _damaged(path, f"its header has a malformed weight entry {str(item)[:80]}")


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


__all__ = ["FORMAT_VERSION", "SUFFIX", "CompiledModel", "is_compiled_model", "load", "save", "serialize"]
