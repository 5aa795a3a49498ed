"""Injective kernels compute a 16-byte vector of outputs per thread and iteration: the
operands read at the output index are loaded as 16-byte vectors, the outputs stored with
one 128-bit store, and a scalar loop takes the tail of a length that is no multiple of
the vector. Checked on the host against the reference (``tests/support/kernel_check.py``,
two blocks striding over everything) and in sm_90 SASS."""

from __future__ import annotations

import re

import pytest
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_check import check_kernels, fuse  # tests/support/kernel_check.py

from partita.lowering.cuda.codegen import program_of

CHAIN = """
func.func @main(%x: tensor<{S}x{T}>, %y: tensor<{S}x{T}>, %b: tensor<{C}x{T}>) -> tensor<{S}x{T}> {{
  %0 = nn.add %x, %y : (tensor<{S}x{T}>, tensor<{S}x{T}>) -> tensor<{S}x{T}>
  %1 = nn.add %0, %b : (tensor<{S}x{T}>, tensor<{C}x{T}>) -> tensor<{S}x{T}>
  %2 = nn.tanh %1 : (tensor<{S}x{T}>) -> tensor<{S}x{T}>
  func.return %2 : tensor<{S}x{T}>
}}
"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize("dtype, rows, cols", [("f16", 3, 37), ("bf16", 2, 64), ("f32", 1667, 3), ("f32", 5, 4)])
def test_vectors_and_the_scalar_tail_match_the_reference(dtype, rows, cols, tmp_path):
    module = fuse(CHAIN.format(S=f"{rows}x{cols}", C=cols, T=dtype))
    code = program_of(module).code
    assert "((const partita_v16*)in0)[iv]" in code and "((const partita_v16*)in1)[iv]" in code
    assert "((partita_v16*)out)[iv] = wo;" in code
    assert check_kernels(module, tmp_path) == [""]


def test_sm90_injective_kernels_load_and_store_128_bits():
    from support.sass import compiled_sass  # tests/support/sass.py

    program = program_of(fuse(CHAIN.format(S="64x768", C=768, T="f16")))
    _, sass = compiled_sass(program.code)
    (kernel,) = program.kernels.values()
    text = sass[kernel.entry]
    assert len(re.findall(r"LDG\.E\.128", text)) >= 2 and "STG.E.128" in text
    assert not re.search(r"\b(STL|LDL)\b", text)
