"""DeformConv (opset 19): ``nn.deform_conv2d``'s native kernel built for the host and its
reference, both against onnx's reference implementation, over groups, offset groups, masks,
strides, dilations, padding and samples that leave the image; and end to end through
``partita.compile`` as one kernel."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from support.cuda_host import have_gxx  # tests/support/cuda_host.py

import partita
from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError

ONNX_OPS = ("DeformConv",)


def _model(x, w, offset, *, bias=False, mask=False, batch=None, **attrs) -> onnx.ModelProto:
    inputs = [("x", x), ("w", w), ("offset", offset)]
    if bias:
        inputs.append(("b", (w[0],)))
    if mask:
        inputs.append(("mask", (offset[0], offset[1] // 2, *offset[2:])))
    names = ["x", "w", "offset", "b" if bias else "", "mask" if mask else ""]
    while not names[-1]:
        names.pop()
    infos = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [batch, *s[1:]] if batch and n in ("x", "offset", "mask")
                                           else list(s)) for n, s in inputs]
    node = helper.make_node("DeformConv", names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", infos, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def _inputs(model: onnx.ModelProto, spread: float = 1.5, seed: int = 0) -> dict[str, np.ndarray]:
    """Values whose products and sums are exact in f32 (small integers, offsets and masks in
    quarters), so the kernel equals the reference whatever order each sums in."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for info in model.graph.input:
        shape = [d.dim_value or 2 for d in info.type.tensor_type.shape.dim]
        if info.name == "offset":
            value = np.round(rng.standard_normal(shape) * spread * 4) / 4
        elif info.name == "mask":  # a modulation in [0, 1], as DCNv2's sigmoid gives
            value = rng.integers(0, 5, shape) / 4
        else:
            value = rng.integers(-4, 5, shape) / (2 if info.name == "w" else 1)
        feeds[info.name] = value.astype(np.float32)
    return feeds


CASES = {
    "basic": (dict(x=(1, 2, 5, 6), w=(3, 2, 3, 3), offset=(1, 18, 3, 4)), {}),
    "padding-stride-dilation": (dict(x=(2, 2, 7, 8), w=(4, 2, 3, 2), offset=(2, 12, 3, 4)),
                                dict(pads=[1, 2, 2, 1], strides=[2, 3], dilations=[2, 1])),
    "groups-offset-groups": (dict(x=(2, 4, 6, 6), w=(6, 2, 2, 2), offset=(2, 16, 5, 5)), dict(group=2, offset_group=2)),
    "mask-bias": (dict(x=(1, 3, 5, 5), w=(2, 3, 3, 3), offset=(1, 18, 5, 5), bias=True, mask=True), dict(pads=[1, 1, 1, 1])),
}


@pytest.mark.parametrize("spread", [0.7, 4.0], ids=["near", "leaving-the-image"])
@pytest.mark.parametrize("case", CASES)
def test_deform_conv_kernel_and_reference_against_onnx(case, spread, tmp_path) -> None:
    shapes, attrs = CASES[case]
    model = _model(**shapes, **attrs)
    feeds = _inputs(model, spread)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    from support.kernel_harness import run_host_kernels  # tests/support/kernel_harness.py

    (got,), left = run_host_kernels(model, list(feeds.values()), tmp_path)  # checks kernel == reference
    assert not [op for op in left if op != "nn.add"], left  # the deformable convolution is a kernel
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_deform_conv_end_to_end_with_a_dynamic_batch() -> None:
    shapes, attrs = CASES["mask-bias"]
    model = _model(**shapes, batch="n", **attrs)
    exe = partita.compile(model)
    assert not [r for r in exe.report().rows if r.symbol.startswith("(")]  # no host step
    for batch in (1, 3):
        feeds = {k: np.concatenate([v] * batch) if k in ("x", "offset", "mask") else v
                 for k, v in _inputs(model, 1.0).items()}
        (want,) = ReferenceEvaluator(model).run(None, feeds)
        (got,) = exe.run(feeds)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_deform_conv_shape_errors_are_located() -> None:
    with pytest.raises(PartitaError, match=r"\(DeformConv\): .*offset must hold \(dy, dx\) per tap and offset group"):
        import_onnx(_model(x=(1, 2, 5, 6), w=(3, 2, 3, 3), offset=(1, 12, 3, 4)))
    with pytest.raises(PartitaError, match=r"\(DeformConv\): .*supported over 2 spatial dims"):
        import_onnx(_model(x=(1, 2, 5), w=(3, 2, 3), offset=(1, 6, 3)))
