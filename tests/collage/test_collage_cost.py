"""Tests of the Collage cost models and the persistent cost cache."""

from __future__ import annotations

import json

import pytest

from partita.collage import (
    Candidate,
    CostCache,
    DataflowGraph,
    MeasuringEstimator,
    MockEstimator,
    NodeInfo,
    RooflineEstimator,
    TensorInfo,
    enumerate_native_candidates,
    load_devices,
    search,
    structural_key,
)
from partita.collage.cost import node_flops


def gemm_gelu(m=4096, n=4096, k=4096, dt="f16") -> DataflowGraph:
    a, w, y = TensorInfo((m, k), dt), TensorInfo((n, k), dt), TensorInfo((m, n), dt)
    return DataflowGraph(
        [NodeInfo("nn.dense", (), (a, w), y), NodeInfo("nn.gelu", (0,), (y,), y)], [1]
    )


def C(nodes, target, label=None):
    return Candidate(frozenset(nodes), target, label or target)


def test_device_specs_load():
    specs = load_devices()
    for dev in ("a100", "h100", "h200"):
        d = specs["devices"][dev]
        assert d["tensor_flops"]["f16"] > d["cuda_core_flops"]["f32"] > 0
        assert d["mem_bandwidth"] > 1e12
        assert d["host"] in specs["hosts"]
        RooflineEstimator(dev)
    assert specs["devices"]["h100"]["tensor_flops"]["f16"] == pytest.approx(989.4e12)
    assert specs["devices"]["a100"]["tensor_flops"]["f16"] == pytest.approx(312e12)
    assert specs["devices"]["h200"]["mem_bandwidth"] == pytest.approx(4.8e12)
    for be in ("cutlass", "cublas", "cudnn", "tensorrt", "cuda", "llvm"):
        assert be in specs["backends"]
    with pytest.raises(ValueError, match="unknown device"):
        RooflineEstimator("v100")


def test_flop_formulas():
    g = gemm_gelu(128, 256, 512)
    assert node_flops(g.nodes[0]) == 2 * 128 * 256 * 512
    assert node_flops(g.nodes[1]) == 128 * 256
    # conv2d: N=2, P=Q=14, K=64, C=32, R=S=3 (OIHW weight)
    conv = NodeInfo(
        "nn.conv2d",
        (),
        (TensorInfo((2, 32, 16, 16), "f16"), TensorInfo((64, 32, 3, 3), "f16")),
        TensorInfo((2, 64, 14, 14), "f16"),
    )
    assert node_flops(conv) == 2 * 2 * 14 * 14 * 64 * 3 * 3 * 32
    sm = NodeInfo("nn.softmax", (), (TensorInfo((8, 10), "f32"),), TensorInfo((8, 10), "f32"))
    assert node_flops(sm) == 5 * 80
    dyn = NodeInfo("nn.relu", (), (TensorInfo((-1, 10), "f32"),), TensorInfo((-1, 10), "f32"))
    assert node_flops(dyn, dynamic_dim_hint=1) == 10
    assert node_flops(dyn, dynamic_dim_hint=32) == 320


def test_gemm_cheaper_on_libraries_than_native_cuda():
    """The native f16 tiles multiply on tensor cores, below CUTLASS's pipelined kernels and
    cuBLASLt; its f32 GEMM is 16x16 SIMT tiles on CUDA cores, far below TF32 libraries."""
    g = gemm_gelu()
    est = RooflineEstimator("h100")
    cuda = est.breakdown(g, C({0}, "cuda"))
    assert est.estimate(g, C({0}, "cutlass")) < cuda["time"]
    assert est.estimate(g, C({0}, "cublas")) * 2 < cuda["time"]
    flops = 2 * 4096**3
    # the f16 tensor peak, in 4 waves of 264 tiles for 1024 (wave quantization)
    assert cuda["compute_time"] == pytest.approx(flops / (989.4e12 * 0.3) * (4 * 264 / 1024))
    f32 = gemm_gelu(dt="f32")
    assert est.breakdown(f32, C({0}, "cuda"))["compute_time"] == pytest.approx(flops / (66.9e12 * 0.3))
    assert est.estimate(f32, C({0}, "cutlass")) * 3 < est.estimate(f32, C({0}, "cuda"))
    # newer GPU is faster for the same GEMM
    assert est.estimate(g, C({0}, "cutlass")) < RooflineEstimator("a100").estimate(g, C({0}, "cutlass"))


