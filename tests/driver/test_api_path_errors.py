"""Issue 23, item 9 (API): a wrong path argument of ``partita.compile``, ``partita.load``
or ``Executable.save`` is a ``PartitaError`` naming it, never a ``TypeError`` or an
``IsADirectoryError``, and never a parse error of the path as if it were IR."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import partita
from partita.ir import PartitaError

RELU = """func.func @main(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = nn.relu %x : (tensor<2x4xf32>) -> tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}
"""


@pytest.fixture
def exe(tmp_path):
    return partita.compile(RELU, targets="llvm", cache_dir=tmp_path)


@pytest.mark.parametrize("path", [None, 123, b"model.partita", "", 1.5])
def test_load_and_save_refuse_what_is_not_a_path(exe, path) -> None:
    with pytest.raises(PartitaError, match="must be a file path"):
        partita.load(path)
    with pytest.raises(PartitaError, match="must be a file path"):
        exe.save(path)


def test_a_directory_given_to_compile_is_named_as_one(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models").mkdir()
    for model in ("models", "models/", str(tmp_path / "models"), Path("models")):
        with pytest.raises(PartitaError, match="cannot read '.*models/?': Is a directory"):
            partita.compile(model, targets="llvm", cache_dir=tmp_path)


def test_a_directory_given_to_load_or_save(tmp_path, exe) -> None:
    with pytest.raises(PartitaError, match="Is a directory"):
        partita.load(tmp_path)
    with pytest.raises(PartitaError, match="is a directory"):
        exe.save(tmp_path)


def test_good_paths_still_round_trip(tmp_path, exe) -> None:
    x = np.arange(-4, 4, dtype=np.float32).reshape(2, 4)
    for path in (tmp_path / "a.partita", str(tmp_path / "b.partita")):
        exe.save(path)
        np.testing.assert_array_equal(partita.load(path).run(x)[0], np.maximum(x, 0))
