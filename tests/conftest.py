"""Shared test setup: ``tests/`` is importable, so every test folder reaches the doubles
in ``tests/support`` (``from support.recording_driver import RecordingDriver``) however
pytest is started (from the repository, on one file, or with another rootdir); and the
suite-wide fixtures."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = str(Path(__file__).resolve().parent)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

from support.gpu_guard import gpu_tests_run_on_the_gpu  # noqa: E402,F401 - an autouse fixture
