"""Results whose size depends on values the plan computes (NonZero, Compress, Unique,
NonMaxSuppression; a Reshape / TopK / ReduceSum sized by a computed tensor): the launch plan
is cut into stages there; each stage is bound once per distinct size read back from the
device, and the kernels after it see an ordinary dynamic dim."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py

import partita
from partita.ir import PartitaError
from partita.runtime.cuda import CudaDevice

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes, inputs, outputs, opset=18):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _onnxruntime(model, *args):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {i.name: a for i, a in zip(session.get_inputs(), args)})


# NonZero feeding kernels: x * 2 at the selected places, then a sum over them.
SELECT = _model(
    [helper.make_node("Relu", ["x"], ["r"]),
     helper.make_node("NonZero", ["r"], ["i"]),
     helper.make_node("Transpose", ["i"], ["t"]),
     helper.make_node("GatherND", ["x", "t"], ["picked"]),
     helper.make_node("Mul", ["picked", "two"], ["y"]),
     helper.make_node("ReduceSum", ["y"], ["s"], keepdims=0)],
    [("x", F, [4, 5]), ("two", F, [])], [("t", I64), ("y", F), ("s", F)])


def _inputs(count: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = -np.abs(rng.standard_normal((4, 5))).astype(np.float32)
    x.flat[rng.choice(20, count, replace=False)] *= -1
    return [x, np.array(2.0, np.float32)]


@pytest.fixture(scope="module")
def select() -> partita.Executable:
    return partita.compile(SELECT)


def test_nonzero_sizes_the_kernels_after_it(select):
    for count, seed in ((7, 0), (1, 1), (7, 2), (20, 3), (0, 4)):
        args = _inputs(count, seed)
        got = select.run(*args)
        want = _onnxruntime(SELECT, *args)
        assert got[0].shape == (count, 2)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_each_size_binds_the_following_stage_once(select):
    runtime = select.runtime
    assert len(runtime.plan.stages) == 2
    binds = runtime.stats["binds"]
    select.run(*_inputs(5, 10))
    select.run(*_inputs(5, 11))  # same count, other places: the bound stage is reused
    assert runtime.stats["binds"] == binds + 1
    select.run(*_inputs(6, 12))
    assert runtime.stats["binds"] == binds + 2
    # One read-back a run (the stage boundary), not one per op after it.
    reads = runtime.stats["sizing_reads"]
    select.run(*_inputs(6, 13))
    assert runtime.stats["sizing_reads"] == reads + 1


def test_stages_run_on_a_cuda_device_and_free_what_they_bound():
    """On the recording driver (kernels do not run there, copies do): NonZero of a graph
    input is sized by the input's real bytes, read back once per run after a
    synchronization; the kernels after it are bound to that size."""
    model = _model(
        [helper.make_node("NonZero", ["x"], ["i"]),
         helper.make_node("Transpose", ["i"], ["t"]),
         helper.make_node("GatherND", ["x", "t"], ["picked"]),
         helper.make_node("Mul", ["picked", "two"], ["y"])],
        [("x", F, [4, 5]), ("two", F, [])], [("t", I64), ("y", F)])
    drv = RecordingDriver()
    runtime = partita.compile(model).load(CudaDevice(driver=drv))
    for count, seed in ((3, 20), (9, 21), (3, 22)):
        reads, syncs = drv.calls["cuMemcpyDtoHAsync:bytes"], drv.calls["cuStreamSynchronize"]
        x, two = _inputs(count, seed)
        t, y = runtime.run(np.maximum(x, 0), two)
        assert t.shape == (count, 2) and y.shape == (count,)
        # x's 80 bytes at the boundary, then the outputs; a synchronization before each read.
        assert drv.calls["cuMemcpyDtoHAsync:bytes"] - reads == 80 + t.nbytes + y.nbytes
        assert drv.calls["cuStreamSynchronize"] - syncs >= 2
    assert runtime.stats["binds"] == 3  # the first stage once, the second once per count
    assert drv.calls["cuLaunchKernel"] == 3 * 2  # transpose, gather * 2 in each run
    # Host steps (NonZero) keep this plan eager: no graph was captured.
    assert drv.calls["cuStreamBeginCapture"] == 0
    runtime.close()
    assert "memory" not in drv.live()


def test_the_stage_after_a_boundary_is_timed_by_the_profile(select):
    profile = select.profile(*_inputs(4, 30), repeat=2)
    labels = [step.label for step in profile.steps]
    assert "nn.nonzero" in labels
    assert labels.index("nn.nonzero") < len(labels) - 1  # kernels of the second stage follow it


def test_compress_unique_and_non_max_suppression_match_onnxruntime():
    model = _model(
        [helper.make_node("Constant", [], ["one"], value=helper.make_tensor("one", I64, [1], [1])),
         helper.make_node("ReduceMax", ["x", "one"], ["m"], keepdims=0),
         helper.make_node("Greater", ["m", "zero"], ["rows"]),
         helper.make_node("Compress", ["x", "rows"], ["c"], axis=0),
         helper.make_node("Compress", ["x", "rows"], ["flat"]),
         helper.make_node("Unique", ["ids"], ["u", "first", "inverse", "counts"], sorted=0),
         helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "score"], ["kept"])],
        [("x", F, [5, 3]), ("zero", F, []), ("ids", I64, [8]), ("boxes", F, [1, 6, 4]), ("scores", F, [1, 2, 6]),
         ("limit", I64, [1]), ("iou", F, [1]), ("score", F, [1])],
        [("c", F), ("flat", F), ("u", I64), ("first", I64), ("inverse", I64), ("counts", I64), ("kept", I64)])
    exe = partita.compile(model)
    rng = np.random.default_rng(5)
    for trial in range(3):
        corner = rng.uniform(0, 4, (1, 6, 2)).astype(np.float32)
        boxes = np.concatenate([corner, corner + rng.uniform(0.5, 2, (1, 6, 2)).astype(np.float32)], axis=2)
        args = [rng.standard_normal((5, 3)).astype(np.float32), np.array(0.3 * trial, np.float32),
                rng.integers(0, 4, 8).astype(np.int64), boxes, rng.uniform(0, 1, (1, 2, 6)).astype(np.float32),
                np.array([3], np.int64), np.array([0.3], np.float32), np.array([0.2], np.float32)]
        for got, want in zip(exe.run(*args), _onnxruntime(model, *args), strict=True):
            assert got.shape == want.shape
            np.testing.assert_array_equal(got, want)


def test_a_size_computed_in_the_plan_is_read_back():
    """Reshape and TopK parameterized by computed tensors (no graph input gives them)."""
    model = _model(
        [helper.make_node("Cast", ["mask"], ["ones"], to=I64),
         helper.make_node("Constant", [], ["axis0"], value=helper.make_tensor("axis0", I64, [1], [0])),
         helper.make_node("ReduceSum", ["ones", "axis0"], ["k"], keepdims=1),
         helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1),
         helper.make_node("Concat", ["k", "minus1"], ["shape"], axis=0),
         helper.make_node("Reshape", ["v", "shape"], ["r"])],
        [("x", F, [2, 6]), ("mask", B, [6]), ("minus1", I64, [1])], [("r", F), ("i", I64)])
    exe = partita.compile(model)
    x = np.array([[5, 1, 4, 2, 6, 3], [0, 9, 8, 7, 1, 2]], np.float32)
    for kept in (3, 1, 3, 6):
        mask = np.arange(6) < kept
        args = [x, mask, np.array([-1], np.int64)]
        for got, want in zip(exe.run(*args), _onnxruntime(model, *args), strict=True):
            np.testing.assert_array_equal(got, want)
    assert exe.runtime.stats["sizing_reads"] >= 4


def test_a_bad_size_read_back_is_a_located_error():
    model = _model([helper.make_node("Neg", ["s"], ["t"]), helper.make_node("Tile", ["x", "t"], ["y"])],
                   [("x", F, [2, 3]), ("s", I64, [2])], [("y", F)])
    exe = partita.compile(model)
    (y,) = exe.run(np.ones((2, 3), np.float32), np.array([-2, -1], np.int64))
    assert y.shape == (4, 3)
    with pytest.raises(PartitaError, match=r"nn\.dyn.*"):
        exe.run(np.ones((2, 3), np.float32), np.array([2, 1], np.int64))  # repeats -2, -1


def test_a_size_divided_by_an_empty_selection_is_a_located_error():
    """``Reshape(hits, [-1, k])`` of the 2k x 2 rows of k NonZero hits: with none, the -1
    is 0 / 0, named at the Reshape (not an error from inside the shape arithmetic)."""
    n = helper.make_node
    model = _model([n("NonZero", ["x"], ["i"]), n("Transpose", ["i"], ["t"]), n("Concat", ["t", "t"], ["tt"], axis=0),
                    n("Cast", ["tt"], ["f"], to=F), n("Shape", ["t"], ["s"]), n("Gather", ["s", "zero"], ["k"], axis=0),
                    n("Unsqueeze", ["k", "axis"], ["k1"]), n("Concat", ["m1", "k1"], ["target"], axis=0),
                    n("Reshape", ["f", "target"], ["r"]), n("Relu", ["r"], ["y"])],
                   [("x", F, [3, 4])], [("y", F)])
    model.graph.initializer.extend([numpy_helper.from_array(np.array(0), "zero"),
                                    numpy_helper.from_array(np.array([0]), "axis"),
                                    numpy_helper.from_array(np.array([-1]), "m1")])
    exe = partita.compile(model)
    assert exe.run(np.eye(3, 4, dtype=np.float32))[0].shape == (4, 3)
    with pytest.raises(PartitaError, match=r"node 8 'r' \(Reshape\).*divided by zero"):
        exe.run(np.zeros((3, 4), np.float32))


def _detector(classes: int = 3, seed: int = 0):
    """An SSD-style detector: a strided conv backbone, class and box heads over an 8x8 grid
    of anchors, box decoding, NonMaxSuppression, and the kept boxes, scores and classes
    gathered by its selection (random weights)."""
    rng = np.random.default_rng(seed)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    cells = np.stack(np.meshgrid(np.arange(8), np.arange(8), indexing="ij"), -1).reshape(64, 2) / 8.0
    anchors = np.concatenate([cells, cells + 0.25], axis=1)[None].astype(np.float32)  # y1 x1 y2 x2
    inits = [weight("w1", 8, 3, 3, 3), weight("w2", 8, 8, 3, 3), weight("wc", classes, 8, 1, 1),
             weight("wb", 4, 8, 1, 1), numpy_helper.from_array(anchors, "anchors"),
             numpy_helper.from_array(np.array([1, classes, 64], np.int64), "score_shape"),
             numpy_helper.from_array(np.array([1, 4, 64], np.int64), "box_shape"),
             numpy_helper.from_array(np.array(0.1, np.float32), "scale"),
             numpy_helper.from_array(np.array([5], np.int64), "limit"),
             numpy_helper.from_array(np.array([0.4], np.float32), "iou"),
             numpy_helper.from_array(np.array([0.55], np.float32), "min_score"),
             numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(2, np.int64), "two")]
    n = helper.make_node
    nodes = [
        n("Conv", ["image", "w1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]), n("Relu", ["c1"], ["r1"]),
        n("Conv", ["r1", "w2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1]), n("Relu", ["c2"], ["r2"]),
        n("Conv", ["r2", "wc"], ["logits"]), n("Reshape", ["logits", "score_shape"], ["flat_logits"]),
        n("Sigmoid", ["flat_logits"], ["scores"]),
        n("Conv", ["r2", "wb"], ["deltas"]), n("Reshape", ["deltas", "box_shape"], ["flat_deltas"]),
        n("Transpose", ["flat_deltas"], ["box_deltas"], perm=[0, 2, 1]),
        n("Mul", ["box_deltas", "scale"], ["shift"]), n("Add", ["anchors", "shift"], ["boxes"]),
        n("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "min_score"], ["selected"]),
        n("Gather", ["selected", "two"], ["box_index"], axis=1),
        n("Gather", ["selected", "one"], ["classes"], axis=1),
        n("Gather", ["boxes", "zero"], ["image_boxes"], axis=0),
        n("Gather", ["image_boxes", "box_index"], ["detected"], axis=0),
        n("GatherND", ["scores", "selected"], ["detected_scores"]),
    ]
    graph = helper.make_graph(
        nodes, "detector", [helper.make_tensor_value_info("image", F, [1, 3, 32, 32])],
        [helper.make_tensor_value_info(v, t, None)
         for v, t in (("detected", F), ("detected_scores", F), ("classes", I64))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_detector_runs_end_to_end():
    model = _detector()
    exe = partita.compile(model, partitioner="collage")
    rng = np.random.default_rng(1)
    counts = set()
    for _ in range(3):
        image = rng.standard_normal((1, 3, 32, 32)).astype(np.float32)
        got = exe.run(image)
        want = _onnxruntime(model, image)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
        counts.add(got[0].shape[0])
    assert counts - {0}  # some boxes were kept
    # The convolutions ran as kernels before the boundary; NMS is the one host step.
    assert exe.runtime.plan.host_ops and all("non_max_suppression" in h for h in exe.runtime.plan.host_ops)
    assert "2 stages: sizes known only at run time are read back before nn.non_max_suppression" in \
        exe.runtime.describe()
