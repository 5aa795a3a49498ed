"""Backend registration, pattern tables, phases, targets (partita.backends)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass

from partita.backends import (
    UMABackend,
    backend_target,
    get_backend,
    get_pattern_table,
    list_backends,
    match_patterns,
    native_supports,
    register_backend,
    unregister_backend,
)
from partita.backends.pattern import is_op, wildcard
from partita.dialects import make_context
from partita.ir import PartitaError, parse_module
from partita.target import CompilationConfig, get_target_kind, register_target_kind
from partita.transforms.backend_phases import run_phase

_ids = itertools.count()


def _fresh(prefix: str = "testbe") -> str:
    """Backend registration is global and permanent: each test uses new names."""
    return f"{prefix}{next(_ids)}_{id(_ids)}"


def _dense():
    return is_op("nn.dense")(wildcard(), wildcard())


def test_builtin_backends_in_priority_order():
    assert list_backends()[:4] == ["cutlass", "cublas", "cudnn", "tensorrt"]
    names = [e.name for e in get_pattern_table("cutlass")]
    assert names == [
        "cutlass.dense_bias_residual", "cutlass.residual_dense_bias",
        "cutlass.dense_bias_gelu", "cutlass.dense_bias_relu", "cutlass.dense_bias", "cutlass.dense_residual",
        "cutlass.residual_dense", "cutlass.dense", "cutlass.batch_matmul_bias", "cutlass.batch_matmul", "cutlass.matmul_bias", "cutlass.matmul",
        "cutlass.conv2d_bias_residual_relu", "cutlass.residual_conv2d_bias_relu", "cutlass.conv2d_bias_residual",
        "cutlass.residual_conv2d_bias", "cutlass.conv2d_bias_relu", "cutlass.conv2d_bias", "cutlass.conv2d",
        "cutlass.matmul_integer_bias",
        "cutlass.matmul_integer", "cutlass.conv_integer_bias", "cutlass.conv_integer", "cutlass.matmul_float8",
    ]
    cublas = [e.name for e in get_pattern_table("cublas")]
    assert cublas == [
        "cublas.matmul_float8_scale", "cublas.matmul_float8", "cublas.dense_bias_gelu", "cublas.dense_bias_relu", "cublas.dense_bias", "cublas.dense", "cublas.matmul",
        "cublas.batch_matmul",
    ]
    cudnn = [e.name for e in get_pattern_table("cudnn")]
    assert cudnn == ["cudnn.sdpa", "cudnn.conv2d_bias_relu", "cudnn.conv2d_bias", "cudnn.conv2d_relu", "cudnn.conv2d"]
    table = get_pattern_table()
    # Global table: backends in registration order, each backend's rows in its order.
    assert [e.name for e in table[: len(names) + len(cublas) + len(cudnn) + 1]] == names + cublas + cudnn + ["tensorrt.add"]
    assert all(e.backend == e.name.split(".")[0] for e in table)
    assert [e.backend for e in get_pattern_table(["cudnn", "cutlass"])][-1] == "cudnn"  # registration order wins


def test_a_row_that_needs_a_newer_device_is_skipped_for_an_older_one():
    """``requires_sm``: FP8 rows match on sm_89 and later, on no arch given, never on sm_80."""
    from partita.backends import greedy_matches, requires_sm

    name = _fresh()
    register_backend(name, patterns=[("new", _dense(), requires_sm(89)(lambda m: True)), ("any", _dense())])
    try:
        fn = parse_module("""
