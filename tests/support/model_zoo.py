"""Small models of real architectures, built with ``onnx.helper`` in the form that
``torch.onnx.export`` gives them (random weights, no downloads).

- ``bert``: embeddings (word, position sliced from a buffer, token type) from int64
  ``input_ids`` / ``token_type_ids`` and an int64 ``attention_mask`` turned into an additive
  mask (Unsqueeze, Cast, Sub, Mul), encoder layers with multi-head attention whose head
  reshapes go through ``Shape -> Gather -> Unsqueeze -> Concat``, Erf GELU, LayerNorm, and a
  tanh pooler on the first token; ``batch`` and ``sequence`` are dynamic.
- ``gpt``: token + position embeddings (``Range`` over the run-time length), pre-norm
  blocks with a causal mask from ``Trilu`` and ``Where``, the tanh GELU written out
  (``Pow``), and an LM head tied to the embedding.
- ``llama``: one LLaMA block: RMSNorm written out (``Pow, ReduceMean, Sqrt, Div``), rotary
  position embedding (``Slice, Neg, Concat`` on halves; cos/sin tables gathered by
  position), grouped-query attention (``Expand`` of the kv heads), causal mask, SiLU-gated
  MLP.
- ``mobilenet``: MobileNetV3-like: stem Conv + BatchNorm + HardSwish, depthwise-separable
  blocks with squeeze-excite (GlobalAveragePool, 1x1 Convs, HardSigmoid, Mul) and a
  residual, a Flatten + Gemm head.
- ``resnet``: ResNet basic blocks: a stem Conv + BatchNorm + ReLU, two identity blocks and a
  strided one whose shortcut is a 1x1 Conv + BatchNorm (``relu(bn(conv(relu(bn(conv(x))))) +
  shortcut)``), global pooling and a Gemm head.
- ``vit``: ViT patch embedding (16x16 Conv), class token ``Expand``ed to the batch and
  concatenated, position embedding, one pre-norm encoder layer, head on the class token.

Every builder takes ``dtype`` (``np.float32`` or ``np.float16``): the f16 model has the
same weights, rounded.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class Graph:
    """Accumulates nodes, initializers, inputs and outputs with generated names."""

    def __init__(self, seed: int, dtype=np.float32):
        self.rng = np.random.default_rng(seed)
        self.dtype = np.dtype(dtype)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.count = 0

    @property
    def elem(self) -> int:
        return helper.np_dtype_to_tensor_dtype(self.dtype)

    def input(self, name: str, elem: int, shape) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def const(self, array, dtype=None) -> str:
        self.count += 1
        name = f"c{self.count}"
        array = np.asarray(array, dtype=dtype if dtype is not None else None)
        self.inits.append(numpy_helper.from_array(array, name))
        return name

    def f(self, value) -> str:
        """A floating constant in the model's dtype."""
        return self.const(np.asarray(value, dtype=self.dtype))

    def i64(self, value) -> str:
        return self.const(np.asarray(value, dtype=np.int64))

    def weight(self, *shape: int, scale: float | None = None) -> str:
        scale = scale if scale is not None else 1 / math.sqrt(shape[0])
        return self.f(self.rng.standard_normal(shape).astype(np.float32) * scale)

    def op(self, op_type: str, *inputs: str, outputs: int = 1, **attrs):
        self.count += 1
        names = [f"{op_type.lower()}{self.count}_{k}" for k in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=f"{op_type}_{self.count}", **attrs))
        return names[0] if outputs == 1 else names

    def model(self, name: str, outputs: list[tuple[str, str, list]]) -> onnx.ModelProto:
        """``outputs``: (value, public name, shape); each gets an Identity to its name."""
        infos = []
        for value, public, shape in outputs:
            self.nodes.append(helper.make_node("Identity", [value], [public], name=f"out_{public}"))
            infos.append(helper.make_tensor_value_info(public, self.elem, shape))
        graph = helper.make_graph(self.nodes, name, self.inputs, infos, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="partita-tests")
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model

    # -- layers as exporters write them ------------------------------------------------
    def linear(self, x: str, n_in: int, n_out: int, bias: bool = True) -> str:
        y = self.op("MatMul", x, self.weight(n_in, n_out))
        return self.op("Add", y, self.f(np.zeros(n_out) + self.rng.standard_normal(n_out) * 0.02)) if bias else y

    def layer_norm(self, x: str, n: int) -> str:
        gamma = self.f(1 + self.rng.standard_normal(n) * 0.05)
        beta = self.f(self.rng.standard_normal(n) * 0.05)
        return self.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=1e-5)

    def gelu_erf(self, x: str) -> str:
        e = self.op("Erf", self.op("Div", x, self.f(math.sqrt(2))))
        return self.op("Mul", self.op("Mul", x, self.op("Add", e, self.f(1.0))), self.f(0.5))

    def gelu_tanh(self, x: str) -> str:
        cube = self.op("Mul", self.op("Pow", x, self.f(3.0)), self.f(0.044715))
        inner = self.op("Mul", self.op("Add", x, cube), self.f(math.sqrt(2 / math.pi)))
        return self.op("Mul", self.op("Mul", x, self.f(0.5)), self.op("Add", self.op("Tanh", inner), self.f(1.0)))

    def dims(self, x: str, *axes: int) -> list[str]:
        """1-element int64 tensors holding ``x``'s run-time dims (Shape, Gather, Unsqueeze)."""
        shape = self.op("Shape", x)
        return [self.op("Unsqueeze", self.op("Gather", shape, self.i64(a), axis=0), self.i64([0])) for a in axes]

    def split_heads(self, x: str, heads: int, head_dim: int) -> str:
        """[b, s, heads * d] -> [b, heads, s, d] with a run-time shape."""
        b, s = self.dims(x, 0, 1)
        shape = self.op("Concat", b, s, self.i64([heads]), self.i64([head_dim]), axis=0)
        return self.op("Transpose", self.op("Reshape", x, shape), perm=[0, 2, 1, 3])

    def merge_heads(self, x: str, hidden: int) -> str:
        t = self.op("Transpose", x, perm=[0, 2, 1, 3])
        b, s = self.dims(t, 0, 1)
        return self.op("Reshape", t, self.op("Concat", b, s, self.i64([hidden]), axis=0))

    def attention(self, q: str, k: str, v: str, head_dim: int, mask: str | None) -> str:
        scores = self.op("Div", self.op("MatMul", q, self.op("Transpose", k, perm=[0, 1, 3, 2])),
                         self.f(math.sqrt(head_dim)))
        if mask is not None:
            scores = self.op("Add", scores, mask)
        return self.op("MatMul", self.op("Softmax", scores, axis=-1), v)


