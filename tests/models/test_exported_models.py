"""Models as real exporters write them: tiny Hugging Face BERT (opset 17 and 14), GPT-2,
LLaMA (GQA, rotary, RMSNorm) and ViT, and torchvision's EfficientNet, exported by
``torch.onnx.export`` with dynamic batch and sequence axes and random weights, by the
TorchScript exporter (opset 17) and by the ``torch.export``-based one (``*_dynamo``, opset
20), and LLaMA once more in f16 (``tests/models/export_models.py`` regenerates them; this
test needs no torch). Each compiles with the default targets under both partitioners, every op lands in
a kernel, and every output matches onnxruntime; the transformers also run at a second
batch and sequence length through the same executable."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import partita

ort = pytest.importorskip("onnxruntime")

EXPORTED = Path(__file__).resolve().parent / "exported"
MODELS = sorted(p.stem for p in EXPORTED.glob("*.onnx"))
TARGETS = ["cuda -arch=sm_90", "cutlass", "llvm"]
ARCHITECTURES = ("bert", "efficientnet", "gpt2", "llama", "vit")
SEQUENCE_MODELS = {"bert", "bert_opset14", "bert_dynamo", "gpt2", "gpt2_dynamo", "llama", "llama_dynamo", "llama_f16"}


def test_fixtures_are_torch_exports() -> None:
    assert MODELS == sorted([*ARCHITECTURES, *(f"{a}_dynamo" for a in ARCHITECTURES), "bert_opset14", "llama_f16"])
    for name in MODELS:
        model = onnx.load(EXPORTED / f"{name}.onnx")
        assert model.producer_name == "pytorch"
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        assert opset == {"bert_opset14": 14}.get(name, 20 if name.endswith("_dynamo") else 17)
        dims = [d.dim_param for i in model.graph.input for d in i.type.tensor_type.shape.dim]
        assert "batch" in dims and ("sequence" in dims) == (name in SEQUENCE_MODELS)


def other_shape(name: str, sample: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The sample at another batch (and, for the transformers, sequence length): rows
    repeated, tokens cut, padding kept at the end of the second row."""
    if name not in SEQUENCE_MODELS:
        return {k: v[:1] for k, v in sample.items()}
    out = {k: np.concatenate([v, v[:1]])[:, :5] for k, v in sample.items()}
    out["attention_mask"][1, 3:] = 0
    return out


def host_ops(exe) -> list[str]:
    return [op for row in exe.report().rows if row.symbol.startswith("(in @") for op in row.ops]


@pytest.fixture(scope="module")
def cache(kernel_cache: Path) -> Path:
    return kernel_cache


@pytest.mark.parametrize("partitioner", ["collage", "eager"])
@pytest.mark.parametrize("name", MODELS)
def test_exported_model_matches_onnxruntime(name: str, partitioner: str, cache: Path) -> None:
    path = EXPORTED / f"{name}.onnx"
    exe = partita.compile(path, TARGETS, partitioner=partitioner, cache_dir=cache)
    assert host_ops(exe) == [], f"ops left on the host:\n{exe.report()}"
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outputs = [o.name for o in session.get_outputs()]
    sample = dict(np.load(EXPORTED / f"{name}.npz"))
    for inputs in (sample, other_shape(name, sample)):
        want = session.run(None, inputs)
        got = exe.run(**inputs)
        assert len(got) == len(want)
        for output, g, w in zip(outputs, got, want):
            assert g.shape == w.shape and g.dtype == w.dtype, output
            if g.dtype == np.float16:  # both round each op to f16, not always at the same points
                scale = max(1.0, float(np.abs(w.astype(np.float32)).max()))
                np.testing.assert_allclose(g.astype(np.float32), w.astype(np.float32), rtol=1e-2,
                                           atol=2e-3 * scale, err_msg=f"{name}: {output}")
            else:
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=f"{name}: {output}")
