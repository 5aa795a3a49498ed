"""The normalization family in every layer: softmax / log_softmax / hardmax on any axis
(and the 2-D coercion of opsets before 13), layer norm with its Mean / InvStdDev outputs,
RMS, group (and instance), Lp and mean-variance norms: converters against onnx's own
reference, window kernels built for the host against the NumPy references, and end to
end with every op in a kernel."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from ops.test_ops_reduction import _tensor, _value, check_against_onnx, model
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_check import check_kernels, fuse, host_ops  # tests/support/kernel_check.py
from xdsl.utils.exceptions import VerifyException

import partita
from partita.dialects import nn
from partita.frontends.onnx import import_onnx
from partita.runtime.reference import run

ONNX_OPS = ("Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "RMSNormalization",
            "GroupNormalization", "InstanceNormalization", "LpNormalization",
            "MeanVarianceNormalization")
"""The ONNX op types this file converts."""


# -- dialect ------------------------------------------------------------------------------


@pytest.mark.parametrize("build, message", [
    (lambda x: nn.GroupNormOp(x, _tensor([6]), _tensor([6]), 4), "num_groups 4 does not divide the 6"),
    (lambda x: nn.GroupNormOp(x, _tensor([3]), _tensor([6]), 3), "scale size does not match"),
    (lambda x: nn.RMSNormOp(x, _tensor([4, 5]), axis=2), "does not broadcast"),
    (lambda x: nn.LpNormOp(x, p=3), "p must be 1 or 2"),
    (lambda x: nn.MeanVarianceNormOp(x, [0, 0]), "repeat an axis"),
    (lambda x: nn.HardmaxOp(x, axis=3), "out of range"),
])
def test_verifier_rejections(build, message):
    with pytest.raises(VerifyException, match=message):
        build(_tensor([2, 6, 5])).verify()


# -- ONNX converters -------------------------------------------------------------------------


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_family_on_every_axis(op_type, opset):
    x = _value((2, 3, 4))
    x[0, 1, :2] = 7.0  # a tie for hardmax
    for axis in (0, 1, 2, -1, -2, None):
        attrs = {} if axis is None else {"axis": axis}
        m = model(op_type, {"x": x}, 1, opset, **attrs)
        if opset >= 13:
            check_against_onnx(m, {"x": x})
            continue
        # Before 13, [..axis) and [axis..) flatten into a 2-D input, normalized along its
        # rows (onnx's reference evaluator applies opset 13 semantics to every version).
        k = (1 if axis is None else axis) % 3
        rows = x.reshape(int(np.prod(x.shape[:k])), -1)
        (want,) = ReferenceEvaluator(model(op_type, {"x": rows}, 1, 13, axis=1)).run(None, {"x": rows})
        (got,) = run(import_onnx(m), x)
        np.testing.assert_allclose(got, want.reshape(x.shape), rtol=1e-5, atol=1e-6)


def test_old_opset_softmax_coerces_to_2d():
    """Opset 11 softmax at axis 1 of [2, 3, 4] normalizes over 12 elements per row."""
    x = _value((2, 3, 4))
    module = import_onnx(model("Softmax", {"x": x}, 1, 11, axis=1))
    names = [o.name for o in module.walk() if o.name.startswith("nn.")]
    assert names == ["nn.reshape", "nn.softmax", "nn.reshape"]


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
def test_layer_norm_with_mean_and_inv_std_dev(axis):
    x = _value((2, 3, 4))
    norm = x.shape[axis % 3:]
    m = model("LayerNormalization", {"x": x}, 3, 17,
              {"s": _value(norm[-1:]) + 1, "b": _value(norm)}, axis=axis, epsilon=1e-3)
    check_against_onnx(m, {"x": x}, rtol=1e-4, atol=1e-5)


def test_layer_norm_statistics_in_another_stash_type_run_as_the_function_body():
    """The converter builds no f32 Mean / InvStdDev for an f16 input: the op is imported as
    its ONNX function body (statistics computed and returned in f32), op by op."""
    import onnxruntime as ort

    x = _value((2, 4)).astype(np.float16)
    f16, f32 = TensorProto.FLOAT16, TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("LayerNormalization", ["x", "s"], ["y", "mean", "inv"])], "g",
        [helper.make_tensor_value_info("x", f16, [2, 4])],
        [helper.make_tensor_value_info("y", f16, [2, 4]), helper.make_tensor_value_info("mean", f32, [2, 1]),
         helper.make_tensor_value_info("inv", f32, [2, 1])],
        [helper.make_tensor("s", f16, [4], np.ones(4, np.float16).tobytes(), raw=True)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert "nn.layer_norm" not in str(import_onnx(m))
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for got, expected in zip(run(import_onnx(m), x), want, strict=True):
        assert got.dtype == expected.dtype  # the statistics in f32, as stash_type says
        np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=2e-3, atol=2e-3)


def test_rms_norm():
    if onnx.defs.onnx_opset_version() < 23:
        pytest.skip("RMSNormalization needs opset 23")
    x = _value((2, 3, 4))
    for axis, scale in ((-1, (4,)), (1, (3, 4)), (1, (4,))):
        m = model("RMSNormalization", {"x": x}, 1, 23, {"s": _value(scale)}, axis=axis)
        check_against_onnx(m, {"x": x}, rtol=1e-4, atol=1e-5)


def test_group_and_instance_norm():
    x = _value((2, 6, 3, 2))
    for opset, shape in ((18, (3,)), (21, (6,))):
        m = model("GroupNormalization", {"x": x}, 1, opset,
                  {"s": _value(shape) + 1, "b": _value(shape)}, num_groups=3, epsilon=1e-4)
        check_against_onnx(m, {"x": x}, rtol=1e-4, atol=1e-5)
    m = model("InstanceNormalization", {"x": x}, 1, 9, {"s": _value((6,)), "b": _value((6,))})
    check_against_onnx(m, {"x": x}, rtol=1e-4, atol=1e-5)


def test_lp_and_mean_variance_norm():
    x = _value((3, 4, 2, 2))
    x[0, :, 0, 0] = 0  # a zero norm gives 0
    for p in (1, 2):
        for axis in (0, -1):
            # onnx's reference evaluator leaves out the absolute value: the spec's formula.
            norm = (np.abs(x) ** p).sum(axis=axis, keepdims=True) ** (1 / p)
            want = np.where(norm == 0, 0, x / np.where(norm == 0, 1, norm))
            (got,) = run(import_onnx(model("LpNormalization", {"x": x}, 1, 9, p=p, axis=axis)), x)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    check_against_onnx(model("MeanVarianceNormalization", {"x": x}, 1, 13), {"x": x},
                       rtol=1e-4, atol=1e-5)
    check_against_onnx(model("MeanVarianceNormalization", {"x": x}, 1, 13, axes=[1]), {"x": x},
                       rtol=1e-4, atol=1e-5)


# -- native kernels, built for the host -------------------------------------------------------

KERNELS = """
func.func @norms_T(%x: tensor<?x6x5xT>, %s: tensor<6xT>, %b: tensor<6xT>, %r: tensor<5xT>, %g: tensor<6x5xT>) -> (tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>) {
  %0 = nn.softmax %x {axis = 1 : i64} : (tensor<?x6x5xT>) -> tensor<?x6x5xT>
  %1 = nn.log_softmax %x {axis = -1 : i64} : (tensor<?x6x5xT>) -> tensor<?x6x5xT>
  %2 = nn.hardmax %x {axis = 0 : i64} : (tensor<?x6x5xT>) -> tensor<?x6x5xT>
  %3 = nn.rms_norm %x, %r {axis = 1 : i64, epsilon = 1.0e-3 : f64} : (tensor<?x6x5xT>, tensor<5xT>) -> tensor<?x6x5xT>
  %4 = nn.group_norm %x, %s, %b {num_groups = 3 : i64} : (tensor<?x6x5xT>, tensor<6xT>, tensor<6xT>) -> tensor<?x6x5xT>
  %5 = nn.lp_norm %x {axis = 1 : i64, p = 1 : i64} : (tensor<?x6x5xT>) -> tensor<?x6x5xT>
  %6 = nn.lp_norm %x {axis = 2 : i64} : (tensor<?x6x5xT>) -> tensor<?x6x5xT>
  %7 = nn.mean_variance_norm %x {axes = array<i64: 0, 2>} : (tensor<?x6x5xT>) -> tensor<?x6x5xT>
  %8 = nn.layer_norm %x, %g, %g {axis = 1 : i64} : (tensor<?x6x5xT>, tensor<6x5xT>, tensor<6x5xT>) -> tensor<?x6x5xT>
  %9 = nn.add %8, %x : (tensor<?x6x5xT>, tensor<?x6x5xT>) -> tensor<?x6x5xT>
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %9 : tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>, tensor<?x6x5xT>
}
"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_kernels_compute_the_reference_semantics(tmp_path):
    module = fuse("\n".join(KERNELS.replace("T", t) for t in ("f32", "f16", "bf16", "f64")))
    assert host_ops(module) == []
    anchors = check_kernels(module, tmp_path)
    # The f64 layer norm takes the window rule; the others the row-wise kernel (checked
    # in test_cuda_codegen_reductions), which the host check also runs.
    assert anchors.count("nn.log_softmax") == 4 and anchors.count("nn.group_norm") == 4
    assert len(anchors) == 4 * 9


