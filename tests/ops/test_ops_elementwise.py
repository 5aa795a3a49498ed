"""Element-wise operators end to end: small ONNX models (onnx.helper) through
``partita.compile`` (default targets, Collage), against ``onnx.reference``, every op in a
native kernel; and the kernels' C built for the host (tests/support/cuda_host.py) on edge values
(NaN, mixed signs, zero divisors, wrap-around, halves, out-of-range shifts) against the
NumPy references."""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from xdsl.passes import PassPipeline

import partita
from partita.dialects import make_context, nn
from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError, parse_module

BF16 = ml_dtypes.bfloat16
_ONNX_TYPE = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
              np.dtype(np.float64): TensorProto.DOUBLE, np.dtype(BF16): TensorProto.BFLOAT16,
              np.dtype(np.bool_): TensorProto.BOOL, np.dtype(np.int8): TensorProto.INT8,
              np.dtype(np.int16): TensorProto.INT16, np.dtype(np.int32): TensorProto.INT32,
              np.dtype(np.int64): TensorProto.INT64, np.dtype(np.uint8): TensorProto.UINT8,
              np.dtype(np.uint16): TensorProto.UINT16, np.dtype(np.uint32): TensorProto.UINT32,
              np.dtype(np.uint64): TensorProto.UINT64}
RNG = np.random.default_rng(0)


def floats(shape, dtype=np.float32, scale=2.0):
    return (RNG.standard_normal(shape) * scale).astype(dtype)


def ints(shape, dtype=np.int32, lo=-50, hi=50, nonzero=False):
    x = RNG.integers(lo, hi, shape).astype(dtype)
    return np.where(x == 0, 1, x).astype(dtype) if nonzero else x


def bools(shape):
    return RNG.random(shape) < 0.5


def positive(shape, dtype=np.float32):
    return (RNG.random(shape) * 4 + 0.1).astype(dtype)


