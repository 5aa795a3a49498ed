"""Kernel families in the roofline: on ``sm_90a`` a cutlass candidate is costed with the
Hopper spec (``cutlass-sm90a``) where its kernel spec has a CUTLASS 3 kernel (a bias beside a
residual too: the tensor-broadcast epilogue, and f32 as TF32) and with the Sm80 one elsewhere
(3xTF32, exact f32); FP8 on the Sm80 / Sm89 kernels is costed at the f16 peak (Hopper emulates their 8-bit ``mma.sync`` with f16 HMMA)."""

from __future__ import annotations

import pytest

from partita.collage.cost import RooflineEstimator, load_devices
from partita.collage.ir_graph import function_candidate
from partita.dialects import make_context
from partita.ir import parse_module
from partita.target import CompilationConfig
from partita.transforms.collage.families import HOPPER_CUTLASS, HOPPER_FAMILIES, kernel_families

HOPPER = CompilationConfig(["cuda -arch=sm_90a", "cutlass", "llvm"])
SM90 = CompilationConfig(["cuda -arch=sm_90", "cutlass", "llvm"])


def _candidate(body: str, args: str, result: str):
    text = f"func.func @main({args}) -> {result} {{\n{body}\n}}"
    (function,) = parse_module(text, make_context()).ops
    return function_candidate(function, "cutlass")


def _dense(t: str, epilogue: str = "gelu", n: int = 4096):
    ty = f"tensor<{n}x{n}x{t}>"
    lines = [f"  %0 = nn.dense %x, %w : ({ty}, {ty}) -> {ty}",
             f"  %1 = nn.add %0, %b : ({ty}, tensor<{n}x{t}>) -> {ty}"]
    if epilogue == "gelu":
        lines.append(f"  %2 = nn.gelu %1 : ({ty}) -> {ty}")
    else:  # a residual beside the bias
        lines.append(f"  %2 = nn.add %1, %r : ({ty}, {ty}) -> {ty}")
    lines.append(f"  func.return %2 : {ty}")
    return _candidate("\n".join(lines), f"%x: {ty}, %w: {ty}, %b: tensor<{n}x{t}>, %r: {ty}", ty)


def _estimators():
    return RooflineEstimator("h100"), RooflineEstimator("h100", families=kernel_families(HOPPER))


def test_a_hopper_gemm_is_costed_with_the_hopper_spec() -> None:
    graph, candidate = _dense("f16")
    assert HOPPER_CUTLASS(graph, candidate) == "cutlass-sm90a"
    plain, hopper = (e.breakdown(graph, candidate) for e in _estimators())
    # the epilogue's cost is the same; the main loop's follows each spec's efficiency
    # (measured on an H200: the non-persistent Hopper kernel below the Sm80 one)
    assert plain["compute_time"] - hopper["compute_time"] == pytest.approx(_hopper_saving())
    assert plain["time"] - hopper["time"] == pytest.approx(_hopper_saving())


def _hopper_saving() -> float:
    """Seconds the Hopper spec takes off (or adds to) a 4096^3 f16 GEMM on an H100."""
    specs = load_devices()
    peak, backends = specs["devices"]["h100"]["tensor_flops"]["f16"], specs["backends"]
    gemm = 2 * 4096**3 / peak
    return gemm / backends["cutlass"]["efficiency"]["gemm"] - gemm / backends["cutlass-sm90a"]["efficiency"]["gemm"]


def test_a_bias_beside_a_residual_is_a_hopper_gemm() -> None:
    """A projection back into the residual stream (bias and residual: the tensor-broadcast
    epilogue) is a Hopper kernel on sm_90a, costed so."""
    graph, candidate = _dense("f16", "residual")
    assert HOPPER_CUTLASS(graph, candidate) == "cutlass-sm90a"
    plain, hopper = (e.estimate(graph, candidate) for e in _estimators())
    assert plain - hopper == pytest.approx(_hopper_saving())