def bert(dtype=np.float32, layers: int = 2, hidden: int = 32, heads: int = 4, vocab: int = 50,
         max_len: int = 16) -> onnx.ModelProto:
    g = Graph(1, dtype)
    d = hidden // heads
    ids = g.input("input_ids", TensorProto.INT64, ["batch", "sequence"])
    types = g.input("token_type_ids", TensorProto.INT64, ["batch", "sequence"])
    mask = g.input("attention_mask", TensorProto.INT64, ["batch", "sequence"])
    (s,) = g.dims(ids, 1)
    positions = g.op("Slice", g.i64(np.arange(max_len)[None, :]), g.i64([0]), s, g.i64([1]))
    x = g.op("Add", g.op("Add", g.op("Gather", g.weight(vocab, hidden, scale=0.5), ids),
                         g.op("Gather", g.weight(max_len, hidden, scale=0.5), positions)),
             g.op("Gather", g.weight(2, hidden, scale=0.5), types))
    x = g.layer_norm(x, hidden)
    m = g.op("Cast", g.op("Unsqueeze", mask, g.i64([1, 2])), to=g.elem)
    m = g.op("Mul", g.op("Sub", g.f(1.0), m), g.f(-10000.0))
    for _ in range(layers):
        q, k, v = (g.split_heads(g.linear(x, hidden, hidden), heads, d) for _ in range(3))
        a = g.linear(g.merge_heads(g.attention(q, k, v, d, m), hidden), hidden, hidden)
        x = g.layer_norm(g.op("Add", a, x), hidden)
        f = g.linear(g.gelu_erf(g.linear(x, hidden, 4 * hidden)), 4 * hidden, hidden)
        x = g.layer_norm(g.op("Add", f, x), hidden)
    first = g.op("Gather", x, g.i64(0), axis=1)
    pooled = g.op("Tanh", g.op("Gemm", first, g.weight(hidden, hidden), g.f(np.zeros(hidden))))
    return g.model("bert", [(x, "last_hidden_state", ["batch", "sequence", hidden]),
                            (pooled, "pooler_output", ["batch", hidden])])


