"""The whole job on the bundled models: import, partition, lower, run; the oracle is the
``onnx`` package's own ReferenceEvaluator."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

import partita
from partita.frontends.onnx import import_onnx
from partita.runtime.reference import run

EXAMPLES = Path(__file__).parents[2] / "examples"
TARGETS = ["cuda -arch=sm_80", "cutlass", "cublas", "cudnn", "llvm"]


def make_models():
    """The examples' model builder, imported from its file."""
    spec = importlib.util.spec_from_file_location("make_models", EXAMPLES / "make_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _random_inputs(model: onnx.ModelProto, batch: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    initializers = {i.name for i in model.graph.initializer}
    inputs = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else batch for d in value.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        inputs[value.name] = rng.standard_normal(dims).astype(dtype)
    return inputs


@pytest.fixture(scope="module")
def cache(kernel_cache: Path) -> Path:
    return kernel_cache


@pytest.mark.parametrize("partitioner", ["collage", "eager", "none"])
@pytest.mark.parametrize("name", ["encoder", "cnn"])
def test_matches_the_onnx_reference_evaluator(name: str, partitioner: str, cache: Path) -> None:
    path = EXAMPLES / f"{name}.onnx"
    model = onnx.load(path)
    exe = partita.compile(path, TARGETS, partitioner=partitioner, cache_dir=cache)
    evaluator = ReferenceEvaluator(model)
    unpartitioned = import_onnx(model)
    for batch in (1, 3):
        inputs = _random_inputs(model, batch, seed=batch)
        want = evaluator.run(None, inputs)
        got = exe.run(*inputs.values())
        assert len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
        # ... and equals Partita's reference on the model before partitioning.
        for g, r in zip(got, run(unpartitioned, *inputs.values())):
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)
    if partitioner != "none":  # the dense layers leave the host for a library backend
        assert {row.target for row in exe.report().rows} & {"cutlass", "cublas", "cudnn"}
    if partitioner == "collage":  # compiled completely, and never worse than eager
        report = exe.report()
        assert not [row for row in report.rows if row.symbol.startswith("(in @")]
        assert report.collage_total is not None and report.eager_total is not None
        assert report.collage_total <= report.eager_total


def test_f16_encoder_within_f16_tolerance(cache: Path) -> None:
    # The same encoder in f16: CUTLASS tensor-op kernels for the dense layers.
    model = make_models().make_encoder(dtype=np.float16)
    exe = partita.compile(model, TARGETS, partitioner="collage", cache_dir=cache)
    inputs = _random_inputs(model, 2, seed=7)
    want = run(import_onnx(model), *inputs.values())
    got = exe.run(*inputs.values())
    np.testing.assert_allclose(got[0].astype(np.float32), want[0].astype(np.float32), rtol=2e-2, atol=2e-2)
    kernels = [row.kernel for row in exe.report().rows if row.target == "cutlass"]
    assert kernels and all("tensorop_f16" in k for k in kernels)
