"""``fuse-attention`` folds the exporters' rotary embedding (Hugging Face's ``rotate_half``:
``x * cos + concat(-x2, x1) * sin``, the caches ``cos / sin(concat(f, f))``) into
``nn.rotary_embedding``: on the exported LLaMA fixtures (TorchScript, dynamo and f16) Q and K
of both layers take one op each, the head-split transposes before them move after them
(``layout = "BSHD"``) and fold into the attention, so no head transpose is left; and the
module computes the same outputs as before (the NumPy reference, before and after the
pass)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from partita.dialects import make_context, nn
from partita.frontends.onnx import import_onnx
from partita.runtime.reference import run
from partita.transforms.fuse_attention import FuseAttention

EXPORTED = Path(__file__).resolve().parents[1] / "models" / "exported"


def _count(module: ModuleOp, kind: type) -> int:
    return sum(isinstance(op, kind) for op in module.walk())


@pytest.mark.parametrize("name", ["llama", "llama_dynamo", "llama_f16"])
def test_rotate_half_becomes_rotary_embedding(name: str):
    module = import_onnx(EXPORTED / f"{name}.onnx")
    before = module.clone()
    negs = _count(module, nn.NegOp)
    FuseAttention().apply(make_context(), module)
    module.verify()
    rotary = [op for op in module.walk() if isinstance(op, nn.RotaryEmbeddingOp)]
    assert len(rotary) == 4  # Q and K of two layers
    assert all(not op.interleaved and op.rotary_dim == 0 for op in rotary)
    assert all(op.layout == "BSHD" for op in rotary)
    assert {op.input.type.get_shape()[2] for op in rotary} == {4, 2}  # GQA: 4 query, 2 KV heads
    assert _count(module, nn.NegOp) == negs - 4  # each rotate_half's negation is gone
    attention = [op for op in module.walk() if isinstance(op, nn.AttentionOp)]
    assert len(attention) == 2 and all(op.layout == "BSHD" for op in attention)
    assert {op.query.owner for op in attention} | {op.key.owner for op in attention} == set(rotary)
    head_transposes = [op for op in module.walk() if isinstance(op, nn.TransposeOp) and tuple(op.perm) == (0, 2, 1, 3)]
    assert head_transposes == []
    sample = dict(np.load(EXPORTED / f"{name}.npz"))
    want = run(before, *sample.values())
    got = run(module, *sample.values())
    for g, w in zip(got, want):
        tol = 2e-2 if name == "llama_f16" else 1e-5  # f16: the chain rounded once, not per op
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=tol, atol=tol)
