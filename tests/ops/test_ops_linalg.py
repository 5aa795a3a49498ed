"""The linear-algebra family: MatMul with rank-1 operands (NumPy semantics), Gemm on every
input form, MatMulInteger and Einsum against onnx's own reference; GEMMs in f64 and
integer types and matmul_integer as native window kernels built for the host; the
CUTLASS patterns still catch a transformer's MatMul + Add + GELU exported with transposed
weights."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.reference
import pytest
from onnx import TensorProto, helper, numpy_helper
from ops.test_ops_reduction import check_against_onnx, model, rand_like
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_check import check_kernels, fuse, host_ops  # tests/support/kernel_check.py

import partita
from partita.frontends.onnx import import_onnx
from partita.ir.diagnostics import PartitaError

ONNX_OPS = ("MatMul", "Gemm", "MatMulInteger", "Einsum")
"""The ONNX op types this file converts."""


@pytest.mark.parametrize("a, b", [((4,), (4,)), ((4,), (2, 4, 3)), ((2, 3, 4), (4,)),
                                  ((3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2))])
def test_matmul_numpy_semantics(a, b):
    x, y = rand_like(a, np.float32), rand_like(b, np.float32, seed=1)
    check_against_onnx(model("MatMul", {"x": x, "y": y}, 1, 13), {"x": x, "y": y}, rtol=1e-5)


def test_matmul_int_and_f64():
    for dtype in (np.int32, np.int64, np.float64):
        x, y = rand_like((2, 3), dtype), rand_like((3, 4), dtype, seed=1)
        check_against_onnx(model("MatMul", {"x": x, "y": y}, 1, 13), {"x": x, "y": y})


@pytest.mark.parametrize("c_shape", [None, (), (5,), (1, 5), (3, 1), (3, 5)])
@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_input_forms(c_shape, trans):
    ta, tb = trans
    a = rand_like((4, 3) if ta else (3, 4), np.float32)
    b = rand_like((5, 4) if tb else (4, 5), np.float32, seed=1)
    inputs = {"a": a, "b": b}
    if c_shape is not None:
        inputs["c"] = rand_like(c_shape, np.float32, seed=2)
    m = model("Gemm", inputs, 1, 13, transA=ta, transB=tb, alpha=0.5, beta=2.0)
    check_against_onnx(m, inputs, rtol=1e-5)
    # Weights as initializers (the exported-model form).
    m = model("Gemm", {"a": a}, 1, 11, {k: v for k, v in inputs.items() if k != "a"},
              transA=ta, transB=tb, alpha=1.5)
    check_against_onnx(m, {"a": a}, rtol=1e-5)


def test_matmul_integer():
    a = rand_like((4, 3), np.uint8)
    b = rand_like((3, 2), np.uint8, seed=1)
    inputs = {"a": a, "b": b, "za": np.array([3], np.uint8), "zb": np.array(1, np.uint8)}
    check_against_onnx(model("MatMulInteger", inputs, 1, 10), inputs)
    ai, bi = a.astype(np.int8), rand_like((2, 3, 5), np.int8)
    check_against_onnx(model("MatMulInteger", {"a": ai, "b": bi}, 1, 10), {"a": ai, "b": bi})


@pytest.mark.parametrize("equation, shapes", [
    ("bhid,bhjd->bhij", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("bhij,bhjd->bhid", [(2, 3, 4, 6), (2, 3, 6, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,kj->ik", [(3, 4), (5, 4)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bsd,df->bsf", [(2, 3, 4), (4, 6)]),
    ("i,j->ij", [(3,), (4,)]),
    ("i,i", [(4,), (4,)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("ijk,kj->i", [(2, 3, 4), (4, 3)]),
    ("ij->ji", [(3, 4)]),
    ("ijk->ki", [(2, 3, 4)]),
    ("ij->", [(3, 4)]),
    ("->", [()]),
    ("bsd,fd->bsf", [(2, 3, 4), (6, 4)]),
    ("bij,bkj->bki", [(2, 3, 4), (2, 5, 4)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]),
    ("...ij,jk", [(2, 3, 4), (4, 5)]),
    ("b...d,bd->b...", [(2, 3, 4, 5), (2, 5)]),
    # Diagonals: a subscript repeated in one term.
    ("...ii->...i", [(2, 3, 3)]),
    ("ii->i", [(3, 3)]),
    ("ii", [(4, 4)]),
    ("iji->ij", [(3, 2, 3)]),
    ("bii,bj->bij", [(2, 3, 3), (2, 4)]),
])
def test_einsum_contractions(equation, shapes):
    inputs = {f"x{k}": rand_like(s, np.float32, seed=k) for k, s in enumerate(shapes)}
    check_against_onnx(model("Einsum", inputs, 1, 12, equation=equation), inputs, rtol=1e-5)


@pytest.mark.parametrize("equation, ops", [
    ("bsd,fd->bsf", ["nn.dense"]),
    ("bij,bkj->bik", ["nn.batch_matmul"]),
    ("bij,bkj->bki", ["nn.batch_matmul", "nn.transpose"]),
    ("bhid,bhjd->bhij", ["nn.transpose", "nn.matmul"]),
    ("ij,j->i", ["nn.reshape", "nn.matmul", "nn.reshape"]),
])
def test_einsum_emits_the_gemm_forms_backends_take(equation, ops):
    """x . w^T becomes nn.dense and [B, M, K] . [B, N, K] a batch_matmul with transpose_b
    (what CUTLASS matches); other contractions transpose into one nn.matmul."""
    terms = equation.split("->")[0].split(",")
    size = {c: 2 + ord(c) % 5 for c in "".join(terms)}  # one size per subscript
    inputs = {f"x{k}": rand_like([size[c] for c in t], np.float32) for k, t in enumerate(terms)}
    module = import_onnx(model("Einsum", inputs, 1, 12, equation=equation))
    assert [o.name for o in module.walk() if o.name.startswith("nn.")] == ops


@pytest.mark.parametrize("equation, shapes, message", [
    ("ij->ii", [(3, 3)], "a repeated subscript in the output"),
    ("ii->i", [(3, 4)], "the diagonal of 'i' needs two equal static dims, got 3 and 4"),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], "more than two operands"),
    ("ij,jk->ik", [(2, 3), (1, 4)], "broadcasting is not supported"),
    ("ijk->i", [(2, 3)], "does not match an operand of rank 2"),
])
def test_unsupported_einsum_is_a_partita_error(equation, shapes, message):
    inputs = {f"x{k}": rand_like(s, np.float32, seed=k) for k, s in enumerate(shapes)}
    with pytest.raises(PartitaError, match=rf"\(Einsum\): .*{message}"):
        import_onnx(model("Einsum", inputs, 1, 12, equation=equation))


def test_an_einsum_over_two_run_time_dims_matches_onnxruntime():
    """Batch and sequence both run-time (Longformer's contraction of heads and head dims):
    each flattened group a single run-time subscript sizes is a shape reference to the
    operand axis holding it, so one compile serves every shape."""
    import onnxruntime as ort

    infos = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["b", "s", 4, 8]) for n in ("a", "c")]
    graph = helper.make_graph([helper.make_node("Einsum", ["a", "c"], ["y"], equation="bshd,bthd->bst")], "g", infos,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    exe = partita.compile(onnx_model)
    session = ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    for b, n in ((2, 5), (3, 7)):
        a, c = (rng.standard_normal((b, n, 4, 8)).astype(np.float32) for _ in range(2))
        (got,) = exe.run(a, c)
        np.testing.assert_allclose(got, session.run(None, {"a": a, "c": c})[0], rtol=1e-5, atol=1e-5)


# -- native kernels ------------------------------------------------------------------------------

GEMMS = """
func.func @g_T(%a: tensor<?x3x5xT>, %b: tensor<5x4xT>, %w: tensor<6x5xT>, %c: tensor<1x5x3xT>, %d: tensor<?x4x3xT>) -> (tensor<?x3x4xT>, tensor<?x3x6xT>, tensor<?x5x4xT>) {
  %0 = nn.matmul %a, %b : (tensor<?x3x5xT>, tensor<5x4xT>) -> tensor<?x3x4xT>
  %1 = nn.dense %a, %w : (tensor<?x3x5xT>, tensor<6x5xT>) -> tensor<?x3x6xT>
  %2 = nn.batch_matmul %c, %d : (tensor<1x5x3xT>, tensor<?x4x3xT>) -> tensor<?x5x4xT>
  func.return %0, %1, %2 : tensor<?x3x4xT>, tensor<?x3x6xT>, tensor<?x5x4xT>
}
"""
MATMUL_INTEGER = """
func.func @mi(%a: tensor<4x3xui8>, %b: tensor<2x3x2xui8>, %za: tensor<1xui8>, %zb: tensor<ui8>) -> tensor<2x4x2xi32> {
  %0 = nn.matmul_integer %a, %b, %za, %zb : (tensor<4x3xui8>, tensor<2x3x2xui8>, tensor<1xui8>, tensor<ui8>) -> tensor<2x4x2xi32>
  func.return %0 : tensor<2x4x2xi32>
}
func.func @mi_batch(%a: tensor<4x3xi8>, %b: tensor<?x3x2xi8>, %za: tensor<i8>, %zb: tensor<i8>) -> tensor<?x4x2xi32> {
  %0 = nn.matmul_integer %a, %b, %za, %zb : (tensor<4x3xi8>, tensor<?x3x2xi8>, tensor<i8>, tensor<i8>) -> tensor<?x4x2xi32>
  func.return %0 : tensor<?x4x2xi32>
}
"""
MATMUL_FLOAT8 = """
func.func @mf_tn(%a: tensor<?x3x32xf8E4M3FN>, %w: tensor<8x32xf8E5M2>) -> tensor<?x3x8xf32> {
  %0 = nn.matmul_float8 %a, %w {transpose_b = true} : (tensor<?x3x32xf8E4M3FN>, tensor<8x32xf8E5M2>) -> tensor<?x3x8xf32>
  func.return %0 : tensor<?x3x8xf32>
}
func.func @mf_batch(%a: tensor<4x5xf8E5M2>, %b: tensor<2x5x3xf8E4M3FN>) -> tensor<2x4x3xf32> {
  %0 = nn.matmul_float8 %a, %b : (tensor<4x5xf8E5M2>, tensor<2x5x3xf8E4M3FN>) -> tensor<2x4x3xf32>
  func.return %0 : tensor<2x4x3xf32>
}
"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_untiled_gemm_kernels_compute_the_reference_semantics(tmp_path):
    module = fuse("\n".join(GEMMS.replace("T", t) for t in ("f64", "i64", "i32", "ui8"))
                  + MATMUL_INTEGER + MATMUL_FLOAT8)
    assert host_ops(module) == []
    anchors = check_kernels(module, tmp_path)
    assert anchors == ["nn.matmul", "nn.dense", "nn.batch_matmul"] * 4 + ["nn.matmul_integer"] * 2 \
        + ["nn.matmul_float8"] * 2


# -- end to end ---------------------------------------------------------------------------------


def test_transformer_dense_gelu_still_reaches_cutlass_in_f16(tmp_path):
    """torch.onnx.export's nn.Linear: MatMul by the transposed weight, Add of the bias, and
    the erf GELU subgraph; in f16 CUTLASS takes all of it as one GEMM with an epilogue."""
    rng = np.random.default_rng(0)
    dt = np.float16
    inits = {"W": (rng.standard_normal((64, 128)) * 0.1).astype(dt),
             "b": rng.standard_normal(128).astype(dt), "sq2": np.array(1.4142135, dt),
             "one": np.array(1.0, dt), "half": np.array(0.5, dt)}
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Div", ["hb", "sq2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["hb", "e1"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["batch", 16, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    exe = partita.compile(m, cache_dir=tmp_path)
    (row,) = exe.report().rows
    assert row.target == "cutlass" and row.ops == ("nn.dense", "nn.add", "nn.gelu")
    x = rng.standard_normal((2, 16, 64)).astype(dt)
    (y,) = exe.run(x)
    h = x.astype(np.float32) @ inits["W"].astype(np.float32) + inits["b"].astype(np.float32)
    from math import erf
    want = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2)))
    np.testing.assert_allclose(y.astype(np.float32), want, rtol=2e-2, atol=2e-2)


def test_compile_runs_einsum_attention_in_kernels(tmp_path):
    nodes = [helper.make_node("Einsum", ["q", "k"], ["s"], equation="bhid,bhjd->bhij"),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("Einsum", ["p", "v"], ["o"], equation="bhij,bhjd->bhid")]
    shape = ["b", 2, 4, 8]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    exe = partita.compile(m, cache_dir=tmp_path)
    assert not [r for r in exe.report().rows if r.symbol.startswith("(")], exe.report().table()
    q, k, v = (rand_like((3, 2, 4, 8), np.float32, seed=s) for s in range(3))
    want = onnx.reference.ReferenceEvaluator(m).run(None, {"q": q, "k": k, "v": v})
    np.testing.assert_allclose(exe.run(q, k, v)[0], want[0], rtol=1e-5, atol=1e-6)
