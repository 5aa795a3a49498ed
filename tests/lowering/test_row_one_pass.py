"""Softmax, layer_norm and rms_norm row kernels read the row once for their statistics
(online max/sum, Welford, sum of squares) and once for the output, and match the
reference on the host (``tests/support/cuda_host.py``), masks, NaN and infinities included;
rms_norm in f16 / bf16 / f32 is a ``rowwise`` kernel (it was a window kernel whose threads
each re-read the whole row)."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from support.cuda_host import HostKernels, have_gxx  # tests/support/cuda_host.py
from support.kernel_check import (  # tests/support/kernel_check.py
    build_for_host,
    check_kernels,
    fuse,
    fused_functions,
    host_ops,
    launch_beside_reference,
)
from xdsl.dialects.builtin import DictionaryAttr, ModuleOp, StringAttr

from partita.lowering.cuda.codegen import program_of
from partita.lowering.cuda.records import RECORDS, fused_record
from partita.runtime.reference import run

pytestmark = pytest.mark.skipif(not have_gxx(), reason="needs g++")

ROWS = """
func.func @main(%x: tensor<5x{C}x{T}>, %g: tensor<{C}x{T}>, %b: tensor<{C}x{T}>) -> (tensor<5x{C}x{T}>, tensor<5x{C}x{T}>, tensor<5x{C}x{T}>) {{
  %0 = nn.softmax %x {{axis = 1 : i64}} : (tensor<5x{C}x{T}>) -> tensor<5x{C}x{T}>
  %1 = nn.layer_norm %x, %g, %b {{axis = 1 : i64, epsilon = 1.0e-05 : f64}} : (tensor<5x{C}x{T}>, tensor<{C}x{T}>, tensor<{C}x{T}>) -> tensor<5x{C}x{T}>
  %2 = nn.rms_norm %x, %g {{axis = 1 : i64, epsilon = 1.0e-06 : f64}} : (tensor<5x{C}x{T}>, tensor<{C}x{T}>) -> tensor<5x{C}x{T}>
  func.return %0, %1, %2 : tensor<5x{C}x{T}>, tensor<5x{C}x{T}>, tensor<5x{C}x{T}>
}}
"""
NP = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}


def _row_passes(code: str, entry: str) -> int:
    """Loops over a row (``j`` or ``jv`` striding by the block) in one kernel's code."""
    body = code.split(f"{entry}(")[1]
    return len(re.findall(r"for \((?:int|long long) jv? = (?:threadIdx\.x|lane);", body.split('extern "C"')[0]))


@pytest.mark.parametrize("dtype, cols, schedule", [
    ("f16", 96, "warp-per-row"), ("bf16", 40, "warp-per-row"), ("f32", 36, "warp-per-row"),
    ("f16", 33, "warp-per-row"), ("f32", 1000, "warp-per-row"), ("f32", 1028, "block-per-row"),
    ("f16", 2056, "block-per-row"), ("bf16", 300, "block-per-row")])
def test_one_statistics_pass_and_the_reference(dtype, cols, schedule, tmp_path):
    module = fuse(ROWS.format(C=cols, T=dtype))
    assert host_ops(module) == []
    program = program_of(module)
    kinds = {k.anchor: k.kind for k in program.kernels.values()}
    assert kinds == {"nn.softmax": "rowwise", "nn.layer_norm": "rowwise", "nn.rms_norm": "rowwise"}
    for kernel in program.kernels.values():
        assert _row_passes(program.code, kernel.entry) == 2, kernel.anchor  # statistics + output
        assert kernel.schedule == schedule
        assert (kernel.block, kernel.rows_per_block) == ((128, 4) if schedule == "warp-per-row" else (256, 1))
    assert "partita_block_softmax(" in program.code and "partita_block_welford(" in program.code
    assert sorted(check_kernels(module, tmp_path)) == ["nn.layer_norm", "nn.rms_norm", "nn.softmax"]


def _host_run(text: str, inputs: list[np.ndarray], tmp_path) -> list[tuple[np.ndarray, np.ndarray]]:
    """(kernel output, reference output) of each fused function of ``text`` on ``inputs``
    (the function's arguments, which must be the entry's)."""
    module = fuse(text)
    _, records, host = build_for_host(module, tmp_path)
    return [launch_beside_reference(function, name, records[name], host,
                                    [inputs[0], *inputs[1:len(records[name].inputs)]])
            for name, function in fused_functions(module).items()]


