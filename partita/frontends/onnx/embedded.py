"""Weights embedded in an ``.onnx`` file, left in the file (issue 25).

An ONNX model under 2 GB usually keeps its initializers inside the protobuf, as
``TensorProto.raw_data``. ``onnx.load`` reads the whole file and decodes it, so every weight
sits in memory twice (the file's bytes and the decoded message) before the importer even
starts. A raw_data payload is already the little-endian array that ONNX's external data
holds, at a fixed offset of the model file, so it can be named where it lies instead.

``parse_leaving_weights`` maps the file, walks the protobuf wire format down
``ModelProto.graph`` (field 7) to each ``GraphProto.initializer`` (field 5), and decodes a
copy of the message without the ``raw_data`` (field 9) payloads of ``threshold`` bytes or
more; those initializers are rewritten as external data whose ``location`` is the model
file itself, at the payload's offset. The importer then maps them as it maps any external
data: they become ``#nn.parameter``s of the ``.onnx`` file, and the process never holds
their bytes. Anything the walk does not expect (groups, a graph or payload given twice, a
truncated field) makes it decline, and the model is loaded the ordinary way, whose errors
are the ones reported.

Only top-level initializers are left in place; tensors in ``Constant`` nodes and in
subgraphs are decoded as before.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from pathlib import Path

import onnx

__all__ = ["EmbeddedWeight", "parse_leaving_weights"]

# Field numbers of onnx.proto3 on the path to the payloads.
_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_RAW_DATA = 9
_TENSOR_EXTERNAL_DATA = 13
_TENSOR_DATA_LOCATION = 14
_DEFAULT_LOCATION = 0  # TensorProto.DataLocation.DEFAULT

_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


class _Declined(Exception):
    """The bytes are not what the walk expects: load the model the ordinary way."""


@dataclass(frozen=True)
class EmbeddedWeight:
    """The ``raw_data`` of initializer number ``index`` of the graph: ``length`` bytes of
    the model file from ``offset``."""

    index: int
    offset: int
    length: int


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= end or shift > 63:
            raise _Declined
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(buf, start: int, end: int):
    """``(field, wire type, field start, payload start, payload end)`` of each field of the
    message in ``buf[start:end]``; the field runs from its start to its payload end."""
    pos = start
    while pos < end:
        head = pos
        tag, pos = _varint(buf, pos, end)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise _Declined
        if wire == _VARINT:
            payload = pos
            _, pos = _varint(buf, pos, end)
        elif wire == _FIXED64:
            payload, pos = pos, pos + 8
        elif wire == _FIXED32:
            payload, pos = pos, pos + 4
        elif wire == _LENGTH_DELIMITED:
            length, payload = _varint(buf, pos, end)
            pos = payload + length
        else:  # groups (wire types 3, 4) are not in onnx.proto
            raise _Declined
        if pos > end:
            raise _Declined
        yield field, wire, head, payload, pos


def _message(field: int, body: bytes) -> bytes:
    return _encode_varint(field << 3 | _LENGTH_DELIMITED) + _encode_varint(len(body)) + body


def _tensor_without_payload(buf, start: int, end: int, threshold: int) -> tuple[bytes, int, int] | None:
    """The TensorProto in ``buf[start:end]`` without its raw_data, and the payload's
    (offset, length); None when it keeps its payload (small, absent, or not plain)."""
    raw, external = [], False
    for field, wire, head, payload, stop in _fields(buf, start, end):
        if field == _TENSOR_RAW_DATA and wire == _LENGTH_DELIMITED:
            raw.append((head, payload, stop))
        elif field == _TENSOR_EXTERNAL_DATA or (field == _TENSOR_DATA_LOCATION and wire == _VARINT
                                                and _varint(buf, payload, stop)[0] != _DEFAULT_LOCATION):
            external = True  # (onnx.save writes data_location DEFAULT out explicitly)
    if len(raw) != 1 or external:
        return None  # no payload, a payload given twice (the last would win), or already external
    head, payload, stop = raw[0]
    if stop - payload < threshold:
        return None
    return bytes(buf[start:head]) + bytes(buf[stop:end]), payload, stop - payload


def _graph_without_payloads(buf, start: int, end: int, threshold: int) -> tuple[bytes, list[EmbeddedWeight]]:
    parts: list[bytes] = []
    weights: list[EmbeddedWeight] = []
    initializers = 0
    for field, wire, head, payload, stop in _fields(buf, start, end):
        left = None
        if field == _GRAPH_INITIALIZER and wire == _LENGTH_DELIMITED:
            left = _tensor_without_payload(buf, payload, stop, threshold)
            if left is not None:
                weights.append(EmbeddedWeight(initializers, left[1], left[2]))
            initializers += 1
        parts.append(bytes(buf[head:stop]) if left is None else _message(_GRAPH_INITIALIZER, left[0]))
    return b"".join(parts), weights


def _model_without_payloads(buf, threshold: int) -> tuple[bytes, list[EmbeddedWeight]]:
    end = len(buf)
    graphs = [(head, payload, stop) for field, wire, head, payload, stop in _fields(buf, 0, end)
              if field == _MODEL_GRAPH and wire == _LENGTH_DELIMITED]
    if len(graphs) != 1:
        raise _Declined  # no graph, or one given in parts that protobuf would merge
    head, payload, stop = graphs[0]
    graph, weights = _graph_without_payloads(buf, payload, stop, threshold)
    if not weights:
        raise _Declined
    return bytes(buf[:head]) + _message(_MODEL_GRAPH, graph) + bytes(buf[stop:]), weights


def parse_leaving_weights(path: Path, threshold: int) -> onnx.ModelProto | None:
    """The model at ``path`` with each top-level initializer of ``threshold`` bytes or
    more of raw_data rewritten as external data in ``path`` itself (see the module
    docstring); None when there is none, or when the file is not what the walk expects."""
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                model_bytes, weights = _model_without_payloads(buf, threshold)
            except _Declined:
                return None
    except (OSError, ValueError):  # an empty file cannot be mapped
        return None
    try:
        model = onnx.ModelProto.FromString(model_bytes)
    except Exception:  # noqa: BLE001 - DecodeError: the ordinary load reports it
        return None
    initializers = model.graph.initializer
    for weight in weights:
        tensor = initializers[weight.index]
        tensor.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", path.name), ("offset", str(weight.offset)), ("length", str(weight.length))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
    return model
