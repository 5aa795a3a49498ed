"""The NumPy reference executor against independent hand-written NumPy formulas."""

import math

import ml_dtypes
import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import arith, builtin, func, tensor
from xdsl.parser import Parser

from partita.dialects.nn import NN
from partita.runtime.reference import ReferenceExecutor, run

RNG = np.random.default_rng(0)


def parse(text: str) -> builtin.ModuleOp:
    ctx = Context()
    for d in (builtin.Builtin, func.Func, arith.Arith, tensor.Tensor, NN):
        ctx.load_dialect(d)
    module = Parser(ctx, text).parse_module()
    module.verify()
    return module


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def run_op(op_text: str, in_types: list[str], out_type: str, *args):
    """Run a single-op @main whose operands are the function arguments."""
    params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(in_types))
    operands = ", ".join(f"%a{i}" for i in range(len(in_types)))
    name, _, attrs = op_text.partition(" ")
    module = parse(f"""
    func.func @main({params}) -> {out_type} {{
      %r = {name} {operands} {attrs} : ({", ".join(in_types)}) -> {out_type}
      func.return %r : {out_type}
    }}""")
    (result,) = run(module, *args)
    return result


@pytest.mark.parametrize("name,fn", [("nn.add", np.add), ("nn.subtract", np.subtract),
                                     ("nn.multiply", np.multiply), ("nn.divide", np.divide)])
def test_binary_broadcast(name, fn):
    a, b = rand(2, 1, 4), rand(3, 1) + 3
    out = run_op(name, ["tensor<2x1x4xf32>", "tensor<3x1xf32>"], "tensor<2x3x4xf32>", a, b)
    assert out.shape == (2, 3, 4) and out.dtype == np.float32
    np.testing.assert_allclose(out, fn(a, b), rtol=1e-6)


def test_unary_ops():
    x = rand(3, 5)
    t = ["tensor<3x5xf32>"]
    np.testing.assert_array_equal(run_op("nn.relu", t, t[0], x), np.where(x > 0, x, 0))
    np.testing.assert_allclose(run_op("nn.sigmoid", t, t[0], x), 1 / (1 + np.exp(-x)), rtol=1e-6)
    np.testing.assert_allclose(run_op("nn.tanh", t, t[0], x), np.tanh(x), rtol=1e-6)
    clip = run_op("nn.clip {min = -0.5 : f64, max = 0.25 : f64}", t, t[0], x)
    np.testing.assert_array_equal(clip, np.minimum(np.maximum(x, -0.5), 0.25))


def test_gelu_both_forms():
    x = np.array([[-3.0, -1.0, -0.1, 0.0, 0.5, 2.0]], np.float32)
    t = ["tensor<1x6xf32>"]
    exact = [0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x[0]]
    np.testing.assert_allclose(run_op("nn.gelu", t, t[0], x)[0], exact, rtol=1e-6, atol=1e-7)
    tanh = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))
            for v in x[0]]
    out = run_op('nn.gelu {approximate = "tanh"}', t, t[0], x)[0]
    np.testing.assert_allclose(out, tanh, rtol=1e-6, atol=1e-7)
    assert not np.allclose(out, exact, rtol=1e-6, atol=1e-7)  # the forms differ


