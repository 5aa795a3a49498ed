"""The ATen ops of ``torch.export`` graphs as Hugging Face and torchvision models emit them
(``partita.frontends.torch.aten``), each module checked against torch's own output: masks
built from ``arange`` and comparisons, advanced indexing by several tensors, rotary
embeddings, an empty cache concatenated, RMSNorm's ``pow`` / ``rsqrt``, type promotion
(``int * float``, ``mask == 0``), slices, splits, pads, rolls, upsampling and the rest."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import partita  # noqa: E402
from partita.ir import PartitaError  # noqa: E402

HOST = {"partitioner": "none", "fallback_device": "cpu"}  # reference semantics, no NVRTC
F = torch.nn.functional


class CausalMask(torch.nn.Module):
    """transformers' mask: positions from ``arange``, a causal test, a padding mask indexed
    at (batch, query, key) points, ``masked_fill`` with the dtype's minimum."""

    def forward(self, x, padding):
        b, n, _ = x.shape
        q = torch.arange(n)
        causal = q[None, :] <= q[:, None]
        visible = padding.bool()[torch.arange(b)[:, None], q[None, :]]  # two index tensors: (batch, key) points
        keep = causal[None] & visible[:, None, :]
        scores = x @ x.transpose(1, 2)
        return torch.softmax(scores.masked_fill(~keep, torch.finfo(x.dtype).min), -1)


class Rotary(torch.nn.Module):
    """LLaMA's rotate_half, an RMSNorm (``pow``, ``mean``, ``rsqrt``, casts) and a cache
    concatenated to an empty one (1-D, skipped by ``torch.cat``)."""

    def forward(self, x):
        positions = torch.arange(x.shape[1], dtype=torch.int64).float()
        freqs = positions[:, None] * (1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)))[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None], emb.sin()[None]
        x1, x2 = x[..., :4], x[..., 4:]
        rotated = x * cos + torch.cat((-x2, x1), dim=-1) * sin
        variance = rotated.to(torch.float32).pow(2).mean(-1, keepdim=True)
        normed = rotated * torch.rsqrt(variance + 1e-6)
        return torch.cat([torch.tensor([]), normed], dim=-2)


class Shapes(torch.nn.Module):
    """Slices with steps and negative ends, select, split / chunk, stack, expand, repeat,
    pad, roll, tril, clamp, cumsum, gather, index_select, where with a scalar, rsub."""

    def forward(self, x, idx):
        a, b = x.split([3, 5], dim=-1)
        c = torch.stack(x.chunk(2, dim=1), dim=0).sum(0)
        d = x[:, 1:-1:2].select(1, 0)
        e = F.pad(x, (1, 2, 0, 1), value=0.5)
        f = torch.roll(x, shifts=2, dims=1).tril(1).clamp(-0.5, 0.5)
        g = torch.gather(x, 1, idx) + torch.index_select(x, 1, idx[0])
        h = torch.where(x > 0, x, 0.0).cumsum(-1)
        i = (1 - x).expand(2, *x.shape).repeat(1, 1, 2)
        return a.sum() + b.mean(), c, d, e, f, g, h, i


class Vision(torch.nn.Module):
    """Swin's and MobileViT's: group norm, bilinear and nearest upsampling, a 1-D adaptive
    pool, a vector norm, log-softmax, argmax, hardswish."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.GroupNorm(2, 4)

    def forward(self, x):
        y = self.norm(x)
        up = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        near = F.interpolate(y, size=(6, 10), mode="nearest")
        pooled = F.adaptive_avg_pool1d(up.flatten(2), 1)
        unit = F.normalize(near.flatten(1), dim=-1)
        return pooled, unit, F.log_softmax(F.hardswish(y), 1), y.flatten(1).argmax(-1)


class Promotion(torch.nn.Module):
    """torch's promotion: int tensors times float numbers, comparisons of mixed types,
    integer bit operations, ``new_zeros`` / ``full_like``."""

    def forward(self, ids, x):
        scaled = ids * 0.5 + x
        same = (ids == 3) | (x > ids)
        bits = (ids & 6) ^ ids.new_zeros(ids.shape)
        return scaled, same, bits, torch.full_like(x, 2.0) ** x


class Points(torch.nn.Module):
    """Advanced indexing by several tensors: adjacent axes after a full slice (the broadcast
    dims stay in their place) and axes apart (the broadcast dims first), as NumPy."""

    def forward(self, x, i, j):
        return x[:, i, j], x[i, :, j], x[i[:, None], j]


class Writes(torch.nn.Module):
    """In-place writes through views (functionalized: ``slice_scatter``), einsum (the
    lowering the ONNX frontend shares) and GQA's ``repeat_interleave``."""

    def forward(self, x):
        y = x * 1.0
        y[:, 0].mul_(2)
        z = y.clone()
        z[:, 1:3] = 0.5
        return y, z, torch.einsum("bij,bkj->bik", x[None], x[None]), x.repeat_interleave(2, dim=1)