def causal_mask(g: Graph, scores_like: str, n: str) -> str:
    """Lower-triangular bool [n, n] from ``Trilu`` on a ``ConstantOfShape`` of ones."""
    square = g.op("Concat", n, n, axis=0)
    ones = g.op("ConstantOfShape", square, value=numpy_helper.from_array(np.ones(1, np.bool_)))
    return g.op("Trilu", ones, upper=0)


def gpt(dtype=np.float32, layers: int = 2, hidden: int = 32, heads: int = 4, vocab: int = 64) -> onnx.ModelProto:
    g = Graph(2, dtype)
    d = hidden // heads
    ids = g.input("input_ids", TensorProto.INT64, ["batch", "sequence"])
    shape = g.op("Shape", ids)
    s_scalar = g.op("Gather", shape, g.i64(1), axis=0)
    positions = g.op("Range", g.i64(0), s_scalar, g.i64(1))
    wte = g.weight(vocab, hidden, scale=0.5)
    x = g.op("Add", g.op("Gather", wte, ids), g.op("Gather", g.weight(32, hidden, scale=0.5), positions))
    n = g.op("Unsqueeze", s_scalar, g.i64([0]))
    causal = causal_mask(g, x, n)
    neg = g.f(np.finfo(np.float16).min if g.dtype == np.float16 else -1e9)
    for _ in range(layers):
        h = g.layer_norm(x, hidden)
        q, k, v = (g.split_heads(g.linear(h, hidden, hidden), heads, d) for _ in range(3))
        scores = g.op("Div", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])), g.f(math.sqrt(d)))
        scores = g.op("Where", causal, scores, neg)
        a = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
        x = g.op("Add", x, g.linear(g.merge_heads(a, hidden), hidden, hidden))
        h = g.layer_norm(x, hidden)
        x = g.op("Add", x, g.linear(g.gelu_tanh(g.linear(h, hidden, 4 * hidden)), 4 * hidden, hidden))
    logits = g.op("MatMul", g.layer_norm(x, hidden), g.op("Transpose", wte, perm=[1, 0]))
    return g.model("gpt", [(logits, "logits", ["batch", "sequence", vocab])])


def rms_norm(g: Graph, x: str, n: int) -> str:
    var = g.op("ReduceMean", g.op("Pow", x, g.f(2.0)), axes=[-1], keepdims=1)
    scale = g.op("Div", g.f(1.0), g.op("Sqrt", g.op("Add", var, g.f(1e-6))))
    return g.op("Mul", g.op("Mul", x, scale), g.f(1 + g.rng.standard_normal(n) * 0.05))


