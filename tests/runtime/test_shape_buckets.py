"""Shape buckets (``partita.runtime.arenas``, issue 24): a KV-cache decode loop whose past
length grows every step shares one arena and one CUDA graph per power-of-two bucket,
updated in place per token, reads the cache in place (alternating between twin arenas)
and matches onnxruntime step by step."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from xdsl.dialects.builtin import DYNAMIC_INDEX

import partita
from partita.ir import PartitaError
from partita.runtime import plan_bind
from partita.runtime.arenas import ShapeBuckets
from partita.runtime.cuda import CudaDevice, cuda_available
from partita.runtime.device import SimulatedDevice
from partita.runtime.plan import Runtime

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from frontends.test_kv_cache_import import HD, D, H, _decoder_step  # noqa: E402
from support.recording_driver import RecordingDriver  # noqa: E402


@pytest.fixture(scope="module")
def decoder(tmp_path_factory) -> tuple[Path, partita.Executable]:
    path = tmp_path_factory.mktemp("decoder") / "step.onnx"
    _decoder_step(path, 1)
    return path, partita.compile(str(path))  # the suite's cubin cache: test_kv_cache_import builds the same


def _decode(runtime: Runtime, tokens: int, seed: int = 0, cache=None):
    """``tokens`` steps, each step's present key/values (left on the device) fed back as
    the next step's past; the host inputs and the outputs of every step."""
    rng = np.random.default_rng(seed)
    past_key, past_value = cache or (np.zeros((1, H, 0, HD), np.float32),) * 2
    steps = []
    for _ in range(tokens):
        x = rng.standard_normal((1, 1, D)).astype(np.float32)
        out, past_key, past_value = runtime.run(x=x, past_key=past_key, past_value=past_value, outputs="device")
        steps.append((x, out.numpy().copy()))
    return steps, (past_key, past_value)


def test_pow2_edges() -> None:
    edge = ShapeBuckets.powers_of_two(16).edge
    assert [edge(d) for d in (0, 1, 16, 17, 32, 33, 1000)] == [16, 16, 16, 32, 32, 64, 1024]
    assert ShapeBuckets.of("pow2").reserve((1, DYNAMIC_INDEX, 8), (1, 17, 8)) == (1, 32, 8)  # static dims kept
    with pytest.raises(PartitaError, match="rounds dim 9 down to 8"):
        ShapeBuckets.of(lambda d: 8).reserve((DYNAMIC_INDEX,), (9,))
    with pytest.raises(PartitaError, match="shape buckets must be None, 'pow2'"):
        ShapeBuckets.of("linear")


def test_bucketed_decode_loop_matches_onnxruntime_step_by_step(decoder) -> None:
    import onnxruntime as ort

    path, exe = decoder
    runtime = Runtime(exe.module, "simulated", buckets="pow2")
    steps, (key, value) = _decode(runtime, 40)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    past_key = past_value = np.zeros((1, H, 0, HD), np.float32)
    for t, (x, got) in enumerate(steps):
        want, past_key, past_value = session.run(None, {"x": x, "past_key": past_key, "past_value": past_value})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"token {t}")
    np.testing.assert_allclose(key.numpy(), past_key, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value.numpy(), past_value, rtol=1e-4, atol=1e-5)
    stats = runtime.stats
    # Present lengths 1..40: buckets 16, 32 and 64, each a pair of twin arenas.
    assert stats["allocations"] <= 6 and stats["captures"] <= 6
    assert stats["graph_updates"] == 40 - stats["captures"]
    assert "a CUDA graph per shape bucket" in runtime.describe()
    runtime.close()


