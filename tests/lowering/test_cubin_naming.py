"""Lowered IR names cubins by content: a ``byoc.binary`` carries the cubin's sha256 and the
NVRTC that compiled it, never a path of this machine (unless the compile was given a cache
of its own); the bytes are found in the cubin cache at load, or in a compiled-model file."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from support.artifact_files import unpack  # tests/support/artifact_files.py

import partita
from partita.dialects import byoc
from partita.ir import PartitaError
from partita.lowering import nvrtc
from partita.lowering.binaries import binary_images, cubin_file

MODEL = """
func.func @main(%x: tensor<4x64xf32>, %y: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %0 = nn.add %x, %y : (tensor<4x64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32>
  %1 = nn.relu %0 : (tensor<4x64xf32>) -> tensor<4x64xf32>
  func.return %1 : tensor<4x64xf32>
}
"""
TARGETS = ["cuda -arch=sm_90", "llvm"]


def _inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal((4, 64)).astype(np.float32) for _ in range(2)]


def _binary(exe) -> byoc.BinaryOp:
    (binary,) = [op for op in exe.module.ops if isinstance(op, byoc.BinaryOp)]
    return binary


def test_default_cache_is_named_by_digest_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path / "cache"))
    exe = partita.compile(MODEL, TARGETS, partitioner="eager")
    binary = _binary(exe)
    text = str(exe.module)
    assert str(tmp_path) not in text and "path = " not in text and "cache_dir" not in binary.attributes
    digest = binary.attributes[byoc.DIGEST].data
    assert binary.attributes["nvrtc"].data == "{}.{}".format(*nvrtc.nvrtc_version())
    assert cubin_file(binary) == tmp_path / "cache" / f"{digest}.cubin"
    x, y = _inputs()
    (out,) = exe.run(x, y)
    np.testing.assert_array_equal(out, np.maximum(x + y, 0))


def test_the_cache_at_load_time_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The IR moves: the same text loads from whichever cache holds the digest."""
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path / "a"))
    exe = partita.compile(MODEL, TARGETS, partitioner="eager")
    digest = _binary(exe).attributes[byoc.DIGEST].data
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / f"{digest}.cubin").rename(tmp_path / "b" / f"{digest}.cubin")
    with pytest.raises(PartitaError, match=f"sha256 {digest}, compiled by NVRTC .* is not in the cubin cache"):
        partita.compile(str(exe.module), TARGETS, partitioner="none").run(*_inputs())
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path / "b"))
    again = partita.compile(str(exe.module), TARGETS, partitioner="none")
    assert len(again.run(*_inputs())) == 1


def test_a_cache_of_its_own_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path / "default"))
    exe = partita.compile(MODEL, TARGETS, partitioner="eager", cache_dir=tmp_path / "own")
    binary = _binary(exe)
    assert binary.attributes["cache_dir"].data == str(tmp_path / "own")
    assert cubin_file(binary).parent == tmp_path / "own"
    assert len(exe.run(*_inputs())) == 1


def test_a_saved_model_names_no_cache_and_loads_without_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path / "default"))
    exe = partita.compile(MODEL, TARGETS, partitioner="eager", cache_dir=tmp_path / "own")
    exe.save(tmp_path / "m.partita")
    _, parts, _ = unpack((tmp_path / "m.partita").read_bytes())
    module = parts["module.mlir"].decode()  # (the header's pipeline keeps the cache-dir option it ran)
    assert str(tmp_path) not in module and "path = " not in module and "cache_dir" not in module
    assert re.search(r'sha256 = "[0-9a-f]{64}"', module)
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path / "empty"))
    for cubin in (tmp_path / "own").glob("*.cubin"):
        cubin.unlink()
    loaded = partita.load(tmp_path / "m.partita")
    x, y = _inputs()
    (out,) = loaded.run(x, y)
    np.testing.assert_array_equal(out, np.maximum(x + y, 0))


def test_ir_with_a_legacy_path_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path / "cache"))
    exe = partita.compile(MODEL, TARGETS, partitioner="eager")
    digest = _binary(exe).attributes[byoc.DIGEST].data
    legacy = tmp_path / "old.cubin"
    (tmp_path / "cache" / f"{digest}.cubin").rename(legacy)
    text = re.sub(r'sha256 = "', f'path = "{legacy}", sha256 = "', str(exe.module), count=1)
    again = partita.compile(text, TARGETS, partitioner="none")
    assert binary_images(again.module)[_binary(again).sym_name.data].path == legacy
    assert len(again.run(*_inputs())) == 1
