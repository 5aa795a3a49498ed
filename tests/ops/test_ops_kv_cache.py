"""TensorScatter (opset 24), a KV cache's update: ``nn.tensor_scatter``'s native kernel
built for the host against onnxruntime (linear and circular, either axis, f16 moved
exactly), rows written past the end dropped as the reference drops them, and a
fixed-capacity ("static") cache decoded step by step end to end."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from frontends.test_kv_cache_import import attention_nodes  # the decoder step's attention
from onnx import TensorProto, helper, numpy_helper
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from xdsl.dialects import func
from xdsl.ir import BlockArgument
from xdsl.passes import PassPipeline

import partita
from partita.dialects import byoc, make_context
from partita.dialects.byoc import tied_operand
from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError
from partita.runtime.reference import run as run_reference
from partita.transforms import get_all_passes

ONNX_OPS = ("TensorScatter",)

F32, F16, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64


def _scatter_model(cache: tuple, rows: int, axis: int = -2, mode: str = "linear", elem: int = F32,
                   indices: bool = True) -> onnx.ModelProto:
    update = list(cache)
    update[axis] = rows
    inputs = [helper.make_tensor_value_info("cache", elem, list(cache)),
              helper.make_tensor_value_info("update", elem, update)]
    if indices:
        inputs.append(helper.make_tensor_value_info("write", I64, [cache[0]]))
    node = helper.make_node("TensorScatter", [i.name for i in inputs], ["present"], axis=axis, mode=mode)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("present", elem, list(cache))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])


def _ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


IN_PLACE = "fuse-native-kernels,tie-in-place-updates"
"""The passes that make a scatter of an input nothing else reads write into that input."""


def _fused_in_place(model: onnx.ModelProto) -> list[func.FuncOp]:
    """The fused functions of ``model`` after ``IN_PLACE`` (each may carry a tied operand)."""
    module = import_onnx(model)
    PassPipeline.parse_spec(get_all_passes(), IN_PLACE).apply(make_context(), module)
    return [f for f in module.ops if isinstance(f, func.FuncOp) and f.sym_name.data != "main"]


def _host(model: onnx.ModelProto, inputs: list[np.ndarray], tmp_path, passes: str = "fuse-native-kernels"
          ) -> np.ndarray:
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    from support.kernel_harness import run_host_kernels  # tests/support/kernel_harness.py

    (got,), left = run_host_kernels(model, inputs, tmp_path, passes=passes)
    assert not left, left  # the scatter is a kernel
    return got


def _fresh(path):
    path.mkdir()
    return path


SCATTERS = [((2, 3, 8, 4), 1, -2, "linear", [0, 7]), ((2, 3, 8, 4), 3, -2, "linear", [5, 2]),
            ((2, 3, 8, 4), 3, -2, "circular", [6, 7]), ((3, 6, 5), 2, 1, "circular", [5, 0, 3]),
            ((2, 4, 3, 6), 2, 3, "linear", [4, 1])]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("cache, rows, axis, mode, write", SCATTERS,
                         ids=[f"{m}-axis{a}-rank{len(c)}-rows{r}" for c, r, a, m, _ in SCATTERS])
def test_tensor_scatter_kernel_against_onnxruntime(cache, rows, axis, mode, write, dtype, tmp_path) -> None:
    model = _scatter_model(cache, rows, axis, mode, F16 if dtype == np.float16 else F32)
    rng = np.random.default_rng(rows)
    past = rng.standard_normal(cache).astype(dtype)
    shape = list(cache)
    shape[axis] = rows
    update = rng.standard_normal(shape).astype(dtype)
    write = np.array(write, np.int64)
    got = _host(model, [past, update, write], tmp_path)
    (want,) = _ort(model, {"cache": past, "update": update, "write": write})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cache, rows, axis, mode, write", SCATTERS,
                         ids=[f"{m}-axis{a}-rank{len(c)}-rows{r}" for c, r, a, m, _ in SCATTERS])
def test_the_in_place_kernel_stores_the_update_alone(cache, rows, axis, mode, write, tmp_path) -> None:
    """Tied to the cache (``tie-in-place-updates``), the kernel writes the update's rows
    into the cache's own buffer and leaves every other element as it was: the harness
    hands it a copy of the cache as its output, which ends equal to onnxruntime's result."""
    model = _scatter_model(cache, rows, axis, mode, F16)
    assert [tied_operand(f) for f in _fused_in_place(model)] == [0]
    rng = np.random.default_rng(rows)
    past = rng.standard_normal(cache).astype(np.float16)
    shape = list(cache)
    shape[axis] = rows
    update = rng.standard_normal(shape).astype(np.float16)
    write = np.array(write, np.int64)
    got = _host(model, [past, update, write], tmp_path, IN_PLACE)
    (want,) = _ort(model, {"cache": past, "update": update, "write": write})
    np.testing.assert_array_equal(got, want)