def test_fusing_elementwise_into_gemm_is_cheaper():
    for m in (64, 4096):  # launch-bound and compute-bound sizes
        g = gemm_gelu(m=m)
        est = RooflineEstimator("h100")
        fused = est.breakdown(g, C({0, 1}, "cutlass"))
        dense = est.breakdown(g, C({0}, "cutlass"))
        gelu = est.breakdown(g, C({1}, "cuda"))
        assert fused["time"] < dense["time"] + gelu["time"]
        # the intermediate is neither written by the GEMM nor re-read by gelu
        assert fused["bytes"] < dense["bytes"] + gelu["bytes"]
        y = g.nodes[0].out_type.nbytes()
        assert dense["bytes"] + gelu["bytes"] - fused["bytes"] == pytest.approx(2 * y)


def test_host_cpu_much_slower_for_big_gemm():
    g = gemm_gelu()
    est = RooflineEstimator("h100")
    cpu = est.breakdown(g, C({0}, "llvm"))
    assert cpu["launch_overhead"] == 0.0
    assert cpu["time"] > 50 * est.estimate(g, C({0}, "cutlass"))


def test_memory_bound_op_follows_bandwidth():
    g = gemm_gelu()
    t100 = RooflineEstimator("h100").breakdown(g, C({1}, "cuda"))
    t200 = RooflineEstimator("h200").breakdown(g, C({1}, "cuda"))
    assert t100["memory_time"] > t100["compute_time"]
    assert t100["memory_time"] / t200["memory_time"] == pytest.approx(4.8 / 3.35)


def test_roofline_name_follows_its_figures():
    """A persistent cost cache keys estimates by the estimator's name: other figures (an
    edited devices.json, a new release's efficiencies) give another name."""
    specs = load_devices()
    same = RooflineEstimator("h100", specs=json.loads(json.dumps(specs)))
    assert same.name == RooflineEstimator("h100").name
    edited = json.loads(json.dumps(specs))
    edited["backends"]["cuda"]["efficiency"]["gemm"] = 0.5
    assert RooflineEstimator("h100", specs=edited).name != same.name


def test_roofline_deterministic_and_unknown_backend():
    g = gemm_gelu(1000, 333, 77)
    a = [RooflineEstimator("a100").estimate(g, C(s, t)) for s in ({0}, {1}, {0, 1}) for t in ("cutlass", "cuda", "llvm", "tensorrt")]
    b = [RooflineEstimator("a100").estimate(g, C(s, t)) for s in ({0}, {1}, {0, 1}) for t in ("cutlass", "cuda", "llvm", "tensorrt")]
    assert a == b and all(x > 0 for x in a)
    with pytest.raises(ValueError, match="unknown backend"):
        RooflineEstimator().estimate(g, C({0}, "nope"))


def test_external_value_used_twice_counted_once():
    t = TensorInfo((1024,), "f32")
    g = DataflowGraph(
        [NodeInfo("nn.relu", (), (t,), t), NodeInfo("nn.add", (0, 0), (t, t), t)], [1]
    )
    b = RooflineEstimator().breakdown(g, C({1}, "cuda"))
    assert b["bytes"] == 2 * 4096  # read x once, write the result


