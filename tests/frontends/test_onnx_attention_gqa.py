"""ONNX ``Attention`` (opset 23) with grouped-query heads: the importer repeats the KV heads
as the exporters' ``repeat_kv`` does, so ``fuse-attention`` folds the whole decomposition
into one ``nn.attention`` whose head grouping reads each KV head once (no expanded K and V
in memory), and the compiled model matches onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from xdsl.dialects import func

import partita
from partita.dialects import make_context, nn
from partita.frontends.onnx import import_onnx
from partita.transforms.fuse_attention import FuseAttention

ort = pytest.importorskip("onnxruntime")

B, HQ, HKV, S, D = 2, 4, 2, 6, 8


def _model(causal: bool):
    shapes = {"q": [B, HQ, S, D], "k": [B, HKV, S, D], "v": [B, HKV, S, D]}
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=int(causal))
    graph = helper.make_graph([node], "gqa", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                              for n, s in shapes.items()],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, HQ, S, D])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention_is_one_op_reading_each_kv_head_once(causal: bool) -> None:
    module = import_onnx(_model(causal))
    FuseAttention().apply(make_context(), module)
    main = next(op for op in module.ops if isinstance(op, func.FuncOp))
    ops = [op for op in main.body.block.ops if not isinstance(op, func.ReturnOp)]
    (attention,) = [op for op in ops if isinstance(op, nn.AttentionOp)]
    assert attention.groups == HQ // HKV and attention.causal == causal
    assert not [op for op in ops if isinstance(op, nn.BroadcastToOp | nn.MultiplyOp)], [op.name for op in ops]
    assert attention.key.type.get_shape()[1] == HKV


@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention_matches_onnxruntime(causal: bool) -> None:
    model = _model(causal)
    rng = np.random.default_rng(0)
    feeds = {"q": rng.standard_normal((B, HQ, S, D)), "k": rng.standard_normal((B, HKV, S, D)),
             "v": rng.standard_normal((B, HKV, S, D))}
    feeds = {k: v.astype(np.float32) for k, v in feeds.items()}
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    (got,) = partita.compile(model, ["cuda -arch=sm_90", "cutlass", "llvm"]).run(feeds)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
