"""SASS of cubins for the tests that check what the hardware would execute (HMMA, 128-bit
loads, spills): skips the test when ``nvdisasm`` is not installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from partita.lowering.cubin import nvdisasm_tool, sass_by_function, sass_listing

__all__ = ["sass_by_function", "sass_of"]


def sass_of(cubin: bytes | str | Path) -> str:
    """``cubin``'s SASS listing; skips the calling test without ``nvdisasm``."""
    if nvdisasm_tool() is None:
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm)")
    return sass_listing(cubin)
