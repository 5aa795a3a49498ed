"""Row kernels read their rows with 128-bit loads where the row length allows it: softmax,
layer_norm and row reductions over rows of a multiple of 8 halves (4 floats) compile (NVRTC,
sm_90) to ``LDG.E.128`` and match the reference on the host (``tests/support/kernel_check.py``);
other lengths keep scalar loads."""

from __future__ import annotations

import pytest
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_check import check_kernels, fuse, host_ops  # tests/support/kernel_check.py
from support.sass import compiled_sass  # tests/support/sass.py

from partita.lowering.cuda.codegen import program_of

ROWS = """
func.func @main(%x: tensor<6x{C}x{T}>, %g: tensor<{C}x{T}>, %b: tensor<{C}x{T}>) -> (tensor<6x{C}x{T}>, tensor<6x{C}x{T}>, tensor<6x1x{T}>) {{
  %0 = nn.softmax %x {{axis = 1 : i64}} : (tensor<6x{C}x{T}>) -> tensor<6x{C}x{T}>
  %1 = nn.layer_norm %x, %g, %b {{axis = 1 : i64, epsilon = 1.0e-05 : f64}} : (tensor<6x{C}x{T}>, tensor<{C}x{T}>, tensor<{C}x{T}>) -> tensor<6x{C}x{T}>
  %2 = nn.reduce_sum %x {{axes = array<i64: 1>, keepdims = true}} : (tensor<6x{C}x{T}>) -> tensor<6x1x{T}>
  func.return %0, %1, %2 : tensor<6x{C}x{T}>, tensor<6x{C}x{T}>, tensor<6x1x{T}>
}}
"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("dtype, cols, vector", [("f16", 72, True), ("bf16", 64, True), ("f32", 36, True),
                                                 ("f16", 70, False), ("f32", 37, False)])
def test_rows_use_vector_loads_and_match_the_reference(dtype, cols, vector, tmp_path):
    module = fuse(ROWS.format(C=cols, T=dtype))
    assert host_ops(module) == []
    code = program_of(module).code
    assert ("((const partita_v16*)xr)[jv]" in code) == vector
    check_kernels(module, tmp_path)


def test_sm90_row_kernels_load_128_bits(tmp_path):
    program = program_of(fuse(ROWS.format(C=768, T="f16")))
    _, sass = compiled_sass(program.code, use_cache=False)
    entries = [k.entry for k in program.kernels.values()]
    assert len(entries) == 3
    for entry in entries:
        text = sass[entry]
        assert "LDG.E.128" in text, entry
