"""``partita-run`` and its files: a FIFO given as the model or as ``--inputs`` is refused
at once (never a hang), and an ``--inputs`` zip bomb, or an ``.npy`` header claiming
more than its member holds, is refused before any array is allocated."""

from __future__ import annotations

import io
import os
import threading
import zipfile
from pathlib import Path

import numpy as np
import pytest

from partita.tools import run as run_tool

MODEL = """
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""


def _run(argv: list[str], timeout: float = 60) -> int:
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(run_tool.main(argv)), daemon=True)
    worker.start()
    worker.join(timeout)
    assert not worker.is_alive(), f"partita-run {argv} hangs"
    return result[0]


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.mlir"
    path.write_text(MODEL)
    return path


@pytest.mark.parametrize("name", ["model.partita", "model.mlir", "model.onnx"])
def test_a_fifo_as_the_model_is_refused(tmp_path: Path, capsys, name: str) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    assert _run([str(fifo)]) == 1
    assert "is not a regular file" in capsys.readouterr().err


def test_a_fifo_as_inputs_is_refused(tmp_path: Path, model: Path, capsys) -> None:
    fifo = tmp_path / "in.npz"
    os.mkfifo(fifo)
    assert _run([str(model), "--inputs", str(fifo)]) == 1
    assert "is not a regular file" in capsys.readouterr().err


def test_inputs_are_read(tmp_path: Path, model: Path, capsys) -> None:
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.array([-1, 2, -3, 4], np.float32))
    out = tmp_path / "out.npz"
    assert _run([str(model), "--inputs", str(inputs), "--output", str(out)]) == 0
    with np.load(out) as outputs:
        (values,) = outputs.values()
    np.testing.assert_array_equal(values, [0, 2, 0, 4])


def test_a_zip_bomb_is_refused_before_it_expands(tmp_path: Path, model: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(run_tool, "MAX_INPUTS_BYTES", 64 << 20)
    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        buffer = io.BytesIO()
        np.save(buffer, np.zeros(2**25, np.float32))  # 128 MiB of zeros, ~130 KB compressed
        archive.writestr("x.npy", buffer.getvalue())
    assert bomb.stat().st_size < 1 << 20
    assert _run([str(model), "--inputs", str(bomb)]) == 1
    assert "would expand to" in capsys.readouterr().err


def test_an_npy_header_claiming_more_than_its_bytes_is_refused(tmp_path: Path, model: Path, capsys) -> None:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<f4", "fortran_order": False, "shape": (2**40,)})
    lying = tmp_path / "lying.npz"
    with zipfile.ZipFile(lying, "w") as archive:
        archive.writestr("x.npy", buffer.getvalue() + b"\0" * 16)
    assert _run([str(model), "--inputs", str(lying)]) == 1
    assert "claims shape" in capsys.readouterr().err
