"""The ONNX backend node test suite, run through ``partita.compile``.

The ``onnx`` package no longer ships the suite's data files; its own generator
(``onnx.backend.test.case.node``, what ``onnx.backend.test``'s data loader is made from)
builds every case in memory: one small model per operator variant, with inputs and the
expected outputs. Each case is compiled with the default targets and Collage, run (kernels
emulated on the CPU without a device), and compared with the expected outputs using the
case's own tolerances (the backend runner's defaults: rtol 1e-3, atol 1e-7) and exact
dtypes.

Every case gets one status:

* ``pass``: outputs match;
* ``unsupported``: Partita rejected the model with its own error (``PartitaError``), which
  is the right answer for what it cannot compile; the reason is the error's first line;
* ``random``: the model draws random values (RandomUniform, Bernoulli...): its outputs have
  the expected shapes and dtypes, but the values are draws of another generator (the
  generators' numpy, onnxruntime's), so they are not compared;
* ``wrong``: it ran and a result differs (shape, dtype or values);
* ``crash``: any other exception (a bug: an error must be Partita's own);
* ``timeout``: the case took longer than ``--timeout`` seconds.

``tests/support/onnx_node_expected.txt`` lists every case that is not expected to pass, with its
status and reason, as onnxruntime and TVM keep exclusion lists; ``test_onnx_node_suite``
fails on any difference in either direction. Regenerate it with
``python tests/support/onnx_node_suite.py --write-expected`` after a change that makes cases pass.

Command line: ``python tests/support/onnx_node_suite.py [-k SUBSTRING] [--jobs N] [--verbose]``.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import sys
import warnings
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

EXPECTED = Path(__file__).with_name("onnx_node_expected.txt")
STATUSES = ("pass", "unsupported", "random", "wrong", "crash", "timeout")
RANDOM_OPS = frozenset({"RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Bernoulli",
                        "Multinomial"})
"""Operators whose outputs are random draws: a case using one is checked for shapes and dtypes."""


@dataclass(frozen=True)
class Outcome:
    name: str
    status: str
    reason: str = ""


def load_cases(pattern: str | None = None) -> list:
    """Every node test case (``onnx.backend.test.case.test_case.TestCase``), by name."""
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the generators overflow casts on purpose
        cases = node.collect_testcases(None)
    return sorted((c for c in cases if pattern is None or pattern in c.name), key=lambda c: c.name)


def op_types(case) -> set[str]:
    """The operator types a case's model uses."""
    return {n.op_type for n in case.model.graph.node}