def test_dense_matmul_batch_matmul():
    x, w = rand(2, 3, 4), rand(5, 4)
    out = run_op("nn.dense", ["tensor<2x3x4xf32>", "tensor<5x4xf32>"], "tensor<2x3x5xf32>", x, w)
    expected = np.array([[[sum(x[b, m, k] * w[n, k] for k in range(4)) for n in range(5)]
                          for m in range(3)] for b in range(2)])
    np.testing.assert_allclose(out, expected, rtol=1e-5)

    a, b = rand(2, 1, 3, 4), rand(5, 4, 6)
    out = run_op("nn.matmul", ["tensor<2x1x3x4xf32>", "tensor<5x4x6xf32>"],
                 "tensor<2x5x3x6xf32>", a, b)
    np.testing.assert_allclose(out[1, 2], a[1, 0] @ b[2], rtol=1e-5)

    a, b = rand(2, 3, 4), rand(2, 6, 4)
    out = run_op("nn.batch_matmul", ["tensor<2x3x4xf32>", "tensor<2x6x4xf32>"],
                 "tensor<2x3x6xf32>", a, b)
    np.testing.assert_allclose(out, np.einsum("bmk,bnk->bmn", a, b), rtol=1e-5)
    at, bt = rand(2, 4, 3), rand(2, 4, 6)
    out = run_op("nn.batch_matmul {transpose_a = true, transpose_b = false}",
                 ["tensor<2x4x3xf32>", "tensor<2x4x6xf32>"], "tensor<2x3x6xf32>", at, bt)
    np.testing.assert_allclose(out, np.einsum("bkm,bkn->bmn", at, bt), rtol=1e-5)


def test_bias_add_softmax_layer_norm():
    x, bias = rand(2, 3, 4), rand(3)
    out = run_op("nn.bias_add {axis = 1 : i64}", ["tensor<2x3x4xf32>", "tensor<3xf32>"],
                 "tensor<2x3x4xf32>", x, bias)
    np.testing.assert_allclose(out, x + bias[None, :, None], rtol=1e-6)

    out = run_op("nn.softmax {axis = 0 : i64}", ["tensor<2x3x4xf32>"], "tensor<2x3x4xf32>", x)
    np.testing.assert_allclose(out, np.exp(x) / np.exp(x).sum(0), rtol=1e-5)

    g, b = rand(3, 4), rand(3, 4)
    out = run_op("nn.layer_norm {axis = 1 : i64, epsilon = 1.0e-3 : f64}",
                 ["tensor<2x3x4xf32>", "tensor<3x4xf32>", "tensor<3x4xf32>"],
                 "tensor<2x3x4xf32>", x, g, b)
    for i in range(2):
        flat = x[i].ravel().astype(np.float64)
        norm = (flat - flat.mean()) / math.sqrt(flat.var() + 1e-3)
        np.testing.assert_allclose(out[i], norm.reshape(3, 4) * g + b, rtol=1e-4, atol=1e-5)


def test_batch_norm_and_lrn():
    x = rand(2, 5, 3, 3)
    g, b, mean, var = rand(5), rand(5), rand(5), np.abs(rand(5)) + 0.1
    t = ["tensor<2x5x3x3xf32>"] + ["tensor<5xf32>"] * 4
    out = run_op("nn.batch_norm", t, t[0], x, g, b, mean, var)
    for c in range(5):
        ref = (x[:, c] - mean[c]) / math.sqrt(var[c] + 1e-5) * g[c] + b[c]
        np.testing.assert_allclose(out[:, c], ref, rtol=1e-5, atol=1e-6)

    out = run_op("nn.lrn {size = 3 : i64, alpha = 0.5 : f64, beta = 0.75 : f64, bias = 2.0 : f64}",
                 t[:1], t[0], x)
    for c in range(5):
        sq = sum(x[:, j] ** 2 for j in range(max(0, c - 1), min(5, c + 2)))
        np.testing.assert_allclose(out[:, c], x[:, c] / (2.0 + 0.5 / 3 * sq) ** 0.75, rtol=1e-5)


