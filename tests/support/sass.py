"""SASS of cubins for the tests that check what the hardware would execute (HMMA, 128-bit
loads, spills): skips the test when ``nvdisasm`` is not installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from partita.lowering.cubin import nvdisasm_tool, sass_by_function, sass_listing

__all__ = ["compiled_sass", "sass_by_function", "sass_of"]


def sass_of(cubin: bytes | str | Path) -> str:
    """``cubin``'s SASS listing; skips the calling test without ``nvdisasm``."""
    if nvdisasm_tool() is None:
        pytest.skip("nvdisasm is not installed (pip install nvidia-cuda-nvdisasm)")
    return sass_listing(cubin)


def compiled_sass(code: str, arch: str = "sm_90", **options):
    """``code`` compiled by NVRTC for ``arch`` and each of its functions' SASS (its body up
    to the next section), by name; skips the calling test without NVRTC or ``nvdisasm``."""
    nvrtc = pytest.importorskip("partita.lowering.nvrtc")
    try:
        binary = nvrtc.compile_cuda(code, arch=arch, **options)
    except Exception as err:  # noqa: BLE001 - no NVRTC here
        pytest.skip(f"NVRTC unavailable: {err}")
    functions = sass_by_function(sass_of(binary.cubin))
    return binary, {name: body.split(".section")[0] for name, body in functions.items()}
