"""Cache entries that are not what they claim: a FIFO in place of a ``.ref`` or a
``.cubin`` never hangs a compile, and a ``.ref`` edited to name another key's valid cubin
is detected (that cubin lacks this source's kernels) instead of embedding the wrong one."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from partita.lowering import nvrtc
from partita.lowering.cubin import kernel_symbols

ONE = 'extern "C" __global__ void one(int* p) { p[threadIdx.x] = 1; }\n'
TWO = 'extern "C" __global__ void __launch_bounds__(64)\ntwo(int* p) { p[threadIdx.x] = 2; }\n'


def _compile(source: str, cache: Path, timeout: float = 120):
    result: list = []
    worker = threading.Thread(target=lambda: result.append(nvrtc.compile_cuda(source, arch="sm_80", cache_dir=cache)),
                              daemon=True)
    worker.start()
    worker.join(timeout)
    assert not worker.is_alive(), "the compile hangs"
    return result[0]


def test_declared_entries_read_launch_bounds() -> None:
    assert nvrtc.declared_entries(ONE + TWO) == {"one", "two"}


@pytest.mark.parametrize("which", ["ref", "cubin"])
def test_a_fifo_in_the_cache_never_hangs(which: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _compile(ONE, cache)
    entry = cache / f"{first.key}.ref" if which == "ref" else first.path
    entry.unlink()
    os.mkfifo(entry)
    with pytest.warns(nvrtc.CacheWarning, match="damaged; recompiling"):
        again = _compile(ONE, cache)
    assert not again.cache_hit and again.cubin == first.cubin
    assert entry.is_file()  # the FIFO was replaced by the repaired entry


def test_a_ref_naming_another_keys_cubin_is_detected(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    one, two = _compile(ONE, cache), _compile(TWO, cache)
    (cache / f"{one.key}.ref").write_text(two.digest)  # "one" now points at two's valid cubin
    with pytest.warns(nvrtc.CacheWarning, match="damaged; recompiling"):
        again = _compile(ONE, cache)
    assert not again.cache_hit and "one" in kernel_symbols(again.cubin)
    assert (cache / f"{one.key}.ref").read_text() == one.digest