def test_reshapes_alone_cost_nothing():
    """A candidate of reshapes only is a buffer alias after fusion, not a kernel: no launch,
    no traffic; with a relu it is one kernel again."""
    x, y = TensorInfo((64, 1024), "f32"), TensorInfo((64, 32, 32), "f32")
    g = DataflowGraph([NodeInfo("nn.reshape", (), (x,), y), NodeInfo("nn.reshape", (0,), (y,), x),
                       NodeInfo("nn.relu", (1,), (x,), x)], [2])
    est = RooflineEstimator()
    assert est.estimate(g, C({0, 1}, "cuda")) == 0.0 and est.breakdown(g, C({0}, "cuda"))["bytes"] == 0.0
    with_relu = est.breakdown(g, C({0, 1, 2}, "cuda"))
    assert with_relu["launch_overhead"] > 0 and with_relu["bytes"] == 2 * 64 * 1024 * 4


def test_measuring_estimator():
    g = gemm_gelu(8, 8, 8)
    m = MeasuringEstimator(lambda g, c: [3.0, 1.0, 2.0])
    assert m.available() and m.estimate(g, C({0}, "cutlass")) == 2.0 and m.calls == 1
    off = MeasuringEstimator(lambda g, c: 1.0, available=lambda: False)
    with pytest.raises(RuntimeError, match="no device"):
        off.estimate(g, C({0}, "cutlass"))
    fb = MeasuringEstimator(lambda g, c: 1.0, available=lambda: False, fallback=MockEstimator({"cutlass": 7.0}))
    assert fb.estimate(g, C({0}, "cutlass")) == 7.0 and fb.calls == 0


def mlp_chain(blocks: int) -> DataflowGraph:
    x, h = TensorInfo((128, 64), "f16"), TensorInfo((128, 256), "f16")
    nodes, prev = [], None
    for _ in range(blocks):
        src = [] if prev is None else [prev]
        base = len(nodes)
        nodes += [
            NodeInfo("nn.dense", tuple(src), (x, TensorInfo((256, 64), "f16")), h),
            NodeInfo("nn.gelu", (base,), (h,), h, {"approximate": "tanh"}),
            NodeInfo("nn.dense", (base + 1,), (h, TensorInfo((64, 256), "f16")), x),
            NodeInfo("nn.add", (base + 2, *src), (x, x), x),
        ]
        prev = base + 3
    return DataflowGraph(nodes, [prev])


def test_structural_key_position_independent():
    g = mlp_chain(4)
    k1 = structural_key(g, C({4, 5}, "cutlass"))
    k2 = structural_key(g, C({8, 9}, "cutlass"))
    assert k1 == k2
    assert structural_key(g, C({0, 1}, "cutlass")) != k1  # block 0 reads a graph input
    assert structural_key(g, C({5, 6}, "cutlass")) != k1
    # the last block's result is a graph output, block 2's feeds block 3: both leave
    assert structural_key(g, C({12, 13, 14, 15}, "x")) == structural_key(g, C({8, 9, 10, 11}, "x"))
    # whether a result leaves the candidate changes the key (it changes traffic)
    t = TensorInfo((4,), "f32")
    chain = [NodeInfo("nn.relu", (), (t,), t)] + [NodeInfo("nn.relu", (i,), (t,), t) for i in range(3)]
    only_last, also_1 = DataflowGraph(chain, [3]), DataflowGraph(chain, [1, 3])
    assert structural_key(only_last, C({1, 2}, "x")) != structural_key(also_1, C({1, 2}, "x"))
    assert structural_key(only_last, C({2, 3}, "x")) == structural_key(also_1, C({2, 3}, "x"))


def test_cost_cache_persists(tmp_path):
    path = tmp_path / "costs.json"
    g = mlp_chain(6)
    cands = enumerate_native_candidates(g, ["cutlass", "cuda"], 2)
    inner1 = MockEstimator(lambda g, c: RooflineEstimator("h100").estimate(g, c))
    cache1 = CostCache(path, inner1)
    plan1 = search(g, cands, cache1)
    # equal sub-graphs at different positions share entries
    assert 0 < inner1.calls == cache1.misses < len(cands)
    assert cache1.hits > 0
    data = json.loads(path.read_text())
    assert len(data["entries"]) == cache1.misses
    assert [p.name for p in tmp_path.iterdir()] == ["costs.json"]  # no temp files left
    inner2 = MockEstimator(lambda g, c: pytest.fail("measured again"))
    cache2 = CostCache(path, inner2)
    plan2 = search(g, cands, cache2)
    assert inner2.calls == 0 and cache2.misses == 0 and cache2.hits > 0
    assert plan2.total_cost == pytest.approx(plan1.total_cost)
    assert plan2.summary() == plan1.summary()


