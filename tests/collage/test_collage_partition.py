"""Tests of the IR-level Collage partitioner (``collage-partition``)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, f16, f32
from xdsl.ir import Block, Region

from partita.backends import register_backend, unregister_backend
from partita.backends.pattern import is_op, wildcard
from partita.collage import (
    CostCache,
    MeasuringEstimator,
    MockEstimator,
    RooflineEstimator,
    brute_force_search,
)
from partita.dialects import make_context, nn
from partita.dialects.byoc import COMPILER, COMPOSITE, PRIMITIVE
from partita.ir import PartitaError, parse_module, verify_module
from partita.runtime.reference import run
from partita.transforms.collage.partitioner import CollageReport, collage_partition, function_candidates
from partita.transforms.collage_partition import CollagePartition

ALL = "cuda,cutlass,cublas,cudnn,llvm"


def main_of(module: ModuleOp) -> func.FuncOp:
    return next(op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == "main")


def outlined(module: ModuleOp) -> dict[str, func.FuncOp]:
    return {op.sym_name.data: op for op in module.ops
            if isinstance(op, func.FuncOp) and COMPILER in op.attributes}


def hashed_costs(seed: int):
    """Deterministic pseudo-random cost per (target, label, node set)."""
    def cost(graph, cand) -> float:
        return random.Random(f"{seed}|{cand.target}|{cand.label}|{sorted(cand.nodes)}").uniform(0.1, 2.0)
    return cost


# ------------------------------------------------------------- random graphs
def random_module(draw_ops: list[tuple[str, int, int]], dtype=f16, n: int = 8) -> ModuleOp:
    """@main(x, y, w, b): each step applies an op to earlier values (indices modulo the
    values so far); every value is [n, n]. Unused values are returned too."""
    t, w_t, b_t = TensorType(dtype, [n, n]), TensorType(dtype, [n, n]), TensorType(dtype, [n])
    block = Block(arg_types=[t, t, w_t, b_t])
    x, y, w, b = block.args
    values = [x, y]
    used: set[int] = set()
    for kind, i, j in draw_ops:
        a_i, b_i = i % len(values), j % len(values)
        a, c = values[a_i], values[b_i]
        if kind == "add":
            op = nn.AddOp(a, c)
            used |= {a_i, b_i}
        else:
            used.add(a_i)
            op = {
                "relu": lambda: nn.ReluOp(a),  # noqa: B023 (called at once)
                "tanh": lambda: nn.TanhOp(a),  # noqa: B023 (called at once)
                "gelu": lambda: nn.GeluOp(a),  # noqa: B023 (called at once)
                "softmax": lambda: nn.SoftmaxOp(a, axis=-1),  # noqa: B023 (called at once)
                "dense": lambda: nn.DenseOp(a, w),  # noqa: B023 (called at once)
                "bias_add": lambda: nn.BiasAddOp(a, b),  # noqa: B023 (called at once)
            }[kind]()
        block.add_op(op)
        values.append(op.results[0])
    outs = [v for k, v in enumerate(values) if k >= 2 and k not in used] or [values[-1]]
    block.add_op(func.ReturnOp(*outs))
    return ModuleOp([func.FuncOp("main", ([t, t, w_t, b_t], [v.type for v in outs]), Region(block))])


OPS = st.sampled_from(["relu", "tanh", "gelu", "softmax", "dense", "bias_add", "add", "dense", "bias_add"])
GRAPHS = st.lists(st.tuples(OPS, st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(GRAPHS, st.integers(1, 3), st.integers(0, 10_000))
def test_pass_cost_equals_brute_force_over_same_candidates(ops, depth, seed):
    module = random_module(ops)
    estimator = MockEstimator(hashed_costs(seed))
    graph, _, cands = function_candidates(main_of(module.clone()), ALL, estimator, depth)
    best = brute_force_search(graph, cands, estimator)
    coalesced = collage_partition(module.clone(), ALL, estimator, depth, baseline=False)
    report = collage_partition(module, ALL, estimator, depth, baseline=False, coalesce=False)
    verify_module(module)
    assert report.total == pytest.approx(best.total_cost)
    assert coalesced.total <= report.total + 1e-12  # MaxCoalesce only merges when cheaper
    # The rewrite made exactly the chosen BYOC candidates.
    byoc = [g for g in report.functions[0].groups if g.kind == "byoc"]
    calls = [op for op in main_of(module).body.block.ops if isinstance(op, func.CallOp)]
    assert len(calls) == len(byoc)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(GRAPHS, st.integers(0, 10_000), st.sampled_from([f16, f32]))
def test_partitioning_preserves_reference_results_random(ops, seed, dtype):
    module = random_module(ops, dtype)
    np_dtype = np.float16 if dtype == f16 else np.float32
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(s).astype(np_dtype) for s in [(8, 8), (8, 8), (8, 8), (8,)]]
    before = run(module, *args)
    collage_partition(module, ALL, MockEstimator(hashed_costs(seed)), 3, baseline=False)
    after = run(module, *args)
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------ BERT-like layer
def encoder_layer(dtype=f16, tokens=128, hidden=768, heads=12, ffn=3072) -> ModuleOp:
    """One BERT encoder layer: QKV dense+bias, per-head batch_matmul attention with
    softmax, output projection, residual add + layer norm, dense+bias+gelu MLP,
    residual add + layer norm."""
    dh = hidden // heads
    T = lambda *s: TensorType(dtype, list(s))  # noqa: E731
    names = ["x", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo", "g1", "be1", "w1", "b1", "w2", "b2", "g2", "be2"]
    shapes = [(tokens, hidden), (hidden, hidden), (hidden,), (hidden, hidden), (hidden,),
              (hidden, hidden), (hidden,), (hidden, hidden), (hidden,), (hidden,), (hidden,),
              (ffn, hidden), (ffn,), (hidden, ffn), (hidden,), (hidden,), (hidden,)]
    block = Block(arg_types=[T(*s) for s in shapes])
    a = dict(zip(names, block.args))
    ops = []

    def add(op):
        ops.append(op)
        return op.results[0]

    def heads_of(v, perm):
        r = add(nn.ReshapeOp(v, [tokens, heads, dh]))
        return add(nn.TransposeOp(r, perm))

    x = a["x"]
    q = add(nn.BiasAddOp(add(nn.DenseOp(x, a["wq"])), a["bq"]))
    k = add(nn.BiasAddOp(add(nn.DenseOp(x, a["wk"])), a["bk"]))
    v = add(nn.BiasAddOp(add(nn.DenseOp(x, a["wv"])), a["bv"]))
    qh, kh = heads_of(q, [1, 0, 2]), heads_of(k, [1, 0, 2])  # [heads, tokens, dh]
    vt = heads_of(v, [1, 2, 0])  # [heads, dh, tokens]
    scores = add(nn.BatchMatmulOp(qh, kh))  # [heads, tokens, tokens]
    probs = add(nn.SoftmaxOp(scores, axis=-1))
    ctx = add(nn.BatchMatmulOp(probs, vt))  # [heads, tokens, dh]
    merged = add(nn.ReshapeOp(add(nn.TransposeOp(ctx, [1, 0, 2])), [tokens, hidden]))
    attn = add(nn.BiasAddOp(add(nn.DenseOp(merged, a["wo"])), a["bo"]))
    h1 = add(nn.LayerNormOp(add(nn.AddOp(attn, x)), a["g1"], a["be1"]))
    m = add(nn.GeluOp(add(nn.BiasAddOp(add(nn.DenseOp(h1, a["w1"])), a["b1"]))))
    m2 = add(nn.BiasAddOp(add(nn.DenseOp(m, a["w2"])), a["b2"]))
    out = add(nn.LayerNormOp(add(nn.AddOp(m2, h1)), a["g2"], a["be2"]))
    block.add_ops([*ops, func.ReturnOp(out)])
    fn = func.FuncOp("main", ([T(*s) for s in shapes], [T(tokens, hidden)]), Region(block))
    return ModuleOp([fn]), shapes


@pytest.mark.parametrize("dtype", [f16, f32])
def test_encoder_layer_collage_not_above_eager_and_uses_backends(dtype):
    module, _ = encoder_layer(dtype)
    report = collage_partition(module, ALL, RooflineEstimator("h100"), 3)
    verify_module(module)
    assert report.eager_total is not None
    assert report.total <= report.eager_total * (1 + 1e-12)
    labels = {g.label for g in report.partitions}
    assert any(label.startswith(("cutlass.", "cublas.")) for label in labels)
    # The three QKV projections (equal) and the output projection share functions.
    assert len(outlined(module)) < len(report.partitions)


@pytest.mark.parametrize("dtype,np_dtype,seed", [(f16, np.float16, 0), (f32, np.float32, 1), (f32, np.float32, 2)])
def test_encoder_layer_reference_results_unchanged(dtype, np_dtype, seed):
    module, shapes = encoder_layer(dtype, tokens=8, hidden=16, heads=2, ffn=32)
    rng = np.random.default_rng(seed)
    args = [(rng.standard_normal(s) * 0.5).astype(np_dtype) for s in shapes]
    before = run(module, *args)
    report = collage_partition(module, ALL, MockEstimator(hashed_costs(seed)), 3)
    assert report.partitions  # something was partitioned
    after = run(module, *args)
    np.testing.assert_array_equal(before[0], after[0])


def test_encoder_onnx_import_partitions():
    from pathlib import Path

    onnx = pytest.importorskip("onnx")
    from partita.frontends.onnx import import_onnx

    path = Path(__file__).parents[2] / "examples" / "encoder.onnx"
    module = import_onnx(onnx.load(str(path)))
    report = collage_partition(module, ALL, RooflineEstimator("h100"), 3)
    verify_module(module)
    assert report.total <= report.eager_total * (1 + 1e-12)


# --------------------------------------------------------------------- cache
def test_cost_cache_second_run_estimates_nothing(tmp_path):
    calls = []

    def timer(graph, cand):
        calls.append(cand)
        return [1e-5 * len(cand.nodes), 2e-5, 1.5e-5]

    path = tmp_path / "costs.json"
    outputs = []
    for _ in range(2):
        module, _ = encoder_layer(f16, tokens=16, hidden=64, heads=2, ffn=128)
        inner = MeasuringEstimator(timer, available=lambda: True)
        cache = CostCache(path, inner)
        report = collage_partition(module, ALL, cache, 3)
        outputs.append((str(module), report.total, inner.calls, cache.hits, cache.misses))
    (first_ir, first_total, first_calls, _, first_misses), (second_ir, second_total, second_calls, hits, misses) = outputs
    assert first_calls > 0 and first_misses == first_calls
    assert second_calls == 0 and misses == 0 and hits > 0
    assert first_ir == second_ir and first_total == second_total


# ------------------------------------------------- a combining (TensorRT-like) backend
DIAMOND = """
func.func @main(%x: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %0 = nn.relu %x : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %1 = nn.tanh %0 : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %2 = nn.relu %1 : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %3 = nn.add %0, %2 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  func.return %3 : tensor<16x16xf32>
}
"""


@pytest.fixture
def graph_backend():
    name = "collagetest"
    register_backend(name, patterns=[
        ("relu", is_op("nn.relu")(wildcard())),
        ("tanh", is_op("nn.tanh")(wildcard())),
        ("add", is_op("nn.add")(wildcard(), wildcard())),
    ])
    yield name
    unregister_backend(name)


@pytest.mark.parametrize("depth,expected", [(1, [1, 1, 1, 1]), (3, [1, 3]), (4, [4])])
def test_diamond_combined_by_depth(graph_backend, depth, expected):
    module = parse_module(DIAMOND, make_context(), "diamond")
    x = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    before = run(module, x)
    # One kernel of the backend costs 1 whatever it holds; the host costs 2 per op.
    estimator = MockEstimator({graph_backend: 1.0, "llvm": 2.0})
    report = collage_partition(module, f"llvm,{graph_backend}", estimator, depth,
                               combine=[graph_backend], baseline=False, coalesce=False)
    assert sorted(len(g.ops) for g in report.partitions) == sorted(expected)
    assert report.total == len(expected)
    functions = outlined(module)
    combined = [f for f in functions.values() if COMPOSITE not in f.attributes]
    assert len(combined) == sum(1 for n in expected if n > 1)
    assert all(name.startswith(f"collage_{graph_backend}_") for name in functions)
    np.testing.assert_array_equal(before[0], run(module, x)[0])


def test_undeclared_backend_fuses_arbitrarily(graph_backend):
    # A backend that declares no partition rule gets TVM's default for its name:
    # arbitrary fusion (one exit, no taps), without being named in combine=.
    module = parse_module(DIAMOND, make_context(), "diamond")
    estimator = MockEstimator({graph_backend: 1.0, "llvm": 2.0, "llvm.fused": 10.0})
    report = collage_partition(module, f"llvm,{graph_backend}", estimator, 4, baseline=False)
    assert [len(g.ops) for g in report.partitions] == [4]


def test_pattern_only_backend_is_not_combined():
    register_backend("collagepat", patterns=[
        ("relu", is_op("nn.relu")(wildcard())),
        ("tanh", is_op("nn.tanh")(wildcard())),
        ("add", is_op("nn.add")(wildcard(), wildcard())),
    ], partition_rule="pattern")
    try:
        module = parse_module(DIAMOND, make_context(), "diamond")
        estimator = MockEstimator({"collagepat": 1.0, "llvm": 2.0, "llvm.fused": 10.0})
        report = collage_partition(module, "llvm,collagepat", estimator, 4, baseline=False)
        assert [len(g.ops) for g in report.partitions] == [1, 1, 1, 1]
        functions = outlined(module)
        assert all(COMPOSITE in f.attributes and PRIMITIVE in f.attributes for f in functions.values())
    finally:
        unregister_backend("collagepat")


def test_unknown_fusion_style_is_an_error():
    with pytest.raises(PartitaError, match="unknown fusion style 'fused'"):
        register_backend("collagebad", patterns=[], partition_rule="fused")


# ------------------------------------------------------------------ the pass
SOFTMAX = """
func.func @main(%x: tensor<16x16xf16>) -> tensor<16x16xf16> {
  %0 = nn.softmax %x {axis = -1 : i64} : (tensor<16x16xf16>) -> tensor<16x16xf16>
  func.return %0 : tensor<16x16xf16>
}
"""


@pytest.mark.parametrize("costs,moved", [(("llvm=1", "tensorrt=2"), False), (("llvm=2", "tensorrt=1"), True),
                                         ("llvm=2,tensorrt=1", True)])
def test_pass_accepts_tuple_and_string_options(costs, moved):
    ctx = make_context()
    module = parse_module(SOFTMAX, ctx, "softmax")
    pass_ = CollagePartition(targets=("tensorrt", "llvm"), cost="mock", costs=costs)
    assert pass_.last_report is None
    pass_.apply(ctx, module)
    assert bool(outlined(module)) == moved
    assert isinstance(pass_.last_report, CollageReport)
    assert pass_.last_report.total == 1.0


def test_uncovered_op_is_a_located_error():
    ctx = make_context()
    module = parse_module(SOFTMAX, ctx, "softmax.mlir")
    with pytest.raises(PartitaError, match=r"softmax.mlir:3:\d+: error: 'nn.softmax' op cannot be placed"):
        CollagePartition(targets="cutlass", native="none").apply(ctx, module)


def test_bad_options_are_errors():
    ctx = make_context()
    module = parse_module(SOFTMAX, ctx, "softmax")
    with pytest.raises(PartitaError, match="invalid mock cost"):
        CollagePartition(targets="cudnn,llvm", cost="mock", costs="llvm").apply(ctx, module)
    with pytest.raises(PartitaError, match="unknown device"):
        CollagePartition(targets="cudnn,llvm", device="tpu").apply(ctx, module)
    with pytest.raises(PartitaError, match="max-depth"):
        CollagePartition(targets="cudnn,llvm", max_depth=0).apply(ctx, module)


def test_measure_without_device_is_an_error():
    from partita.runtime.cuda import cuda_available

    if cuda_available():
        pytest.skip("a CUDA device is present")
    ctx = make_context()
    module = parse_module(SOFTMAX, ctx, "softmax")
    with pytest.raises(PartitaError, match="needs a CUDA device"):
        CollagePartition(targets="cudnn,llvm", cost="measure").apply(ctx, module)


def test_report_lists_groups_and_totals():
    module, _ = encoder_layer(f16)
    report = collage_partition(module, ALL, RooflineEstimator("h100"), 3)
    groups = report.functions[0].groups
    n_nodes = sum(len(g.ops) for g in groups)
    assert n_nodes == sum(1 for op in encoder_layer(f16)[0].walk() if op.name.startswith("nn."))
    assert report.total == pytest.approx(sum(g.cost for g in groups))
    assert all(g.symbol and g.symbol.startswith(f"collage_{g.target}_") for g in report.partitions)
    text = report.format()
    assert "total=" in text and "eager=" in text and "byoc cutlass @collage_cutlass_0" in text


def test_native_ops_placed_where_the_function_runs():
    from partita.transforms.collage.partitioner import main_target, parse_config

    assert main_target(parse_config(ALL)) == "cuda"
    assert main_target(parse_config("cudnn,llvm")) == "llvm"
    module, _ = encoder_layer(f32, tokens=8, hidden=16, heads=2, ffn=32)
    report = collage_partition(module, ALL, RooflineEstimator("h100"), 3, baseline=False)
    assert {g.target for g in report.native} == {"cuda"}
    # Explicitly allowing the host too: tiny ops then go there (the roofline has no
    # transfer costs), and a target outside the config is an error.
    module, _ = encoder_layer(f32, tokens=8, hidden=16, heads=2, ffn=32)
    report = collage_partition(module, ALL, RooflineEstimator("h100"), 3, native="cuda,llvm", baseline=False)
    assert "llvm" in {g.target for g in report.native}
    with pytest.raises(PartitaError, match="native target 'c'"):
        collage_partition(module, ALL, RooflineEstimator("h100"), 3, native="c")
