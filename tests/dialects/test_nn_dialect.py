"""The nn dialect: builders infer types, verifiers reject bad ops, text round trips."""

import io

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, tensor
from xdsl.dialects.builtin import BFloat16Type, Float16Type, TensorType, f32
from xdsl.ir import Block
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from partita.dialects import nn
from partita.dialects.nn import DYN

F16 = Float16Type()


def block_args(*types):
    return Block(arg_types=types).args


def t(*shape, elt=f32):
    return TensorType(elt, shape)


def make_ctx() -> Context:
    ctx = Context()
    for d in (builtin.Builtin, func.Func, arith.Arith, tensor.Tensor, nn.NN):
        ctx.load_dialect(d)
    return ctx


# -- shape functions -----------------------------------------------------------------


def test_broadcast_rules_with_dynamic_dims():
    assert nn.broadcast_shapes((2, 1, 4), (3, 1)) == (2, 3, 4)
    assert nn.broadcast_shapes((DYN, 4), (1, 4)) == (DYN, 4)
    assert nn.broadcast_shapes((DYN, 4), (5, 4)) == (5, 4)
    assert nn.broadcast_shapes((DYN,), (DYN,)) == (DYN,)
    with pytest.raises(VerifyException, match="not broadcastable"):
        nn.broadcast_shapes((2, 3), (4, 3))


def test_pool_and_conv_dims():
    assert nn.conv_output_dim(5, 2, 2, 0, 0, 1, ceil_mode=False) == 2
    assert nn.conv_output_dim(5, 2, 2, 0, 0, 1, ceil_mode=True) == 3
    # ceil_mode drops a window that would start in the trailing padding
    assert nn.conv_output_dim(4, 2, 2, 1, 1, 1, ceil_mode=True) == 3
    assert nn.conv_output_dim(DYN, 3, 1, 1, 1, 1) == DYN
    assert nn.infer_conv2d_shape((1, 56, 56, 64), (128, 3, 3, 64), (2, 2), (1, 1, 1, 1),
                                 (1, 1), 1, "NHWC", "OHWI") == (1, 28, 28, 128)


# -- builders ------------------------------------------------------------------------


def test_builders_infer_result_types():
    x, w, b, img, k, v = block_args(t(DYN, 4), t(8, 4), t(3, 1, 4), t(1, 6, 9, 9),
                                    t(12, 2, 3, 3), t(8))
    assert nn.AddOp(x, b).result.type == t(3, DYN, 4)
    assert nn.DenseOp(x, w).result.type == t(DYN, 8)
    assert nn.MatmulOp(b, nn.TransposeOp(w, [1, 0])).result.type == t(3, 1, 8)
    assert nn.BatchMatmulOp(b, b).result.type == t(3, 1, 1)
    assert nn.BatchMatmulOp(b, b, transpose_a=True, transpose_b=False).result.type == t(3, 4, 4)
    conv = nn.Conv2DOp(img, k, strides=[2, 2], padding=[1, 1, 1, 1], groups=3)
    assert conv.result.type == t(1, 12, 5, 5)
    assert (conv.groups, conv.strides, conv.dilation, conv.data_layout) == (3, (2, 2), (1, 1),
                                                                           "NCHW")
    pool = nn.MaxPool2DOp(img, [2, 2], strides=[2, 2], ceil_mode=True)
    assert pool.result.type == t(1, 6, 5, 5) and pool.ceil_mode is True
    avg = nn.AvgPool2DOp(img, [3, 3], padding=[1, 1, 1, 1], count_include_pad=True)
    assert avg.result.type == t(1, 6, 9, 9) and avg.count_include_pad is True
    assert nn.GlobalAvgPool2DOp(img).result.type == t(1, 6, 1, 1)
    assert nn.PadOp(x, [1, 0], [2, 3]).result.type == t(DYN, 7)
    assert nn.ReshapeOp(img, [6, DYN]).result.type == t(6, DYN)
    assert nn.ConcatenateOp([x, x], axis=0).result.type == t(DYN, 4)
    assert nn.ConcatenateOp([w, w], axis=1).result.type == t(8, 8)
    assert nn.BiasAddOp(w, nn.ConstantOp(np.zeros(4, np.float32))).result.type == t(8, 4)
    sm = nn.SoftmaxOp(x)
    assert sm.axis == -1 and sm.result.type == x.type
    gelu = nn.GeluOp(x)
    assert gelu.approximate == "none"
    lrn = nn.LRNOp(img, 5)
    assert (lrn.size, lrn.axis, lrn.alpha, lrn.beta, lrn.bias) == (5, 1, 1e-4, 0.75, 1.0)
    bn = nn.BatchNormOp(nn.ReluOp(img), *block_args(*[t(6)] * 4))
    assert bn.epsilon == 1e-5 and bn.result.type == img.type
    ln = nn.LayerNormOp(x, *block_args(t(4), t(4)), epsilon=1e-6)
    assert ln.epsilon == 1e-6 and ln.axis == -1
    clip = nn.ClipOp(v, 0, 6)
    assert (clip.min, clip.max) == (0.0, 6.0)
    for op in (conv, pool, avg, sm, gelu, lrn, bn, ln, clip):
        op.verify()


