"""Causal masks as the exporters write them (``tests/models/exported_attention``, made by
``tests/models/export_attention_masks.py`` with both of PyTorch's exporters): ``fuse-attention``
turns each into ``nn.attention`` with ``causal`` set and the frontier dropped from the mask
(a key padding mask and-ed with it stays), leaves the masks that are not the op's frontier
(a rectangle's ``tril``, a finite fill with padding) as masks, and every compiled model
matches onnxruntime at the sample shape and at another batch and sequence length."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects import func

import partita
from partita.dialects import make_context, nn
from partita.frontends.onnx import import_onnx
from partita.transforms.fuse_attention import FuseAttention

ort = pytest.importorskip("onnxruntime")

FIXTURES = Path(__file__).resolve().parents[1] / "models" / "exported_attention"
TARGETS = ["cuda -arch=sm_90", "cutlass", "llvm"]

# name -> (causal, mask kind, layout) of the one nn.attention fuse-attention leaves
EXPECTED = {
    "is_causal": (True, "none", "BHSD"),
    "is_causal_opset14": (True, "none", "BHSD"),
    "is_causal_opset20": (True, "none", "BHSD"),
    "is_causal_dynamo": (True, "none", "BHSD"),
    "tril_mask": (True, "none", "BHSD"),
    "tril_mask_dynamo": (True, "none", "BHSD"),
    "masked_fill": (True, "none", "BHSD"),
    "masked_fill_dynamo": (True, "none", "BHSD"),
    "additive_triu": (True, "none", "BHSD"),
    "additive_triu_dynamo": (True, "none", "BHSD"),
    "causal_padding": (True, "boolean", "BHSD"),
    # where(causal & padding, 0, finfo.min): a fully padded row is uniform, not undefined
    "causal_padding_dynamo": (False, "additive", "BHSD"),
    "gqa_bshd": (True, "none", "BSHD"),
    "gqa_bshd_dynamo": (True, "none", "BSHD"),
    # tril of [5, 7]: top-left aligned, the op's frontier is bottom-right
    "rectangle_tril": (False, "additive", "BHSD"),
}


def _case(name: str) -> str:
    return name.removesuffix("_dynamo").removesuffix("_opset14").removesuffix("_opset20")


def test_every_fixture_is_listed():
    assert sorted(p.stem for p in FIXTURES.glob("*.onnx")) == sorted(EXPECTED)


def _fused(name: str) -> func.FuncOp:
    module = import_onnx(FIXTURES / f"{name}.onnx")
    FuseAttention().apply(make_context(), module)
    module.verify()
    return next(op for op in module.walk() if isinstance(op, func.FuncOp))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fuse_attention_marks_the_causal_frontier(name: str):
    main = _fused(name)
    attention = [op for op in main.walk() if isinstance(op, nn.AttentionOp)]
    assert len(attention) == 1, name
    op = attention[0]
    assert (op.causal, op.mask_kind, op.layout) == EXPECTED[name]
    if op.causal:  # nothing of the frontier is left: no trilu, range or comparison
        left = {o.name for o in main.walk()} - {"func.func", "func.return"}
        assert not left & {"nn.trilu", "nn.arange", "nn.less_equal", "nn.greater", "nn.where",
                           "nn.softmax", "nn.matmul"}, left
    if name == "causal_padding":  # the key padding mask, [B, 1, 1, Skv]
        assert op.mask.type.get_shape()[1:3] == (1, 1)


def _other_shape(sample: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One batch row and five positions (the sequence axes are those of length 7), the
    last two keys padded."""
    out = {}
    for key, value in sample.items():
        index = tuple(slice(0, 5) if d == 7 else slice(None) for d in value.shape[1:])
        out[key] = np.ascontiguousarray(value[(slice(1, 2), *index)])
    if "key_padding" in out:
        out["key_padding"][:] = [True, True, True, False, False]
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cubins")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_compiled_matches_onnxruntime(name: str, cache: Path):
    path = FIXTURES / f"{name}.onnx"
    exe = partita.compile(path, TARGETS, cache_dir=cache)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    sample = dict(np.load(FIXTURES / f"{_case(name)}.npz"))
    shapes = [sample] if name == "rectangle_tril" else [sample, _other_shape(sample)]
    for inputs in shapes:
        (want,) = session.run(None, inputs)
        (got,) = exe.run(**inputs)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)
