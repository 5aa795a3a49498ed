"""Both bundled models compile for every backend at once (cuBLAS, cuDNN, TensorRT,
CUTLASS, native CUDA, host) under both partitioners and compute what the reference does
(library calls emulated: TensorRT sub-models under onnxruntime, the others from their
reference bodies)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import partita
from partita.driver import load_module
from partita.runtime.reference import run

EXAMPLES = Path(__file__).parents[1] / "examples"
TARGETS = ["cuda -arch=sm_90", "cublas", "cudnn", "tensorrt", "cutlass", "llvm"]


def _input(path: Path) -> np.ndarray:
    dims = [d.dim_value or 3 for d in onnx.load(path).graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(0).standard_normal(dims).astype(np.float32)


@pytest.mark.parametrize("model", ["encoder.onnx", "cnn.onnx"])
@pytest.mark.parametrize("partitioner", ["collage", "eager"])
def test_bundled_model_with_every_library(model: str, partitioner: str, tmp_path: Path) -> None:
    path = EXAMPLES / model
    exe = partita.compile(path, TARGETS, partitioner=partitioner, cache_dir=tmp_path)
    x = _input(path)
    (want,) = run(load_module(path), x)
    (got,) = exe.run(x)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    compilers = {row.target for row in exe.report().rows}
    # TensorRT takes what no kernel library does; every op is placed somewhere real.
    assert "tensorrt" in compilers
    assert all(not row.target.startswith("llvm") for row in exe.report().rows)
    for stage in ("cublas-codegen", "cudnn-codegen", "tensorrt-codegen"):
        assert stage in exe.pipeline