func.func @f(%x: tensor<4x8xf16>, %w: tensor<2x8xf16>) -> tensor<4x2xf16> {
  %0 = nn.dense %x, %w : (tensor<4x8xf16>, tensor<2x8xf16>) -> tensor<4x2xf16>
  func.return %0 : tensor<4x2xf16>
}""", make_context()).body.block.first_op
        table = get_pattern_table(name)
        assert [e.min_sm for e in table] == [89, 0]
        for sm, want in ((0, ["new", "any"]), (80, ["any"]), (89, ["new", "any"]), (90, ["new", "any"])):
            assert [m.name.split(".")[1] for m in match_patterns(fn, name, sm=sm)] == want
            assert [m.name.split(".")[1] for m in greedy_matches(fn.body.block, table, sm)] == want[:1]
    finally:
        unregister_backend(name)


def test_register_backend_table_order_and_new_target_kind():
    name = _fresh()
    be = register_backend(name, target_options={"tile": (int, 64)},
                          patterns=[("b", _dense(), None), ("a", _dense())])
    assert get_backend(name) is be and list_backends()[-1] == name
    assert [e.name for e in get_pattern_table(name)] == [f"{name}.b", f"{name}.a"]
    kind = get_target_kind(name)
    assert kind.is_external_codegen and kind.device_type.value == "cuda"
    assert kind.options["tile"].default == 64


def test_duplicate_pattern_and_backend_are_errors():
    name = _fresh()
    with pytest.raises(PartitaError, match=f"pattern '{name}.p' is already registered"):
        register_backend(name, patterns=[("p", _dense(), None), ("p", _dense(), None)])
    assert name not in list_backends()
    register_backend(name, patterns=[("p", _dense(), None)])
    with pytest.raises(PartitaError, match=f"backend '{name}' is already registered"):
        register_backend(name)
    with pytest.raises(PartitaError, match="already registered"):
        register_backend("cutlass")


def test_existing_kind_options_are_added_and_duplicates_rejected():
    # An already registered external kind (like the built-in tensorrt) is reused.
    reused, clash = _fresh("kind"), _fresh("kind")
    register_target_kind(reused, "cuda", {"old": int}, is_external_codegen=True)
    register_backend(reused, target_options={"new": (int, 3)})
    assert set(get_target_kind(reused).options) == {"old", "new"}
    register_target_kind(clash, "cuda", {"old": int}, is_external_codegen=True)
    with pytest.raises(PartitaError, match="option 'old' is already registered"):
        register_backend(clash, target_options={"old": int})
    with pytest.raises(PartitaError, match="not an external codegen"):
        register_backend("llvm")


def test_uma_style_backend():
    name = _fresh("uma")

    class MyBackend(UMABackend):
        target_name = name

        def __init__(self):
            super().__init__()
            self._register_target_attr("tile", int, 128)
            self._register_pattern("dense_relu", is_op("nn.relu")(_dense()))
            self._register_pattern("dense", _dense(), lambda m: True)
            self._register_pass("before_partitioning", "canonicalize")

    be = MyBackend().register()
    assert [e.name for e in be.patterns] == [f"{name}.dense_relu", f"{name}.dense"]
    assert be.before_partitioning == ("canonicalize",)
    assert get_target_kind(name).options["tile"].default == 128


@dataclass(frozen=True)
class _Log(ModulePass):
    name = "test-log"
    tag: str = ""

    def apply(self, ctx, op: ModuleOp) -> None:
        log = op.attributes.get("test.log")
        text = (log.data + "," if isinstance(log, StringAttr) else "") + self.tag
        op.attributes["test.log"] = StringAttr(text)


def test_phase_passes_run_in_registration_order():
    first, second = _fresh("ph"), _fresh("ph")
    register_backend(first, before_partitioning=[_Log("a1"), _Log("a2")], after_partitioning=[_Log("z1")])
    register_backend(second, before_partitioning=[_Log("b1")])
    module = ModuleOp([])
    try:
        ran = run_phase(module, "before_partitioning", [second, first])
        assert ran == ["test-log"] * 3
        assert module.attributes["test.log"].data == "a1,a2,b1"
        run_phase(module, "after_partitioning", [first, second])
        assert module.attributes["test.log"].data == "a1,a2,b1,z1"
        with pytest.raises(PartitaError, match="unknown backend phase"):
            run_phase(module, "during", [first])
    finally:
        unregister_backend(first)
        unregister_backend(second)


def test_phase_pipeline_strings_are_parsed():
    name = _fresh("pipe")
    register_backend(name, before_partitioning=["no-such-pass"])
    try:
        with pytest.raises(PartitaError, match="invalid phase pass pipeline"):
            run_phase(ModuleOp([]), "before_partitioning", [name])
    finally:
        unregister_backend(name)
    assert name not in list_backends()
    good = _fresh("pipe")
    register_backend(good, after_partitioning=["canonicalize"])
    try:
        assert run_phase(ModuleOp([]), "after_partitioning", [good]) == ["canonicalize"]
    finally:
        unregister_backend(good)


def test_backend_target_reads_config_options():
    config = CompilationConfig.parse("cuda -arch=sm_80,cutlass -sm=75,llvm")
    target = backend_target(config, "cutlass")
    assert target.kind.name == "cutlass" and target.get("sm") == 75
    assert backend_target(None, "cutlass").get("sm") == 80
    with pytest.raises(PartitaError, match="no target of kind 'cublas'"):
        backend_target(config, "cublas")
    with pytest.raises(PartitaError, match="unknown backend"):
        backend_target(config, "cuda")


def test_native_supports():
    assert native_supports("cuda", "nn.softmax") and native_supports("llvm", "nn.conv2d")
    assert not native_supports("cutlass", "nn.dense")
    assert not native_supports("nonexistent", "nn.dense")
    assert not native_supports("cuda", "func.call")


def test_match_patterns_enumerates_overlapping_matches_for_collage():
    text = """func.func @main(%x: tensor<16x8xf16>, %w: tensor<4x8xf16>, %b: tensor<4xf16>) -> tensor<16x4xf16> {
  %0 = nn.dense %x, %w : (tensor<16x8xf16>, tensor<4x8xf16>) -> tensor<16x4xf16>
  %1 = nn.bias_add %0, %b : (tensor<16x4xf16>, tensor<4xf16>) -> tensor<16x4xf16>
  %2 = nn.relu %1 : (tensor<16x4xf16>) -> tensor<16x4xf16>
  func.return %2 : tensor<16x4xf16>
}"""
    func = next(iter(parse_module(text, make_context(), "t").ops))
    found = [(m.name, [op.name for op in m.ops]) for m in match_patterns(func, ["cutlass", "cublas"])]
    assert found == [
        ("cutlass.dense", ["nn.dense"]),
        ("cublas.dense", ["nn.dense"]),
        ("cutlass.dense_bias", ["nn.dense", "nn.bias_add"]),
        ("cublas.dense_bias", ["nn.dense", "nn.bias_add"]),
        ("cutlass.dense_bias_relu", ["nn.dense", "nn.bias_add", "nn.relu"]),
        ("cublas.dense_bias_relu", ["nn.dense", "nn.bias_add", "nn.relu"]),
    ]
    first = match_patterns(func, "cutlass,cublas", first_only=True)
    assert [m.name for m in first] == ["cutlass.dense", "cutlass.dense_bias", "cutlass.dense_bias_relu"]


@pytest.mark.parametrize("dims, result, offered", [("?x8x8x3", "?x6x6x4", True), ("?x8x8x?", "?x6x6x4", False),
                                                   ("?x?x8x3", "?x?x6x4", True), ("?x?x?x3", "?x?x?x4", True)])
def test_a_cutlass_convolution_needs_static_channels(dims, result, offered):
    """CUTLASS's implicit GEMM takes N, H and W at run time, but its accesses are aligned
    by C at compile time: a convolution with a run-time channel count is not offered to it,
    rather than placed there and refused by its codegen (GLPN's reshaped tokens); one of a
    run-time height and width (an image of any size) is."""
    text = f"""func.func @main(%x: tensor<{dims}xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<{result}xf32> {{
  %0 = nn.conv2d %x, %w {{data_layout = "NHWC", kernel_layout = "OHWI"}} : (tensor<{dims}xf32>, tensor<4x3x3x3xf32>) -> tensor<{result}xf32>
  func.return %0 : tensor<{result}xf32>
}}"""
    func = next(iter(parse_module(text, make_context(), "t").ops))
    assert bool(match_patterns(func, ["cutlass"])) == offered