def test_constant_from_numpy_round_trips_payload():
    for dtype, elt in ((np.float16, F16), (np.float32, f32)):
        arr = np.arange(6, dtype=dtype).reshape(2, 3) / 4
        op = nn.ConstantOp(arr)
        assert op.result.type == t(2, 3, elt=elt)
        np.testing.assert_array_equal(op.to_numpy(), arr)
    import ml_dtypes

    arr = np.array([1.5, -2.0], ml_dtypes.bfloat16)
    op = nn.ConstantOp(arr)
    assert op.result.type == t(2, elt=BFloat16Type())
    np.testing.assert_array_equal(op.to_numpy(), arr)


# -- verifiers -----------------------------------------------------------------------


def _bad(builder, message):
    with pytest.raises(VerifyException, match=message):
        op = builder()
        op.verify()


def test_verifier_rejections():
    x, w, img, k, i32t, v3 = block_args(t(2, 4), t(8, 5), t(1, 6, 9, 9), t(12, 4, 3, 3),
                                        TensorType(builtin.i32, [2, 4]), t(3))
    h = block_args(t(2, 4, elt=F16))[0]
    _bad(lambda: nn.AddOp(x, h, result_type=t(2, 4)), "share one element type")
    _bad(lambda: nn.SoftmaxOp(i32t), "element type must be one of f16, bf16, f32, f64, got i32")
    _bad(lambda: nn.AddOp(x, w), "not broadcastable")
    _bad(lambda: nn.ReluOp(x, result_type=t(2, 5)), r"result shape \[2, 5\] is incompatible")
    _bad(lambda: nn.ReluOp(x, result_type=t(2, 4, 1)), "incompatible with inferred shape")
    _bad(lambda: nn.DenseOp(x, w), "dense reduction dimension mismatch: 4 vs 5")
    _bad(lambda: nn.DenseOp(v3, w), "dense expects input rank >= 2")
    _bad(lambda: nn.MatmulOp(x, x), "matmul reduction dimension mismatch")
    _bad(lambda: nn.BatchMatmulOp(x, x), "batch_matmul expects rank 3")
    _bad(lambda: nn.BiasAddOp(x, v3), "bias size does not match input dimension 1")
    _bad(lambda: nn.SoftmaxOp(x, axis=2), "axis 2 out of range for rank 2")
    _bad(lambda: nn.GeluOp(x, approximate="fast"), "approximate must be")
    _bad(lambda: nn.LayerNormOp(x, v3, v3), r"gamma must have shape \[4\]")
    _bad(lambda: nn.BatchNormOp(img, v3, v3, v3, v3), "gamma size does not match")
    _bad(lambda: nn.Conv2DOp(img, k, groups=4), "groups 4 does not divide input channels 6")
    _bad(lambda: nn.Conv2DOp(img, k), "input channels 6 != weight input channels 4")
    _bad(lambda: nn.Conv2DOp(img, k, groups=2, strides=[0, 1]), "strides values must be >= 1")
    _bad(lambda: nn.Conv2DOp(img, k, groups=2, padding=[1, 1]), "padding must have 4 values")
    _bad(lambda: nn.Conv2DOp(img, k, data_layout="NCWH"), "unsupported layout")
    _bad(lambda: nn.Conv2DOp(img, k, groups=2, kernel_layout="OHWI"),
         "kernel_layout 'OHWI' does not match data_layout 'NCHW'")
    _bad(lambda: nn.Conv2DOp(x, w), "conv2d expects rank 4")
    _bad(lambda: nn.MaxPool2DOp(img, [2, 2], padding=[2, 0, 0, 0]), "smaller than the window")
    _bad(lambda: nn.MaxPool2DOp(img, [20, 2]), "larger than padded input")
    _bad(lambda: nn.AvgPool2DOp(img, [2]), "pool_size must have 2 values")
    _bad(lambda: nn.GlobalAvgPool2DOp(x), "expects a rank 4 input")
    _bad(lambda: nn.LRNOp(img, 0), "lrn size must be >= 1")
    _bad(lambda: nn.PadOp(x, [1], [1, 1]), "pad_before must have 2 values")
    _bad(lambda: nn.PadOp(x, [-1, 0], [1, 1]), "pad_before values must be >= 0")
    _bad(lambda: nn.ReshapeOp(x, [3, 3]), "reshape changes the element count: 8 vs 9")
    _bad(lambda: nn.ReshapeOp(x, [DYN, DYN]), "at most one dynamic dimension")
    _bad(lambda: nn.ReshapeOp(x, [3, DYN]), "cannot reshape 8 elements")
    _bad(lambda: nn.TransposeOp(x, [0, 0]), "not a permutation")
    _bad(lambda: nn.ConcatenateOp([x, w], axis=0), "concatenate dimension 1 mismatch")
    _bad(lambda: nn.ConcatenateOp([x, img], axis=0), "same rank")


