"""convert-layout{conv2d=NHWC}: semantics preserved (reference executor) with the fewest
transposes left."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from partita.dialects import make_context, nn
from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError, parse_module, verify_module
from partita.runtime.reference import run
from partita.transforms.convert_layout import ConvertLayout

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def convert(module):
    ConvertLayout(conv2d="NHWC").apply(make_context(), module)
    verify_module(module)
    return module


def ops_of(module, cls):
    return [op for op in module.walk() if isinstance(op, cls)]


@pytest.mark.parametrize("batch", [1, 3])
def test_example_cnn_keeps_its_results_with_two_transposes(batch):
    x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
    module = import_onnx(EXAMPLES / "cnn.onnx")
    (before,) = run(module, x)
    assert not ops_of(module, nn.TransposeOp)
    convert(module)
    (after,) = run(module, x)
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-6)
    transposes = ops_of(module, nn.TransposeOp)
    assert [t.perm for t in transposes] == [(0, 2, 3, 1), (0, 3, 1, 2)]
    # Entry transpose reads the argument; the exit one feeds the (layout-sensitive) Flatten.
    assert transposes[0].input.owner is None or not isinstance(transposes[0].input.owner,
                                                                nn.NNOp)
    assert isinstance(next(iter(transposes[1].result.uses)).operation, nn.ReshapeOp)
    convs = ops_of(module, nn.Conv2DOp)
    assert len(convs) == 2 and all(c.data_layout == "NHWC" and c.kernel_layout == "OHWI"
                                   for c in convs)
    assert all(p.layout == "NHWC" for p in ops_of(module, nn.MaxPool2DOp))
    assert ops_of(module, nn.BatchNormOp)[0].axis == 3


RESIDUAL = """
func.func @main(%x: tensor<2x2x5x5xf32>, %w: tensor<2x1x3x3xf32>, %s: tensor<2xf32>, %w2: tensor<2x2x3x3xf32>) -> tensor<2x2x5x5xf32> {
  %0 = nn.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>, groups = 2 : i64} : (tensor<2x2x5x5xf32>, tensor<2x1x3x3xf32>) -> tensor<2x2x5x5xf32>
  %1 = nn.lrn %0 {size = 3 : i64} : (tensor<2x2x5x5xf32>) -> tensor<2x2x5x5xf32>
  %2 = nn.batch_norm %1, %s, %s, %s, %s : (tensor<2x2x5x5xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<2x2x5x5xf32>
  %3 = nn.pad %2 {pad_before = array<i64: 0, 0, 1, 0>, pad_after = array<i64: 0, 0, 0, 1>} : (tensor<2x2x5x5xf32>) -> tensor<2x2x6x6xf32>
  %4 = nn.avg_pool2d %3 {pool_size = array<i64: 2, 2>, count_include_pad = true, strides = array<i64: 1, 1>} : (tensor<2x2x6x6xf32>) -> tensor<2x2x5x5xf32>
  %5 = nn.softmax %4 {axis = 1 : i64} : (tensor<2x2x5x5xf32>) -> tensor<2x2x5x5xf32>
  %6 = nn.multiply %5, %0 : (tensor<2x2x5x5xf32>, tensor<2x2x5x5xf32>) -> tensor<2x2x5x5xf32>
  %7 = nn.concatenate %6, %x {axis = 1 : i64} : (tensor<2x2x5x5xf32>, tensor<2x2x5x5xf32>) -> tensor<2x4x5x5xf32>
  %8 = nn.conv2d %7, %w2 {padding = array<i64: 1, 1, 1, 1>, groups = 2 : i64} : (tensor<2x4x5x5xf32>, tensor<2x2x3x3xf32>) -> tensor<2x2x5x5xf32>
  func.return %8 : tensor<2x2x5x5xf32>
}
"""


def test_propagation_through_every_agnostic_op_preserves_semantics():
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((2, 2, 5, 5)).astype(np.float32),
            rng.standard_normal((2, 1, 3, 3)).astype(np.float32),
            (np.abs(rng.standard_normal(2)) + 0.5).astype(np.float32)]
    module = parse_module(RESIDUAL, make_context())
    args.append(rng.standard_normal((2, 2, 3, 3)).astype(np.float32))
    (before,) = run(module, *args)
    convert(module)
    (after,) = run(module, *args)
    np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-6)
    data_transposes = [t for t in ops_of(module, nn.TransposeOp)
                       if t.input.name_hint not in ("w", "w2")]
    # Entry transposes of %x (one per use: conv and concatenate share it), one exit.
    assert len(data_transposes) <= 3
    for op in module.walk():
        if isinstance(op, nn.LRNOp | nn.SoftmaxOp | nn.ConcatenateOp | nn.BatchNormOp):
            assert op.axis == 3, op
        if isinstance(op, nn.AvgPool2DOp):
            assert op.layout == "NHWC"
        if isinstance(op, nn.PadOp):
            assert op.pad_before == (0, 1, 0, 0) and op.pad_after == (0, 0, 1, 0)


def test_only_nhwc_is_supported():
    module = import_onnx(EXAMPLES / "cnn.onnx")
    with pytest.raises(PartitaError, match="unsupported conv2d layout 'NCHW'"):
        ConvertLayout(conv2d="NCHW").apply(make_context(), module)