def test_bucketed_decode_on_a_gpu_copies_and_allocates_nothing_per_token(decoder) -> None:
    _, exe = decoder
    drv = RecordingDriver()
    runtime = Runtime(exe.module, CudaDevice(driver=drv), buckets="pow2")
    _, cache = _decode(runtime, 20)  # past lengths 0..19: into the 32 bucket
    drv.reset()
    before = dict(runtime.stats)
    _decode(runtime, 8, seed=1, cache=cache)  # past lengths 20..27: the same bucket
    calls, stats = drv.calls, runtime.stats
    assert calls["cuMemcpyHtoDAsync"] == 8 and calls["cuMemcpyHtoDAsync:bytes"] == 8 * D * 4  # x only
    assert calls["cuMemcpyDtoDAsync"] == 0 and calls["cuMemcpyDtoHAsync"] == 0  # the cache read in place
    assert calls["cuMemAlloc"] == 0 and calls["cuGraphInstantiate"] == 0
    # Per token the graph sets the kernel nodes of the 5 launches bound again (below):
    # no capture, no whole-graph update.
    assert calls["cuGraphExecKernelNodeSetParams"] == 8 * 5 and calls["cuGraphLaunch"] == 8
    assert calls["cuStreamBeginCapture"] == 0 and calls["cuGraphExecUpdate"] == 0
    # 8 kernels a token: two GEMMs, two embedding kernels, two cache concatenations, the
    # mask and one attention (masked_fill's -1e9 fused, Q read in place; was 11).
    assert len(drv.launches) == 8 * 8 and all(launch.get("graph") for launch in drv.launches)  # no eager launch
    assert stats["graph_updates"] - before["graph_updates"] == 8
    assert stats["graph_node_updates"] - before["graph_node_updates"] == 8
    # Binding a new past length copies the launches whose tensors did not change (the two
    # GEMMs and the token embedding: 3 a token); the 5 that read the cache or its length
    # are bound again.
    assert stats["launches_reused"] - before["launches_reused"] == 8 * 3
    # Past / present lengths rounded: (16, 16) for past 0..15, (16, 32) for past 16, then
    # (32, 32): twin arenas for the first and last (each step reads the other's cache).
    assert len(runtime.pool.arenas) == 5 and stats["allocations"] == 5
    runtime.close()
    assert set(drv.live()) <= {"contexts"}  # arenas and graphs freed


def test_a_new_past_length_binds_only_what_follows_it(decoder, monkeypatch) -> None:
    """A step binds from the signature bound before it: only the ops that read the grown
    cache (or a length computed from it) are evaluated again, and calls whose tensors did
    not change copy the arena's previous launches; what comes out is the bind from nothing."""
    _, exe = decoder
    runtime = Runtime(exe.module, CudaDevice(driver=RecordingDriver()), buckets="pow2")
    _, cache = _decode(runtime, 18)
    ops = len(runtime.plan.stages[0])
    before = runtime.stats["ops_bound"]
    _decode(runtime, 4, seed=1, cache=cache)
    per_token = (runtime.stats["ops_bound"] - before) / 4
    assert 0 < per_token < ops / 2, (per_token, ops)  # 14 of 31 here
    # the key and value concatenations are one function at one shape: bound once, the
    # other's launch copied with its pointers patched in
    assert runtime.stats["launches_patched"] >= 4, dict(runtime.stats)

    bound = next(reversed(runtime._bound.values()))  # the last step's plan, bound from the one before
    bound.read_inputs_from_slots()  # as bound: the cache's pointers are patched in per run
    arena = bound.shared
    arena.latest = None  # nothing to copy launches from
    facts = runtime.plan.facts
    facts.launches.clear()
    facts.templates.clear()
    monkeypatch.setattr(plan_bind, "_pointer_slots", lambda *args: None)  # every call bound by its kernel's bind
    fresh = runtime.plan.bind(bound.signature, runtime.stats, pool=runtime.pool, avoid=bound.avoid)
    assert fresh.shared is arena
    assert fresh.shapes == bound.shapes and fresh.workspaces == bound.workspaces
    assert [(s.grid, s.params) for s in fresh.steps] == [(s.grid, s.params) for s in bound.steps]
    fresh.close()
    runtime.close()


