"""Hardening: edited compiled-model files with every digest recomputed (what anyone
editing a ``.partita`` can do). Each either loads and runs, or fails with a
``PartitaError``; any other exception (an "internal error") is a bug."""

from __future__ import annotations

import hashlib
import re
import struct

import numpy as np
import pytest
from driver.test_untrusted_model import MODEL  # tests/driver/test_untrusted_model.py
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.artifact_files import pack, reseal, unpack  # tests/support/artifact_files.py

import partita
from partita import artifact
from partita.ir import PartitaError
from partita.runtime.device import SimulatedDevice

INTERESTING = [0, 1, -1, 3, 255, 1024, 2**31 - 1, 2**31, 2**32, 2**40, 2**62, 2**63 - 1, -(2**63), -(2**36)]
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


class _Model(tuple):
    def __repr__(self) -> str:  # keep falsifying examples readable
        return "<model>"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    exe = partita.compile(MODEL, partitioner="eager")
    path = tmp_path_factory.mktemp("fuzz") / "model.partita"
    exe.save(path)
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in [(8, 64), (32, 64), (16, 32)]]
    return _Model((path.read_bytes(), inputs))


def _load_and_run(data: bytes, inputs, tmp_path) -> None:
    path = tmp_path / "fuzzed.partita"
    path.write_bytes(data)
    try:
        exe = partita.load(path)
        exe.load(SimulatedDevice()).run(*inputs)
    except PartitaError:
        pass


def _edit(text: str, kind: str, index: int, value: int) -> str:
    """One edit of the module text: an integer literal set to ``value``, two string
    literals swapped, or a line deleted."""
    if kind == "integer":
        spots = list(re.finditer(r"(?<![\w.#%@])-?\d+(?= : i64|\]| x|x)", text))
        m = spots[index % len(spots)]
        return text[: m.start()] + str(value) + text[m.end():]
    if kind == "string":
        spots = list(re.finditer(r'"[^"\n]*"', text))
        a, b = sorted([spots[index % len(spots)], spots[(index // 7) % len(spots)]], key=lambda m: m.start())
        if a.end() > b.start():
            return text
        return text[: a.start()] + b.group() + text[a.end(): b.start()] + a.group() + text[b.end():]
    lines = text.splitlines()
    del lines[index % len(lines)]
    return "\n".join(lines)


@FUZZ
@given(kind=st.sampled_from(["integer", "string", "line"]), index=st.integers(0, 10**6),
       value=st.sampled_from(INTERESTING))
def test_edited_modules_load_or_fail_cleanly(model, tmp_path, kind, index, value) -> None:
    data, inputs = model
    _load_and_run(reseal(data, lambda text: _edit(text, kind, index, value)), inputs, tmp_path)


JUNK = [None, 0, -1, 2**64, "x", [], {}, [[1, 2, 3]], [["a"]], {"name": 1}, [{"symbol": 3}]]


@FUZZ
@given(key=st.sampled_from(["entry", "pipeline", "targets", "partitions", "weights", "parts"]),
       junk=st.sampled_from([*JUNK, "drop"]))
def test_edited_headers_load_or_fail_cleanly(model, tmp_path, key, junk) -> None:
    data, inputs = model
    header, parts, weights = unpack(data)

    def mutate(header: dict) -> None:
        if junk == "drop":
            header.pop(key)
        else:
            header[key] = junk

    _load_and_run(pack(header, parts, weights, mutate), inputs, tmp_path)


@FUZZ
@given(length=st.integers(0, 200), header_len=st.sampled_from([0, 1, 2**31, 2**63, 2**64 - 1]))
def test_short_files_and_bad_header_lengths_fail_cleanly(model, tmp_path, length, header_len) -> None:
    data, inputs = model
    _load_and_run(data[:length], inputs, tmp_path)
    body = artifact.MAGIC + struct.pack("<Q", header_len) + data[len(artifact.MAGIC) + 8: -32]
    _load_and_run(body + hashlib.sha256(body).digest(), inputs, tmp_path)
