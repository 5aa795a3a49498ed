"""Models of real architectures (``tests/support/model_zoo.py``: BERT, GPT, LLaMA block, MobileNet,
ViT; random weights) through ``partita.compile`` with both partitioners, against
onnxruntime. With the CUDA target every op must land in a CUTLASS or native CUDA kernel:
the report lists no op left in the host program."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from support import model_zoo  # tests/support/model_zoo.py

import partita

ort = pytest.importorskip("onnxruntime")

TARGETS = ["cuda -arch=sm_90", "cutlass", "llvm"]
DYNAMIC_SEQUENCE = {"bert", "gpt", "llama"}


def reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


@pytest.fixture(scope="module")
def cache(kernel_cache: Path) -> Path:
    return kernel_cache


def host_ops(exe) -> list[str]:
    """Ops the compiled program runs in the host program instead of a kernel."""
    return [op for row in exe.report().rows if row.symbol.startswith("(in @") for op in row.ops]


@pytest.mark.parametrize("partitioner", ["collage", "eager"])
@pytest.mark.parametrize("name", sorted(model_zoo.MODELS))
def test_f32_model_matches_onnxruntime(name: str, partitioner: str, cache: Path) -> None:
    model = model_zoo.MODELS[name]()
    exe = partita.compile(model, TARGETS, partitioner=partitioner, cache_dir=cache)
    assert host_ops(exe) == []
    # Two shapes through one executable: the batch, and for language models the sequence
    # length, are dynamic.
    for batch, sequence in ((2, 7), (1, 5)):
        inputs = model_zoo.inputs_for(name, model, batch, sequence, seed=batch)
        want = reference(model, inputs)
        got = exe.run(**inputs)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-3, atol=1e-4)
        if name not in DYNAMIC_SEQUENCE:
            break


@pytest.mark.parametrize("name", sorted(model_zoo.MODELS))
def test_f16_model_within_f16_tolerance(name: str, cache: Path) -> None:
    model16 = model_zoo.MODELS[name](np.float16)
    exe = partita.compile(model16, TARGETS, partitioner="collage", cache_dir=cache)
    assert host_ops(exe) == []
    inputs = model_zoo.inputs_for(name, model16, 2, 6, seed=3)
    # The oracle is the f32 model with the same (rounded) weights, so the check measures
    # Partita's f16 arithmetic, not onnxruntime's.
    model32 = model_zoo.MODELS[name](np.float32)
    inputs32 = {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in inputs.items()}
    want = reference(model32, inputs32)
    got = exe.run(**inputs)
    for g, w in zip(got, want):
        assert g.dtype == np.float16 and g.shape == w.shape
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g.astype(np.float32), w, rtol=3e-2, atol=3e-2 * scale)