def test_bound_plans_share_the_launches_no_run_patches(decoder) -> None:
    """A launch a run never writes (its call reads no argument) is shared between the plans
    bound to it; a call reading an argument gets each plan its own copies, since a run
    patches the device input's pointer into them: patching one plan leaves the other's."""
    _, exe = decoder
    runtime = Runtime(exe.module, CudaDevice(driver=RecordingDriver()), buckets="pow2")
    _decode(runtime, 20)
    plans = list(runtime._bound.values())
    older, newer = plans[-3], plans[-1]  # two tokens apart: the same arena, other lengths
    assert older.shared is newer.shared and older.signature != newer.signature
    facts = runtime.plan.facts.calls
    steps = dict(zip(newer.steps, newer.step_ops))
    shared = [s for s in older.steps if s in steps]
    assert shared and all(not facts[steps[s]].reads_arguments for s in shared)
    patched = [(k, op) for k, op in enumerate(newer.step_ops) if facts[op].reads_arguments]
    assert patched  # the cache concatenations read past_key / past_value
    index = next(i for i, arg in enumerate(runtime.plan.block.args) if arg.name_hint == "past_key")
    launch, _ = newer.patches[index][0]
    before, own = [s.params for s in older.steps], launch.params
    assert newer.point_input(index, newer.bound_inputs[index] + 256)
    assert launch.params != own  # patched in place
    assert [s.params for s in older.steps] == before  # the other plan's launches as bound
    runtime.close()


def test_exact_signatures_bind_and_instantiate_every_token(decoder) -> None:
    """The baseline the buckets replace."""
    _, exe = decoder
    drv = RecordingDriver()
    runtime = Runtime(exe.module, CudaDevice(driver=drv))
    _decode(runtime, 6)
    assert drv.calls["cuMemAlloc"] >= 6 and drv.calls["cuGraphExecUpdate"] == 0
    runtime.close()


