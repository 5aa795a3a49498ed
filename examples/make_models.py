"""Build the small example ONNX models with ``onnx.helper`` and save them next to this file.

- ``encoder.onnx``: one BERT-style encoder layer (hidden 64, 4 heads, sequence 16, dynamic
  batch ``batch``), in the form PyTorch exports: MatMul + Add projections, Reshape /
  Transpose to heads (one Reshape through a ``Shape -> Gather -> Unsqueeze -> Concat``
  subgraph), scaled-dot-product attention with Softmax, residual Adds, LayerNormalization
  (opset 17) and an MLP with the Erf form of GELU.
- ``cnn.onnx``: Conv + BatchNormalization + Relu, MaxPool, Conv + Add(bias) + Relu,
  GlobalAveragePool, Flatten, Gemm (NCHW, dynamic batch).
- ``decoder_step.onnx``: one decode step of a one-layer GPT-style decoder with a KV cache
  (hidden 64, 4 heads): inputs ``input_embeds`` [1, 1, 64] and ``past_key`` / ``past_value``
  [1, 4, ``past``, 16], outputs ``logits`` and ``present_key`` / ``present_value`` (the
  caches concatenated along the sequence); positions ``Range(past, past + 1)`` read off the
  cache's shape, learned position embeddings (512), LayerNormalization before the attention
  and the MLP, as exporters write a ``use_cache=True`` step. ``partita-doctor --validate``
  decodes with it.
- ``static_decoder_step.onnx``: the same step over a static cache of 64 positions (opset 24):
  a ``position`` input [1], TensorScatter writing the new key and value there, the positions
  after it masked out; the caches are updated in place (``tie-in-place-updates``).

Run: ``python examples/make_models.py`` (deterministic: fixed seed).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
HERE = Path(__file__).resolve().parent


class _Graph:
    """Accumulates nodes and initializers with generated names."""

    def __init__(self, seed: int, dtype: type = np.float32):
        self.rng = np.random.default_rng(seed)
        self.dtype = dtype
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name: str, shape: tuple[int, ...], scale: float | None = None) -> str:
        scale = scale if scale is not None else 1 / math.sqrt(shape[0])
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(self.dtype))

    def op(self, op_type: str, *inputs: str, name: str | None = None, **attrs) -> str:
        self.count += 1
        node_name = name or f"{op_type}_{self.count}"
        out = f"{node_name}_out"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=node_name,
                                           **attrs))
        return out

    def model(self, name: str, inputs, outputs, opset: int = OPSET) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        opsets = [helper.make_opsetid("", opset)]
        # the lowest IR version these opsets allow (onnx writes its newest by default, which
        # an older onnxruntime refuses: 1.30 reads IR 13 at most, onnx 1.23 writes 14)
        model = helper.make_model(graph, opset_imports=opsets, producer_name="partita-examples",
                                  ir_version=helper.find_min_ir_version_for(opsets))
        onnx.checker.check_model(model, full_check=True)
        return model


def make_encoder(hidden: int = 64, heads: int = 4, seq: int = 16, ffn: int = 256,
                 layers: int = 1, dtype: type = np.float32, seed: int = 0) -> onnx.ModelProto:
    """``layers`` stacked encoder layers; ``dtype`` np.float32 or np.float16."""
    g = _Graph(seed, dtype)
    head_dim = hidden // heads
    scalar = lambda name, value: g.const(name, np.array(value, dtype))  # noqa: E731

    def linear(inp: str, n_in: int, n_out: int, prefix: str) -> str:
        w = g.weight(f"{prefix}.weight", (n_in, n_out))
        b = g.weight(f"{prefix}.bias", (n_out,), 0.1)
        return g.op("Add", g.op("MatMul", inp, w, name=f"{prefix}/MatMul"), b,
                    name=f"{prefix}/Add")

    def layer_norm(inp: str, prefix: str) -> str:
        gamma = g.const(f"{prefix}.weight", (1 + 0.1 * g.rng.standard_normal(hidden)).astype(dtype))
        beta = g.weight(f"{prefix}.bias", (hidden,), 0.1)
        return g.op("LayerNormalization", inp, gamma, beta, axis=-1, epsilon=1e-5,
                    name=f"{prefix}/LayerNormalization")

    heads_shape = g.const("heads_shape", np.array([0, 0, heads, head_dim], np.int64))
    scale, sqrt2 = scalar("scale", math.sqrt(head_dim)), scalar("sqrt2", math.sqrt(2))
    one, half = scalar("one_f", 1.0), scalar("half", 0.5)
    zero_i, one_i = g.const("zero", np.array(0, np.int64)), g.const("one", np.array(1, np.int64))
    axes0 = g.const("axes0", np.array([0], np.int64))
    key_rest = g.const("key_rest", np.array([seq, heads, head_dim], np.int64))
    hidden_dim = g.const("hidden_dim", np.array([hidden], np.int64))

    def layer(x: str, p: str) -> str:
        q = g.op("Transpose", g.op("Reshape", linear(x, hidden, hidden, p + "query"), heads_shape),
                 perm=[0, 2, 1, 3])
        v = g.op("Transpose", g.op("Reshape", linear(x, hidden, hidden, p + "value"), heads_shape),
                 perm=[0, 2, 1, 3])
        # Key: reshaped through the shape subgraph PyTorch emits for x.view(x.size(0), ...).
        shape_x = g.op("Shape", x)
        batch = g.op("Unsqueeze", g.op("Gather", shape_x, zero_i, axis=0), axes0)
        key_shape = g.op("Concat", batch, key_rest, axis=0)
        k_t = g.op("Transpose", g.op("Reshape", linear(x, hidden, hidden, p + "key"), key_shape),
                   perm=[0, 2, 3, 1])
        scores = g.op("Div", g.op("MatMul", q, k_t), scale)
        probs = g.op("Softmax", scores, axis=-1)
        ctx = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        seq_dim = g.op("Unsqueeze", g.op("Gather", shape_x, one_i, axis=0), axes0)
        merged_shape = g.op("Concat", batch, seq_dim, hidden_dim, axis=0)
        attn = linear(g.op("Reshape", ctx, merged_shape), hidden, hidden, p + "attention.output")
        h1 = layer_norm(g.op("Add", x, attn), p + "attention.norm")
        # MLP with GELU as PyTorch exports it: x * 0.5 * (1 + erf(x / sqrt(2))).
        up = linear(h1, hidden, ffn, p + "intermediate")
        erf = g.op("Erf", g.op("Div", up, sqrt2))
        gelu = g.op("Mul", g.op("Mul", up, g.op("Add", erf, one)), half)
        down = linear(gelu, ffn, hidden, p + "output")
        return layer_norm(g.op("Add", h1, down), p + "output.norm")

    out = "input"
    for index in range(layers):
        out = layer(out, f"layer{index}." if layers > 1 else "")
    g.nodes.append(helper.make_node("Identity", [out], ["output"], name="output"))
    elem = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    io = lambda name: helper.make_tensor_value_info(name, elem, ["batch", seq, hidden])  # noqa: E731
    return g.model("encoder", [io("input")], [io("output")])


def make_cnn(seed: int = 1) -> onnx.ModelProto:
    g = _Graph(seed)
    x = "input"
    w1 = g.weight("conv1.weight", (8, 3, 3, 3), 0.3)
    c1 = g.op("Conv", x, w1, name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    bn = g.op("BatchNormalization", c1,
              g.const("bn.scale", (1 + 0.1 * g.rng.standard_normal(8)).astype(np.float32)),
              g.weight("bn.bias", (8,), 0.1), g.weight("bn.mean", (8,), 0.1),
              g.const("bn.var", (1 + 0.2 * g.rng.random(8)).astype(np.float32)),
              name="bn1", epsilon=1e-5)
    p = g.op("MaxPool", g.op("Relu", bn), name="pool1", kernel_shape=[2, 2], strides=[2, 2])
    w2 = g.weight("conv2.weight", (16, 8, 3, 3), 0.2)
    c2 = g.op("Conv", p, w2, name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    r2 = g.op("Relu", g.op("Add", c2, g.weight("conv2.bias", (16, 1, 1), 0.1)))
    flat = g.op("Flatten", g.op("GlobalAveragePool", r2), axis=1)
    logits = g.op("Gemm", flat, g.weight("fc.weight", (10, 16), 0.3),
                  g.weight("fc.bias", (10,), 0.1), name="fc", transB=1)
    g.nodes.append(helper.make_node("Identity", [logits], ["output"], name="output"))
    return g.model("cnn",
                   [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 3, 16, 16])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                                  ["batch", 10])])


def make_decoder_step(hidden: int = 64, heads: int = 4, ffn: int = 256, positions: int = 512,
                      vocab: int = 128, seed: int = 2, layers: int = 1, capacity: int = 0) -> onnx.ModelProto:
    """One decode step of a GPT-style decoder with a KV cache concatenated along the
    sequence: ``past_key`` / ``past_value`` in, ``present_key`` / ``present_value`` out
    (``past_key.<i>`` ... per layer when ``layers > 1``). With a ``capacity``, the caches
    hold that many positions (a static cache): the step writes its key and value at the
    ``position`` input (TensorScatter, opset 24) and attends to the positions up to it."""
    g = _Graph(seed)
    head_dim = hidden // heads
    i64 = lambda name, value: g.const(name, np.array(value, np.int64))  # noqa: E731
    names = [("", "") if layers == 1 else (f".{i}", f"h.{i}.") for i in range(layers)]

    def linear(inp: str, n_in: int, n_out: int, prefix: str) -> str:
        return g.op("Add", g.op("MatMul", inp, g.weight(f"{prefix}.weight", (n_in, n_out))),
                    g.weight(f"{prefix}.bias", (n_out,), 0.1))

    def layer_norm(inp: str, prefix: str) -> str:
        gamma = g.const(f"{prefix}.weight", (1 + 0.1 * g.rng.standard_normal(hidden)).astype(np.float32))
        return g.op("LayerNormalization", inp, gamma, g.weight(f"{prefix}.bias", (hidden,), 0.1), axis=-1)

    if capacity:  # the position is an input; the cache rows past it are masked out
        position = "position"
        hidden_rows = g.op("Greater", i64("slots", np.arange(capacity).reshape(1, 1, 1, capacity)), position)
    else:  # the new token's position: the past length, read off the (first) cache's shape
        past = g.op("Gather", g.op("Shape", f"past_key{names[0][0]}"), i64("two", 2), axis=0)
        limit = g.op("Add", past, i64("one", 1))
        position = g.op("Range", past, limit, i64("step", 1))
    table = g.weight("wpe", (positions, hidden), 0.1)
    x = g.op("Add", "input_embeds", g.op("Gather", table, position, axis=0))
    made: dict[str, str] = {}

    def shared(name: str, value: float | list[int]) -> str:
        """A constant all layers read, made where the first layer first reads it."""
        if name not in made:
            made[name] = i64(name, value) if isinstance(value, list) else g.const(name, np.array(value, np.float32))
        return made[name]

    for suffix, p in names:
        h = layer_norm(x, p + "ln_1")

        def split(name: str, h: str = h, p: str = p) -> str:
            heads_shape = shared("heads_shape", [1, -1, heads, head_dim])
            return g.op("Transpose", g.op("Reshape", linear(h, hidden, hidden, p + name), heads_shape), perm=[0, 2, 1, 3])

        q, k, v = split("attn.q"), split("attn.k"), split("attn.v")
        for kv, new in (("key", k), ("value", v)):
            cache = [f"past_{kv}{suffix}", new, position] if capacity else [f"past_{kv}{suffix}", new]
            g.nodes.append(helper.make_node("TensorScatter" if capacity else "Concat", cache, [f"present_{kv}{suffix}"],
                                            name=f"present_{kv}{suffix}", axis=2))
        scores = g.op("Div", g.op("MatMul", q, g.op("Transpose", f"present_key{suffix}", perm=[0, 1, 3, 2])),
                      shared("scale", math.sqrt(head_dim)))
        if capacity:
            scores = g.op("Where", hidden_rows, shared("masked", -1e9), scores)
        ctx = g.op("Transpose", g.op("MatMul", g.op("Softmax", scores, axis=-1), f"present_value{suffix}"),
                   perm=[0, 2, 1, 3])
        attn = linear(g.op("Reshape", ctx, shared("model_shape", [1, -1, hidden])), hidden, hidden, p + "attn.out")
        x = g.op("Add", x, attn)
        up = linear(layer_norm(x, p + "ln_2"), hidden, ffn, p + "mlp.up")
        erf = g.op("Erf", g.op("Div", up, shared("sqrt2", math.sqrt(2))))
        gelu = g.op("Mul", g.op("Mul", up, g.op("Add", erf, shared("one_f", 1.0))), shared("half", 0.5))
        x = g.op("Add", x, linear(gelu, ffn, hidden, p + "mlp.down"))
    g.nodes.append(helper.make_node("MatMul", [layer_norm(x, "ln_f"), g.weight("lm_head", (hidden, vocab))],
                                    ["logits"], name="logits"))
    f32 = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    cache = [1, heads, capacity or "past", head_dim]
    present = [1, heads, capacity or "present", head_dim]
    step = [helper.make_tensor_value_info("position", TensorProto.INT64, [1])] if capacity else []
    return g.model("static_decoder_step" if capacity else "decoder_step",
                   [f32("input_embeds", [1, 1, hidden]), *step]
                   + [f32(f"past_{kv}{s}", cache) for s, _ in names for kv in ("key", "value")],
                   [f32("logits", [1, 1, vocab])]
                   + [f32(f"present_{kv}{s}", present) for s, _ in names for kv in ("key", "value")],
                   opset=24 if capacity else OPSET)


def main() -> None:
    for name, model in (("encoder", make_encoder()), ("cnn", make_cnn()), ("decoder_step", make_decoder_step()),
                        ("static_decoder_step", make_decoder_step(capacity=64))):
        path = HERE / f"{name}.onnx"
        onnx.save(model, str(path))
        print(f"wrote {path} ({path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
