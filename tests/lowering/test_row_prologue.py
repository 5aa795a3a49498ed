"""Element-wise producers of a row anchor's input run in the anchor's kernel (its
prologue): RMSNorm's square before its mean, a residual add (with a broadcast bias) before
a layer norm or a softmax. The kernels compute the row where they read it, with 16-byte
loads of the producers' operands that have the row's shape, and match the reference on
the host (``tests/support/kernel_check.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_check import (  # tests/support/kernel_check.py
    TOLERANCE,
    build_for_host,
    check_kernels,
    fuse,
    fused_functions,
    host_ops,
    launch_beside_reference,
    random_input,
)

from partita.lowering.cuda.codegen import program_of
from partita.lowering.cuda.fusion import kernel_function_error

PROLOGUES = """
func.func @main(%x: tensor<3x{C}x{T}>, %r: tensor<3x{C}x{T}>, %g: tensor<{C}x{T}>, %b: tensor<{C}x{T}>) -> (tensor<3x1x{T}>, tensor<3x{C}x{T}>, tensor<3x{C}x{T}>, tensor<3x{C}x{T}>) {{
  %0 = nn.multiply %x, %x : (tensor<3x{C}x{T}>, tensor<3x{C}x{T}>) -> tensor<3x{C}x{T}>
  %1 = nn.reduce_mean %0 {{axes = array<i64: 1>, keepdims = true}} : (tensor<3x{C}x{T}>) -> tensor<3x1x{T}>
  %2 = nn.add %x, %r : (tensor<3x{C}x{T}>, tensor<3x{C}x{T}>) -> tensor<3x{C}x{T}>
  %3 = nn.add %2, %b : (tensor<3x{C}x{T}>, tensor<{C}x{T}>) -> tensor<3x{C}x{T}>
  %4 = nn.layer_norm %3, %g, %b {{axis = 1 : i64, epsilon = 1.0e-05 : f64}} : (tensor<3x{C}x{T}>, tensor<{C}x{T}>, tensor<{C}x{T}>) -> tensor<3x{C}x{T}>
  %5 = nn.subtract %r, %x : (tensor<3x{C}x{T}>, tensor<3x{C}x{T}>) -> tensor<3x{C}x{T}>
  %6 = nn.softmax %5 {{axis = 1 : i64}} : (tensor<3x{C}x{T}>) -> tensor<3x{C}x{T}>
  %7 = nn.sigmoid %x : (tensor<3x{C}x{T}>) -> tensor<3x{C}x{T}>
  %8 = nn.rms_norm %7, %g {{axis = 1 : i64, epsilon = 1.0e-06 : f64}} : (tensor<3x{C}x{T}>, tensor<{C}x{T}>) -> tensor<3x{C}x{T}>
  func.return %1, %4, %6, %8 : tensor<3x1x{T}>, tensor<3x{C}x{T}>, tensor<3x{C}x{T}>, tensor<3x{C}x{T}>
}}
"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("dtype, cols, vector", [("f16", 64, True), ("f32", 36, True), ("bf16", 24, True),
                                                 ("f16", 30, False), ("f32", 7, False)])
def test_prologues_run_in_the_row_kernel(dtype, cols, vector, tmp_path):
    module = fuse(PROLOGUES.format(C=cols, T=dtype))
    assert host_ops(module) == []
    functions = fused_functions(module)
    assert len(functions) == 4  # one kernel per anchor, its producers inside
    program = program_of(module)
    assert {k.anchor: k.kind for k in program.kernels.values()} == {
        "nn.reduce_mean": "rowwise", "nn.layer_norm": "rowwise", "nn.softmax": "rowwise", "nn.rms_norm": "rowwise"}
    by_anchor = {k.anchor: k for k in program.kernels.values()}
    assert by_anchor["nn.layer_norm"].ops == ("nn.add", "nn.add", "nn.layer_norm")
    # the residual's two row operands in 16-byte vectors; the broadcast bias element-wise
    code = by_anchor["nn.layer_norm"].code
    assert ("((const partita_v16*)(in0 + r * cols))[jv]" in code) == vector
    assert ("((const partita_v16*)(in1 + r * cols))[jv]" in code) == vector
    assert sorted(check_kernels(module, tmp_path)) == ["nn.layer_norm", "nn.reduce_mean", "nn.rms_norm", "nn.softmax"]