def test_what_stays_on_sm80_kernels_keeps_the_sm80_spec() -> None:
    """An f32 GEMM is a TF32 Hopper kernel in the target's default math; in 3xTF32 or
    exact f32 it stays on the Sm80 kernels, and costs the same with and without the family."""
    graph, candidate = _dense("f32", "gelu")
    assert HOPPER_CUTLASS(graph, candidate) == "cutlass-sm90a"
    for math in ("3xtf32", "ffma"):
        assert HOPPER_FAMILIES[math](graph, candidate) == "cutlass"
    exact = kernel_families(CompilationConfig(["cuda -arch=sm_90a", "cutlass -use_3xtf32=1", "llvm"]))
    assert exact == {"cutlass": HOPPER_FAMILIES["3xtf32"]} and exact["cutlass"].name != HOPPER_CUTLASS.name
    plain, hopper = (e.estimate(graph, candidate) for e in _estimators())
    sm80 = RooflineEstimator("h100", families=exact).estimate(graph, candidate)
    assert sm80 == plain and hopper < plain  # TF32 wgmma: the Hopper spec's efficiency


def test_fp8_is_costed_by_the_units_that_run_it() -> None:
    """Sm89 FP8 kernels (the cutlass target below sm_90a) run f16 HMMA on Hopper: the f16
    peak; the Hopper FP8 kernel is wgmma on 8-bit floats: the FP8 peak."""
    n = 4096
    a, w, out = f"tensor<{n}x{n}xf8E4M3FN>", f"tensor<{n}x{n}xf8E4M3FN>", f"tensor<{n}x{n}xf32>"
    graph, candidate = _candidate(f"  %0 = nn.matmul_float8 %a, %w {{transpose_b = true}} : ({a}, {w}) -> {out}\n"
                                  f"  func.return %0 : {out}", f"%a: {a}, %w: {w}", out)
    assert HOPPER_CUTLASS(graph, candidate) == "cutlass-sm90a"
    plain, hopper = (e.breakdown(graph, candidate) for e in _estimators())
    device = load_devices()["devices"]["h100"]
    backends = load_devices()["backends"]
    flops = 2 * n**3
    assert plain["compute_time"] == pytest.approx(flops / (device["tensor_flops"]["f16"] * backends["cutlass"]["efficiency"]["gemm"]))
    assert hopper["compute_time"] == pytest.approx(flops / (device["tensor_flops"]["f8"] * backends["cutlass-sm90a"]["efficiency"]["gemm"]))


def test_only_an_sm_90a_cutlass_target_has_a_family() -> None:
    assert kernel_families(SM90) == {}
    assert kernel_families(CompilationConfig(["cuda -arch=sm_90a", "llvm"])) == {}
    assert kernel_families(HOPPER) == {"cutlass": HOPPER_CUTLASS}
    plain, hopper = _estimators()
    assert plain.name != hopper.name  # a persistent cost cache keeps their estimates apart


def _conv(kernel: int) -> tuple:
    x, w, y = "tensor<8x28x28x256xf16>", f"tensor<256x{kernel}x{kernel}x256xf16>", "tensor<8x28x28x256xf16>"
    pad = kernel // 2
    body = (f"  %0 = nn.conv2d %x, %w {{data_layout = \"NHWC\", kernel_layout = \"OHWI\", "
            f"padding = array<i64: {pad}, {pad}, {pad}, {pad}>}} : ({x}, {w}) -> {y}\n  func.return %0 : {y}")
    return _candidate(body, f"%x: {x}, %w: {w}", y)


def test_a_pointwise_convolution_is_costed_as_the_hopper_gemm_it_runs() -> None:
    """A 1x1 convolution is its GEMM's Hopper kernel, costed at that spec's GEMM efficiency;
    a 3x3 one stays an Sm80 implicit GEMM, costed as before."""
    pointwise, wide = _conv(1), _conv(3)
    assert HOPPER_CUTLASS(*pointwise) == "cutlass-sm90a" and HOPPER_CUTLASS(*wide) == "cutlass"
    plain, hopper = _estimators()
    assert hopper.estimate(*pointwise) < plain.estimate(*pointwise)
    assert hopper.estimate(*wide) == plain.estimate(*wide)
    specs = load_devices()["backends"]
    assert specs["cutlass-sm90a"]["efficiency"]["conv"] == specs["cutlass-sm90a"]["efficiency"]["gemm"]
