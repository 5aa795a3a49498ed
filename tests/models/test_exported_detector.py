"""A detector as torchvision exports it (``tests/models/export_models.py``:
``faster_rcnn_tiny``; this test needs no torch): ``FasterRCNN`` over a small FPN backbone,
with region proposals kept by NMS per level, the first 1,000 of them (fewer are kept: a
slice clamped to what the run found), multi-scale RoIAlign with its level mapping and
ScatterElements, box decoding and per-class NMS, exported by the TorchScript exporter at
opset 17. Compiled with the default targets, the plan stops where sizes are data-dependent
(NonZero, NonMaxSuppression, the If that guards an empty NMS), reads the sizes back, binds
the rest, and every image's detections match onnxruntime's. The same detector exported with
a dynamic image height and width (``faster_rcnn_dynamic.onnx``) runs images of three sizes
through one compile."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import partita
from partita.dialects import nn

ort = pytest.importorskip("onnxruntime")

MODEL = Path(__file__).resolve().parent / "exported_detection" / "faster_rcnn.onnx"
SAMPLES = dict(np.load(MODEL.with_suffix(".npz")))
DYNAMIC = MODEL.with_name("faster_rcnn_dynamic.onnx")


@pytest.fixture(scope="module")
def exe(kernel_cache: Path) -> partita.Executable:
    return partita.compile(str(MODEL), cache_dir=kernel_cache)


def _matches_onnxruntime(exe: partita.Executable, model: Path) -> list[int]:
    """Each sample's detections against onnxruntime's; the number of each."""
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    found = []
    for name, image in np.load(model.with_suffix(".npz")).items():
        boxes, labels, scores = exe.run(image)
        want_boxes, want_labels, want_scores = session.run(None, {"image": image})
        assert boxes.shape == want_boxes.shape and labels.dtype == want_labels.dtype, name
        np.testing.assert_array_equal(labels, want_labels, err_msg=name)
        np.testing.assert_allclose(boxes, want_boxes, rtol=1e-4, atol=1e-3, err_msg=name)  # pixels of a 64x64 image
        np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-6, err_msg=name)
        found.append(len(boxes))
    return found


def test_every_image_matches_onnxruntime(exe) -> None:
    found = _matches_onnxruntime(exe, MODEL)
    assert len(set(found)) > 1 and 0 < min(found), f"detections per image {found}: sizes the runs decide"


def test_images_of_any_size_through_one_compile(kernel_cache: Path) -> None:
    """The transform's resize to ``min_size``, the FPN's upsampling to the next level's size
    and the RPN's per-level split of its anchors follow the image: their sizes are read
    when the plan binds (``nn.dyn``, host steps); the convolutions after them are kernels
    of run-time height and width; 64x64, 48x80 and 100x72 images match onnxruntime."""
    exe = partita.compile(str(DYNAMIC), cache_dir=kernel_cache)
    assert {"resize", "split"} <= {op.kind for op in exe.module.walk() if isinstance(op, nn.DynOp)}
    # the convolutions, pools and RoIAlign read the image's size as run-time dims: kernels
    assert set(exe.runtime.plan.host_ops) == {"nn.dyn", "nn.nonzero", "nn.non_max_suppression", "nn.choose"}
    found = _matches_onnxruntime(exe, DYNAMIC)
    assert 0 < min(found), f"detections per image {found}"


def test_the_plan_stops_where_a_run_decides_the_sizes(exe) -> None:
    """Only the data-dependent selections run on the host (at stage boundaries); every
    convolution, RoIAlign, box decoding and slice of what they kept is a device kernel."""
    plan = exe.runtime.plan
    assert set(plan.host_ops) == {"nn.nonzero", "nn.non_max_suppression", "nn.choose"}
    first = [op.name for op in (ops[0] for ops in plan.stages[1:])]
    assert first.count("nn.non_max_suppression") == 2 and "nn.nonzero" in first  # proposals, then detections
    kept = [op for op in exe.module.walk() if isinstance(op, nn.StridedSliceOp) and op.clamped]
    assert kept and all(op.result.type.get_shape()[0] == nn.DYN for op in kept)  # [:1000] of what NMS kept


def test_an_image_of_known_sizes_binds_nothing_again(exe) -> None:
    """Each stage is bound once per distinct size it is given: a second run of an image
    reads the sizes back at every boundary and binds nothing new."""
    runtime = exe.runtime
    image = SAMPLES["image0"]
    exe.run(image)
    binds, reads = runtime.stats["binds"], runtime.stats["sizing_reads"]
    exe.run(image)
    assert runtime.stats["binds"] == binds
    assert runtime.stats["sizing_reads"] - reads == len(runtime.plan.stages) - 1