def test_a_producer_that_remaps_indices_is_no_prologue():
    module = fuse(PROLOGUES.format(C=8, T="f32"))
    (function,) = [f for f in fused_functions(module).values()
                   if any(o.name == "nn.layer_norm" for o in f.body.ops)]
    assert kernel_function_error(function) is None
    # the same kernel with a transpose computing the row: refused, with the reason
    text = """
func.func @main(%x: tensor<8x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8x8xf32> {
  %0 = nn.transpose %x {perm = array<i64: 1, 0>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %1 = nn.layer_norm %0, %g, %b {axis = 1 : i64, epsilon = 1.0e-05 : f64} : (tensor<8x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  func.return %1 : tensor<8x8xf32>
}
"""
    fused = fuse(text)
    assert len(fused_functions(fused)) == 2  # the transpose stays a kernel of its own
    from partita.dialects import make_context
    from partita.ir import parse_module

    whole = parse_module(text.replace("func.func @main", "func.func private @main"), make_context(), "t.mlir")
    (main,) = whole.ops
    assert "remaps indices" in (kernel_function_error(main) or "")


def test_sm90_prologue_kernels_load_128_bits_without_spills():
    import re

    from support.sass import compiled_sass  # tests/support/sass.py

    program = program_of(fuse(PROLOGUES.format(C=768, T="f16")))
    _, sass = compiled_sass(program.code)
    for kernel in program.kernels.values():
        text = sass[kernel.entry]
        assert "LDG.E.128" in text, kernel.anchor
        assert not re.search(r"\b(STL|LDL)\b", text), f"{kernel.anchor} spills to local memory"