# name -> (op type, inputs, attributes, opset)
CASES: dict[str, tuple[str, dict[str, np.ndarray], dict, int]] = {
    "sqrt": ("Sqrt", {"x": positive((2, 3))}, {}, 13),
    "sqrt_f64": ("Sqrt", {"x": positive((5,), np.float64)}, {}, 13),
    "reciprocal": ("Reciprocal", {"x": positive((2, 3))}, {}, 13),
    "exp_f16": ("Exp", {"x": floats((4, 3), np.float16, 1.0)}, {}, 13),
    "log": ("Log", {"x": positive((6,))}, {}, 13),
    "erf": ("Erf", {"x": floats((3, 4))}, {}, 13),
    "floor": ("Floor", {"x": floats((7,))}, {}, 13),
    "ceil_bf16": ("Ceil", {"x": floats((7,), BF16)}, {}, 13),
    "round_halves": ("Round", {"x": np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.49, -3.7],
                                             np.float32)}, {}, 22),
    "neg_i8": ("Neg", {"x": np.array([-128, -1, 0, 5, 127], np.int8)}, {}, 13),
    "abs_i32": ("Abs", {"x": ints((9,))}, {}, 13),
    "abs_u8": ("Abs", {"x": ints((9,), np.uint8, 0, 255)}, {}, 13),
    "sign_i64": ("Sign", {"x": ints((9,), np.int64)}, {}, 13),
    "sign_f32": ("Sign", {"x": np.array([-2.0, -0.0, 0.0, 3.0, np.nan], np.float32)}, {}, 13),
    "relu_i32": ("Relu", {"x": ints((8,))}, {}, 14),
    "relu_f64": ("Relu", {"x": floats((8,), np.float64)}, {}, 14),
    "sigmoid_f64": ("Sigmoid", {"x": floats((8,), np.float64)}, {}, 13),
    "tanh": ("Tanh", {"x": floats((8,))}, {}, 13),
    "leaky_relu": ("LeakyRelu", {"x": floats((3, 4))}, {"alpha": 0.1}, 16),
    "prelu": ("PRelu", {"x": floats((2, 3, 4)), "slope": floats((3, 1))}, {}, 16),
    "elu": ("Elu", {"x": floats((3, 4))}, {"alpha": 0.5}, 6 + 7),
    "selu": ("Selu", {"x": floats((3, 4))}, {}, 13),
    "celu": ("Celu", {"x": floats((3, 4))}, {"alpha": 2.0}, 13),
    "thresholded_relu": ("ThresholdedRelu", {"x": floats((3, 4))}, {"alpha": 0.5}, 13),
    "hard_sigmoid": ("HardSigmoid", {"x": floats((3, 4), scale=5)}, {"alpha": 0.3, "beta": 0.4}, 13),
    "hard_swish": ("HardSwish", {"x": floats((3, 4), scale=5)}, {}, 14),
    "softplus": ("Softplus", {"x": floats((3, 4), scale=10)}, {}, 13),
    "softsign": ("Softsign", {"x": floats((3, 4))}, {}, 13),
    "mish": ("Mish", {"x": floats((3, 4))}, {}, 18),
    "gelu_tanh": ("Gelu", {"x": floats((3, 4))}, {"approximate": "tanh"}, 20),
    "add_i8_wraps": ("Add", {"a": np.array([100, -100, 7], np.int8),
                             "b": np.array([100, -100, 1], np.int8)}, {}, 14),
    "sub_u8_wraps": ("Sub", {"a": np.array([1, 200], np.uint8), "b": np.array([2, 100], np.uint8)},
                     {}, 14),
    "mul_i64": ("Mul", {"a": ints((2, 3), np.int64), "b": ints((3,), np.int64)}, {}, 14),
    "div_i32_truncates": ("Div", {"a": np.array([7, -7, 7, -7, 0], np.int32),
                                  "b": np.array([2, 2, -2, -2, 3], np.int32)}, {}, 14),
    "div_i64_exact": ("Div", {"a": np.array([2**62 + 1, -(2**61) - 3], np.int64),
                              "b": np.array([1, 3], np.int64)}, {}, 14),
    "pow": ("Pow", {"a": positive((2, 3)), "b": floats((3,))}, {}, 15),
    "pow_i64": ("Pow", {"a": ints((6,), np.int64, -5, 5), "b": ints((6,), np.int64, 0, 6)},
                {}, 15),
    "pow_f32_i64": ("Pow", {"a": floats((4,)), "b": np.array([0, 1, 2, 3], np.int64)}, {}, 15),
    "max3": ("Max", {"a": floats((2, 3)), "b": floats((3,)), "c": floats((2, 1))}, {}, 13),
    "min_i16": ("Min", {"a": ints((2, 3), np.int16), "b": ints((3,), np.int16)}, {}, 13),
    "mean": ("Mean", {"a": floats((2, 3)), "b": floats((3,))}, {}, 13),
    "sum3": ("Sum", {"a": floats((2, 3)), "b": floats((3,)), "c": floats((1,))}, {}, 13),
    "mod_i32": ("Mod", {"a": np.array([5, -5, 5, -5, 0], np.int32),
                        "b": np.array([3, 3, -3, -3, 2], np.int32)}, {}, 13),
    "fmod_i32": ("Mod", {"a": np.array([5, -5, 5, -5], np.int32),
                         "b": np.array([3, 3, -3, -3], np.int32)}, {"fmod": 1}, 13),
    "fmod_f32": ("Mod", {"a": floats((6,)), "b": floats((6,))}, {"fmod": 1}, 13),
    "equal_i64": ("Equal", {"a": ints((3, 4), np.int64, 0, 3), "b": ints((4,), np.int64, 0, 3)},
                  {}, 13),
    "equal_bool": ("Equal", {"a": bools((5,)), "b": bools((5,))}, {}, 13),
    "less_f16": ("Less", {"a": floats((3, 4), np.float16), "b": floats((4,), np.float16)}, {}, 13),
    "less_equal_u32": ("LessOrEqual", {"a": ints((6,), np.uint32, 0, 4),
                                       "b": ints((6,), np.uint32, 0, 4)}, {}, 16),
    "greater": ("Greater", {"a": floats((3, 4)), "b": floats((3, 1))}, {}, 13),
    "greater_equal_i8": ("GreaterOrEqual", {"a": ints((6,), np.int8, -3, 3),
                                            "b": ints((6,), np.int8, -3, 3)}, {}, 16),
    "not": ("Not", {"x": bools((2, 3))}, {}, 13),
    "and": ("And", {"a": bools((2, 3)), "b": bools((3,))}, {}, 13),
    "or": ("Or", {"a": bools((2, 3)), "b": bools((2, 1))}, {}, 13),
    "xor": ("Xor", {"a": bools((2, 3)), "b": bools((2, 3))}, {}, 13),
    "where_i64": ("Where", {"c": bools((2, 3)), "a": ints((3,), np.int64),
                            "b": ints((2, 1), np.int64)}, {}, 16),
    "cast_f32_i32": ("Cast", {"x": floats((8,), scale=10)}, {"to": TensorProto.INT32}, 19),
    "cast_f32_bool": ("Cast", {"x": np.array([0.0, -0.0, 0.5, np.nan], np.float32)},
                      {"to": TensorProto.BOOL}, 13),
    "cast_bool_f32": ("Cast", {"x": bools((6,))}, {"to": TensorProto.FLOAT}, 13),
    "cast_i64_f16": ("Cast", {"x": ints((6,), np.int64)}, {"to": TensorProto.FLOAT16}, 13),
    "cast_f32_bf16": ("Cast", {"x": floats((6,))}, {"to": TensorProto.BFLOAT16}, 13),
    "castlike_u8_f64": ("CastLike", {"x": ints((6,), np.uint8, 0, 255),
                                     "like": np.zeros((1,), np.float64)}, {}, 15),
    "isnan": ("IsNaN", {"x": np.array([1.0, np.nan, np.inf, -np.nan], np.float32)}, {}, 13),
    "isinf_positive": ("IsInf", {"x": np.array([1.0, np.nan, np.inf, -np.inf], np.float32)},
                       {"detect_negative": 0}, 10),
    "bitshift_left_u8": ("BitShift", {"a": np.array([1, 255, 3], np.uint8),
                                      "b": np.array([7, 1, 2], np.uint8)},
                         {"direction": "LEFT"}, 11),
    "bitshift_right_u32": ("BitShift", {"a": np.array([1024, 255, 3], np.uint32),
                                        "b": np.array([3, 1, 2], np.uint32)},
                           {"direction": "RIGHT"}, 11),
    "clip_min_above_max": ("Clip", {"x": floats((6,)), "lo": np.float32(1.0), "hi": np.float32(-1.0)},
                           {}, 13),
    "clip_i32": ("Clip", {"x": ints((8,)), "lo": np.int32(-5), "hi": np.int32(7)}, {}, 13),
    "asinh_f64": ("Asinh", {"x": floats((5,), np.float64)}, {}, 9),
    "cos_f16": ("Cos", {"x": floats((5,), np.float16)}, {}, 7 + 2),
    "bitwise_and_i16": ("BitwiseAnd", {"a": ints((6,), np.int16, -300, 300),
                                       "b": ints((2, 1), np.int16, -300, 300)}, {}, 18),
    "bitwise_xor_u64": ("BitwiseXor", {"a": ints((6,), np.uint64, 0, 2**40),
                                       "b": ints((6,), np.uint64, 0, 2**40)}, {}, 18),
    "bitwise_not_i8": ("BitwiseNot", {"x": ints((6,), np.int8, -128, 127)}, {}, 18),
    "shrink": ("Shrink", {"x": floats((3, 4))}, {"lambd": 0.7, "bias": 0.2}, 9),
    "bitcast_f32_i32": ("BitCast", {"x": floats((2, 3))}, {"to": TensorProto.INT32}, 26),
    "bitcast_u16_f16": ("BitCast", {"x": ints((5,), np.uint16, 0, 65535)},
                        {"to": TensorProto.FLOAT16}, 26),
    "quantize_u8": ("QuantizeLinear", {"x": floats((2, 3, 4)), "s": np.float32(0.02),
                                       "z": np.uint8(128)}, {}, 19),
    "quantize_i8_per_axis": ("QuantizeLinear", {"x": floats((2, 3, 4)),
                                                "s": np.array([0.01, 0.05, 0.1], np.float32),
                                                "z": np.array([-3, 0, 5], np.int8)}, {"axis": 1}, 19),
    "quantize_blocked": ("QuantizeLinear", {"x": floats((2, 5)),
                                            "s": positive((2, 3)) / 50,
                                            "z": ints((2, 3), np.int8, -5, 5)},
                         {"axis": 1, "block_size": 2}, 21),
    "dequantize_u8": ("DequantizeLinear", {"x": ints((2, 3), np.uint8, 0, 255),
                                           "s": np.float32(0.1), "z": np.uint8(100)}, {}, 19),
    "dequantize_i8_per_axis": ("DequantizeLinear", {"x": ints((2, 3), np.int8, -128, 127),
                                                    "s": np.array([0.5, 0.25], np.float32),
                                                    "z": np.array([1, -2], np.int8)},
                               {"axis": 0}, 19),
}
for _op, _x in (("Sin", floats((5,))), ("Tan", floats((5,), scale=0.7)),
                ("Asin", floats((5,), scale=0.3)), ("Acos", floats((5,), scale=0.3)),
                ("Atan", floats((5,))), ("Sinh", floats((5,))), ("Cosh", floats((5,))),
                ("Acosh", positive((5,)) + 1), ("Atanh", floats((5,), scale=0.3))):
    CASES[_op.lower()] = (_op, {"x": _x}, {}, 9)
