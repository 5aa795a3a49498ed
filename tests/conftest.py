"""Shared test setup: ``tests/`` is importable, so every test folder reaches the doubles
in ``tests/support`` (``from support.recording_driver import RecordingDriver``) however
pytest is started (from the repository, on one file, or with another rootdir); and the
suite-wide fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

from support.gpu_guard import gpu_tests_run_on_the_gpu  # noqa: E402,F401 - an autouse fixture


@pytest.fixture(scope="session")
def kernel_cache() -> Path:
    """The cubin cache of tests that compile models and never touch the cache's files:
    NVRTC's own default (``$PARTITA_CACHE_DIR``, which CI sets to a fresh directory, else
    ``~/.cache/partita/cubins``), shared by both workers. A CUTLASS configuration one test
    file compiles is then a hit in the next, and a configuration both workers need at once
    is compiled once (the cache's per-key lock). Tests about the cache keep private ones."""
    from partita.lowering.nvrtc import default_cache_dir

    return default_cache_dir()

# pytest-xdist (`--dist loadfile`, pyproject.toml) hands whole files to the workers in
# collection order. The longest files (their seconds in a cold-cache run on 2 cores, from the
# `--durations` summary) go first, so that none of them starts last and runs alone while
# the other worker idles: longest-processing-time-first scheduling. The rest keep their order.
LONGEST_FIRST = (
    "models/test_exported_models.py",  # ~400 s
    "frontends/test_onnx_node_suite.py",  # ~240 s
    "models/test_models.py",  # ~150 s
    "runtime/test_tma_launch.py",  # ~105 s (cold sm_90a CUTLASS compiles)
    "models/test_flash_attention_fixtures.py",
    "lowering/test_nvrtc_compile.py",
    "driver/test_artifact.py",
    "driver/test_fuzz_pipeline.py",
    "lowering/test_cutlass_sm90.py",
    "lowering/test_mixed_precision.py",
    "runtime/test_parameters.py",
    "runtime/test_runtime.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: k for k, name in enumerate(LONGEST_FIRST)}

    def order(item) -> int:
        path = Path(str(item.fspath)).resolve()
        try:
            return rank.get(path.relative_to(TESTS).as_posix(), len(rank))
        except ValueError:  # a test outside tests/
            return len(rank)

    items.sort(key=order)  # stable: files keep their tests' order
