"""simplify-inference: batch norms folded into convolutions or decomposed into a broadcast
multiply and add compute what they computed (reference executor, before vs after), and
the folded CNN's first convolution is a CUTLASS conv2d + bias + relu after
convert-layout."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from xdsl.passes import PassPipeline

from partita.dialects import make_context
from partita.frontends.onnx import import_onnx
from partita.ir import parse_module, verify_module
from partita.runtime.reference import run
from partita.transforms import get_all_passes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# A batch norm on each kind of producer: an NCHW conv (folds), an NHWC conv (folds), a
# relu (decomposes on axis 1), a conv whose result is used twice (decomposes), the last
# axis (decomposes to [C] constants), non-constant gamma / beta / mean (arithmetic on the
# vectors) and a non-constant variance (left alone).
TEMPLATE = """
func.func @main(%x: tensor<?x3x9x9xT>, %y: tensor<2x7x7x4xT>, %g: tensor<4xT>, %b: tensor<4xT>) -> (tensor<?x6x5x5xT>, tensor<2x7x7x4xT>, tensor<?x6x5x5xT>) {
  %w = nn.constant dense<WEIGHT_A> : tensor<6x3x3x3xT>
  %0 = nn.conv2d %x, %w {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>} : (tensor<?x3x9x9xT>, tensor<6x3x3x3xT>) -> tensor<?x6x5x5xT>
  %g6 = nn.constant dense<[1.5, 0.5, -1.0, 2.0, 0.25, 1.0]> : tensor<6xT>
  %b6 = nn.constant dense<[0.1, -0.2, 0.3, 0.0, 0.5, -1.0]> : tensor<6xT>
  %m6 = nn.constant dense<[0.2, -0.1, 0.0, 0.4, -0.3, 0.05]> : tensor<6xT>
  %v6 = nn.constant dense<[1.0, 0.5, 2.0, 0.25, 3.0, 1.5]> : tensor<6xT>
  %1 = nn.batch_norm %0, %g6, %b6, %m6, %v6 {epsilon = 1.0e-3 : f64} : (tensor<?x6x5x5xT>, tensor<6xT>, tensor<6xT>, tensor<6xT>, tensor<6xT>) -> tensor<?x6x5x5xT>
  %2 = nn.relu %1 : (tensor<?x6x5x5xT>) -> tensor<?x6x5x5xT>
  %3 = nn.batch_norm %2, %g6, %m6, %b6, %v6 : (tensor<?x6x5x5xT>, tensor<6xT>, tensor<6xT>, tensor<6xT>, tensor<6xT>) -> tensor<?x6x5x5xT>
  %u = nn.constant dense<WEIGHT_B> : tensor<4x3x3x4xT>
  %4 = nn.conv2d %y, %u {data_layout = "NHWC", kernel_layout = "OHWI", padding = array<i64: 1, 1, 1, 1>} : (tensor<2x7x7x4xT>, tensor<4x3x3x4xT>) -> tensor<2x7x7x4xT>
  %g4 = nn.constant dense<[1.5, 0.5, -1.0, 2.0]> : tensor<4xT>
  %b4 = nn.constant dense<[0.1, -0.2, 0.3, 0.0]> : tensor<4xT>
  %m4 = nn.constant dense<[0.2, -0.1, 0.0, 0.4]> : tensor<4xT>
  %v4 = nn.constant dense<[1.0, 0.5, 2.0, 0.25]> : tensor<4xT>
  %5 = nn.batch_norm %4, %g4, %b4, %m4, %v4 {axis = 3 : i64} : (tensor<2x7x7x4xT>, tensor<4xT>, tensor<4xT>, tensor<4xT>, tensor<4xT>) -> tensor<2x7x7x4xT>
  %6 = nn.batch_norm %5, %g, %b, %m4, %v4 {axis = -1 : i64} : (tensor<2x7x7x4xT>, tensor<4xT>, tensor<4xT>, tensor<4xT>, tensor<4xT>) -> tensor<2x7x7x4xT>
  %7 = nn.batch_norm %6, %g4, %b4, %g, %v4 {axis = 3 : i64} : (tensor<2x7x7x4xT>, tensor<4xT>, tensor<4xT>, tensor<4xT>, tensor<4xT>) -> tensor<2x7x7x4xT>
  %8 = nn.batch_norm %7, %g4, %b4, %m4, %g {axis = 3 : i64} : (tensor<2x7x7x4xT>, tensor<4xT>, tensor<4xT>, tensor<4xT>, tensor<4xT>) -> tensor<2x7x7x4xT>
  %w2 = nn.constant dense<WEIGHT_C> : tensor<6x3x1x1xT>
  %9 = nn.conv2d %x, %w2 {strides = array<i64: 2, 2>} : (tensor<?x3x9x9xT>, tensor<6x3x1x1xT>) -> tensor<?x6x5x5xT>
  %10 = nn.batch_norm %9, %g6, %b6, %m6, %v6 : (tensor<?x6x5x5xT>, tensor<6xT>, tensor<6xT>, tensor<6xT>, tensor<6xT>) -> tensor<?x6x5x5xT>
  %11 = nn.add %10, %9 : (tensor<?x6x5x5xT>, tensor<?x6x5x5xT>) -> tensor<?x6x5x5xT>
  %12 = nn.add %11, %3 : (tensor<?x6x5x5xT>, tensor<?x6x5x5xT>) -> tensor<?x6x5x5xT>
  func.return %3, %8, %12 : tensor<?x6x5x5xT>, tensor<2x7x7x4xT>, tensor<?x6x5x5xT>
}
"""


def _dense(shape: tuple[int, ...], seed: int) -> str:
    values = np.random.default_rng(seed).uniform(-1, 1, shape).round(3)
    return np.array2string(values, separator=", ", threshold=10**6, max_line_width=10**6).replace("\n", "")


def _model(dtype: str) -> str:
    text = TEMPLATE.replace("WEIGHT_A", _dense((6, 3, 3, 3), 1)).replace("WEIGHT_B", _dense((4, 3, 3, 4), 2))
    return text.replace("WEIGHT_C", _dense((6, 3, 1, 1), 3)).replace("xT>", f"x{dtype}>").replace("<4xT>", f"<4x{dtype}>").replace("<6xT>", f"<6x{dtype}>")


def _simplify(module, passes: str = "simplify-inference") -> None:
    PassPipeline.parse_spec(get_all_passes(), passes).apply(make_context(), module)
    verify_module(module)


def _op_names(module) -> list[str]:
    return [op.name for op in module.walk() if op.name.startswith("nn.")]


@pytest.mark.parametrize(("dtype", "tol"), [("f32", 2e-5), ("f16", 2e-2)])
def test_rewritten_batch_norms_compute_the_same(dtype: str, tol: float) -> None:
    np_dtype = {"f32": np.float32, "f16": np.float16}[dtype]
    original = parse_module(_model(dtype), make_context(), "bn.mlir")
    module = parse_module(_model(dtype), make_context(), "bn.mlir")
    _simplify(module)
    names = _op_names(module)
    # Two folds (the NCHW and NHWC convs), the non-constant variance left alone.
    assert names.count("nn.batch_norm") == 1 and names.count("nn.bias_add") == 2
    assert names.count("nn.conv2d") == 3 and names.count("nn.subtract") == 2 and "nn.reshape" not in names
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 3, 9, 9)).astype(np_dtype)
    y = rng.standard_normal((2, 7, 7, 4)).astype(np_dtype)
    g = rng.uniform(0.5, 2.0, 4).astype(np_dtype)  # also a variance: positive
    b = rng.standard_normal(4).astype(np_dtype)
    for got, want in zip(run(module, x, y, g, b), run(original, x, y, g, b), strict=True):
        assert got.dtype == np_dtype and got.shape == want.shape
        scale = max(1.0, float(np.abs(want.astype(np.float32)).max()))
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol * scale)


def test_second_run_changes_nothing() -> None:
    module = parse_module(_model("f32"), make_context(), "bn.mlir")
    _simplify(module)
    once = str(module)
    _simplify(module)
    assert str(module) == once


def test_cnn_example_folds_and_computes_the_same() -> None:
    original = import_onnx(EXAMPLES / "cnn.onnx")
    module = import_onnx(EXAMPLES / "cnn.onnx")
    _simplify(module)
    names = _op_names(module)
    assert "nn.batch_norm" not in names and names.count("nn.bias_add") == 1
    assert names.count("nn.constant") == _op_names(original).count("nn.constant") - 3  # -4 parameters, +1 shift, weight replaced
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    (got,), (want,) = run(module, x), run(original, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_cnn_first_conv_is_a_cutlass_conv_bias_relu_after_convert_layout() -> None:
    """The pipeline order the compile driver uses: simplify-inference, convert-layout,
    then partitioning; the folded conv, its bias and the relu are one CUTLASS partition."""
    module = import_onnx(EXAMPLES / "cnn.onnx")
    _simplify(module, "simplify-inference,convert-layout{conv2d=NHWC},partition-eager{backends=cutlass}")
    composites = sorted(
        str(op.attributes["byoc.composite"].data) for op in module.walk() if "byoc.composite" in op.attributes
    )
    assert composites.count("cutlass.conv2d_bias_relu") == 2, composites
