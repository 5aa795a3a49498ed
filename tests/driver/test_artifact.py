"""A compiled model as one file: save/load round trips of both bundled models, loads that
need no cache and no ONNX file, and damage that is rejected with a clear error."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py
from xdsl.dialects.builtin import TensorType

import partita
from partita.dialects.nn import numpy_dtype
from partita.ir import PartitaError
from partita.lowering.binaries import binary_images
from partita.runtime.cuda import CudaDevice
from partita.runtime.plan import Runtime
from partita.tools import compile as compile_tool
from partita.tools import run as run_tool

EXAMPLES = Path(__file__).parents[2] / "examples"


def _inputs(exe, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    function = exe.entry_function()
    types = [t for t in function.function_type.inputs.data if isinstance(t, TensorType)]
    return [rng.standard_normal(tuple(2 if d < 0 else d for d in t.get_shape())).astype(numpy_dtype(t.element_type)) for t in types]


@pytest.fixture(scope="module", params=["encoder.onnx", "cnn.onnx"])
def saved(request, tmp_path_factory: pytest.TempPathFactory):
    """A model compiled into a throwaway cache and ONNX copy, saved, then both deleted."""
    tmp = tmp_path_factory.mktemp("artifact")
    model = tmp / request.param
    shutil.copy(EXAMPLES / request.param, model)
    cache = tmp / "cache"
    exe = partita.compile(model, cache_dir=cache)
    path = tmp / "model.partita"
    exe.save(path)
    expected = exe.run(*_inputs(exe))
    cubins = binary_images(exe.module)
    shutil.rmtree(cache)
    model.unlink()
    return exe, path, expected, cubins


def test_round_trip_gives_equal_outputs_without_cache_or_onnx(saved) -> None:
    exe, path, expected, _ = saved
    loaded = partita.load(path)
    outputs = loaded.run(*_inputs(loaded))
    assert len(outputs) == len(expected)
    for got, want in zip(outputs, expected):
        np.testing.assert_array_equal(got, want)
    assert str(loaded.config) == str(exe.config) and loaded.pipeline == exe.pipeline
    assert [row.symbol for row in loaded.partitions] == [row.symbol for row in exe.partitions]
    assert loaded.report().execution  # the report works from a loaded model


def test_library_partitions_travel_in_the_module(tmp_path: Path) -> None:
    """cuBLAS and TensorRT partitions are records in the IR (TensorRT's ONNX sub-model
    with its digest): the file carries them with no bytes of their own."""
    # no cutlass: it takes every GEMM form first (eager goes by registration order)
    targets = ["cuda -arch=sm_90", "cublas", "cudnn", "tensorrt", "llvm"]
    exe = partita.compile(EXAMPLES / "encoder.onnx", targets, partitioner="eager", cache_dir=tmp_path / "cache")
    path = tmp_path / "model.partita"
    exe.save(path)
    x = _inputs(exe)
    (expected,) = exe.run(*x)
    shutil.rmtree(tmp_path / "cache", ignore_errors=True)  # none when no kernel was compiled
    loaded = partita.load(path)
    kinds = {h.kind for h in loaded.runtime.handles.values()}
    assert {"cublaslt", "tensorrt"} <= kinds
    assert set(loaded.binaries) == set(binary_images(exe.module))  # the cubins only
    np.testing.assert_array_equal(loaded.run(*x)[0], expected)


def test_embedded_cubins_reach_the_device_verified(saved) -> None:
    _, path, expected, _ = saved
    loaded = partita.load(path)
    assert loaded.binaries, "both bundled models compile kernels"
    driver = RecordingDriver()
    Runtime(loaded.module, CudaDevice(driver=driver), embedded=loaded.binaries).run(*_inputs(loaded))
    assert driver.images
    assert set(driver.images) <= set(loaded.binaries.values())
    # Bytes that no longer match the recorded sha256 never reach the driver.
    symbol = next(iter(loaded.binaries))
    flipped = bytearray(loaded.binaries[symbol])
    flipped[len(flipped) // 2] ^= 0x01
    tampered = {**loaded.binaries, symbol: bytes(flipped)}
    driver = RecordingDriver()
    with pytest.raises(PartitaError, match="does not match the sha256 recorded at compile time"):
        Runtime(loaded.module, CudaDevice(driver=driver), embedded=tampered).run(*_inputs(loaded))
    assert tampered[symbol] not in driver.images


@pytest.mark.parametrize("where", [20, 0.5, -40, -1])
def test_a_flipped_byte_is_rejected(saved, tmp_path: Path, where) -> None:
    _, path, _, _ = saved
    data = bytearray(path.read_bytes())
    index = int(len(data) * where) if isinstance(where, float) else where
    data[index] ^= 0x01
    damaged = tmp_path / "damaged.partita"
    damaged.write_bytes(bytes(data))
    with pytest.raises(PartitaError, match="is not a usable compiled model"):
        partita.load(damaged)


def test_truncated_and_foreign_files_are_rejected(saved, tmp_path: Path) -> None:
    _, path, _, _ = saved
    short = tmp_path / "short.partita"
    short.write_bytes(path.read_bytes()[:1000])
    with pytest.raises(PartitaError, match="truncated or changed"):
        partita.load(short)
    foreign = tmp_path / "foreign.partita"
    foreign.write_bytes((EXAMPLES / "cnn.onnx").read_bytes())
    with pytest.raises(PartitaError, match="not a Partita compiled model"):
        partita.load(foreign)


def test_changed_cubin_in_the_cache_is_caught_before_the_driver(tmp_path: Path) -> None:
    exe = partita.compile(EXAMPLES / "cnn.onnx", cache_dir=tmp_path)
    image = next(iter(binary_images(exe.module).values()))
    image.path.chmod(0o644)
    damaged = image.path.read_bytes()[:-16]
    image.path.write_bytes(damaged)
    driver = RecordingDriver()
    with pytest.raises(PartitaError, match="changed or damaged"):
        Runtime(exe.module, CudaDevice(driver=driver)).run(*_inputs(exe))
    assert damaged not in driver.images


def test_partita_compile_then_partita_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cnn.partita"
    cache = tmp_path / "cache"
    assert compile_tool.main([str(EXAMPLES / "cnn.onnx"), "-o", str(out), "-q", "--cache-dir", str(cache)]) == 0
    assert run_tool.main([str(EXAMPLES / "cnn.onnx"), "-q", "--seed", "4", "--cache-dir", str(cache)]) == 0
    from_onnx = capsys.readouterr().out
    shutil.rmtree(cache)
    assert run_tool.main([str(out), "-q", "--seed", "4"]) == 0
    assert capsys.readouterr().out == from_onnx
    assert run_tool.main([str(out), "-q", "--entry", "other"]) == 1
    assert "was compiled for entry @main" in capsys.readouterr().err
