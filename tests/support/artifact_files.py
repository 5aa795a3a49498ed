"""Compiled-model files taken apart and put back together with every digest recomputed, as
anyone editing a ``.partita`` file can: what the untrusted-file tests and the fuzzer feed
``partita.load`` (format 2: header, parts, then the 4 KiB-aligned weights section)."""

from __future__ import annotations

import hashlib
import json
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path

import partita
from partita import artifact


def unpack(data: bytes) -> tuple[dict, dict[str, bytes], list[bytes]]:
    """The header, the parts by name and the weights of a format-2 file's bytes."""
    with tempfile.TemporaryFile() as handle:
        handle.write(data)
        handle.seek(0)
        prefix = handle.read(len(artifact.MAGIC) + 8)
        header, parts, weights = artifact._read_v2(handle, "model", prefix)
        return header, parts, [bytes(w) for w in weights]


def pack(header: dict, parts: dict[str, bytes], weights: list[bytes],
         mutate: Callable[[dict], None] | None = None) -> bytes:
    """A format-2 file of these parts (in ``header["parts"]``'s order) and weights, every
    digest recomputed; ``mutate`` edits the header after that (what a hostile editor
    writes), before the header's own digest is taken."""
    header = dict(header)
    names = [entry["name"] for entry in header["parts"]]
    entries, at = [], 0
    for name in names:
        blob = parts[name]
        entries.append({"name": name, "offset": at, "size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()})
        at += len(blob)
    header["parts"] = entries
    rows, offset = [], 0
    kept = [row[3:] for row in header.get("weights", [])]  # a named parameter keeps its name
    for index, weight in enumerate(weights):
        offset = -(-offset // artifact.WEIGHT_ALIGNMENT) * artifact.WEIGHT_ALIGNMENT
        rows.append([offset, len(weight), hashlib.sha256(weight).hexdigest(), *(kept[index] if index < len(kept)
                                                                                  else [])])
        offset += len(weight)
    header["weights"] = rows
    if mutate is not None:
        mutate(header)
    head = json.dumps(header, sort_keys=True).encode()
    prefix = artifact.MAGIC + struct.pack("<Q", len(head)) + head
    out = bytearray(prefix + b"".join(parts[name] for name in names))
    section = -(-len(out) // artifact.SECTION_ALIGNMENT) * artifact.SECTION_ALIGNMENT
    for (start, *_), weight in zip(rows, weights):
        out += bytes(section + start - len(out))
        out += weight
    return bytes(out) + hashlib.sha256(prefix).digest()


def reseal(data: bytes, edit_module: Callable[[str], str] | None = None,
           edit_parts: Callable[[dict[str, bytes]], None] | None = None) -> bytes:
    """``data`` with its module text edited, every digest recomputed."""
    header, parts, weights = unpack(data)
    if edit_module is not None:
        parts["module.mlir"] = edit_module(parts["module.mlir"].decode()).encode()
    if edit_parts is not None:
        edit_parts(parts)
    return pack(header, parts, weights)


def compile_and_save(text: str, targets: str, folder: Path):
    """``text`` compiled eagerly for ``targets`` and saved in ``folder``: the executable
    and the file's bytes (what the edits above start from)."""
    exe = partita.compile(text, targets=targets, partitioner="eager")
    path = folder / "model.partita"
    exe.save(path)
    return exe, path.read_bytes()
