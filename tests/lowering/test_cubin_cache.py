"""The cubin cache trusts nothing it finds: damaged entries are rebuilt, symlinks are not
followed, an unusable directory falls back to a private one, stale temporaries go."""

from __future__ import annotations

import hashlib
import os
import time
import warnings
from pathlib import Path

import pytest

from partita.lowering import nvrtc

SOURCE = 'extern "C" __global__ void tiny(int* p, int n) { if (threadIdx.x < n) p[threadIdx.x] = n + 1; }\n'


def compile_tiny(cache: Path | str | None) -> nvrtc.CompiledBinary:
    return nvrtc.compile_cuda(SOURCE, arch="sm_80", cache_dir=cache)


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> nvrtc.CompiledBinary:
    return compile_tiny(tmp_path_factory.mktemp("first"))


def _damage_cubin(kind: str, path: Path, elsewhere: Path) -> None:
    if kind == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif kind == "garbage":
        path.write_bytes(b"\x7fELF" + os.urandom(64))
    elif kind == "symlink":
        path.unlink()
        elsewhere.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
        path.symlink_to(elsewhere)
    elif kind == "directory":
        path.unlink()
        path.mkdir()
        (path / "junk").write_text("x")


@pytest.mark.parametrize("kind", ["truncated", "garbage", "symlink", "directory"])
def test_damaged_cubin_entries_are_rebuilt(kind: str, good: nvrtc.CompiledBinary, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = compile_tiny(cache)
    assert not first.cache_hit and first.path == cache / f"{good.digest}.cubin"
    _damage_cubin(kind, first.path, tmp_path / "passwd")
    with pytest.warns(nvrtc.CacheWarning, match="damaged; recompiling"):
        again = compile_tiny(cache)
    assert not again.cache_hit
    assert again.cubin == good.cubin
    assert again.path.is_file() and not again.path.is_symlink()
    assert hashlib.sha256(again.path.read_bytes()).hexdigest() == good.digest
    assert (tmp_path / "passwd").exists() or kind != "symlink"  # the link's target is left alone
    # and the repaired entry is a verified hit afterwards
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compile_tiny(cache).cache_hit


@pytest.mark.parametrize("kind", ["garbage", "symlink", "directory"])
def test_damaged_refs_are_rebuilt(kind: str, good: nvrtc.CompiledBinary, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    compile_tiny(cache)
    ref = cache / f"{good.key}.ref"
    if kind == "garbage":
        ref.write_bytes(b"not a digest")
    elif kind == "symlink":
        ref.unlink()
        (tmp_path / "target").write_text(good.digest)
        ref.symlink_to(tmp_path / "target")
    else:
        ref.unlink()
        ref.mkdir()
    with pytest.warns(nvrtc.CacheWarning):
        again = compile_tiny(cache)
    assert not again.cache_hit and again.cubin == good.cubin
    assert ref.is_file() and not ref.is_symlink() and ref.read_text() == good.digest


@pytest.mark.parametrize("kind", ["file", "proc", "empty"])
def test_unusable_cache_dir_falls_back_to_a_private_one(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    if kind == "file":
        cache: str = str(tmp_path / "afile")
        Path(cache).write_text("x")
    elif kind == "proc":
        cache = "/proc/partita-cache"
    else:
        cache = ""
        monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path / "afile2"))
        (tmp_path / "afile2").write_text("x")
    with pytest.warns(nvrtc.CacheWarning, match="is unusable"):
        binary = compile_tiny(cache)
    assert binary.path is not None and binary.path.is_absolute() and binary.path.is_file()
    assert binary.path.read_bytes() == binary.cubin
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["afile2" if kind == "empty" else "afile"] * (kind != "proc"))


def test_stale_temporaries_are_removed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    stale, fresh = cache / ".abc.cubin.x1.tmp", cache / ".def.cubin.x2.tmp"
    stale.write_bytes(b"half a cubin")
    fresh.write_bytes(b"being written")
    old = time.time() - 2 * nvrtc.STALE_TMP_SECONDS
    os.utime(stale, (old, old))
    compile_tiny(cache)
    assert not stale.exists() and fresh.exists()


def test_read_verified_refuses_symlinks_and_wrong_digests(tmp_path: Path) -> None:
    data = b"cubin bytes"
    path = tmp_path / "a.cubin"
    path.write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    assert nvrtc.read_verified(path, digest) == data
    assert nvrtc.read_verified(path, "0" * 64) is None
    link = tmp_path / "b.cubin"
    link.symlink_to(path)
    assert nvrtc.read_verified(link, digest) is None