# -- text round trips ----------------------------------------------------------------

ROUNDTRIP = """
func.func @main(%x: tensor<?x4xf32>, %w: tensor<8x4xf32>, %img: tensor<1x6x9x9xf16>,
                %k: tensor<12x2x3x3xf16>, %c6: tensor<6xf16>) -> tensor<?x8xf32> {
  %0 = nn.dense %x, %w : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %1 = nn.softmax %0 {axis = 1 : i64} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %2 = nn.gelu %1 {approximate = "tanh"} : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %3 = nn.conv2d %img, %k {groups = 3 : i64, padding = array<i64: 1, 1, 1, 1>} : (tensor<1x6x9x9xf16>, tensor<12x2x3x3xf16>) -> tensor<1x12x9x9xf16>
  %4 = nn.avg_pool2d %img {pool_size = array<i64: 2, 2>, ceil_mode = true, strides = array<i64: 2, 2>} : (tensor<1x6x9x9xf16>) -> tensor<1x6x5x5xf16>
  %5 = nn.batch_norm %img, %c6, %c6, %c6, %c6 {epsilon = 1.0e-3 : f64} : (tensor<1x6x9x9xf16>, tensor<6xf16>, tensor<6xf16>, tensor<6xf16>, tensor<6xf16>) -> tensor<1x6x9x9xf16>
  %6 = nn.concatenate %0, %2 {axis = 1 : i64} : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x16xf32>
  %7 = nn.constant dense<[[1.0, 2.0], [3.0, 4.5]]> : tensor<2x2xf16>
  %8 = nn.constant dense<0.5> : tensor<2x3xf32>
  func.return %2 : tensor<?x8xf32>
}
"""


def _print(op, generic: bool) -> str:
    out = io.StringIO()
    Printer(stream=out, print_generic_format=generic).print_op(op)
    return out.getvalue()


@pytest.mark.parametrize("generic", [False, True])
def test_round_trip(generic):
    ctx = make_ctx()
    module = Parser(ctx, ROUNDTRIP).parse_module()
    module.verify()
    printed = _print(module, generic)
    again = Parser(ctx, printed).parse_module()
    again.verify()
    assert module.is_structurally_equivalent(again)
    assert _print(again, generic) == printed
    if not generic:
        assert "{axis = 1 : i64}" in printed  # non-default property is printed
        assert "nn.constant dense<5.000000e-01> : tensor<2x3xf32>" in printed
        conv_line = next(line for line in printed.splitlines() if "nn.conv2d" in line)
        assert "groups = 3 : i64" in conv_line and "strides" not in conv_line  # defaults elided


def test_parsed_text_is_verified():
    text = ROUNDTRIP.replace("func.return", "%9 = nn.batch_matmul %w, %w : (tensor<8x4xf32>, "
                             "tensor<8x4xf32>) -> tensor<8x8xf32>\n  func.return")
    module = Parser(make_ctx(), text).parse_module()
    with pytest.raises(VerifyException, match="batch_matmul expects rank 3"):
        module.verify()