def test_cost_cache_key_includes_estimator_and_target(tmp_path):
    g = gemm_gelu(8, 8, 8)
    cache = CostCache(None, MockEstimator({"cutlass": 1.0, "cuda": 2.0}))
    assert cache.estimate(g, C({0}, "cutlass")) == 1.0
    assert cache.estimate(g, C({0}, "cuda")) == 2.0
    assert cache.misses == 2 and cache.hits == 0
    other = CostCache(None, MockEstimator({"cutlass": 5.0}, name="other"))
    assert other.key(g, C({0}, "cutlass")) != cache.key(g, C({0}, "cutlass"))


def test_cost_cache_recovers_from_corrupt_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("{not json")
    g = gemm_gelu(8, 8, 8)
    cache = CostCache(path, MockEstimator({"cuda": 3.0}))
    assert cache.estimate(g, C({1}, "cuda")) == 3.0
    assert json.loads(path.read_text())["entries"]


@pytest.mark.parametrize(("dtype", "size"), [("f16", 2), ("float16", 2), ("bf16", 2), ("f8E4M3FN", 1), ("f8E5M2", 1),
                                             ("ui64", 8), ("i1", 1), ("f64", 8)])
def test_element_sizes_come_from_the_dialects_dtype_table(dtype: str, size: int) -> None:
    """The cost model sizes tensors with the nn dialect's one dtype table (a table of its
    own had costed float8 and ui64 as 4 bytes)."""
    assert TensorInfo((3, 5), dtype).nbytes() == 15 * size


def test_native_gemm_tiles_cost_the_device_they_leave_idle():
    """The native tiles are 128x128, two an SM: a product of few tiles splits K into at
    most 8 slices of at least 256 (two launches, the partial tiles written and read), and
    still runs on a few SMs (wave quantization), which cuBLASLt's kernel choice avoids; a
    large one fills whole waves. What Collage weighs when the native kernel could also
    fuse the epilogue."""
    est = RooflineEstimator("h100")
    small, large = gemm_gelu(128, 1024, 1024), gemm_gelu()
    flops = 2 * 128 * 1024 * 1024
    # 8 tiles in 4 slices of 256: 32 blocks in one wave of 264 slots
    cuda = est.breakdown(small, C({0}, "cuda"))
    assert cuda["compute_time"] == pytest.approx(flops / (989.4e12 * 0.3) * 264 / 32)
    assert cuda["launch_overhead"] == pytest.approx(2 * 3e-6)
    plain = est.breakdown(small, C({0}, "cutlass"))
    assert cuda["bytes"] - plain["bytes"] == pytest.approx(2 * 4 * 32 * 128 * 128)  # the f32 partial tiles
    assert est.estimate(small, C({0}, "cublas")) * 3 < est.estimate(small, C({0}, "cuda"))
    # 32 x 32 tiles: 1024 of 4 waves of 264 (97% of the slots), not split
    big = est.breakdown(large, C({0}, "cuda"))
    assert big["compute_time"] == pytest.approx(2 * 4096**3 / (989.4e12 * 0.3) * (4 * 264 / 1024))
    assert big["launch_overhead"] == pytest.approx(3e-6)
    f32 = gemm_gelu(128, 1024, 1024, dt="f32")  # 16x16 SIMT tiles: no such term
    assert est.breakdown(f32, C({0}, "cuda"))["compute_time"] == pytest.approx(flops / (66.9e12 * 0.3))