@pytest.mark.filterwarnings("ignore:invalid value")  # the reference's inf - inf
@pytest.mark.parametrize("dtype, cols", [("f16", 64), ("f32", 37)])
def test_softmax_masks_nan_and_infinities(dtype, cols, tmp_path):
    text = f"""
func.func @main(%x: tensor<6x{cols}x{dtype}>) -> tensor<6x{cols}x{dtype}> {{
  %0 = nn.softmax %x {{axis = 1 : i64}} : (tensor<6x{cols}x{dtype}>) -> tensor<6x{cols}x{dtype}>
  func.return %0 : tensor<6x{cols}x{dtype}>
}}
"""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, cols)).astype(np.float32) * 4
    x[0, : cols // 2] = -np.inf          # masked keys first: the running max starts at -inf
    x[1, 1::3] = -np.inf                 # scattered masks
    x[2, :] = -np.inf                    # a fully masked row (NaN, as the reference)
    x[3, cols - 1] = np.nan              # NaN spreads over its row
    x[4, 5] = np.inf                     # +inf: NaN, as the reference
    x[5, :] = 30.0 * np.arange(cols) / cols  # a growing maximum rescales the sum many times
    ((out, expected),) = _host_run(text, [x.astype(NP[dtype])], tmp_path)
    out, expected = out.astype(np.float64), expected.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
    assert np.isnan(out[2]).all() and np.isnan(out[3]).all() and not np.isnan(out[0]).any()
    np.testing.assert_allclose(out, expected, rtol=4e-3, atol=4e-3, equal_nan=True)


@pytest.mark.parametrize("cols", [512, 45])
def test_layer_norm_statistics_survive_a_large_mean(cols, tmp_path):
    """Welford keeps the variance of values near 1e4 (E[x^2] - E[x]^2 in f32 would lose
    most of its digits)."""
    text = f"""
func.func @main(%x: tensor<4x{cols}xf32>, %g: tensor<{cols}xf32>, %b: tensor<{cols}xf32>) -> tensor<4x{cols}xf32> {{
  %0 = nn.layer_norm %x, %g, %b {{axis = 1 : i64, epsilon = 1.0e-05 : f64}} : (tensor<4x{cols}xf32>, tensor<{cols}xf32>, tensor<{cols}xf32>) -> tensor<4x{cols}xf32>
  func.return %0 : tensor<4x{cols}xf32>
}}
"""
    rng = np.random.default_rng(1)
    x = (1e4 + rng.standard_normal((4, cols))).astype(np.float32)
    g, b = np.ones(cols, np.float32), np.zeros(cols, np.float32)
    ((out, _),) = _host_run(text, [x, g, b], tmp_path)
    x64 = x.astype(np.float64)
    exact = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    # the f32 mean of values near 1e4 is good to its ulp (~1e-3): x - mean carries that
    np.testing.assert_allclose(out, exact, rtol=0, atol=3e-3)
    np.testing.assert_allclose(out.std(1), 1.0, atol=1e-3)  # the variance itself is right


def test_sm90_one_pass_kernels_load_128_bits_without_spills():
    from support.sass import compiled_sass  # tests/support/sass.py

    program = program_of(fuse(ROWS.format(C=768, T="f16")))
    _, sass = compiled_sass(program.code)
    assert len(program.kernels) == 3
    for kernel in program.kernels.values():
        text = sass[kernel.entry]
        assert "LDG.E.128" in text, kernel.anchor
        assert "STG.E.128" in text and "STG.E.U16" not in text, f"{kernel.anchor} stores scalars"
        assert not re.search(r"\b(STL|LDL)\b", text), f"{kernel.anchor} spills to local memory"


VECTOR_OUT = "((partita_v16*)(out + r * cols))[jv] = wo;"


@pytest.mark.parametrize("dtype, cols, out, vector", [
    ("f16", 64, "f16", True), ("f32", 1028, "f32", True), ("f32", 64, "f16", False), ("f16", 33, "f16", False)])
def test_the_output_pass_stores_128_bits_with_a_prologue_and_an_epilogue(dtype, cols, out, vector, tmp_path):
    """A residual add before the norm (its operands read as vectors in both passes), a
    ReLU and a cast after it: the output pass computes a 16-byte vector of outputs per
    thread and stores it at once when the output's elements per vector are the input's
    (a scalar loop for an f32 row cast to f16, or a row of no whole vectors)."""
    cast = "" if out == dtype else f"""
  %4 = nn.cast %3 : (tensor<7x{cols}x{dtype}>) -> tensor<7x{cols}x{out}>"""
    last = "%4" if cast else "%3"
    text = f"""
func.func @main(%x: tensor<7x{cols}x{dtype}>, %r: tensor<7x{cols}x{dtype}>, %g: tensor<{cols}x{dtype}>, %b: tensor<{cols}x{dtype}>) -> tensor<7x{cols}x{out}> {{
  %0 = nn.add %x, %r : (tensor<7x{cols}x{dtype}>, tensor<7x{cols}x{dtype}>) -> tensor<7x{cols}x{dtype}>
  %1 = nn.layer_norm %0, %g, %b {{axis = 1 : i64, epsilon = 1.0e-05 : f64}} : (tensor<7x{cols}x{dtype}>, tensor<{cols}x{dtype}>, tensor<{cols}x{dtype}>) -> tensor<7x{cols}x{dtype}>
  %3 = nn.relu %1 : (tensor<7x{cols}x{dtype}>) -> tensor<7x{cols}x{dtype}>{cast}
  func.return {last} : tensor<7x{cols}x{out}>
}}
"""
    module = fuse(text)
    (kernel,) = program_of(module).kernels.values()
    assert kernel.kind == "rowwise" and (VECTOR_OUT in kernel.code) == vector
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(s).astype(NP[dtype]) for s in ((7, cols), (7, cols), (cols,), (cols,))]
    ((got, want),) = _host_run(text, inputs, tmp_path)
    tol = 1e-5 if out == "f32" else 4e-3
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    assert (got.astype(np.float32) >= 0).all() and (got.astype(np.float32) > 0).any()


