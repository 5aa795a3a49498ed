"""``nn.rotary_embedding`` in every layer: the verifier, the NumPy reference against ONNX's
own reference implementation of ``RotaryEmbedding`` (halves and interleaved, full and
partial rotary dims), and the native window kernel built for the host
(``tests/support/cuda_host.py``) against the reference, f32 and f16, with a dynamic
sequence length. The ONNX node suite's RotaryEmbedding cases run the importer end to end
(``tests/support/onnx_node_expected.txt``)."""

from __future__ import annotations

import numpy as np
import pytest
from support.cuda_host import HostKernels, have_gxx  # tests/support/cuda_host.py
from support.kernel_check import fuse, fused_functions, launch_beside_reference  # tests/support/kernel_check.py
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType, f32
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.test_value import create_ssa_value

from partita.dialects import make_context, nn
from partita.ir import parse_module
from partita.lowering.cuda.codegen import program_of
from partita.lowering.cuda.records import RECORDS, fused_record
from partita.runtime.reference import run
from partita.runtime.reference.nn.attention import rotary_embedding

onnx_reference = pytest.importorskip("onnx.reference.ops.op_rotary_embedding")


def _t(shape, t=f32):
    return create_ssa_value(TensorType(t, shape))


def test_verifier():
    op = nn.RotaryEmbeddingOp(_t([2, 4, 7, 8]), _t([2, 7, 2]), _t([2, 7, 2]), rotary_dim=4, interleaved=True)
    op.verify()
    assert (op.result.type, op.rotated_dims, op.interleaved) == (TensorType(f32, [2, 4, 7, 8]), 4, True)
    for build, message in [
        (lambda: nn.RotaryEmbeddingOp(_t([2, 4, 7, 8]), _t([2, 7, 3]), _t([2, 7, 3])), "3 columns, expected 4"),
        (lambda: nn.RotaryEmbeddingOp(_t([2, 4, 7, 8]), _t([2, 7, 2]), _t([2, 7, 2]), rotary_dim=3), "even"),
        (lambda: nn.RotaryEmbeddingOp(_t([2, 4, 7, 8]), _t([2, 6, 4]), _t([2, 6, 4])), "sequence mismatch"),
        (lambda: nn.RotaryEmbeddingOp(_t([4, 7, 8]), _t([2, 7, 4]), _t([2, 7, 4])), "ranks"),
        # BSHD: the sequence is axis 1 ([2, 4, 7, 8] has 4 positions, the caches 7)
        (lambda: nn.RotaryEmbeddingOp(_t([2, 4, 7, 8]), _t([2, 7, 4]), _t([2, 7, 4]), layout="BSHD"),
         "sequence mismatch"),
        (lambda: nn.RotaryEmbeddingOp(_t([2, 4, 7, 8]), _t([2, 7, 4]), _t([2, 7, 4]), layout="SBHD"), "layout"),
    ]:
        with pytest.raises(VerifyException, match=message):
            build().verify()


VARIANTS = [(False, 0), (True, 0), (False, 4), (True, 4)]