CASES["bitwise_or_u8"] = ("BitwiseOr", {"a": ints((6,), np.uint8, 0, 255),
                                        "b": ints((6,), np.uint8, 0, 255)}, {}, 18)
_SCHEMAS = {s.name for s in onnx.defs.get_all_schemas()}
if "Swish" in _SCHEMAS:
    CASES["swish"] = ("Swish", {"x": floats((3, 4))}, {"alpha": 1.5}, 24)
if "SwiGLU" in _SCHEMAS:
    CASES["swiglu"] = ("SwiGLU", {"a": floats((3, 4)), "b": floats((3, 4))}, {"alpha": 1.2}, 28)
ONNX_OPS = {op for op, *_ in CASES.values()}
"""The ONNX op types these cases cover (tests/frontends/test_onnx_import.py counts them)."""

TOLERANCE = {np.dtype(np.float16): 2e-3, np.dtype(BF16): 1e-2, np.dtype(np.float32): 1e-5,
             np.dtype(np.float64): 1e-12}


def make_model(op: str, inputs: dict[str, np.ndarray], attrs: dict, opset: int,
               constants: frozenset[str] = frozenset()) -> onnx.ModelProto:
    """One node; ``constants`` names inputs that become initializers."""
    node = helper.make_node(op, list(inputs), ["y"], **attrs)
    graph = helper.make_graph(
        [node], op.lower(),
        [helper.make_tensor_value_info(k, _ONNX_TYPE[np.asarray(v).dtype], np.shape(v))
         for k, v in inputs.items() if k not in constants],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in inputs.items()
         if k in constants])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def expected(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (out,) = ReferenceEvaluator(model).run(None, inputs)
    return np.asarray(out)


def assert_matches(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, what
    tol = TOLERANCE.get(want.dtype)
    if tol is None:
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                                   atol=tol, equal_nan=True, err_msg=what)


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_runs_in_a_native_kernel_like_onnx_reference(name: str) -> None:
    op, inputs, attrs, opset = CASES[name]
    model = make_model(op, inputs, attrs, opset)
    exe = partita.compile(model)
    feeds = {k: np.asarray(v) for k, v in inputs.items()}
    (got,) = exe.run(**feeds)
    assert_matches(got, expected(model, feeds), name)
    report = str(exe.report())
    assert "(in @main)" not in report, report


@pytest.mark.parametrize("name", ["where_i64", "mod_i32", "cast_f32_i32", "pow_i64", "clip_i32",
                                  "bitshift_left_u8", "isinf_positive"])
def test_constant_nodes_fold_with_the_references(name: str) -> None:
    """All inputs constant: the importer folds the node with the project's references."""
    op, inputs, attrs, opset = CASES[name]
    model = make_model(op, inputs, attrs, opset, constants=frozenset(inputs))
    module = import_onnx(model)
    consts = [o for o in module.walk() if isinstance(o, nn.ConstantOp)]
    assert [o.name for o in module.walk() if isinstance(o, nn.NNOp)] == ["nn.constant"]
    assert_matches(consts[0].to_numpy(), expected(make_model(op, inputs, attrs, opset), {
        k: np.asarray(v) for k, v in inputs.items()}), name)


def test_clip_bounds_from_graph_inputs_and_missing_bounds() -> None:
    x = floats((3, 4))
    for names, feeds in ((["x", "lo", "hi"], {"lo": np.float32(-0.5), "hi": np.float32(0.7)}),
                         (["x", "", "hi"], {"hi": np.float32(0.3)}),
                         (["x", "lo"], {"lo": np.float32(-0.2)})):
        node = helper.make_node("Clip", names, ["y"])
        graph = helper.make_graph([node], "clip", [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 4] if n == "x" else [])
            for n in names if n], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        exe = partita.compile(model)
        (got,) = exe.run(x, *map(np.asarray, feeds.values()))
        assert_matches(got, expected(model, {"x": x, **feeds}), str(names))
        assert "(in @main)" not in str(exe.report())