EMBEDDINGS = """
func.func @main(%ids: tensor<2x{S}xi64>, %types: tensor<2x{S}xi64>, %pids: tensor<1x{S}xi64>, %words: tensor<50x{C}x{T}>, %pos: tensor<64x{C}x{T}>, %kinds: tensor<2x{C}x{T}>, %g: tensor<{C}x{T}>, %b: tensor<{C}x{T}>, %q: tensor<2x{S}x{C}x{T}>) -> (tensor<2x{S}x{C}x{T}>, tensor<2x{S}x4x{H}x{T}>) {{
  %0 = nn.take %words, %ids : (tensor<50x{C}x{T}>, tensor<2x{S}xi64>) -> tensor<2x{S}x{C}x{T}>
  %1 = nn.take %pos, %pids : (tensor<64x{C}x{T}>, tensor<1x{S}xi64>) -> tensor<1x{S}x{C}x{T}>
  %2 = nn.take %kinds, %types : (tensor<2x{C}x{T}>, tensor<2x{S}xi64>) -> tensor<2x{S}x{C}x{T}>
  %3 = nn.add %0, %1 : (tensor<2x{S}x{C}x{T}>, tensor<1x{S}x{C}x{T}>) -> tensor<2x{S}x{C}x{T}>
  %4 = nn.add %3, %2 : (tensor<2x{S}x{C}x{T}>, tensor<2x{S}x{C}x{T}>) -> tensor<2x{S}x{C}x{T}>
  %5 = nn.layer_norm %4, %g, %b {{axis = 2 : i64, epsilon = 1.0e-12 : f64}} : (tensor<2x{S}x{C}x{T}>, tensor<{C}x{T}>, tensor<{C}x{T}>) -> tensor<2x{S}x{C}x{T}>
  %6 = nn.reshape %q, %4 {{ref_axes = array<i64: 1>, targets = array<i64: 1>}} : (tensor<2x{S}x{C}x{T}>, tensor<2x{S}x{C}x{T}>) -> tensor<2x{S}x4x{H}x{T}>
  func.return %5, %6 : tensor<2x{S}x{C}x{T}>, tensor<2x{S}x4x{H}x{T}>
}}
"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("dtype, cols", [("f16", 64), ("f32", 36)])
def test_embedding_gathers_are_the_layer_norms_prologue(dtype, cols, tmp_path):
    """BERT's embeddings: the word, position and token-type rows gathered and summed in the
    layer norm's kernel (the sum never stored). A head-split reshape sized by the sum (a
    shape reference: dims, not data) reads them from the norm's result instead."""
    module = fuse(EMBEDDINGS.format(S="?", C=cols, H=cols // 4, T=dtype))
    assert host_ops(module) == ["nn.reshape"]  # a view of %q's buffer: no kernel
    (kernel,) = program_of(module).kernels.values()
    assert kernel.ops == ("nn.take", "nn.take", "nn.take", "nn.add", "nn.add", "nn.layer_norm")
    from partita.dialects import nn

    (reshape,) = [op for op in module.walk() if isinstance(op, nn.ReshapeOp)]
    ((name, function),) = fused_functions(module).items()
    assert reshape.refs[0].owner.callee.string_value() == name
    program, records, host = build_for_host(module, tmp_path)
    rng = np.random.default_rng(0)
    seq = 5
    main_args = [rng.integers(0, 50, (2, seq)), rng.integers(0, 2, (2, seq)), rng.integers(0, 64, (1, seq))]
    main_args += [random_input(shape, dtype, rng) for shape in [(50, cols), (64, cols), (2, cols), (cols,), (cols,)]]
    (call,) = [op for op in module.walk() if op.name == "func.call"]
    args = [main_args[v.index] for v in call.operands]  # the kernel's operands are main's arguments
    out, expected = launch_beside_reference(function, name, records[name], host, args)
    np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64), rtol=TOLERANCE[dtype],
                               atol=TOLERANCE[dtype])
    import re

    from support.sass import compiled_sass  # tests/support/sass.py

    _, sass = compiled_sass(program.code)  # NVRTC builds it for sm_90, nothing in local memory
    assert not re.search(r"\b(STL|LDL)\b", sass[program.kernels[name].entry])


def test_a_gather_across_the_row_is_no_prologue():
    """A take along the last axis reads a row out of order: it stays a kernel of its own."""
    text = """
func.func @main(%x: tensor<4x8xf32>, %i: tensor<8xi64>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = nn.take %x, %i {axis = 1 : i64} : (tensor<4x8xf32>, tensor<8xi64>) -> tensor<4x8xf32>
  %1 = nn.layer_norm %0, %g, %b {axis = 1 : i64, epsilon = 1.0e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %1 : tensor<4x8xf32>
}
"""
    assert len(fused_functions(fuse(text))) == 2


def test_a_broadcast_row_is_a_prologue(tmp_path):
    """A row broadcast over the rows (a token-type buffer expanded to the batch, a bias
    row) reads each row in order: the norm's kernel computes it."""
    text = """
func.func @main(%x: tensor<1x8xf32>, %y: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %0 = nn.broadcast_to %x : (tensor<1x8xf32>) -> tensor<4x8xf32>
  %1 = nn.add %0, %y : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = nn.layer_norm %1, %g, %b {axis = 1 : i64, epsilon = 1.0e-05 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %2 : tensor<4x8xf32>
}
"""
    module = fuse(text)
    (function,) = fused_functions(module).values()
    assert [op.name for op in function.body.ops][:-1] == ["nn.broadcast_to", "nn.add", "nn.layer_norm"]
    if have_gxx():
        assert check_kernels(module, tmp_path) == ["nn.layer_norm"]
