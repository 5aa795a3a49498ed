"""Hugging Face architectures as a new user meets them: each built from a tiny config with
random weights, exported to ONNX (the TorchScript exporter, or ``--dynamo``), compiled by
Partita (``--precision fp16|bf16`` too) and compared with onnxruntime (graph optimizations
off) on the same inputs. ``--kv`` exports decoders with ``past_key_values`` and checks two
decode steps of different past lengths. ``--torch`` gives the module itself to
``partita.compile`` (``torch.export``, its ATen graph converted without ONNX) and compares
with the module's own output.

Needs ``transformers`` (not a Partita dependency; pip installs it with ``--no-deps`` beside
the test extra's torch). Not a test: a sweep to run by hand, one line per model.

    python scripts/sweep_transformers.py [--dynamo | --torch] [--precision fp16] [--kv] [name ...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

import partita
from partita.ir import PartitaError

BATCH, SEQ = 2, 16
LAYERS, HEADS, KV_HEADS = 2, 4, 2


def _text(config: str, model: str, **overrides):
    import transformers

    sizes = dict(vocab_size=100, hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                 intermediate_size=128, max_position_embeddings=64)
    sizes.update(overrides)
    return getattr(transformers, model)(getattr(transformers, config)(**sizes))


def _vision(config: str, model: str, **sizes):
    import transformers

    return getattr(transformers, model)(getattr(transformers, config)(**sizes))


ENCODERS: dict[str, Callable[[], torch.nn.Module]] = {
    "bert": lambda: _text("BertConfig", "BertModel"),
    "roberta": lambda: _text("RobertaConfig", "RobertaModel"),
    "deberta_v2": lambda: _text("DebertaV2Config", "DebertaV2Model"),
    "albert": lambda: _text("AlbertConfig", "AlbertModel", embedding_size=32),
    "llama": lambda: _text("LlamaConfig", "LlamaModel", num_key_value_heads=KV_HEADS),
    "qwen2": lambda: _text("Qwen2Config", "Qwen2Model", num_key_value_heads=KV_HEADS),
    "phi3": lambda: _text("Phi3Config", "Phi3Model", num_key_value_heads=KV_HEADS, pad_token_id=0),
    "gemma": lambda: _text("GemmaConfig", "GemmaModel", num_key_value_heads=KV_HEADS, head_dim=16),
    "gpt_neox": lambda: _text("GPTNeoXConfig", "GPTNeoXModel"),
    "longformer": lambda: _text("LongformerConfig", "LongformerModel", attention_window=[4, 4]),
    "funnel": lambda: _vision("FunnelConfig", "FunnelModel", vocab_size=100, d_model=64, n_head=4, d_head=16,
                              d_inner=128, block_sizes=[1, 1], num_decoder_layers=1),
    "vit": lambda: _vision("ViTConfig", "ViTModel", image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=128),
    "swin": lambda: _vision("SwinConfig", "SwinModel", image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                            num_heads=[2, 4], window_size=4),
    "convnext": lambda: _vision("ConvNextConfig", "ConvNextModel", hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 1, 1]),
    "mobilevit": lambda: _vision("MobileViTConfig", "MobileViTModel", image_size=32, hidden_sizes=[16, 24, 32],
                                 neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64]),
    "segformer": lambda: _vision("SegformerConfig", "SegformerModel", hidden_sizes=[16, 32, 48, 64],
                                 num_attention_heads=[1, 2, 2, 4], depths=[1, 1, 1, 1], decoder_hidden_size=32),
    "glpn": lambda: _vision("GLPNConfig", "GLPNModel", hidden_sizes=[16, 32, 48, 64], num_attention_heads=[1, 2, 2, 4],
                            depths=[1, 1, 1, 1], decoder_hidden_size=32),
}
"""Models of one input (token ids and a mask, or pixels), last hidden state out."""

DECODERS = ("llama", "qwen2", "phi3", "gemma", "gpt_neox")
"""The ``--kv`` models: decoder steps with a cache."""


class LastHidden(torch.nn.Module):
    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, *inputs):
        mask = {"attention_mask": inputs[1]} if len(inputs) == 2 else {}
        return self.model(inputs[0], **mask).last_hidden_state


class DecoderStep(torch.nn.Module):
    """One step with ``past_key_values`` given as tensors and ``present`` ones returned."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids, mask, *past):
        from transformers import DynamicCache

        cache = DynamicCache()
        for layer in range(LAYERS):
            cache.update(past[2 * layer], past[2 * layer + 1], layer)
        out = self.model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        presents = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (out.last_hidden_state, *presents)