def rotate(g: Graph, x: str, cos: str, sin: str, d: int) -> str:
    """Rotary embedding on the last axis: ``x * cos + rotate_half(x) * sin``."""
    lo = g.op("Slice", x, g.i64([0]), g.i64([d // 2]), g.i64([-1]))
    hi = g.op("Slice", x, g.i64([d // 2]), g.i64([d]), g.i64([-1]))
    half = g.op("Concat", g.op("Neg", hi), lo, axis=-1)
    return g.op("Add", g.op("Mul", x, cos), g.op("Mul", half, sin))


def llama(dtype=np.float32, hidden: int = 32, heads: int = 4, kv_heads: int = 2, ffn: int = 64,
          max_len: int = 32) -> onnx.ModelProto:
    g = Graph(3, dtype)
    d = hidden // heads
    x = g.input("hidden_states", g.elem, ["batch", "sequence", hidden])
    shape = g.op("Shape", x)
    s_scalar = g.op("Gather", shape, g.i64(1), axis=0)
    positions = g.op("Range", g.i64(0), s_scalar, g.i64(1))
    inv = 1.0 / (10000 ** (np.arange(0, d, 2) / d))
    freqs = np.outer(np.arange(max_len), inv)
    table = np.concatenate([freqs, freqs], axis=-1)
    cos = g.op("Gather", g.f(np.cos(table)), positions)
    sin = g.op("Gather", g.f(np.sin(table)), positions)
    h = rms_norm(g, x, hidden)
    q = rotate(g, g.split_heads(g.linear(h, hidden, hidden, bias=False), heads, d), cos, sin, d)
    k = rotate(g, g.split_heads(g.linear(h, hidden, kv_heads * d, bias=False), kv_heads, d), cos, sin, d)
    v = g.split_heads(g.linear(h, hidden, kv_heads * d, bias=False), kv_heads, d)
    # Grouped-query attention: each kv head serves heads / kv_heads query heads.
    b, s = g.dims(x, 0, 1)
    group = g.op("Concat", b, g.i64([kv_heads]), g.i64([heads // kv_heads]), s, g.i64([d]), axis=0)
    full = g.op("Concat", b, g.i64([heads]), s, g.i64([d]), axis=0)
    k, v = (g.op("Reshape", g.op("Expand", g.op("Unsqueeze", t, g.i64([2])), group), full) for t in (k, v))
    n = g.op("Unsqueeze", s_scalar, g.i64([0]))
    scores = g.op("Div", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])), g.f(math.sqrt(d)))
    scores = g.op("Where", causal_mask(g, scores, n), scores, g.f(-1e4))
    a = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
    x = g.op("Add", x, g.linear(g.merge_heads(a, hidden), hidden, hidden, bias=False))
    h = rms_norm(g, x, hidden)
    gate = g.linear(h, hidden, ffn, bias=False)
    silu = g.op("Mul", gate, g.op("Sigmoid", gate))
    x = g.op("Add", x, g.linear(g.op("Mul", silu, g.linear(h, hidden, ffn, bias=False)), ffn, hidden, bias=False))
    return g.model("llama_block", [(x, "output", ["batch", "sequence", hidden])])


def mobilenet(dtype=np.float32, size: int = 32, classes: int = 10) -> onnx.ModelProto:
    g = Graph(4, dtype)
    x = g.input("image", g.elem, ["batch", 3, size, size])

    def conv(x, c_in, c_out, k, stride=1, group=1, bias=False):
        w = g.weight(c_out, c_in // group, k, k, scale=1 / math.sqrt(c_in // group * k * k))
        args = [x, w] + ([g.f(g.rng.standard_normal(c_out) * 0.05)] if bias else [])
        return g.op("Conv", *args, kernel_shape=[k, k], strides=[stride, stride],
                    pads=[k // 2] * 4, group=group)

    def bn(x, c):
        return g.op("BatchNormalization", x, g.f(1 + g.rng.standard_normal(c) * 0.1),
                    g.f(g.rng.standard_normal(c) * 0.1), g.f(g.rng.standard_normal(c) * 0.1),
                    g.f(1 + np.abs(g.rng.standard_normal(c)) * 0.1), epsilon=1e-3)

    def squeeze_excite(x, c):
        s = g.op("GlobalAveragePool", x)
        s = g.op("Relu", conv(s, c, c // 4, 1, bias=True))
        return g.op("Mul", x, g.op("HardSigmoid", conv(s, c // 4, c, 1, bias=True), alpha=1 / 6, beta=0.5))

    x = g.op("HardSwish", bn(conv(x, 3, 16, 3, stride=2), 16))
    for c_in, c_out, stride in ((16, 16, 1), (16, 24, 2)):
        y = g.op("Relu", bn(conv(x, c_in, c_in, 3, stride=stride, group=c_in), c_in))
        y = squeeze_excite(y, c_in)
        y = bn(conv(y, c_in, c_out, 1), c_out)
        x = g.op("Add", x, y) if (c_in, stride) == (c_out, 1) else y
    x = g.op("HardSwish", bn(conv(x, 24, 48, 1), 48))
    x = g.op("Flatten", g.op("GlobalAveragePool", x), axis=1)
    logits = g.op("Gemm", x, g.weight(classes, 48), g.f(np.zeros(classes)), transB=1)
    return g.model("mobilenet", [(logits, "logits", ["batch", classes])])


def resnet(dtype=np.float32, size: int = 16, classes: int = 10) -> onnx.ModelProto:
    g = Graph(6, dtype)
    x = g.input("image", g.elem, ["batch", 3, size, size])

    def conv_bn(x, c_in, c_out, k, stride=1):
        w = g.weight(c_out, c_in, k, k, scale=1 / math.sqrt(c_in * k * k))
        y = g.op("Conv", x, w, kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4)
        return g.op("BatchNormalization", y, g.f(1 + g.rng.standard_normal(c_out) * 0.1),
                    g.f(g.rng.standard_normal(c_out) * 0.1), g.f(g.rng.standard_normal(c_out) * 0.1),
                    g.f(1 + np.abs(g.rng.standard_normal(c_out)) * 0.1), epsilon=1e-5)

    def block(x, c_in, c_out, stride):
        y = conv_bn(g.op("Relu", conv_bn(x, c_in, c_out, 3, stride)), c_out, c_out, 3)
        shortcut = x if (c_in, stride) == (c_out, 1) else conv_bn(x, c_in, c_out, 1, stride)
        return g.op("Relu", g.op("Add", y, shortcut))

    x = g.op("Relu", conv_bn(x, 3, 16, 3))
    for c_in, c_out, stride in ((16, 16, 1), (16, 16, 1), (16, 32, 2)):
        x = block(x, c_in, c_out, stride)
    x = g.op("Flatten", g.op("GlobalAveragePool", x), axis=1)
    logits = g.op("Gemm", x, g.weight(classes, 32), g.f(np.zeros(classes)), transB=1)
    return g.model("resnet", [(logits, "logits", ["batch", classes])])


def vit(dtype=np.float32, size: int = 32, patch: int = 16, hidden: int = 32, heads: int = 4,
        classes: int = 10) -> onnx.ModelProto:
    g = Graph(5, dtype)
    d = hidden // heads
    tokens = (size // patch) ** 2
    x = g.input("pixel_values", g.elem, ["batch", 3, size, size])
    p = g.op("Conv", x, g.weight(hidden, 3, patch, patch, scale=1 / math.sqrt(3 * patch * patch)),
             g.f(np.zeros(hidden)), kernel_shape=[patch, patch], strides=[patch, patch])
    # x.flatten(2).transpose(1, 2), as torch exports it: Reshape with 0 (copy) and -1.
    p = g.op("Transpose", g.op("Reshape", p, g.i64([0, hidden, -1])), perm=[0, 2, 1])
    (b,) = g.dims(x, 0)
    cls = g.op("Expand", g.weight(1, 1, hidden, scale=0.5), g.op("Concat", b, g.i64([1, hidden]), axis=0))
    x = g.op("Add", g.op("Concat", cls, p, axis=1), g.weight(1, tokens + 1, hidden, scale=0.5))
    h = g.layer_norm(x, hidden)
    q, k, v = (g.split_heads(g.linear(h, hidden, hidden), heads, d) for _ in range(3))
    x = g.op("Add", x, g.linear(g.merge_heads(g.attention(q, k, v, d, None), hidden), hidden, hidden))
    h = g.layer_norm(x, hidden)
    x = g.op("Add", x, g.linear(g.gelu_erf(g.linear(h, hidden, 2 * hidden)), 2 * hidden, hidden))
    first = g.op("Gather", g.layer_norm(x, hidden), g.i64(0), axis=1)
    logits = g.op("Gemm", first, g.weight(hidden, classes), g.f(np.zeros(classes)))
    return g.model("vit", [(logits, "logits", ["batch", classes])])


def inputs_for(name: str, model: onnx.ModelProto, batch: int, sequence: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for a model of this module: token ids within the vocabulary, masks with
    padding at the end of the second row, images and hidden states from a normal law."""
    rng = np.random.default_rng(seed)
    out = {}
    for value in model.graph.input:
        tt = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else (batch if d.dim_param == "batch" else sequence)
                for d in tt.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if value.name == "input_ids":
            out[value.name] = rng.integers(0, 50, dims).astype(np.int64)
        elif value.name == "token_type_ids":
            out[value.name] = rng.integers(0, 2, dims).astype(np.int64)
        elif value.name == "attention_mask":
            mask = np.ones(dims, np.int64)
            if dims[0] > 1:
                mask[1, dims[1] // 2:] = 0
            out[value.name] = mask
        else:
            out[value.name] = rng.standard_normal(dims).astype(dtype)
    return out


MODELS = {"bert": bert, "gpt": gpt, "llama": llama, "mobilenet": mobilenet, "resnet": resnet, "vit": vit}