class Pools(torch.nn.Module):
    """torchvision's blocks: batch norm in eval and an in-place ReLU (torchvision's
    ``inplace=True``: functionalized, where batch norm's fused form returns three tensors),
    adaptive average pooling to the input's own size (VGG), to a divisor of it, and to 1x1;
    ``swapaxes``."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(3)

    def forward(self, x):
        y = torch.relu_(self.bn(x))
        return (F.adaptive_avg_pool2d(y, 4), F.adaptive_avg_pool2d(y, 2), F.adaptive_avg_pool2d(y, 1),
                y.swapaxes(1, 3))


CASES = {
    "pools": (Pools(), lambda: (torch.randn(2, 3, 4, 4),)),
    "writes": (Writes(), lambda: (torch.randn(3, 4),)),
    "points": (Points(), lambda: (torch.randn(3, 4, 5), torch.tensor([0, 2, -1]), torch.tensor([3, 0, 1]))),
    "causal_mask": (CausalMask(), lambda: (torch.randn(2, 5, 8), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]))),
    "rotary": (Rotary(), lambda: (torch.randn(2, 6, 8),)),
    "shapes": (Shapes(), lambda: (torch.randn(4, 8), torch.tensor([[0, 7, 3], [1, 1, 2], [5, 4, 0], [6, 2, 2]]))),
    "vision": (Vision(), lambda: (torch.randn(2, 4, 3, 5),)),
    "promotion": (Promotion(), lambda: (torch.tensor([[1, 3, 5], [2, 3, 7]]), torch.randn(2, 3))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_module_matches_torch(name) -> None:
    torch.manual_seed(0)
    module, make = CASES[name]
    module = module.eval()
    inputs = make()
    with torch.no_grad():
        want = module(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    got = partita.compile(module, example_inputs=inputs, **HOST).run(*[t.numpy() for t in inputs])
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        w = w.numpy()
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=f"output {k}")


def test_a_boolean_mask_index_is_a_located_error() -> None:
    """``x[mask]`` has as many rows as the mask has ones: not an ATen graph of static shapes."""

    class Masked(torch.nn.Module):
        def forward(self, x, idx):
            return x[idx.bool(), idx.bool()]

    with pytest.raises(PartitaError) as caught:
        partita.compile(Masked(), example_inputs=(torch.randn(3, 3), torch.tensor([1, 0, 1])), **HOST)
    assert "torch.export" in str(caught.value) and "Traceback" not in str(caught.value)


class Heads(torch.nn.Module):
    """Attention heads split and merged over a run-time batch and sequence: views to
    ``[b, n, h, d]`` (two symbolic dims, each sized by the input's), an expand of a mask to
    ``[b, h, n, n]``, a splat of ``[b, n]``."""

    def forward(self, x):
        b, n, _ = x.shape
        q = x.view(b, n, 2, 4).transpose(1, 2)
        mask = torch.ones(b, n, dtype=torch.bool)[:, None, None, :].expand(b, 2, n, n)
        scores = (q @ q.transpose(-1, -2)).masked_fill(~mask, -1e9)
        return (torch.softmax(scores, -1) @ q).transpose(1, 2).reshape(b, n, 8)


class NewSplats(torch.nn.Module):
    """``new_zeros`` / ``new_ones`` / ``new_full`` of sizes read from a run-time batch and
    sequence (a padding row, a mask, a bias of the input's dims)."""

    def forward(self, x):
        b, n, d = x.shape
        pad = x.new_zeros(b, 1, d)
        mask = x.new_ones(b, n, 1)
        bias = x.new_full((b, n, d), 0.5)
        return torch.cat([pad, x * mask + bias], dim=1)


@pytest.mark.parametrize("name", ["causal_mask", "rotary", "heads", "new_splats"])
def test_run_time_batch_and_sequence(name) -> None:
    """``torch.export.Dim`` batch and sequence: sizes computed from them (``arange(n)``,
    views, expands, splats, index points) are sized by the input dims they are, and one
    compile runs every shape."""
    module = {"causal_mask": CausalMask(), "rotary": Rotary(), "heads": Heads(), "new_splats": NewSplats()}[name].eval()
    batch, seq = torch.export.Dim("batch", max=64), torch.export.Dim("seq", max=64)
    shapes = {"causal_mask": ({0: batch, 1: seq}, {0: batch, 1: seq}), "rotary": ({1: seq},),
              "heads": ({0: batch, 1: seq},), "new_splats": ({0: batch, 1: seq},)}[name]

    def inputs(b: int, n: int):
        x = torch.randn(b, n, 8) if name != "rotary" else torch.randn(2, n, 8)
        return (x, (torch.rand(b, n) > 0.3).long()) if name == "causal_mask" else (x,)

    torch.manual_seed(1)
    exe = partita.compile(module, example_inputs=inputs(2, 5), dynamic_shapes=shapes, **HOST)
    assert nn_dynamic(exe), "the compiled entry takes run-time dims"
    for b, n in ((2, 5), (3, 9), (1, 2)):
        args = inputs(b, n)
        with torch.no_grad():
            want = module(*args)
        (got,) = exe.run(*[t.numpy() for t in args])
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"b={b} n={n}")


def nn_dynamic(exe) -> bool:
    """Whether the entry function has an argument with a ``?`` dim."""
    from xdsl.dialects import func

    (main,) = [op for op in exe.module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == "main"]
    return any(-1 in arg.type.get_shape() or min(arg.type.get_shape(), default=0) < 0 for arg in main.args)