def _inputs(name: str) -> tuple[list[str], list[torch.Tensor]]:
    if name in ("vit", "swin", "convnext", "mobilevit", "segformer", "glpn"):
        return ["pixel_values"], [torch.randn(BATCH, 3, 32, 32)]
    return ["input_ids", "attention_mask"], [torch.randint(0, 90, (BATCH, SEQ)), torch.ones(BATCH, SEQ, dtype=torch.long)]


def _compare(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    return max(float(np.abs(g.astype(np.float64) - w).max() / (np.abs(w).max() + 1e-30)) for g, w in zip(got, want))


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def sweep_one(name: str, folder: Path, dynamo: bool, precision: str | None) -> str:
    model = ENCODERS[name]().eval()
    names, inputs = _inputs(name)
    path = folder / f"{name}.onnx"
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(LastHidden(model), tuple(inputs), str(path), input_names=names, output_names=["out"],
                              opset_version=18 if dynamo else 17, dynamo=dynamo,
                              dynamic_axes=None if dynamo else {n: {0: "batch"} for n in names})
    except Exception as err:  # noqa: BLE001 - the exporter's failure, not Partita's
        return f"export failed ({type(err).__name__}: {str(err)[:120]})"
    feeds = {n: t.numpy() for n, t in zip(names, inputs)}
    want = _session(path).run(None, feeds)
    exe = partita.compile(str(path), precision=precision, cache_dir=str(folder / "cache"))
    error = _compare(exe.run(**feeds), want)
    tolerance = 2e-2 if precision else 1e-3
    return f"{'ok' if error < tolerance else 'MISMATCH'}  relative error {error:.1e}"


def sweep_torch(name: str, folder: Path) -> str:
    """The module through ``torch.export`` (no ONNX), against its own output."""
    model = LastHidden(ENCODERS[name]().eval())
    _, inputs = _inputs(name)
    with torch.no_grad():
        want = model(*inputs)
    want = want[0] if isinstance(want, tuple) else want
    exe = partita.compile(model, example_inputs=tuple(inputs), cache_dir=str(folder / "cache"))
    error = _compare(exe.run(*[t.numpy() for t in inputs]), [want.numpy()])
    return f"{'ok' if error < 1e-3 else 'MISMATCH'}  relative error {error:.1e}"


def sweep_decoder(name: str, folder: Path) -> str:
    model = ENCODERS[name]().eval()
    config = model.config
    kv_heads = getattr(config, "num_key_value_heads", HEADS)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // HEADS
    past = [torch.randn(1, kv_heads, 5, head_dim) for _ in range(2 * LAYERS)]
    names = ["input_ids", "attention_mask", *(f"past_{k}" for k in range(2 * LAYERS))]
    path = folder / f"{name}_kv.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(DecoderStep(model), (torch.randint(0, 90, (1, 1)), torch.ones(1, 6, dtype=torch.long), *past),
                          str(path), input_names=names, output_names=["out", *(f"present_{k}" for k in range(2 * LAYERS))],
                          opset_version=17, dynamo=False,
                          dynamic_axes={"attention_mask": {1: "total"}, **{n: {2: "past"} for n in names[2:]}})
    session, exe = _session(path), partita.compile(str(path), cache_dir=str(folder / "cache"))
    rng = np.random.default_rng(0)
    errors = []
    for length in (5, 9):
        feeds = {"input_ids": rng.integers(0, 90, (1, 1)), "attention_mask": np.ones((1, length + 1), np.int64),
                 **{n: rng.standard_normal((1, kv_heads, length, head_dim)).astype(np.float32) for n in names[2:]}}
        errors.append(_compare(exe.run(**feeds), session.run(None, feeds)))
    return f"{'ok' if max(errors) < 1e-3 else 'MISMATCH'}  relative error {max(errors):.1e} (past 5 and 9)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--dynamo", action="store_true")
    parser.add_argument("--precision", choices=("fp16", "bf16"))
    parser.add_argument("--kv", action="store_true")
    parser.add_argument("--torch", action="store_true", help="the module through torch.export, no ONNX")
    args = parser.parse_args()
    torch.manual_seed(0)
    names = args.names or (list(DECODERS) if args.kv else list(ENCODERS))
    known = DECODERS if args.kv else tuple(ENCODERS)
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)} (choose from {', '.join(known)})")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            start = time.perf_counter()
            try:
                if args.kv:
                    line = sweep_decoder(name, Path(tmp))
                elif args.torch:
                    line = sweep_torch(name, Path(tmp))
                else:
                    line = sweep_one(name, Path(tmp), args.dynamo, args.precision)
            except PartitaError as err:
                line = f"PARTITA ERROR  {str(err)[:200]}"
            print(f"{name:12s} {line}  ({time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