def test_activation_chain_fuses_into_one_kernel() -> None:
    """A mask-and-activation chain mixing i1, i64 and f32 values is one fused kernel."""
    nodes = [helper.make_node("Greater", ["x", "t"], ["m"]),
             helper.make_node("Cast", ["m"], ["mi"], to=TensorProto.INT64),
             helper.make_node("Cast", ["mi"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("HardSwish", ["x"], ["h"]),
             helper.make_node("Mul", ["h", "mf"], ["p"]),
             helper.make_node("Where", ["m", "p", "x"], ["y"])]
    graph = helper.make_graph(nodes, "chain", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8]),
        helper.make_tensor_value_info("t", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    exe = partita.compile(model)
    for n in (1, 5):
        x, t = floats((n, 8), scale=4), floats((8,))
        (got,) = exe.run(x, t)
        assert_matches(got, expected(model, {"x": x, "t": t}), f"n={n}")
    report = str(exe.report())
    assert "(in @main)" not in report and report.count("fused") >= 1, report


@pytest.mark.parametrize("partitioner", ["collage", "eager"])
def test_gemm_epilogue_with_new_activation_and_quantization(partitioner: str) -> None:
    """MatMul -> LeakyRelu -> QuantizeLinear over a dynamic batch: the activation and the
    quantization run in one kernel (after CUTLASS's TF32 GEMM, which Collage prefers for
    f32, or as the native GEMM's epilogue)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["c"]),
             helper.make_node("LeakyRelu", ["c"], ["l"], alpha=0.1),
             helper.make_node("QuantizeLinear", ["l", "s", "z"], ["y"])]
    inits = [onnx.numpy_helper.from_array(floats((64, 32)), "w"),
             onnx.numpy_helper.from_array(np.array(0.05, np.float32), "s"),
             onnx.numpy_helper.from_array(np.array(3, np.int8), "z")]
    graph = helper.make_graph(nodes, "qdense", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.INT8, ["n", 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    exe = partita.compile(model, partitioner=partitioner)
    for n in (1, 7):
        x = floats((n, 64))
        (got,) = exe.run(x)
        want = expected(model, {"x": x})
        # The GEMM accumulates in another order than NumPy: a value on a rounding
        # boundary may land one step away.
        assert got.dtype == np.int8 and np.abs(got.astype(int) - want).max() <= 1
    report = str(exe.report())
    assert "(in @main)" not in report, report
    if partitioner == "collage":
        assert "leaky_relu, quantize" in report, report


def test_unsupported_cast_target_is_a_located_error() -> None:
    model = make_model("Cast", {"x": floats((3,))}, {"to": TensorProto.STRING}, 13)
    with pytest.raises(PartitaError, match=r"node 0 .*\(Cast\): cast to STRING is not supported"):
        import_onnx(model)


def test_wrong_element_type_is_a_located_error() -> None:
    model = make_model("Sqrt", {"x": ints((3,))}, {}, 13)
    with pytest.raises(PartitaError, match=r"nn.sqrt.*element type must be one of f16"):
        import_onnx(model)


# -- the kernels' C built for the host, on edge values ---------------------------------------

# (name, MLIR op text with T / R placeholders, operand types, result type)
HOST_FUNCTIONS = [
    ("div_i32", "nn.divide %a, %b", ("i32", "i32"), "i32"),
    ("mod_i64", "nn.mod %a, %b", ("i64", "i64"), "i64"),
    ("fmod_i8", "nn.mod %a, %b {fmod = true}", ("i8", "i8"), "i8"),
    ("mod_f32", "nn.mod %a, %b", ("f32", "f32"), "f32"),
    ("min_f32", "nn.minimum %a, %b", ("f32", "f32"), "f32"),
    ("max_f64", "nn.maximum %a, %b", ("f64", "f64"), "f64"),
    ("pow_i32", "nn.pow %a, %b", ("i32", "i32"), "i32"),
    ("pow_f16", "nn.pow %a, %b", ("f16", "f16"), "f16"),
    ("shl_i16", "nn.bit_shift %a, %b {direction = \"left\"}", ("i16", "i16"), "i16"),
    ("shr_i16", "nn.bit_shift %a, %b {direction = \"right\"}", ("i16", "i16"), "i16"),
    ("shl_u8", "nn.bit_shift %a, %b", ("ui8", "ui8"), "ui8"),
    ("mul_u64", "nn.multiply %a, %b", ("ui64", "ui64"), "ui64"),
    ("less_bf16", "nn.less %a, %b", ("bf16", "bf16"), "i1"),
    ("equal_u16", "nn.equal %a, %b", ("ui16", "ui16"), "i1"),
    ("xor", "nn.xor %a, %b", ("i1", "i1"), "i1"),
    ("prelu_f32", "nn.prelu %a, %b", ("f32", "f32"), "f32"),
    ("round_f32", "nn.round %a", ("f32",), "f32"),
    ("sign_f64", "nn.sign %a", ("f64",), "f64"),
    ("abs_i8", "nn.abs %a", ("i8",), "i8"),
    ("neg_i64", "nn.neg %a", ("i64",), "i64"),
    ("relu_f32", "nn.relu %a", ("f32",), "f32"),
    ("relu_i16", "nn.relu %a", ("i16",), "i16"),
    ("clip_f32", "nn.clip %a {min = 1.0 : f64, max = -1.0 : f64}", ("f32",), "f32"),
    ("clip_nan", "nn.clip %a {min = -1.0 : f64}", ("f32",), "f32"),
    ("clip_u8", "nn.clip %a {min = 3.0 : f64, max = 200.0 : f64}", ("ui8",), "ui8"),
    ("cast_f32_i8", "nn.cast %a", ("f32",), "i8"),
    ("cast_f64_bool", "nn.cast %a", ("f64",), "i1"),
    ("cast_i64_bf16", "nn.cast %a", ("i64",), "bf16"),
    ("cast_bool_f16", "nn.cast %a", ("i1",), "f16"),
    ("is_inf_neg", "nn.is_inf %a {detect_positive = false}", ("f32",), "i1"),
    ("is_nan_f16", "nn.is_nan %a", ("f16",), "i1"),
    ("not", "nn.not %a", ("i1",), "i1"),
    ("elu_f64", "nn.elu %a {alpha = 0.5 : f64}", ("f64",), "f64"),
    ("selu_f16", "nn.selu %a", ("f16",), "f16"),
    ("celu_f32", "nn.celu %a {alpha = 1.5 : f64}", ("f32",), "f32"),
    ("softplus_f32", "nn.softplus %a", ("f32",), "f32"),
    ("mish_bf16", "nn.mish %a", ("bf16",), "bf16"),
    ("swish_f32", "nn.swish %a {alpha = 2.0 : f64}", ("f32",), "f32"),
    ("hard_sigmoid_f32", "nn.hard_sigmoid %a", ("f32",), "f32"),
    ("hard_swish_f64", "nn.hard_swish %a", ("f64",), "f64"),
    ("thresholded_relu_f32", "nn.thresholded_relu %a {alpha = 0.25 : f64}", ("f32",), "f32"),
    ("leaky_relu_f16", "nn.leaky_relu %a", ("f16",), "f16"),
    ("softsign_f32", "nn.softsign %a", ("f32",), "f32"),
    ("erf_f64", "nn.erf %a", ("f64",), "f64"),
    ("gelu_tanh_f64", "nn.gelu %a {approximate = \"tanh\"}", ("f64",), "f64"),
    ("sigmoid_f64", "nn.sigmoid %a", ("f64",), "f64"),
    ("atanh_f32", "nn.atanh %a", ("f32",), "f32"),
    ("bitcast_f16_i16", "nn.bitcast %a", ("f16",), "i16"),
    ("bitcast_i64_f64", "nn.bitcast %a", ("i64",), "f64"),
    ("bitcast_f32_ui32", "nn.bitcast %a", ("f32",), "ui32"),
    ("bitwise_not_u16", "nn.bitwise_not %a", ("ui16",), "ui16"),
    ("bitwise_or_i64", "nn.bitwise_or %a, %b", ("i64", "i64"), "i64"),
    ("shrink_i32", "nn.shrink %a {lambd = 2.0 : f64, bias = 1.0 : f64}", ("i32",), "i32"),
]
QUANTIZATION_FUNCTIONS = """
func.func @quantize_i8(%x: tensor<4x6xf32>, %s: tensor<6xf32>, %z: tensor<6xi8>) -> tensor<4x6xi8> {
  %0 = nn.quantize %x, %s, %z {axis = 1 : i64} : (tensor<4x6xf32>, tensor<6xf32>, tensor<6xi8>) -> tensor<4x6xi8>
  func.return %0 : tensor<4x6xi8>
}
func.func @quantize_u8(%x: tensor<4x6xf16>, %s: tensor<f16>, %z: tensor<ui8>) -> tensor<4x6xui8> {
  %0 = nn.quantize %x, %s, %z : (tensor<4x6xf16>, tensor<f16>, tensor<ui8>) -> tensor<4x6xui8>
  func.return %0 : tensor<4x6xui8>
}
func.func @dequantize_blocked(%x: tensor<4x6xui8>, %s: tensor<2x6xf16>, %z: tensor<2x6xui8>) -> tensor<4x6xf16> {
  %0 = nn.dequantize %x, %s, %z {axis = 0 : i64, block_size = 3 : i64} : (tensor<4x6xui8>, tensor<2x6xf16>, tensor<2x6xui8>) -> tensor<4x6xf16>
  func.return %0 : tensor<4x6xf16>
}
func.func @dequantize_i8(%x: tensor<4x6xi8>, %s: tensor<4xf32>, %z: tensor<4xi8>) -> tensor<4x6xf32> {
  %0 = nn.dequantize %x, %s, %z {axis = 0 : i64} : (tensor<4x6xi8>, tensor<4xf32>, tensor<4xi8>) -> tensor<4x6xf32>
  func.return %0 : tensor<4x6xf32>
}
"""
QUANTIZATION_ARGS = {
    # Halves of the scale (round half to even), saturation at both ends.
    "quantize_i8": [np.array([[0.5, 1.5, 2.5, -0.5, -1.5, 1000.0]] * 4, np.float32),
                    np.array([1, 1, 1, 1, 0.5, 0.25], np.float32),
                    np.array([0, 1, -1, 0, 127, -128], np.int8)],
    "quantize_u8": [np.linspace(-3, 3, 24).reshape(4, 6).astype(np.float16),
                    np.array(0.0234, np.float16), np.array(128, np.uint8)],
    "dequantize_blocked": [np.arange(0, 240, 10).reshape(4, 6).astype(np.uint8),
                           np.linspace(0.1, 2, 12).reshape(2, 6).astype(np.float16),
                           np.arange(0, 120, 10).reshape(2, 6).astype(np.uint8)],
    "dequantize_i8": [np.arange(-128, 128, 11)[:24].reshape(4, 6).astype(np.int8),
                      np.array([0.5, 0.25, 1.0, 2.0], np.float32),
                      np.array([0, -128, 127, 3], np.int8)],
}
N = 24
_NP = {t: nn.numpy_dtype(nn.element_type_of(np.dtype(d))) for t, d in (
    ("f32", np.float32), ("f16", np.float16), ("bf16", BF16), ("f64", np.float64),
    ("i1", np.bool_), ("i8", np.int8), ("i16", np.int16), ("i32", np.int32), ("i64", np.int64),
    ("ui8", np.uint8), ("ui16", np.uint16), ("ui32", np.uint32), ("ui64", np.uint64))}


def _edge_values(t: str, k: int) -> np.ndarray:
    """N values of type ``t`` with the cases that break naive kernels."""
    dtype = _NP[t]
    rng = np.random.default_rng(k)
    if t == "i1":
        return rng.random(N) < 0.5
    if dtype.kind == "f" or t == "bf16":
        special = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0, 30.0, -30.0]
        return np.array(special + list(rng.standard_normal(N - len(special)) * 3), np.float64).astype(dtype)
    info = np.iinfo(dtype)
    special = [0, 1, info.max, info.min, 2, 3, 5, 7, 15, 16, 17, 64] if info.min == 0 else \
        [0, 1, -1, info.max, info.min, 3, -3, 5, -5, 7, -7, 15, 16, 17]
    rest = rng.integers(max(info.min, -100), min(info.max, 100), N - len(special), endpoint=True)
    return np.concatenate([np.array(special, dtype), rest.astype(dtype)])


def _host_module() -> str:
    funcs = [QUANTIZATION_FUNCTIONS]
    for name, text, operands, result in HOST_FUNCTIONS:
        args = ", ".join(f"%{a}: tensor<{N}x{t}>" for a, t in zip("ab", operands))
        types = ", ".join(f"tensor<{N}x{t}>" for t in operands)
        funcs.append(f"func.func @{name}({args}) -> tensor<{N}x{result}> {{\n"
                     f"  %0 = {text} : ({types}) -> tensor<{N}x{result}>\n"
                     f"  func.return %0 : tensor<{N}x{result}>\n}}\n")
    return "".join(funcs)


def test_kernels_built_for_the_host_match_the_references(tmp_path) -> None:
    from support.cuda_host import HostKernels, have_gxx  # tests/support/cuda_host.py

    from partita.lowering.cuda.codegen import program_of
    from partita.runtime.extern import kernel_handles
    from partita.runtime.reference import run
    from partita.transforms import get_all_passes

    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    text = _host_module()
    ctx = make_context()
    fused = parse_module(text, ctx, "host.mlir")
    PassPipeline.parse_spec(get_all_passes(), "fuse-native-kernels").apply(ctx, fused)
    lowered = parse_module(text, ctx, "host.mlir")
    spec = f'fuse-native-kernels,cuda-codegen{{arch=sm_90 cache-dir="{tmp_path}"}},lower-extern-calls'
    PassPipeline.parse_spec(get_all_passes(), spec).apply(ctx, lowered)
    handles = kernel_handles(lowered)
    host = HostKernels(program_of(fused).code, [h.record for h in handles.values()], tmp_path)
    reference = parse_module(text, make_context(), "host.mlir")
    assert len(handles) == len(HOST_FUNCTIONS) + len(QUANTIZATION_ARGS)
    cases = [(name, None, None, result) for name, result in (
        ("quantize_i8", "i8"), ("quantize_u8", "ui8"), ("dequantize_i8", "f32"),
        ("dequantize_blocked", "f16"))]
    for k, (name, _, operands, result) in enumerate(cases + HOST_FUNCTIONS):
        (handle,) = [h for key, h in handles.items() if key.startswith(f"{name}_")]
        if name in QUANTIZATION_ARGS:
            args = QUANTIZATION_ARGS[name]
        else:
            args = [_edge_values(t, k + j) for j, t in enumerate(operands)]
        if name.startswith("cast_f") and _NP[result].kind in "iu":
            args = [np.nan_to_num(x, posinf=100, neginf=-100) for x in args]  # out of range is undefined in C
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (want,) = run(reference, *args, entry=name)
        out = np.zeros(want.shape, want.dtype)
        grid, block = handle.record.geometry(out.shape)
        host.launch(handle.record, grid, block, args, out)
        if want.dtype.kind == "f" or want.dtype == BF16:
            tol = {"f16": 1e-3, "bf16": 8e-3}.get(result, 1e-6)
            np.testing.assert_allclose(out.astype(np.float64), want.astype(np.float64), rtol=tol,
                                       atol=tol, equal_nan=True, err_msg=name)
        else:
            np.testing.assert_array_equal(out, want, err_msg=name)