BATCH_NORM = """
func.func @batch_norm_T(%x: tensor<?x6x5xT>, %c: tensor<6xT>, %v: tensor<6xT>, %l: tensor<5xT>) -> (tensor<?x6x5xT>, tensor<?x6x5xT>) {
  %va = nn.abs %v : (tensor<6xT>) -> tensor<6xT>
  %la = nn.abs %l : (tensor<5xT>) -> tensor<5xT>
  %0 = nn.batch_norm %x, %c, %c, %c, %va {epsilon = 1.0e-3 : f64} : (tensor<?x6x5xT>, tensor<6xT>, tensor<6xT>, tensor<6xT>, tensor<6xT>) -> tensor<?x6x5xT>
  %1 = nn.relu %0 : (tensor<?x6x5xT>) -> tensor<?x6x5xT>
  %2 = nn.batch_norm %x, %l, %l, %l, %la {axis = -1 : i64} : (tensor<?x6x5xT>, tensor<5xT>, tensor<5xT>, tensor<5xT>, tensor<5xT>) -> tensor<?x6x5xT>
  func.return %1, %2 : tensor<?x6x5xT>, tensor<?x6x5xT>
}
"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_a_standalone_batch_norm_is_an_injective_kernel(tmp_path):
    """A batch norm that follows no convolution (channel axis 1 as in NCHW, or -1 as in
    NHWC) is injective: it fuses with its neighbours (the variance's abs before it, a relu
    after it) into one kernel and computes the reference semantics."""
    module = fuse("\n".join(BATCH_NORM.replace("T", t) for t in ("f32", "f16", "bf16")))
    assert host_ops(module) == []
    check_kernels(module, tmp_path)
    kernels = [f for f in module.ops if "_fused_" in getattr(getattr(f, "sym_name", None), "data", "")]
    assert len(kernels) == 3 * 2
    assert all(sum(op.name == "nn.batch_norm" for op in k.body.walk()) == 1 for k in kernels)


# -- end to end ---------------------------------------------------------------------------------


def test_compile_runs_every_normalization_in_a_kernel(tmp_path):
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln", "mean", "isd"], axis=-1),
        helper.make_node("Softmax", ["ln"], ["sm"], axis=1),
        helper.make_node("LogSoftmax", ["x"], ["lsm"], axis=0),
        helper.make_node("InstanceNormalization", ["x", "c", "c"], ["inn"]),
        helper.make_node("LpNormalization", ["x"], ["lp"], axis=1),
    ]
    inits = {"g": _value((4,)), "b": _value((4,)), "c": _value((3,))}
    outs = ("sm", "mean", "isd", "lsm", "inn", "lp")
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 4])],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outs],
        [onnx.numpy_helper.from_array(v, n) for n, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    exe = partita.compile(m, cache_dir=tmp_path)
    assert not [r for r in exe.report().rows if r.symbol.startswith("(")], exe.report().table()
    x = _value((2, 3, 4))
    want = ReferenceEvaluator(m).run(None, {"x": x})
    for g, w in zip(exe.run(x), want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