def _feedback_model(path: Path) -> list[np.ndarray]:
    """``y = relu(x @ w0) @ w1 @ w2 + x`` on a dynamic batch: ``y`` fed back as ``x``."""
    rng = np.random.default_rng(2)
    ws = [(rng.standard_normal((16, 16)) * 0.2).astype(np.float32) for _ in range(3)]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("MatMul", ["r", "w1"], ["b"]), helper.make_node("MatMul", ["b", "w2"], ["c"]),
             helper.make_node("Add", ["c", "x"], ["y"])]
    graph = helper.make_graph(nodes, "feedback", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 16])],
                              [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(ws)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return ws


@pytest.fixture(scope="module")
def feedback(tmp_path_factory) -> tuple[list[np.ndarray], partita.Executable]:
    path = tmp_path_factory.mktemp("feedback") / "feedback.onnx"
    ws = _feedback_model(path)
    return ws, partita.compile(str(path))


def test_an_output_fed_back_is_read_from_the_twin_arena(feedback) -> None:
    ws, exe = feedback
    x = np.random.default_rng(3).standard_normal((5, 16)).astype(np.float32)
    runtime = Runtime(exe.module, "simulated", buckets="pow2")  # the values
    want, value = x, x
    for _ in range(5):
        want = np.maximum(want @ ws[0], 0) @ ws[1] @ ws[2] + want
        (value,) = runtime.run(value, outputs="device")
        np.testing.assert_allclose(value.numpy(), want, rtol=1e-4, atol=1e-4)
    runtime.close()

    drv = RecordingDriver()  # where a GPU's run reads and writes
    runtime = Runtime(exe.module, CudaDevice(driver=drv), buckets="pow2")
    value, arenas = x, []
    for _ in range(5):
        (out,) = runtime.run(value, outputs="device")
        (bound,) = [b for b in runtime._bound.values() if b.outputs[0].ptr == out.ptr]
        if value is not x:
            assert not bound.shared.holds(value.ptr) and bound.inputs[0].ptr != value.ptr  # read in place ...
            assert bound.bound_inputs[0] == value.ptr  # ... by the kernels, from the twin arena
        arenas.append(bound.shared)
        value = out
    assert arenas[1] is not arenas[2] and arenas[1] is arenas[3] and arenas[2] is arenas[4]
    assert runtime.stats["allocations"] == 2 and runtime.stats["binds"] == 2  # one signature, two arenas
    assert drv.calls["cuMemcpyDtoDAsync"] == 0
    runtime.close()


def _exec_launches(drv: RecordingDriver, runtime: Runtime, bound) -> list[tuple]:
    """What the executable of ``bound``'s arena graph launches, per kernel node: its kernel,
    grid, block, shared memory and the argument bytes the node copied (at the capture or
    when it was set), beside the same of ``bound``'s steps now."""
    records = drv._execs[bound.shared.graph.executable[1]]
    assert len(records) == len(bound.steps)
    held, want = [], []
    for record, step in zip(records, bound.steps):
        assert record["arguments"] is not None  # the cubins' parameters are known
        held.append((record["name"], record["grid"], record["block"], record["smem"], record["arguments"]))
        want.append((step.function.name, step.grid, step.block, step.smem,
                     drv.arguments(step.function.handle, step._address)))
    return held, want


def test_a_graph_set_node_by_node_launches_what_the_signature_binds(decoder) -> None:
    """After per-node updates the executable launches exactly the steps of the signature
    that runs: every kernel, grid and argument byte, those set and those kept."""
    _, exe = decoder
    drv = RecordingDriver()
    runtime = Runtime(exe.module, CudaDevice(driver=drv), buckets="pow2")
    rng = np.random.default_rng(4)
    past = np.zeros((1, H, 0, HD), np.float32)
    key, value = past, past
    for t in range(7):  # past lengths 0..6: one bucket, twin arenas alternating
        before = drv.calls["cuGraphExecKernelNodeSetParams"]
        x = rng.standard_normal((1, 1, D)).astype(np.float32)
        _, key, value = runtime.run(x=x, past_key=key, past_value=value, outputs="device")
        bound = next(reversed(runtime._bound.values()))
        if bound.shared.graph is not None and runtime.stats["graph_node_updates"]:
            held, want = _exec_launches(drv, runtime, bound)
            assert held == want, f"token {t}"
    assert runtime.stats["graph_node_updates"] >= 3 and drv.calls["cuGraphExecKernelNodeSetParams"] > before
    runtime.close()
    assert set(drv.live()) <= {"contexts"}


def test_a_refused_node_update_updates_the_whole_graph(decoder) -> None:
    _, exe = decoder
    drv = RecordingDriver(fail={"cuGraphExecKernelNodeSetParams": 1})
    runtime = Runtime(exe.module, CudaDevice(driver=drv), buckets="pow2")
    _, cache = _decode(runtime, 6)
    assert drv.calls["cuGraphExecKernelNodeSetParams"] >= 4 and runtime.stats["graph_node_updates"] == 0
    assert drv.calls["cuGraphExecUpdate"] == runtime.stats["graph_updates"] >= 4
    bound = next(reversed(runtime._bound.values()))
    held, want = _exec_launches(drv, runtime, bound)
    assert held == want
    # Once the driver takes them again, nodes are set in the executables the whole updates
    # kept: still named by the graphs they were instantiated from.
    drv.fail.clear()
    _decode(runtime, 4, seed=1, cache=cache)
    assert runtime.stats["graph_node_updates"] == 4
    held, want = _exec_launches(drv, runtime, next(reversed(runtime._bound.values())))
    assert held == want
    runtime.close()
    assert set(drv.live()) <= {"contexts"}


def test_a_refused_graph_update_instantiates_again(decoder) -> None:
    _, exe = decoder
    drv = RecordingDriver(fail={"cuGraphExecKernelNodeSetParams": 1, "cuGraphExecUpdate": 910})
    runtime = Runtime(exe.module, CudaDevice(driver=drv), buckets="pow2")
    _decode(runtime, 6)
    assert drv.calls["cuGraphExecUpdate"] >= 4 and runtime.stats["graph_updates"] == 0
    # The first run's capture, then an instantiation for each later token.
    assert drv.calls["cuGraphInstantiate"] == runtime.stats["captures"] == 6
    runtime.close()
    assert set(drv.live()) <= {"contexts"}


def test_the_least_recently_used_arenas_are_freed(feedback) -> None:
    ws, exe = feedback
    runtime = Runtime(exe.module, "simulated", buckets="pow2", max_signatures=1)
    for n in (3, 20, 40, 70, 3):
        x = np.ones((n, 16), np.float32)
        (y,) = runtime.run(x)
        np.testing.assert_allclose(y, np.maximum(x @ ws[0], 0) @ ws[1] @ ws[2] + x, rtol=1e-4, atol=1e-4)
        assert len(runtime.pool.arenas) <= 2
    assert runtime.stats["arenas"] == 5  # the 16 bucket's arena was freed, then made again
    runtime.close()
    assert runtime.device.allocated_bytes == 0


def test_an_unknown_bucket_policy_is_refused_before_loading(feedback) -> None:
    _, exe = feedback
    device = SimulatedDevice()
    with pytest.raises(PartitaError, match="shape buckets must be None, 'pow2' or a function of a dim"):
        Runtime(exe.module, device, buckets="linear")
    assert device.counts["load_module"] == 0 and device.allocated_bytes == 0


def _recurrent_step(path: Path, batch: int | str = 4) -> None:
    """``state' = softmax(state @ W) @ W + x``: a recurrent cell whose new state is fed back."""
    w = numpy_helper.from_array((np.random.default_rng(3).standard_normal((64, 64)) * 0.1).astype(np.float32), "W")
    nodes = [helper.make_node("MatMul", ["state", "W"], ["t"]), helper.make_node("Softmax", ["t"], ["u"]),
             helper.make_node("MatMul", ["u", "W"], ["v"]), helper.make_node("Add", ["v", "x"], ["next"])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, 64]) for n in ("state", "x", "next")]
    graph = helper.make_graph(nodes, "cell", io[:2], io[2:], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("buckets", [None, "pow2"], ids=["exact-eager", "buckets"])
def test_an_output_in_the_static_arena_fed_back_is_copied_not_read_in_place(tmp_path: Path, buckets) -> None:
    """A step of static shapes keeps its output in the plan's static arena, which every
    run writes. Fed back, it is copied into its input slot (a kernel reading it in place
    would read what the same run overwrites)."""
    _recurrent_step(tmp_path / "cell.onnx")
    exe = partita.compile(str(tmp_path / "cell.onnx"))
    drv = RecordingDriver()
    runtime = Runtime(exe.module, CudaDevice(driver=drv), graphs=False, buckets=buckets)
    x = np.zeros((4, 64), np.float32)
    (state,) = runtime.run(state=x, x=x, outputs="device")
    assert runtime.plan.holds(state.ptr)
    drv.reset()
    runtime.run(state=state, x=x, outputs="device")
    assert drv.calls["cuMemcpyDtoDAsync"] == 1 and drv.calls["cuMemcpyDtoDAsync:bytes"] == x.nbytes
    (bound,) = runtime._bound.values()
    assert state.ptr not in bound.bound_inputs  # the kernels read the slot
    runtime.close()


def test_an_output_fed_back_into_its_own_signature_runs_in_the_twin(tmp_path: Path) -> None:
    """With a dynamic batch the new state lies in the signature's own arena, where the
    planner may put the first GEMM's result: read in place there, the GEMM would read what
    it writes. The signature is bound a second time (its twin) and the two alternate, each
    reading the other's output in place."""
    _recurrent_step(tmp_path / "cell.onnx", "batch")
    exe = partita.compile(str(tmp_path / "cell.onnx"))
    drv = RecordingDriver()
    runtime = Runtime(exe.module, CudaDevice(driver=drv), graphs=False)
    x = np.zeros((4, 64), np.float32)
    (state,) = runtime.run(state=x, x=x, outputs="device")
    first = next(iter(runtime._bound.values()))
    assert sum(p == state.ptr for p in first.pointers.values()) == 2  # the state shares the GEMM's bytes
    drv.reset()
    (after,) = runtime.run(state=state, x=x, outputs="device")
    twin = runtime._bound[(runtime._signature([state, x], {}), 1)]
    assert twin is not first and not twin.holds(state.ptr) and state.ptr in twin.bound_inputs  # read in place
    assert drv.calls["cuMemcpyDtoDAsync"] == 0
    runtime.run(state=after, x=x, outputs="device")  # back to the first
    assert first.holds(after.ptr) is False and after.ptr in first.bound_inputs
    assert runtime.stats["binds"] == 2
    runtime.close()


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="no CUDA device")
def test_a_bucketed_decode_loop_on_the_gpu_sets_kernel_nodes_and_matches_the_simulated_device(decoder) -> None:
    """On the device: kernel nodes set in the arena graphs per token, results those of the
    simulated device's run of the same plan."""
    _, exe = decoder
    simulated = Runtime(exe.module, "simulated", buckets="pow2")
    want, _ = _decode(simulated, 24)
    simulated.close()
    runtime = Runtime(exe.module, "cuda", buckets="pow2")
    got, _ = _decode(runtime, 24)
    for t, ((_, a), (_, b)) in enumerate(zip(got, want)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"token {t}")
    assert runtime.stats["graph_node_updates"] >= 16, dict(runtime.stats)
    runtime.close()
