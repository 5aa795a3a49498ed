"""How long the fuzzers run: the examples CI runs, times ``$PARTITA_FUZZ_SCALE`` (an
integer, default 1), derandomized (the same examples every run) unless
``$PARTITA_FUZZ_RANDOM=1``. A local hunt, as issue 23's longer runs did:

    PARTITA_FUZZ_SCALE=50 PARTITA_FUZZ_RANDOM=1 pytest tests/frontends/test_fuzz_onnx.py
"""

from __future__ import annotations

import os


def examples(ci: int) -> int:
    """``max_examples`` for a fuzzer that CI runs ``ci`` times."""
    return ci * max(1, int(os.environ.get("PARTITA_FUZZ_SCALE", "1") or 1))


def derandomize() -> bool:
    return os.environ.get("PARTITA_FUZZ_RANDOM", "") != "1"