def _cache_update_model(op_type: str, indices: list[int], elem: int, **attributes) -> onnx.ModelProto:
    """One scatter of a ``[2, 3, 8, 4]`` cache with an update of one row per head."""
    nodes = [helper.make_node(op_type, ["cache", "indices", "update"], ["present"], **attributes)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("cache", elem, [2, 3, 8, 4]),
                                           helper.make_tensor_value_info("indices", I64, indices),
                                           helper.make_tensor_value_info("update", elem, [2, 3, 1, 4])],
                              [helper.make_tensor_value_info("present", elem, [2, 3, 8, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _scatter_nd_model(reduction: str = "none", elem: int = F16) -> onnx.ModelProto:
    """A static cache's update as ``index_copy_`` exports it: ScatterND writing the new
    token's key at one ``(batch, head, position)`` tuple per head."""
    return _cache_update_model("ScatterND", [2, 3, 1, 3], elem, reduction=reduction)


@pytest.mark.parametrize("reduction", ["none", "add"])
def test_a_scatter_nd_update_in_place(reduction, tmp_path) -> None:
    """ScatterND (no reduction) of a cache nothing else reads is tied to it too: one
    thread per update element stores it at its index tuple (a negative position counted
    from the end); with a reduction it keeps its out-of-place kernel (each element walks
    the updates). Both equal onnxruntime (f16; onnxruntime adds in f32 only)."""
    dtype = np.float16 if reduction == "none" else np.float32
    model = _scatter_nd_model(reduction, F16 if reduction == "none" else F32)
    tied = [tied_operand(f) for f in _fused_in_place(model)]
    assert tied == ([0] if reduction == "none" else [None])
    rng = np.random.default_rng(3)
    cache = rng.standard_normal((2, 3, 8, 4)).astype(dtype)
    update = rng.standard_normal((2, 3, 1, 4)).astype(dtype)
    position = np.array([5, -1])  # batch 1 writes the last row
    b, h = np.meshgrid(np.arange(2), np.arange(3), indexing="ij")
    indices = np.stack([b, h, position[b]], axis=-1).reshape(2, 3, 1, 3).astype(np.int64)
    got = _host(model, [cache, indices, update], tmp_path, IN_PLACE)
    (want,) = _ort(model, {"cache": cache, "indices": indices, "update": update})
    np.testing.assert_array_equal(got, want)


def test_a_linear_write_past_the_end_is_dropped(tmp_path) -> None:
    """onnxruntime refuses it; the kernel must not write out of bounds, so the reference
    and the kernel drop the rows past the cache's end."""
    model = _scatter_model((2, 1, 4, 3), 2)
    past = np.zeros((2, 1, 4, 3), np.float32)
    update = np.ones((2, 1, 2, 3), np.float32)
    write = np.array([3, -1], np.int64)  # rows 3 (kept) and 4 (dropped); rows -1 (dropped) and 0
    (want,) = run_reference(import_onnx(model), past, update, write)
    for passes in ("fuse-native-kernels", IN_PLACE):  # gathered, and stored in place
        got = _host(model, [past, update, write], _fresh(tmp_path / passes.replace(",", "-")), passes)
        np.testing.assert_array_equal(got, want)
        assert got[0, 0, :, 0].tolist() == [0, 0, 0, 1] and got[1, 0, :, 0].tolist() == [1, 0, 0, 0]


def test_absent_write_indices_write_from_zero(tmp_path) -> None:
    model = _scatter_model((2, 2, 5, 3), 2, indices=False)
    rng = np.random.default_rng(0)
    past, update = rng.standard_normal((2, 2, 5, 3)).astype(np.float32), rng.standard_normal((2, 2, 2, 3)).astype(np.float32)
    exe = partita.compile(model)
    (got,) = exe.run(past, update)
    np.testing.assert_array_equal(got, _ort(model, {"cache": past, "update": update})[0])


def test_an_update_longer_than_the_cache_is_a_located_error() -> None:
    model = _scatter_model((2, 2, 3, 4), 3)
    model.graph.input[1].type.tensor_type.shape.dim[2].dim_value = 5
    with pytest.raises(PartitaError, match="the update holds 5 rows along axis 2, more than the cache's 3"):
        import_onnx(model)


def _scatter_elements_model(reduction: str = "none", elem: int = F16) -> onnx.ModelProto:
    """A static cache's update as the TorchScript exporter writes ``index_copy``:
    ScatterElements along the sequence axis, the position broadcast to the update's shape."""
    return _cache_update_model("ScatterElements", [2, 3, 1, 4], elem, axis=2, reduction=reduction)


@pytest.mark.parametrize("reduction", ["none", "max"])
def test_a_scatter_elements_update_in_place(reduction, tmp_path) -> None:
    """ScatterElements (no reduction) of a cache nothing else reads is tied to it: one
    thread per update element stores it at its index along the axis (negative: from the
    end); with a reduction it keeps its out-of-place kernel. Both equal onnxruntime."""
    dtype = np.float16 if reduction == "none" else np.float32
    model = _scatter_elements_model(reduction, F16 if reduction == "none" else F32)
    tied = [tied_operand(f) for f in _fused_in_place(model)]
    assert tied == ([0] if reduction == "none" else [None])
    rng = np.random.default_rng(4)
    cache = rng.standard_normal((2, 3, 8, 4)).astype(dtype)
    update = rng.standard_normal((2, 3, 1, 4)).astype(dtype)
    indices = np.broadcast_to(np.array([6, -2]).reshape(2, 1, 1, 1), (2, 3, 1, 4)).astype(np.int64)
    got = _host(model, [cache, indices, update], tmp_path, IN_PLACE)
    (want,) = _ort(model, {"cache": cache, "indices": indices, "update": update})
    np.testing.assert_array_equal(got, want)


def test_a_scatter_elements_update_read_through_views(tmp_path) -> None:
    """The update a head split of a packed projection (slice, reshape, transpose) and the
    indices the position broadcast (reshape, expand), as ``index_copy`` exports them: the
    in-place kernel reads both where they lie (the views join the scatter's kernel), equal
    to onnxruntime."""
    i64 = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [helper.make_node("Slice", ["proj", "start", "stop", "last"], ["v_flat"]),
             helper.make_node("Reshape", ["v_flat", "heads"], ["v_bshd"]),
             helper.make_node("Transpose", ["v_bshd"], ["v_new"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["position", "one4"], ["pos4"]),
             helper.make_node("Expand", ["pos4", "update_shape"], ["indices"]),
             helper.make_node("ScatterElements", ["cache", "indices", "v_new"], ["present"], axis=2)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("cache", F16, [1, 2, 8, 4]),
                                           helper.make_tensor_value_info("proj", F16, [1, 1, 16]),
                                           helper.make_tensor_value_info("position", I64, [1])],
                              [helper.make_tensor_value_info("present", F16, [1, 2, 8, 4])],
                              [i64("start", [8]), i64("stop", [16]), i64("last", [2]), i64("heads", [1, 1, 2, 4]),
                               i64("one4", [1, 1, 1, 1]), i64("update_shape", [1, 2, 1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (fused,) = _fused_in_place(model)
    tied = tied_operand(fused)
    assert tied is not None and fused.args[tied].type.get_shape() == (1, 2, 8, 4)  # the cache
    names = [o.name for o in fused.body.walk()]
    assert "nn.strided_slice" in names and "nn.broadcast_to" in names  # the operands' views joined
    rng = np.random.default_rng(8)
    cache = rng.standard_normal((1, 2, 8, 4)).astype(np.float16)
    proj = rng.standard_normal((1, 1, 16)).astype(np.float16)
    for position in (3, -1):
        got = _host(model, [cache, proj, np.array([position], np.int64)], _fresh(tmp_path / f"p{position + 1}"), IN_PLACE)
        (want,) = _ort(model, {"cache": cache, "proj": proj, "position": np.array([position], np.int64)})
        np.testing.assert_array_equal(got, want)


def _static_cache_step(path, update: str = "TensorScatter") -> dict[str, np.ndarray]:
    """One attention layer decoding into a fixed-capacity cache (a static KV cache): the
    new key and value are written at ``position`` (TensorScatter, ScatterND at the
    ``(batch, head, position)`` tuples, as ``index_copy_`` exports, or ScatterElements
    with the position broadcast, as ``index_copy`` exports), and the query attends
    to the cache's first ``position + 1`` rows (a mask from the position)."""
    D, H, HD, L = 8, 2, 4, 16
    rng = np.random.default_rng(5)
    weights = {f"w{n}": (rng.standard_normal((D, D)) * 0.3).astype(np.float32) for n in "qkvo"}
    inits = [numpy_helper.from_array(v, k) for k, v in weights.items()] + [
        numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
        [("heads", [1, 1, H, HD]), ("model", [1, 1, D]), ("slots", np.arange(L).reshape(1, 1, 1, L)),
         ("ax0", [0])]] + [numpy_helper.from_array(np.array(HD ** -0.5, np.float32), "scale"),
                           numpy_helper.from_array(np.array(-1e9, np.float32), "neg")]
    nodes = [helper.make_node("Unsqueeze", ["position", "ax0"], ["write"])]
    for n in "qkv":
        nodes += [helper.make_node("MatMul", ["x", f"w{n}"], [f"{n}_flat"]),
                  helper.make_node("Reshape", [f"{n}_flat", "heads"], [f"{n}_bshd"]),
                  helper.make_node("Transpose", [f"{n}_bshd"], [f"{n}_new"], perm=[0, 2, 1, 3])]
    if update == "TensorScatter":
        nodes += [helper.make_node("TensorScatter", ["key_cache", "k_new", "write"], ["present_key"]),
                  helper.make_node("TensorScatter", ["value_cache", "v_new", "write"], ["present_value"])]
    elif update == "ScatterElements":  # index_copy: the position broadcast to the update
        inits += [numpy_helper.from_array(np.array([1, H, 1, HD], np.int64), "update_shape"),
                  numpy_helper.from_array(np.array([1, 1, 1, 1], np.int64), "one4")]
        nodes += [helper.make_node("Reshape", ["position", "one4"], ["pos1"]),
                  helper.make_node("Expand", ["pos1", "update_shape"], ["rows"]),
                  helper.make_node("ScatterElements", ["key_cache", "rows", "k_new"], ["present_key"], axis=2),
                  helper.make_node("ScatterElements", ["value_cache", "rows", "v_new"], ["present_value"], axis=2)]
    else:  # the (0, h, position) tuple of each head
        heads = np.stack([np.zeros(H, np.int64), np.arange(H)], axis=-1).reshape(1, H, 1, 2)
        inits += [numpy_helper.from_array(heads, "bh"), numpy_helper.from_array(np.array([1, H, 1, 1], np.int64), "per_head"),
                  numpy_helper.from_array(np.array([1, 1, 1, 1], np.int64), "one4")]
        nodes += [helper.make_node("Reshape", ["position", "one4"], ["pos1"]),
                  helper.make_node("Expand", ["pos1", "per_head"], ["pos_h"]),
                  helper.make_node("Concat", ["bh", "pos_h"], ["tuples"], axis=-1),
                  helper.make_node("ScatterND", ["key_cache", "tuples", "k_new"], ["present_key"]),
                  helper.make_node("ScatterND", ["value_cache", "tuples", "v_new"], ["present_value"])]
    nodes += [
        helper.make_node("Greater", ["slots", "position"], ["hidden"]),  # rows not written yet
        *attention_nodes("present_key", "present_value", "hidden"),
    ]
    cache = [1, H, L, HD]
    graph = helper.make_graph(
        nodes, "static_cache_step",
        [helper.make_tensor_value_info("x", F32, [1, 1, D]), helper.make_tensor_value_info("position", I64, []),
         helper.make_tensor_value_info("key_cache", F32, cache), helper.make_tensor_value_info("value_cache", F32, cache)],
        [helper.make_tensor_value_info("out", F32, [1, 1, D]), helper.make_tensor_value_info("present_key", F32, cache),
         helper.make_tensor_value_info("present_value", F32, cache)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 24)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return {"D": D, "H": H, "HD": HD, "L": L}


@pytest.mark.parametrize("update", ["TensorScatter", "ScatterND", "ScatterElements"])
def test_a_static_kv_cache_decodes_with_one_graph(tmp_path, update) -> None:
    """Every step has the same shapes: one bound plan, one graph; the caches written by a
    kernel each step, fed back on the device; each step equal to onnxruntime's."""
    import onnxruntime as ort

    path = tmp_path / "step.onnx"
    dims = _static_cache_step(path, update)
    exe = partita.compile(str(path))
    assert not exe.runtime.plan.host_ops  # the scatters, the mask and the attention are kernels
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(6)
    cache = np.zeros((1, dims["H"], dims["L"], dims["HD"]), np.float32)
    key = value = cache
    want_key = want_value = cache
    for position in range(10):
        x = rng.standard_normal((1, 1, dims["D"])).astype(np.float32)
        feeds = {"x": x, "position": np.array(position, np.int64)}
        want, want_key, want_value = session.run(None, {**feeds, "key_cache": want_key, "value_cache": want_value})
        got, key, value = exe.run(**feeds, key_cache=key, value_cache=value, outputs="device")
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5, err_msg=f"position {position}")
    np.testing.assert_allclose(key.numpy(), want_key, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value.numpy(), want_value, rtol=1e-5, atol=1e-6)
    stats = exe.runtime.stats
    assert stats["binds"] == 1 and stats["captures"] == 1 and stats["allocations"] <= 1
    (bound,) = exe.runtime._bound.values()
    assert (key.ptr, value.ptr) == (bound.inputs[2].ptr, bound.inputs[3].ptr)  # written in place


@pytest.mark.parametrize("update, buckets", [("TensorScatter", None), ("TensorScatter", "pow2"), ("ScatterND", None),
                                             ("ScatterElements", None)])
def test_a_static_kv_cache_is_updated_in_place_and_never_copied(tmp_path, update, buckets) -> None:
    """The scatters are tied to the caches (``tie-in-place-updates``): each step's presents
    are the past's own buffers, so a decode loop feeding them back on the device uploads
    the token and its position and moves nothing else: no device copy, no allocation,
    one graph launch per step (on the recording driver, graphs on, either binding mode)."""
    from support.recording_driver import RecordingDriver

    from partita.runtime.cuda import CudaDevice
    from partita.runtime.plan import Runtime

    path = tmp_path / "step.onnx"
    dims = _static_cache_step(path, update)
    exe = partita.compile(str(path))
    in_place = [op for op in exe.module.walk() if isinstance(op, byoc.CallExternOp)
                and any(isinstance(out, BlockArgument) for out in op.outs)]
    assert len(in_place) == 2  # the two cache updates write the caches' own buffers
    drv = RecordingDriver()
    runtime = Runtime(exe.module, CudaDevice(driver=drv), buckets=buckets)
    key = value = np.zeros((1, dims["H"], dims["L"], dims["HD"]), np.float32)
    x = np.zeros((1, 1, dims["D"]), np.float32)
    _, key, value = runtime.run(x=x, position=np.array(0, np.int64), key_cache=key, value_cache=value,
                                outputs="device")
    slots = (key.ptr, value.ptr)
    drv.reset()
    for position in range(1, 6):
        _, key, value = runtime.run(x=x, position=np.array(position, np.int64), key_cache=key, value_cache=value,
                                    outputs="device")
        assert (key.ptr, value.ptr) == slots
    calls = drv.calls
    assert calls["cuMemcpyDtoDAsync"] == 0 and calls["cuMemAlloc"] == 0
    assert calls["cuMemcpyHtoDAsync"] == 2 * 5 and calls["cuMemcpyHtoDAsync:bytes"] == (x.nbytes + 8) * 5
    assert calls["cuGraphLaunch"] == 5 and runtime.stats["binds"] == 1
    runtime.close()


def test_an_update_computed_in_the_kernel(tmp_path) -> None:
    """A producer fused into the scatter's kernel (the update scaled) is computed at a row
    clamped into the update: the same values, no read past it."""
    model = _scatter_model((2, 2, 6, 3), 2, mode="circular")
    graph = model.graph
    graph.node[0].input[1] = "scaled"
    graph.node.insert(0, helper.make_node("Mul", ["update", "two"], ["scaled"]))
    graph.initializer.append(numpy_helper.from_array(np.array(2.0, np.float32), "two"))
    rng = np.random.default_rng(1)
    past, update = rng.standard_normal((2, 2, 6, 3)).astype(np.float32), rng.standard_normal((2, 2, 2, 3)).astype(np.float32)
    write = np.array([5, 1], np.int64)
    want = _ort(model, {"cache": past, "update": update, "write": write})[0]
    for passes in ("fuse-native-kernels", IN_PLACE):  # in place: computed where it is stored
        got = _host(model, [past, update, write], _fresh(tmp_path / passes.replace(",", "-")), passes)
        np.testing.assert_array_equal(got, want)