def naive_conv_nchw(x, w, stride, pad, dil, groups):
    n, c, h, wd = x.shape
    o, ci, kh, kw = w.shape
    xp = np.pad(x, [(0, 0), (0, 0), (pad[0], pad[2]), (pad[1], pad[3])])
    oh = (h + pad[0] + pad[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pad[1] + pad[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for oc in range(o):
        g = oc // per_group
        for i in range(oh):
            for j in range(ow):
                for ic in range(ci):
                    for p in range(kh):
                        for q in range(kw):
                            out[:, oc, i, j] += (xp[:, g * ci + ic, i * stride[0] + p * dil[0],
                                                    j * stride[1] + q * dil[1]] * w[oc, ic, p, q])
    return out


def test_conv2d_nchw_groups_dilation_padding():
    x, w = rand(2, 4, 7, 6), rand(6, 2, 3, 2)
    out = run_op("nn.conv2d {strides = array<i64: 2, 1>, padding = array<i64: 1, 0, 2, 1>, "
                 "dilation = array<i64: 1, 2>, groups = 2 : i64}",
                 ["tensor<2x4x7x6xf32>", "tensor<6x2x3x2xf32>"], "tensor<2x6x4x5xf32>", x, w)
    ref = naive_conv_nchw(x, w, (2, 1), (1, 0, 2, 1), (1, 2), 2)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_conv2d_nhwc_ohwi():
    x, w = rand(1, 5, 5, 3), rand(4, 3, 3, 3)
    out = run_op('nn.conv2d {padding = array<i64: 1, 1, 1, 1>, data_layout = "NHWC", '
                 'kernel_layout = "OHWI"}', ["tensor<1x5x5x3xf32>", "tensor<4x3x3x3xf32>"],
                 "tensor<1x5x5x4xf32>", x, w)
    ref = naive_conv_nchw(x.transpose(0, 3, 1, 2), w.transpose(0, 3, 1, 2), (1, 1),
                          (1, 1, 1, 1), (1, 1), 1)
    np.testing.assert_allclose(out, ref.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-5)


def test_max_pool_padding_and_ceil_mode():
    x = rand(1, 2, 5, 5)
    out = run_op("nn.max_pool2d {pool_size = array<i64: 2, 2>, strides = array<i64: 2, 2>, "
                 "ceil_mode = true}", ["tensor<1x2x5x5xf32>"], "tensor<1x2x3x3xf32>", x)
    for i in range(3):
        for j in range(3):
            np.testing.assert_array_equal(out[0, :, i, j],
                                          x[0, :, 2 * i:2 * i + 2, 2 * j:2 * j + 2].max((1, 2)))
    neg = -np.abs(x) - 1  # all negative: padding must not contribute zeros
    out = run_op("nn.max_pool2d {pool_size = array<i64: 3, 3>, padding = array<i64: 1, 1, 1, 1>}",
                 ["tensor<1x2x5x5xf32>"], "tensor<1x2x5x5xf32>", neg)
    assert out[0, 0, 0, 0] == neg[0, 0, :2, :2].max()


@pytest.mark.parametrize("include_pad", [False, True])
def test_avg_pool_padding(include_pad):
    x = rand(1, 1, 4, 4)
    flag = "true" if include_pad else "false"
    out = run_op(f"nn.avg_pool2d {{pool_size = array<i64: 3, 3>, padding = array<i64: 1, 1, 1, 1>,"
                 f" strides = array<i64: 2, 2>, count_include_pad = {flag}}}",
                 ["tensor<1x1x4x4xf32>"], "tensor<1x1x2x2xf32>", x)
    corner = x[0, 0, :2, :2]
    np.testing.assert_allclose(out[0, 0, 0, 0], corner.sum() / (9 if include_pad else 4),
                               rtol=1e-6)
    np.testing.assert_allclose(out[0, 0, 1, 1], x[0, 0, 1:4, 1:4].mean(), rtol=1e-6)


def test_avg_pool_ceil_mode_nhwc():
    x = rand(1, 3, 3, 2)
    out = run_op('nn.avg_pool2d {pool_size = array<i64: 2, 2>, strides = array<i64: 2, 2>, '
                 'ceil_mode = true, layout = "NHWC"}', ["tensor<1x3x3x2xf32>"],
                 "tensor<1x2x2x2xf32>", x)
    np.testing.assert_allclose(out[0, 1, 1], x[0, 2, 2], rtol=1e-6)  # 1-cell window
    np.testing.assert_allclose(out[0, 0, 1], x[0, 0:2, 2].mean(0), rtol=1e-6)


def test_global_avg_pool_pad_reshape_transpose_concat():
    x = rand(2, 3, 4, 5)
    out = run_op("nn.global_avg_pool2d", ["tensor<2x3x4x5xf32>"], "tensor<2x3x1x1xf32>", x)
    np.testing.assert_allclose(out[:, :, 0, 0], x.mean((2, 3)), rtol=1e-5)
    out = run_op('nn.global_avg_pool2d {layout = "NHWC"}', ["tensor<2x3x4x5xf32>"],
                 "tensor<2x1x1x5xf32>", x)
    np.testing.assert_allclose(out[:, 0, 0], x.mean((1, 2)), rtol=1e-5)

    y = rand(2, 3)
    out = run_op("nn.pad {pad_before = array<i64: 1, 0>, pad_after = array<i64: 0, 2>, "
                 "pad_value = 7.0 : f64}", ["tensor<2x3xf32>"], "tensor<3x5xf32>", y)
    assert (out[0] == 7).all() and (out[:, 3:] == 7).all()
    np.testing.assert_array_equal(out[1:, :3], y)

    out = run_op("nn.reshape", ["tensor<2x3x4x5xf32>"], "tensor<6x?xf32>", x)
    np.testing.assert_array_equal(out, x.reshape(6, 20))
    out = run_op("nn.transpose {perm = array<i64: 2, 0, 3, 1>}", ["tensor<2x3x4x5xf32>"],
                 "tensor<4x2x5x3xf32>", x)
    assert out[1, 0, 4, 2] == x[0, 2, 1, 4]
    a, b = rand(2, 3), rand(2, 1)
    out = run_op("nn.concatenate {axis = 1 : i64}", ["tensor<2x3xf32>", "tensor<2x1xf32>"],
                 "tensor<2x4xf32>", a, b)
    np.testing.assert_array_equal(out[:, :3], a)
    np.testing.assert_array_equal(out[:, 3], b[:, 0])


def test_constants_splat_dense_f16():
    module = parse("""
    func.func @main() -> (tensor<2x3xf32>, tensor<2xf16>) {
      %a = nn.constant dense<1.5> : tensor<2x3xf32>
      %b = nn.constant dense<[0.5, -2.0]> : tensor<2xf16>
      func.return %a, %b : tensor<2x3xf32>, tensor<2xf16>
    }""")
    a, b = run(module)
    np.testing.assert_array_equal(a, np.full((2, 3), 1.5, np.float32))
    assert b.dtype == np.float16 and b.tolist() == [0.5, -2.0]


def test_f16_matmul_accumulates_in_f32():
    # 2048 + 1 + 1 + ... : in f16 (11-bit mantissa) each +1 on 2048 rounds away; f32 keeps it.
    k = 64
    a = np.ones((1, k), np.float16)
    b = np.ones((k, 1), np.float16)
    b[0, 0] = 2048
    out = run_op("nn.matmul", [f"tensor<1x{k}xf16>", f"tensor<{k}x1xf16>"], "tensor<1x1xf16>", a, b)
    assert out.dtype == np.float16
    naive = np.float16(0)
    for v in b[:, 0]:
        naive = np.float16(naive + v)
    assert naive == 2048  # a pure f16 accumulator loses every +1
    assert out[0, 0] == np.float16(2048 + k - 1)


def test_f16_broadcast_add_and_softmax():
    a, b = rand(2, 3).astype(np.float16), rand(3).astype(np.float16)
    out = run_op("nn.add", ["tensor<2x3xf16>", "tensor<3xf16>"], "tensor<2x3xf16>", a, b)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, (a.astype(np.float32) + b).astype(np.float16))
    out = run_op("nn.softmax", ["tensor<2x3xf16>"], "tensor<2x3xf16>", a)
    ref = np.exp(a.astype(np.float64))
    np.testing.assert_allclose(out, ref / ref.sum(-1, keepdims=True), rtol=2e-3)


def test_bf16_dense():
    bf = ml_dtypes.bfloat16
    x, w = rand(3, 4).astype(bf), rand(2, 4).astype(bf)
    out = run_op("nn.dense", ["tensor<3x4xbf16>", "tensor<2x4xbf16>"], "tensor<3x2xbf16>", x, w)
    assert out.dtype == bf
    ref = (x.astype(np.float32) @ w.astype(np.float32).T).astype(bf)
    np.testing.assert_array_equal(out, ref)


def test_dynamic_batch_and_tensor_dim():
    module = parse("""
    func.func @main(%x: tensor<?x4xf32>, %w: tensor<3x4xf32>) -> (tensor<?x3xf32>, index) {
      %y = nn.dense %x, %w : (tensor<?x4xf32>, tensor<3x4xf32>) -> tensor<?x3xf32>
      %c0 = arith.constant 0 : index
      %n = tensor.dim %y, %c0 : tensor<?x3xf32>
      func.return %y, %n : tensor<?x3xf32>, index
    }""")
    w = rand(3, 4)
    executor = ReferenceExecutor(module)
    for batch in (1, 5):
        x = rand(batch, 4)
        y, n = executor.run(x, w)
        assert y.shape == (batch, 3) and n == batch
        np.testing.assert_allclose(y, x @ w.T, rtol=1e-5)


def test_func_call_and_named_arguments():
    module = parse("""
    func.func @double(%v: tensor<2xf32>) -> tensor<2xf32> {
      %r = nn.add %v, %v : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      func.return %r : tensor<2xf32>
    }
    func.func @main(%x: tensor<2xf32>, %y: tensor<2xf32>) -> tensor<2xf32> {
      %d = func.call @double(%x) : (tensor<2xf32>) -> tensor<2xf32>
      %r = nn.subtract %d, %y : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      func.return %r : tensor<2xf32>
    }""")
    x, y = np.array([1, 2], np.float32), np.array([0.5, 0.5], np.float32)
    np.testing.assert_array_equal(run(module, x, y)[0], [1.5, 3.5])
    np.testing.assert_array_equal(run(module, y=y, x=x)[0], [1.5, 3.5])
    np.testing.assert_array_equal(run(module, {"x": x, "y": y})[0], [1.5, 3.5])
    np.testing.assert_array_equal(run(module, x, entry="double")[0], [2, 4])


def test_argument_checks():
    module = parse("""
    func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
      %r = nn.relu %x : (tensor<?x4xf32>) -> tensor<?x4xf32>
      func.return %r : tensor<?x4xf32>
    }""")
    with pytest.raises(ValueError, match="takes 1 arguments, got 2"):
        run(module, rand(2, 4), rand(2, 4))
    with pytest.raises(ValueError, match=r"argument #0 \(%x\): shape \(2, 5\)"):
        run(module, rand(2, 5))
    with pytest.raises(ValueError, match=r"argument #0 \(%x\): dtype float64"):
        run(module, rand(2, 4, dtype=np.float64))
    with pytest.raises(ValueError, match="missing argument"):
        run(module, y=rand(2, 4))
    with pytest.raises(ValueError, match="no func.func @nope"):
        run(module, rand(2, 4), entry="nope")


def test_extra_impls_are_passed_in():
    from xdsl.interpreter import InterpreterFunctions, impl, register_impls

    @register_impls
    class EmptyAsZeros(InterpreterFunctions):
        @impl(tensor.EmptyOp)
        def run_empty(self, interpreter, op, args):
            return (np.zeros(op.tensor.type.get_shape(), np.float32),)

    module = parse("""
    func.func @main() -> tensor<2xf32> {
      %e = tensor.empty() : tensor<2xf32>
      %r = nn.sigmoid %e : (tensor<2xf32>) -> tensor<2xf32>
      func.return %r : tensor<2xf32>
    }""")
    np.testing.assert_array_equal(ReferenceExecutor(module, impls=[EmptyAsZeros]).run()[0], [0.5, 0.5])
    with pytest.raises(Exception, match="tensor.empty"):  # nothing leaks into the next executor
        run(module)