@pytest.mark.parametrize("interleaved, rotary_dim", VARIANTS)
def test_reference_matches_onnx(interleaved, rotary_dim):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 8))
    r = rotary_dim or 8
    cos, sin = rng.standard_normal((2, 5, r // 2)), rng.standard_normal((2, 5, r // 2))
    got = rotary_embedding(x, cos, sin, interleaved=interleaved, rotary_dim=rotary_dim)
    want = onnx_reference.rotary_embedding(x, cos, sin, interleaved=int(interleaved),
                                           rotary_embedding_dim=rotary_dim)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert not np.allclose(got, x)  # it rotates


def test_bshd_is_bhsd_with_the_heads_transposed():
    """The reference in BSHD is the BHSD rotary of the head-split input, merged back."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 5, 3, 8))  # [B, S, H, D]
    cos, sin = rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 4))
    module = parse_module(_module("f32", False, 0, layout="BSHD"), make_context(), "rotary.mlir")
    (got,) = run(module, x.astype(np.float32), cos.astype(np.float32), sin.astype(np.float32))
    want = rotary_embedding(x.swapaxes(1, 2), cos, sin, interleaved=False, rotary_dim=0).swapaxes(1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _module(dtype: str, interleaved: bool, rotary_dim: int, cache_batch: str = "2", layout: str = "BHSD") -> str:
    x = f"tensor<2x3x?x8x{dtype}>" if layout == "BHSD" else f"tensor<2x?x3x8x{dtype}>"
    c = f"tensor<{cache_batch}x?x{(rotary_dim or 8) // 2}x{dtype}>"
    attrs = f"{{interleaved = {str(interleaved).lower()}, rotary_dim = {rotary_dim} : i64, layout = \"{layout}\"}}"
    return f"""
func.func @main(%x: {x}, %c: {c}, %s: {c}) -> {x} {{
  %0 = nn.rotary_embedding %x, %c, %s {attrs} : ({x}, {c}, {c}) -> {x}
  func.return %0 : {x}
}}"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("dtype, cache_batch", [("f32", "2"), ("f16", "2"), ("f32", "1"), ("f32", "?")])
@pytest.mark.parametrize("interleaved, rotary_dim", VARIANTS)
@pytest.mark.parametrize("layout", ["BHSD", "BSHD"])
def test_native_kernel_matches_the_reference(dtype, cache_batch, interleaved, rotary_dim, layout, tmp_path):
    """Caches per batch row, or one row shared by both (static 1, or a run-time 1); heads
    before or after the sequence."""
    module = fuse(_module(dtype, interleaved, rotary_dim, cache_batch, layout))
    (name, function), = fused_functions(module).items()
    program = program_of(module)
    rec = RECORDS[program.kernels[name].kind].from_attr(fused_record(program.kernels[name]))
    host = HostKernels(program.code, [rec], tmp_path)
    t = np.float16 if dtype == "f16" else np.float32
    rng = np.random.default_rng(1)
    r = rotary_dim or 8
    rows = 2 if cache_batch == "2" else 1
    x_shape = (2, 3, 5, 8) if layout == "BHSD" else (2, 5, 3, 8)
    inputs = [rng.standard_normal(s).astype(t) for s in (x_shape, (rows, 5, r // 2), (rows, 5, r // 2))]
    clone = function.clone()
    clone.sym_visibility = StringAttr("public")
    (want,) = run(ModuleOp([clone]), *inputs, entry=name)
    out = np.full(want.shape, 7, want.dtype)
    grid, block = rec.geometry(out.shape)
    host.launch(rec, grid, block, [np.ascontiguousarray(a) for a in inputs], out)
    tol = 2e-3 if dtype == "f16" else 1e-6
    np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    x, cos, sin = (a.astype(np.float64) for a in inputs)
    heads_first = x if layout == "BHSD" else x.swapaxes(1, 2)
    expected = rotary_embedding(heads_first, cos, sin, interleaved=interleaved, rotary_dim=rotary_dim)
    expected = expected if layout == "BHSD" else expected.swapaxes(1, 2)
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=5 * tol, atol=5 * tol)


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("interleaved", [False, True])
def test_native_kernel_reads_the_heads_of_a_packed_projection(interleaved, tmp_path):
    """LLaMA after ``combine-parallel-dense``: the rotary input is K's head split of the
    packed [B, S, 64] QKV projection (a strided slice at columns 32..48 and a reshape into
    2 heads of 8); the slice and reshape join the rotary's kernel, which reads K where it
    lies, and matches the reference."""
    text = f"""
func.func @main(%p: tensor<2x5x64xf32>, %c: tensor<1x5x4xf32>, %s: tensor<1x5x4xf32>) -> tensor<2x5x2x8xf32> {{
  %k = nn.strided_slice %p {{begin = array<i64: 0, 0, 32>, end = array<i64: 2, 5, 48>, strides = array<i64: 1, 1, 1>}} : (tensor<2x5x64xf32>) -> tensor<2x5x16xf32>
  %h = nn.reshape %k : (tensor<2x5x16xf32>) -> tensor<2x5x2x8xf32>
  %0 = nn.rotary_embedding %h, %c, %s {{interleaved = {str(interleaved).lower()}, layout = "BSHD"}} : (tensor<2x5x2x8xf32>, tensor<1x5x4xf32>, tensor<1x5x4xf32>) -> tensor<2x5x2x8xf32>
  func.return %0 : tensor<2x5x2x8xf32>
}}"""
    module = fuse(text)
    (name, function), = fused_functions(module).items()
    assert [op.name for op in function.body.ops][:3] == ["nn.strided_slice", "nn.reshape", "nn.rotary_embedding"]
    program = program_of(module)
    rec = RECORDS[program.kernels[name].kind].from_attr(fused_record(program.kernels[name]))
    host = HostKernels(program.code, [rec], tmp_path)
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((2, 5, 64), (1, 5, 4), (1, 5, 4))]
    out = np.full((2, 5, 2, 8), 7, np.float32)
    grid, block = rec.geometry(out.shape)
    host.launch(rec, grid, block, inputs, out)
    k = inputs[0][:, :, 32:48].reshape(2, 5, 2, 8).swapaxes(1, 2).astype(np.float64)
    expected = rotary_embedding(k, *(a.astype(np.float64) for a in inputs[1:]), interleaved=interleaved,
                                rotary_dim=0).swapaxes(1, 2)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
def test_native_kernel_reads_cos_and_sin_gathered_at_the_positions(tmp_path):
    """A decode step's rotary cache read: cos and sin rows gathered from [32, 4] tables at
    run-time positions (``nn.take``, a negative position counted from the end) join the
    rotary's kernel as index views, which reads the tables where they lie (one kernel, not
    one gather each), and matches the reference."""
    text = """
func.func @main(%x: tensor<2x2x3x8xf32>, %ct: tensor<32x4xf32>, %st: tensor<32x4xf32>, %pos: tensor<1x3xi64>) -> tensor<2x2x3x8xf32> {
  %c = nn.take %ct, %pos {axis = 0 : i64} : (tensor<32x4xf32>, tensor<1x3xi64>) -> tensor<1x3x4xf32>
  %s = nn.take %st, %pos {axis = 0 : i64} : (tensor<32x4xf32>, tensor<1x3xi64>) -> tensor<1x3x4xf32>
  %0 = nn.rotary_embedding %x, %c, %s : (tensor<2x2x3x8xf32>, tensor<1x3x4xf32>, tensor<1x3x4xf32>) -> tensor<2x2x3x8xf32>
  func.return %0 : tensor<2x2x3x8xf32>
}"""
    module = fuse(text)
    (name, function), = fused_functions(module).items()
    assert sorted(op.name for op in function.body.ops) == ["func.return", "nn.rotary_embedding", "nn.take", "nn.take"]
    program = program_of(module)
    assert "partita_gather_index(" in program.code
    rec = RECORDS[program.kernels[name].kind].from_attr(fused_record(program.kernels[name]))
    host = HostKernels(program.code, [rec], tmp_path)
    rng = np.random.default_rng(3)
    x, cos, sin = (rng.standard_normal(s).astype(np.float32) for s in ((2, 2, 3, 8), (32, 4), (32, 4)))
    position = np.array([[5, 17, -2]], np.int64)
    (rotary,) = [op for op in function.body.ops if isinstance(op, nn.RotaryEmbeddingOp)]
    by_value = {rotary.input: x, rotary.cos.owner.data: cos, rotary.sin.owner.data: sin,
                rotary.cos.owner.indices: position}
    inputs = [by_value[a] for a in function.args]  # the kernel's argument order
    out = np.full((2, 2, 3, 8), 7, np.float32)
    grid, block = rec.geometry(out.shape)
    host.launch(rec, grid, block, inputs, out)
    clone = function.clone()
    clone.sym_visibility = StringAttr("public")
    (expected,) = run(ModuleOp([clone]), *inputs, entry=name)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    positions = [5, 17, 30]
    want = rotary_embedding(x, cos[None, positions], sin[None, positions], interleaved=False, rotary_dim=0)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("interleaved, rotary_dim", [(False, 0), (True, 4)])
def test_native_kernel_computes_the_tables_from_the_positions(interleaved, rotary_dim, tmp_path):
    """The exporters' rotary tables, ``cos`` / ``sin`` of ``positions x inv_freq`` (halves
    concatenated, the first taken), read by two layers' rotary embeddings: each layer's
    kernel computes the angle, its cos and its sin where it reads them (the tables are no
    kernels of their own: one kernel per layer, sharing one function), and matches the
    reference."""
    r = rotary_dim or 8
    text = f"""
func.func @main(%x: tensor<2x2x5x8xf32>, %y: tensor<2x2x5x8xf32>, %pos: tensor<1x5xi64>, %inv: tensor<{r // 2}xf32>) -> (tensor<2x2x5x8xf32>, tensor<2x2x5x8xf32>) {{
  %p = nn.cast %pos : (tensor<1x5xi64>) -> tensor<1x5xf32>
  %p3 = nn.reshape %p : (tensor<1x5xf32>) -> tensor<1x5x1xf32>
  %f = nn.multiply %p3, %inv : (tensor<1x5x1xf32>, tensor<{r // 2}xf32>) -> tensor<1x5x{r // 2}xf32>
  %e = nn.concatenate %f, %f {{axis = -1 : i64}} : (tensor<1x5x{r // 2}xf32>, tensor<1x5x{r // 2}xf32>) -> tensor<1x5x{r}xf32>
  %ce = nn.cos %e : (tensor<1x5x{r}xf32>) -> tensor<1x5x{r}xf32>
  %se = nn.sin %e : (tensor<1x5x{r}xf32>) -> tensor<1x5x{r}xf32>
  %c = nn.strided_slice %ce {{begin = array<i64: 0, 0, 0>, end = array<i64: 1, 5, {r // 2}>, strides = array<i64: 1, 1, 1>}} : (tensor<1x5x{r}xf32>) -> tensor<1x5x{r // 2}xf32>
  %s = nn.strided_slice %se {{begin = array<i64: 0, 0, 0>, end = array<i64: 1, 5, {r // 2}>, strides = array<i64: 1, 1, 1>}} : (tensor<1x5x{r}xf32>) -> tensor<1x5x{r // 2}xf32>
  %0 = nn.rotary_embedding %x, %c, %s {{interleaved = {str(interleaved).lower()}, rotary_dim = {rotary_dim} : i64}} : (tensor<2x2x5x8xf32>, tensor<1x5x{r // 2}xf32>, tensor<1x5x{r // 2}xf32>) -> tensor<2x2x5x8xf32>
  %1 = nn.rotary_embedding %y, %c, %s {{interleaved = {str(interleaved).lower()}, rotary_dim = {rotary_dim} : i64}} : (tensor<2x2x5x8xf32>, tensor<1x5x{r // 2}xf32>, tensor<1x5x{r // 2}xf32>) -> tensor<2x2x5x8xf32>
  func.return %0, %1 : tensor<2x2x5x8xf32>, tensor<2x2x5x8xf32>
}}"""
    module = fuse(text)
    (name, function), = fused_functions(module).items()  # both layers call it
    assert sorted(op.name for op in function.body.ops) == [
        "func.return", "nn.cast", "nn.cast", "nn.concatenate", "nn.concatenate", "nn.cos", "nn.multiply",
        "nn.multiply", "nn.reshape", "nn.reshape", "nn.rotary_embedding", "nn.sin", "nn.strided_slice",
        "nn.strided_slice"]
    program = program_of(module)
    assert "cosf(" in program.code and "sinf(" in program.code
    rec = RECORDS[program.kernels[name].kind].from_attr(fused_record(program.kernels[name]))
    host = HostKernels(program.code, [rec], tmp_path)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 2, 5, 8)).astype(np.float32)
    position = np.array([[0, 3, 17, 250, 4095]], np.int64)
    inv_freq = (10000.0 ** -(np.arange(0, r, 2) / r)).astype(np.float32)
    by_type = {(2, 2, 5, 8): x, (1, 5): position, (r // 2,): inv_freq}
    inputs = [by_type[tuple(a.type.get_shape())] for a in function.args]  # the kernel's argument order
    out, expected = launch_beside_reference(function, name, rec, host, inputs)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    angle = position[0, :, None].astype(np.float32) * inv_freq
    want = rotary_embedding(x, np.cos(angle)[None], np.sin(angle)[None], interleaved=interleaved, rotary_dim=rotary_dim)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
