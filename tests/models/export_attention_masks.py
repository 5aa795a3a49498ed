"""Regenerates the attention-mask fixtures in ``tests/models/exported_attention/``.

Small attention modules with the causal masks users write (``is_causal=True``, a
``torch.tril`` boolean mask, ``masked_fill`` with ``arange`` comparisons, an additive
``triu(-inf)``, a causal mask and-ed with a key padding mask, GQA with head transposes) and
one mask that is not causal (``tril`` of a rectangle, whose frontier is not the bottom-right
one), each exported by the TorchScript exporter (``dynamo=False``; opset 17, and the
``is_causal`` one at 14 and 20 too) and by the ``torch.export``-based one (``dynamo=True``, its
default opset), with dynamic batch and sequence axes. ``<name>.npz`` is one sample input set for
every export of ``<name>``. ``tests/transforms/test_fuse_attention_causal.py``
checks what ``fuse-attention`` makes of them and compares Partita with onnxruntime; it needs
no torch.

Needs torch and onnxscript (the dynamo exporter), which the project does not depend on::

    python tests/models/export_attention_masks.py

Measured with torch 2.13, onnx 1.23, onnxscript 0.7.2.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's own alias)

OUT = Path(__file__).resolve().parent / "exported_attention"
BATCH, HEADS, KV_HEADS, SEQUENCE, DIM = 2, 4, 2, 7, 8


class IsCausal(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class TrilMask(torch.nn.Module):
    def forward(self, q, k, v):
        s = q.shape[-2]
        mask = torch.tril(torch.ones(s, s, dtype=torch.bool))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class MaskedFill(torch.nn.Module):
    """The hand-written form: ``j > i`` from ``arange``, filled with -inf."""

    def forward(self, q, k, v):
        i = torch.arange(q.shape[-2])
        future = i[None, :] > i[:, None]
        scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1) @ v


class AdditiveTriu(torch.nn.Module):
    def forward(self, q, k, v):
        s = q.shape[-2]
        bias = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
        scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5 + bias
        return torch.softmax(scores, dim=-1) @ v


class CausalPadding(torch.nn.Module):
    """Hugging Face's mask: ``j <= i`` and-ed with the key padding mask."""

    def forward(self, q, k, v, key_padding):
        i = torch.arange(q.shape[-2])
        causal = i[None, :] <= i[:, None]
        mask = causal[None, None] & key_padding[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class GqaBshd(torch.nn.Module):
    """``[B, S, H, D]`` projections, head-split transposes, repeat-kv, ``is_causal``."""

    def forward(self, q, k, v):
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        groups = q.shape[1] // k.shape[1]
        k, v = (x.repeat_interleave(groups, dim=1) for x in (k, v))
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)


class RectangleTril(torch.nn.Module):
    """``tril`` of a ``[Sq, Skv]`` rectangle: top-left aligned, not the op's frontier."""

    def forward(self, q, k, v):
        mask = torch.tril(torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def qkv(rng, q_heads=HEADS, kv_heads=HEADS, q_len=SEQUENCE, kv_len=SEQUENCE, bshd=False):
    shapes = [(BATCH, q_heads, q_len, DIM), (BATCH, kv_heads, kv_len, DIM), (BATCH, kv_heads, kv_len, DIM)]
    if bshd:
        shapes = [(b, s, h, d) for b, h, s, d in shapes]
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in zip("qkv", shapes)}


def export(name: str, module: torch.nn.Module, inputs: dict[str, np.ndarray], *, seq_axis: int | None = 2,
           opsets: tuple[int, ...] = (17,), dynamo: bool = True) -> None:
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    axes = {n: ({0: "batch", seq_axis: "sequence"} if seq_axis is not None and v.ndim == 4 else {0: "batch", 1: "sequence"})
            for n, v in inputs.items()}
    if seq_axis is None:
        axes = {n: {0: "batch"} for n in inputs}
    for opset in opsets:
        stem = name if opset == 17 else f"{name}_opset{opset}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, OUT / f"{stem}.onnx", input_names=list(inputs),
                              output_names=["out"], opset_version=opset, dynamo=False,
                              dynamic_axes=axes)
    if dynamo:
        dims = {"batch": torch.export.Dim("batch"), "sequence": torch.export.Dim("sequence", min=2)}
        shapes = {n: {a: dims[d] for a, d in ax.items()} for n, ax in axes.items()}
        torch.onnx.export(module, args, OUT / f"{name}_dynamo.onnx", input_names=list(inputs),
                          output_names=["out"], dynamo=True, dynamic_shapes=shapes,
                          external_data=False)
    np.savez(OUT / f"{name}.npz", **inputs)


def main() -> None:
    OUT.mkdir(exist_ok=True)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    export("is_causal", IsCausal().eval(), qkv(rng), opsets=(14, 17, 20))
    export("tril_mask", TrilMask().eval(), qkv(rng))
    export("masked_fill", MaskedFill().eval(), qkv(rng))
    export("additive_triu", AdditiveTriu().eval(), qkv(rng))
    padding = np.ones((BATCH, SEQUENCE), bool)
    padding[1, SEQUENCE - 3:] = False
    export("causal_padding", CausalPadding().eval(), {**qkv(rng), "key_padding": padding})
    export("gqa_bshd", GqaBshd().eval(), qkv(rng, kv_heads=KV_HEADS, bshd=True), seq_axis=1)
    export("rectangle_tril", RectangleTril().eval(), qkv(rng, q_len=5), seq_axis=None, dynamo=False)


if __name__ == "__main__":
    main()