@pytest.mark.parametrize("cols, schedule", [(64, "warp-per-row"), (2048 + 8, "block-per-row")])
def test_one_block_strides_over_every_row(cols, schedule, tmp_path):
    """Eleven rows through one block: the warp-per-row kernel's block takes four rows at a
    time (its last warps past the end), the block-per-row one a row at a time."""
    text = f"""
func.func @main(%x: tensor<11x{cols}xf16>, %g: tensor<{cols}xf16>) -> tensor<11x{cols}xf16> {{
  %0 = nn.rms_norm %x, %g {{axis = 1 : i64, epsilon = 1.0e-06 : f64}} : (tensor<11x{cols}xf16>, tensor<{cols}xf16>) -> tensor<11x{cols}xf16>
  func.return %0 : tensor<11x{cols}xf16>
}}
"""
    module = fuse(text)
    program = program_of(module)
    (kernel,) = program.kernels.values()
    assert kernel.schedule == schedule
    rec = RECORDS["rowwise"].from_attr(fused_record(kernel))
    assert rec.geometry((11, cols))[0][0] == (3 if schedule == "warp-per-row" else 11)
    host = HostKernels(program.code, [rec], tmp_path)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((11, cols)).astype(np.float16)
    g = rng.standard_normal(cols).astype(np.float16)
    (function,) = fused_functions(module).values()
    clone = function.clone()
    clone.sym_visibility = StringAttr("public")
    (expected,) = run(ModuleOp([clone]), x, g, entry=function.sym_name.data)
    out = np.zeros_like(expected)
    host.launch(rec, (1, 1, 1), (rec.block, 1, 1), [x, g], out)
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), rtol=4e-3, atol=4e-3)


def test_records_from_before_named_schedules_read_as_a_block_per_row():
    program = program_of(fuse(ROWS.format(C=4096, T="f32")))
    kernel = next(k for k in program.kernels.values() if k.anchor == "nn.softmax")
    record = fused_record(kernel)
    old = DictionaryAttr({k: v for k, v in record.data.items() if k not in ("rows_per_block", "schedule")})
    rec = RECORDS["rowwise"].from_attr(old)
    assert (rec.rows_per_block, rec.schedule) == (1, "block-per-row")
    assert rec.geometry((5, 4096)) == ((5, 1, 1), (kernel.block, 1, 1))
