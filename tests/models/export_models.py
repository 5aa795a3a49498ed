"""Regenerates the exported-model fixtures in ``tests/models/exported/``.

Tiny configurations of the Hugging Face ``BertModel``, ``GPT2LMHeadModel``,
``LlamaForCausalLM`` and ``ViTModel`` and of torchvision's EfficientNet, with fixed seeds and
random weights, exported the way Hugging Face / optimum users export them: the TorchScript
exporter (``torch.onnx.export(..., dynamo=False)``), opset 17, dynamic batch and sequence axes
(BERT once more at opset 14, LLaMA once more in f16); and each once more with the ``torch.export``-based exporter,
the default since torch 2.9 (``<name>_dynamo.onnx``: ``dynamo=True``, its default opset, 20
with torch 2.14; needs ``onnxscript``). Beside each ``<name>.onnx`` sits ``<name>.npz``, one
sample input set keyed by the model's input names. ``tests/models/test_exported_models.py`` compiles these files
with Partita and compares every output with onnxruntime; it needs no torch. One decode step
of a LLaMA attention layer with a static KV cache (``StaticCacheAttention``) goes to
``exported_decode/`` (``tests/models/test_exported_decode.py``).

This script needs torch, torchvision and transformers, which the project does not depend on.
Run it from a separate environment::

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch torchvision transformers onnx onnxruntime onnxscript
    /tmp/torchenv/bin/python tests/models/export_models.py

Measured with torch 2.14.1, torchvision 0.29.1, transformers 5.23.0, onnx 1.23.2,
onnxscript 0.7.2.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import torch
import transformers
from torchvision.models import efficientnet

OUT = Path(__file__).resolve().parent / "exported"
BATCH, SEQUENCE = 2, 7


def token_inputs(vocab: int, *, token_types: bool = False, seed: int = 0) -> dict[str, np.ndarray]:
    """Token ids within the vocabulary and an attention mask padding the end of the second row."""
    rng = np.random.default_rng(seed)
    inputs = {"input_ids": rng.integers(0, vocab, (BATCH, SEQUENCE)).astype(np.int64)}
    mask = np.ones((BATCH, SEQUENCE), np.int64)
    mask[1, SEQUENCE - 3:] = 0
    inputs["attention_mask"] = mask
    if token_types:
        types = np.zeros((BATCH, SEQUENCE), np.int64)
        types[:, SEQUENCE // 2:] = 1
        inputs["token_type_ids"] = types
    return inputs


def export(name: str, model: torch.nn.Module, inputs: dict[str, np.ndarray], outputs: list[str],
           dynamic_axes: dict[str, dict[int, str]], opset: int = 17, dynamo: bool = True) -> None:
    """Writes ``<name>.onnx`` (TorchScript exporter, ``opset``) and, with ``dynamo``,
    ``<name>_dynamo.onnx`` (``torch.export``-based exporter, its default opset), and the
    sample ``.npz`` of each."""
    model.eval()
    args = tuple(torch.from_numpy(v) for v in inputs.values())
    path = OUT / f"{name}.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer warnings
        torch.onnx.export(model, args, str(path), input_names=list(inputs), output_names=outputs,
                          dynamic_axes=dynamic_axes, opset_version=opset, do_constant_folding=True,
                          dynamo=False)
    written = [path]
    if dynamo:
        # torch.export names dynamic dims by Dim objects; inputs sharing a name share one.
        dims: dict[str, torch.export.Dim] = {}
        shapes = tuple({axis: dims.setdefault(label, torch.export.Dim(label, min=1, max=64))
                        for axis, label in dynamic_axes[n].items()} for n in inputs)
        dynamo = OUT / f"{name}_dynamo.onnx"
        with torch.no_grad():
            torch.onnx.export(model, args, str(dynamo), input_names=list(inputs), output_names=outputs,
                              dynamic_shapes=(shapes,) if isinstance(model, Outputs) else shapes,
                              external_data=False, dynamo=True)
        written.append(dynamo)
    for file in written:
        onnx.checker.check_model(onnx.load(str(file)), full_check=True)
        np.savez(file.with_suffix(".npz"), **inputs)
        model_proto = onnx.load(str(file))
        version = next(o.version for o in model_proto.opset_import if o.domain in ("", "ai.onnx"))
        ops = sorted({n.op_type for n in model_proto.graph.node})
        print(f"{file.name}: {file.stat().st_size / 1024:.0f} KiB, opset {version}, ops {' '.join(ops)}")


class Outputs(torch.nn.Module):
    """Calls a Hugging Face model with keyword inputs and returns the named outputs as a tuple
    (``return_dict`` outputs do not trace to a flat output list)."""

    def __init__(self, model: torch.nn.Module, names: list[str], outputs: list[str]) -> None:
        super().__init__()
        self.model, self.names, self.outputs = model, names, outputs

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        result = self.model(**dict(zip(self.names, args)))
        return tuple(result[k] for k in self.outputs)


def text_axes(names: list[str], outputs: dict[str, int]) -> dict[str, dict[int, str]]:
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    for out, rank in outputs.items():
        axes[out] = {0: "batch", 1: "sequence"} if rank >= 2 else {0: "batch"}
    return axes


def bert(opset: int) -> None:
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=64, type_vocab_size=2)
    model = transformers.BertModel(config)
    inputs = token_inputs(config.vocab_size, token_types=True)
    outputs = ["last_hidden_state", "pooler_output"]
    export("bert" if opset == 17 else f"bert_opset{opset}", Outputs(model, list(inputs), outputs), inputs, outputs,
           text_axes(list(inputs), {"last_hidden_state": 3, "pooler_output": 1}), opset, dynamo=opset == 17)


def gpt2() -> None:
    torch.manual_seed(1)
    config = transformers.GPT2Config(vocab_size=100, n_positions=64, n_embd=32, n_layer=2, n_head=4,
                                 bos_token_id=0, eos_token_id=0, use_cache=False)
    model = transformers.GPT2LMHeadModel(config)
    inputs = token_inputs(config.vocab_size, seed=1)
    export("gpt2", Outputs(model, list(inputs), ["logits"]), inputs, ["logits"],
           text_axes(list(inputs), {"logits": 3}))


def llama(dtype: torch.dtype = torch.float32) -> None:
    """In f32, and in f16 (``model.half()``, as deployments export it; TorchScript only)."""
    torch.manual_seed(2)
    config = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                      use_cache=False)
    model = transformers.LlamaForCausalLM(config).to(dtype)
    inputs = token_inputs(config.vocab_size, seed=2)
    half = dtype == torch.float16
    export("llama_f16" if half else "llama", Outputs(model, list(inputs), ["logits"]), inputs, ["logits"],
           text_axes(list(inputs), {"logits": 3}), dynamo=not half)


def vit() -> None:
    torch.manual_seed(3)
    config = transformers.ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=64)
    model = transformers.ViTModel(config)
    inputs = {"pixel_values": np.random.default_rng(3).standard_normal((BATCH, 3, 32, 32)).astype(np.float32)}
    outputs = ["last_hidden_state", "pooler_output"]
    export("vit", Outputs(model, list(inputs), outputs), inputs, outputs,
           {"pixel_values": {0: "batch"}, "last_hidden_state": {0: "batch"}, "pooler_output": {0: "batch"}})


def efficientnet_tiny() -> None:
    """torchvision's EfficientNet-B0 block structure (MBConv: depthwise convolution, SiLU,
    squeeze-excite, batch norm, stochastic depth) at a quarter of its width and depth."""
    torch.manual_seed(4)
    setting, last_channel = efficientnet._efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.25)
    model = efficientnet.EfficientNet(setting, dropout=0.2, last_channel=last_channel, num_classes=10)
    # Random running statistics, so the exported batch norms are not identities.
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    inputs = {"input": np.random.default_rng(4).standard_normal((BATCH, 3, 64, 64)).astype(np.float32)}
    export("efficientnet", model, inputs, ["logits"], {"input": {0: "batch"}, "logits": {0: "batch"}})


class StaticCacheAttention(torch.nn.Module):
    """One decode step of Hugging Face's ``LlamaAttention`` with a static KV cache, written
    out (transformers' own static cache does not trace): Q, K and V projections, rotary
    embeddings from precomputed cos / sin tables read at the position (``rotate_half``),
    the new key and value written into fixed-capacity caches with ``index_copy``, GQA by
    ``repeat_kv`` (expand + reshape), the unwritten slots hidden by ``masked_fill`` with
    ``finfo.min``, and the output projection."""

    HEADS, KV_HEADS, HEAD_DIM, HIDDEN, CAPACITY = 4, 2, 16, 64, 32

    def __init__(self) -> None:
        super().__init__()
        h, kv, d, n = self.HEADS, self.KV_HEADS, self.HEAD_DIM, self.HIDDEN
        self.q_proj, self.k_proj = torch.nn.Linear(n, h * d, bias=False), torch.nn.Linear(n, kv * d, bias=False)
        self.v_proj, self.o_proj = torch.nn.Linear(n, kv * d, bias=False), torch.nn.Linear(h * d, n, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
        freqs = torch.outer(torch.arange(self.CAPACITY).float(), inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos_cached", emb.cos())
        self.register_buffer("sin_cached", emb.sin())

    @staticmethod
    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        return torch.cat([-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]], dim=-1)

    def repeat_kv(self, x: torch.Tensor) -> torch.Tensor:
        b, kv, slots, d = x.shape
        groups = self.HEADS // self.KV_HEADS
        return x[:, :, None].expand(b, kv, groups, slots, d).reshape(b, kv * groups, slots, d)

    def forward(self, hidden, position, key_cache, value_cache):
        b, d = hidden.shape[0], self.HEAD_DIM
        q = self.q_proj(hidden).view(b, 1, self.HEADS, d).transpose(1, 2)
        k = self.k_proj(hidden).view(b, 1, self.KV_HEADS, d).transpose(1, 2)
        v = self.v_proj(hidden).view(b, 1, self.KV_HEADS, d).transpose(1, 2)
        cos, sin = self.cos_cached[position][None, None], self.sin_cached[position][None, None]
        q = q * cos + self.rotate_half(q) * sin
        k = k * cos + self.rotate_half(k) * sin
        key_cache = key_cache.index_copy(2, position, k)
        value_cache = value_cache.index_copy(2, position, v)
        scores = q @ self.repeat_kv(key_cache).transpose(2, 3) / d ** 0.5
        hidden_slots = torch.arange(self.CAPACITY)[None, None, None, :] > position
        scores = scores.masked_fill(hidden_slots, torch.finfo(scores.dtype).min)
        out = torch.softmax(scores, dim=-1) @ self.repeat_kv(value_cache)
        return self.o_proj(out.transpose(1, 2).reshape(b, 1, self.HEADS * d)), key_cache, value_cache


def static_cache_decode() -> None:
    """``exported_decode/llama_static_cache.onnx``: ``StaticCacheAttention`` at batch 1 (the
    TorchScript exporter, opset 17), and a sample step at position 5."""
    torch.manual_seed(5)
    model, m = StaticCacheAttention().eval(), StaticCacheAttention
    rng = np.random.default_rng(5)
    cache = (1, m.KV_HEADS, m.CAPACITY, m.HEAD_DIM)
    inputs = {"hidden": rng.standard_normal((1, 1, m.HIDDEN)).astype(np.float32),
              "position": np.array([5], np.int64),
              "key_cache": rng.standard_normal(cache).astype(np.float32),
              "value_cache": rng.standard_normal(cache).astype(np.float32)}
    path = OUT_DECODE / "llama_static_cache.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, tuple(torch.from_numpy(v) for v in inputs.values()), str(path),
                          input_names=list(inputs), output_names=["out", "present_key", "present_value"],
                          opset_version=17, do_constant_folding=True, dynamo=False)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    np.savez(path.with_suffix(".npz"), **inputs)
    print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB")


class FirstImage(torch.nn.Module):
    """A torchvision detector on one image, its detections as a tuple (the exporter
    traces a list of images to a list of dicts otherwise)."""

    def __init__(self, detector: torch.nn.Module) -> None:
        super().__init__()
        self.detector = detector

    def forward(self, image: torch.Tensor) -> tuple[torch.Tensor, ...]:
        found = self.detector([image])[0]
        return found["boxes"], found["labels"], found["scores"]


def faster_rcnn_tiny() -> None:
    """``exported_detection/faster_rcnn.onnx``: torchvision's ``FasterRCNN`` (region
    proposals with NMS per FPN level, multi-scale RoIAlign, box decoding, per-class NMS)
    over a three-conv backbone with a two-level FPN, the TorchScript exporter at opset 17
    as torchvision's own ONNX tests export it, torchvision's default 1,000 proposals after
    NMS, so the proposals a run keeps are fewer than that: once for 64x64 images (its
    transform's resize to ``min_size`` is then a constant), with three sample images
    (``image0`` ..), and once with the image's height and width dynamic
    (``faster_rcnn_dynamic.onnx``: the resize, the FPN's upsampling and the anchors follow
    the image), with samples of three sizes."""
    from collections import OrderedDict

    from torchvision.models.detection import FasterRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator
    from torchvision.models.detection.backbone_utils import BackboneWithFPN
    from torchvision.models.detection.faster_rcnn import FastRCNNPredictor, TwoMLPHead
    from torchvision.ops import MultiScaleRoIAlign

    torch.manual_seed(6)
    conv = torch.nn.Conv2d
    body = torch.nn.Sequential(OrderedDict(
        stem=torch.nn.Sequential(conv(3, 8, 3, 2, 1), torch.nn.ReLU()),
        layer1=torch.nn.Sequential(conv(8, 16, 3, 2, 1), torch.nn.ReLU()),
        layer2=torch.nn.Sequential(conv(16, 32, 3, 2, 1), torch.nn.ReLU())))
    backbone = BackboneWithFPN(body, {"layer1": "0", "layer2": "1"}, [16, 32], 16)
    model = FasterRCNN(
        backbone, num_classes=None, min_size=64, max_size=64,
        rpn_anchor_generator=AnchorGenerator(sizes=((8,), (16,), (32,)), aspect_ratios=((0.5, 1.0, 2.0),) * 3),
        box_roi_pool=MultiScaleRoIAlign(featmap_names=["0", "1"], output_size=4, sampling_ratio=2),
        box_head=TwoMLPHead(16 * 4 * 4, 32), box_predictor=FastRCNNPredictor(32, 3),
        rpn_pre_nms_top_n_test=64, box_detections_per_img=12, box_score_thresh=0.7).eval()
    with torch.no_grad():  # confident classes, so that each image keeps its own number of boxes
        model.roi_heads.box_predictor.cls_score.weight.mul_(30)
    rng = np.random.default_rng(6)
    images = {f"image{k}": rng.random((3, 64, 64), dtype=np.float32) for k in range(3)}
    detector = FirstImage(model).eval()
    with torch.no_grad():
        found = [len(detector(torch.from_numpy(v))[0]) for v in images.values()]
    path = OUT_DETECTION / "faster_rcnn.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(detector, (torch.from_numpy(images["image0"]),), str(path), input_names=["image"],
                          output_names=["boxes", "labels", "scores"], opset_version=17, dynamo=False)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    np.savez(path.with_suffix(".npz"), **images)
    print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB, detections per sample {found}")
    sized = {f"image{k}": rng.random((3, h, w), dtype=np.float32) for k, (h, w) in enumerate([(64, 64), (48, 80), (100, 72)])}
    path = OUT_DETECTION / "faster_rcnn_dynamic.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(detector, (torch.from_numpy(sized["image0"]),), str(path), input_names=["image"],
                          output_names=["boxes", "labels", "scores"], opset_version=17, dynamo=False,
                          dynamic_axes={"image": {1: "height", 2: "width"}})
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    np.savez(path.with_suffix(".npz"), **sized)
    with torch.no_grad():
        found = [len(detector(torch.from_numpy(v))[0]) for v in sized.values()]
    print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB, detections per sample {found}")


OUT_DECODE = Path(__file__).resolve().parent / "exported_decode"
OUT_DETECTION = Path(__file__).resolve().parent / "exported_detection"
EXPORTS: list[Callable[[], None]] = [lambda: bert(17), lambda: bert(14), gpt2, llama, lambda: llama(torch.float16),
                                     vit, efficientnet_tiny, static_cache_decode, faster_rcnn_tiny]

if __name__ == "__main__":
    OUT.mkdir(exist_ok=True)
    OUT_DECODE.mkdir(exist_ok=True)
    OUT_DETECTION.mkdir(exist_ok=True)
    for make in EXPORTS:
        make()