def _array(value) -> np.ndarray:
    """A case's input or expected output (some generators store a TensorProto)."""
    import onnx
    from onnx import numpy_helper

    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def _mismatch(got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    want = _array(want)
    if not isinstance(got, np.ndarray):
        return f"result is a {type(got).__name__}, not an array"
    if got.shape != want.shape:
        return f"shape {got.shape} instead of {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} instead of {want.dtype}"
    if want.dtype.kind in "fcV" or want.dtype.name == "bfloat16":
        if want.dtype.itemsize == 2:
            # f16/bf16 results are rounded once per op from f32 arithmetic (as on a GPU);
            # the generators round differently, so two ulps of the storage type are allowed.
            eps = 2.0 ** -10 if want.dtype == np.float16 else 2.0 ** -7
            rtol, atol = max(rtol, 2 * eps), max(atol, 2 * eps)
        g, w = got.astype(np.float64), want.astype(np.float64)
        same_nan = np.isnan(g) == np.isnan(w)
        close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        if not (same_nan.all() and close.all()):
            bad = np.flatnonzero(~close)
            return f"{bad.size} of {w.size} values differ (first at {bad[0] if bad.size else '?'})"
        return None
    if not np.array_equal(got, want):
        return f"{int((got != want).sum())} of {want.size} values differ"
    return None


ATOL_OVERRIDES = {
    # The expected imaginary parts at the Nyquist bin are numpy's complex64 rounding noise
    # (1.9e-7, over the default atol of 1e-7); the exact answer is 0 (float64: 7e-16), which
    # Partita's DFT weight gives; onnxruntime computes -7e-6 and fails the case too.
    # (onnxruntime's backend-test runner keeps per-case tolerance overrides likewise.)
    "test_dft_inverse_opset19": 1e-6,
}
"""Cases whose expected outputs carry the generator's float32 rounding noise at values
that are zero exactly: the absolute tolerance they are compared with instead of their own."""


def sequence_lengths(model, inputs) -> dict:
    """``partita.compile``'s ``sequence_lengths`` for a case's inputs: each sequence input's
    length, or its elements' shapes where the model's element type has no shape."""
    lengths = {}
    for info, value in zip(model.graph.input, inputs):
        if info.type.HasField("sequence_type"):
            shaped = info.type.sequence_type.elem_type.tensor_type.HasField("shape")
            lengths[info.name] = len(value) if shaped else [list(_array(e).shape) for e in value]
    return lengths


def _flat(got: Sequence, want: Sequence) -> tuple[list, list, str | None]:
    """Results and expected outputs with each sequence's elements in its place, to compare
    one by one; the reason when a sequence's length, or whether it is one, differs."""
    flat_got, flat_want = [], []
    for k, (g, w) in enumerate(zip(got, want)):
        if isinstance(w, list) != isinstance(g, list) or (isinstance(w, list) and len(w) != len(g)):
            kind = lambda v: f"a sequence of {len(v)}" if isinstance(v, list) else "a tensor"  # noqa: E731
            return [], [], f"output {k}: {kind(g)} instead of {kind(w)}"
        flat_got += g if isinstance(g, list) else [g]
        flat_want += w if isinstance(w, list) else [w]
    return flat_got, flat_want, None


def _alarm(signum, frame):  # pragma: no cover - only on a slow case
    raise TimeoutError


def run_case(case, timeout: float = 60.0) -> Outcome:
    """Compile and run one case; classify what happened."""
    import partita
    from partita.ir import PartitaError

    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(max(1, int(timeout)))
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            random = bool(op_types(case) & RANDOM_OPS)
            compiled = {}
            for inputs, outputs in case.data_sets:
                # A sequence input's length is the user's to give (the model has none): the
                # data set's, with its elements' shapes where the model gives them none.
                lengths = sequence_lengths(case.model, inputs)
                key = repr(lengths)
                if key not in compiled:
                    compiled[key] = partita.compile(case.model, sequence_lengths=lengths or None)
                got = compiled[key].run(*[[_array(e) for e in x] if isinstance(x, list) else _array(x) for x in inputs])
                if len(got) != len(outputs):
                    return Outcome(case.name, "wrong", f"{len(got)} results instead of {len(outputs)}")
                got, outputs, why = _flat(got, outputs)
                if why is not None:
                    return Outcome(case.name, "wrong", why)
                for k, (g, w) in enumerate(zip(got, outputs)):
                    if random:
                        w = _array(w)
                        why = (f"shape {g.shape} instead of {w.shape}" if g.shape != w.shape else
                               f"dtype {g.dtype} instead of {w.dtype}" if g.dtype != w.dtype else None)
                    else:
                        why = _mismatch(g, w, case.rtol, ATOL_OVERRIDES.get(case.name, case.atol))
                    if why is not None:
                        return Outcome(case.name, "wrong", f"output {k}: {why}")
        if random:
            return Outcome(case.name, "random", "its outputs are random draws: shapes and dtypes match the "
                                                "expected ones, values of another generator are not compared")
        return Outcome(case.name, "pass")
    except PartitaError as err:
        return Outcome(case.name, "unsupported", _first_line(str(err)))
    except TimeoutError:
        return Outcome(case.name, "timeout", f"over {timeout:g} s")
    except Exception as err:  # noqa: BLE001 - classifying is the point
        return Outcome(case.name, "crash", f"{type(err).__name__}: {_first_line(str(err))}")
    finally:
        signal.alarm(0)


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    line = line.removeprefix("error: ")
    return line[:200]


def _run_names(names: Sequence[str], timeout: float) -> list[Outcome]:
    by_name = {c.name: c for c in load_cases()}
    return [run_case(by_name[n], timeout) for n in names]


def run_suite(cases: Sequence, jobs: int = 2, timeout: float = 60.0) -> list[Outcome]:
    """Run ``cases`` on ``jobs`` worker processes (each loads the suite once)."""
    names = [c.name for c in cases]
    if jobs <= 1 or len(names) < 2:
        return [run_case(c, timeout) for c in cases]
    chunks = [names[k::jobs * 4] for k in range(jobs * 4)]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        parts = list(pool.map(_run_names, chunks, [timeout] * len(chunks)))
    by_name = {o.name: o for part in parts for o in part}
    return [by_name[n] for n in names]


def read_expected(path: Path = EXPECTED) -> dict[str, Outcome]:
    """``name -> Outcome`` of every case not expected to pass."""
    expected = {}
    for line in path.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, status, *reason = line.split(None, 2)
        expected[name] = Outcome(name, status, reason[0] if reason else "")
    return expected


def write_expected(outcomes: Iterable[Outcome], path: Path = EXPECTED) -> None:
    rows = [o for o in outcomes if o.status != "pass"]
    header = [
        "# ONNX node-suite cases that Partita is not expected to pass: name, status, reason.",
        "# Every case not listed must pass. Regenerate: python tests/support/onnx_node_suite.py --write-expected",
    ]
    path.write_text("\n".join(header + [f"{o.name} {o.status} {o.reason}".rstrip() for o in rows]) + "\n")


def summary(cases: Sequence, outcomes: Sequence[Outcome]) -> str:
    counts = collections.Counter(o.status for o in outcomes)
    passing = {o.name for o in outcomes if o.status == "pass"}
    covered = set().union(*(op_types(c) for c in cases if c.name in passing)) if passing else set()
    every = set().union(*(op_types(c) for c in cases)) if cases else set()
    parts = [f"{counts[s]} {s}" for s in STATUSES]
    return (f"{len(outcomes)} cases: " + ", ".join(parts)
            + f"; operator types passing: {len(covered)} of {len(every)}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/support/onnx_node_suite.py", description=__doc__.split("\n")[0])
    parser.add_argument("-k", dest="pattern", help="only cases whose name contains this")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--write-expected", action="store_true", help=f"rewrite {EXPECTED.name}")
    parser.add_argument("--verbose", "-v", action="store_true", help="print every case")
    args = parser.parse_args(argv)
    cases = load_cases(args.pattern)
    outcomes = run_suite(cases, args.jobs, args.timeout)
    for o in outcomes:
        if args.verbose or o.status in ("wrong", "crash", "timeout"):
            print(f"{o.status:12} {o.name}  {o.reason}")
    print(summary(cases, outcomes))
    if args.write_expected:
        if args.pattern:
            parser.error("--write-expected needs the whole suite (no -k)")
        write_expected(outcomes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
