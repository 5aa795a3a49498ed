"""Fuzzing partita-opt with mutants of the lit inputs: whatever the bytes, the answer is
the module or located ``error:`` lines with exit code 1, never a traceback or an
internal error. Bounded (a fixed number of examples, no deadline per example)."""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partita.tools import opt

LIT_INPUTS = sorted((Path(__file__).parents[1] / "filecheck").rglob("*.mlir"))
# Characters that change the structure of MLIR text rather than a name.
PUNCTUATION = list("{}[]()<>%@^:,=\"#!-?x0") + ["\n", " ", "\xff", "//", "dense<", "tensor<", "^bb0"]


def _mutate(data: st.DataObject, text: str) -> str:
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        if not text:
            break
        at = data.draw(st.integers(0, len(text) - 1), label="position")
        kind = data.draw(st.sampled_from(["delete", "insert", "duplicate", "truncate", "swap"]), label="kind")
        if kind == "delete":
            text = text[:at] + text[at + data.draw(st.integers(1, 40)) :]
        elif kind == "insert":
            text = text[:at] + data.draw(st.sampled_from(PUNCTUATION)) + text[at:]
        elif kind == "duplicate":
            end = text.find("\n", at) + 1 or len(text)
            text = text[:end] + text[at:end] + text[end:]
        elif kind == "truncate":
            text = text[:at]
        else:
            other = data.draw(st.integers(0, len(text) - 1))
            a, b = sorted((at, other))
            text = text[:a] + text[b : b + 8] + text[a + 8 : b] + text[a : a + 8] + text[b + 8 :]
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(data=st.data())
def test_partita_opt_never_prints_a_traceback(data: st.DataObject) -> None:
    source = data.draw(st.sampled_from(LIT_INPUTS), label="lit input")
    text = _mutate(data, source.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mutant.mlir"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = opt.main([str(path), "--split-input-file"])
    message = err.getvalue()
    assert code in (0, 1), message
    assert "Traceback" not in message and "internal error" not in message, (source.name, text, message)
    if code == 1:
        assert "error:" in message
