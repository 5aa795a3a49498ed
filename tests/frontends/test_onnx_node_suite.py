"""The ONNX backend node suite through ``partita.compile``: every case has the status that
``tests/support/onnx_node_expected.txt`` records (pass when not listed), and none gives a wrong
result or a crash. See ``tests/support/onnx_node_suite.py``."""

from __future__ import annotations

import os

import pytest
from support.onnx_node_suite import load_cases, read_expected, run_suite, summary  # tests/support/onnx_node_suite.py


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory):
    # A private cubin cache: the suite's kernels are compiled once here, in both workers.
    os.environ.setdefault("PARTITA_CACHE_DIR", str(tmp_path_factory.mktemp("cubins")))
    cases = load_cases()
    results = run_suite(cases, jobs=os.cpu_count() or 1, timeout=120)
    print(summary(cases, results))
    return results


def test_no_case_gives_a_wrong_result_or_crashes(outcomes) -> None:
    bad = [f"{o.status} {o.name}: {o.reason}" for o in outcomes if o.status in ("wrong", "crash", "timeout")]
    assert not bad, "\n".join(bad)


def test_every_case_has_its_expected_status(outcomes) -> None:
    expected = read_expected()
    changed = []
    for o in outcomes:
        want = expected.get(o.name)
        want_status = want.status if want else "pass"
        if o.status != want_status:
            changed.append(f"{o.name}: expected {want_status}, got {o.status} {o.reason}".rstrip())
    stale = sorted(set(expected) - {o.name for o in outcomes})
    assert not changed and not stale, (
        "node-suite statuses changed (update tests/support/onnx_node_expected.txt with "
        "`python tests/support/onnx_node_suite.py --write-expected` if intended):\n"
        + "\n".join(changed + [f"{n}: no such case" for n in stale]))


def test_expected_file_gives_a_reason_for_every_case() -> None:
    for o in read_expected().values():
        assert o.status in ("unsupported", "random", "wrong", "crash", "timeout") and o.reason, o
