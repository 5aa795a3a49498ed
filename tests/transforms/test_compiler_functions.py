"""Compiler-function utilities: inline / outline round trips, deduplication, extern
lowering with shape functions, all checked against the NumPy reference executor, plus the
structural hash they rely on."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr

from partita.analysis.global_symbols import (
    ExistingGlobalSymbolCache,
    FreshSymbolNames,
    StructuralDedupCache,
)
from partita.dialects import make_context
from partita.dialects.byoc import CallExternOp, PartitionOp
from partita.ir import PartitaError, parse_module, verify_module
from partita.ir.structural import structural_hash, structurally_equal
from partita.runtime.reference import run
from partita.transforms.inline_compiler_functions import InlineCompilerFunctions
from partita.transforms.lower_extern_calls import LowerExternCalls
from partita.transforms.mark_compiler_functions_as_extern import MarkCompilerFunctionsAsExtern
from partita.transforms.outline_compiler_functions import OutlineCompilerFunctions, outline_partitions

CTX = make_context()


def parse(text: str) -> ModuleOp:
    return parse_module(text, CTX, "test.mlir")


def apply(module: ModuleOp, *passes) -> ModuleOp:
    module = module.clone()
    for p in passes:
        p.apply(CTX, module)
        verify_module(module)
    return module


def functions(module: ModuleOp) -> dict[str, func.FuncOp]:
    return {op.sym_name.data: op for op in module.ops if isinstance(op, func.FuncOp)}


# --------------------------------------------------------------------------------------
# Round trip on a hand-written module: nested callers, two compilers, all attributes.
# Outlining puts each function right before the top-level function of its first caller,
# so a module laid out that way comes back identical.
# --------------------------------------------------------------------------------------

OUTLINED = """
func.func private @tvmgen_default_cublas_main_0(%a: tensor<16x4xf32>) -> tensor<16x4xf32> attributes {byoc.compiler = "cublas", byoc.global_symbol = "tvmgen_default_cublas_main_0", byoc.composite = "cublas.relu"} {
  %0 = nn.relu %a : (tensor<16x4xf32>) -> tensor<16x4xf32>
  func.return %0 : tensor<16x4xf32>
}
func.func private @helper(%h: tensor<16x4xf32>) -> tensor<16x4xf32> {
  %0 = func.call @tvmgen_default_cublas_main_0(%h) : (tensor<16x4xf32>) -> tensor<16x4xf32>
  func.return %0 : tensor<16x4xf32>
}
func.func private @tvmgen_default_cutlass_main_0(%a: tensor<16x8xf32>, %c: tensor<4x8xf32>, %d: tensor<4xf32>) -> tensor<16x4xf32> attributes {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} {
  %0 = nn.dense %a, %c : (tensor<16x8xf32>, tensor<4x8xf32>) -> tensor<16x4xf32>
  %1 = nn.add %0, %d : (tensor<16x4xf32>, tensor<4xf32>) -> tensor<16x4xf32>
  func.return %1 : tensor<16x4xf32>
}
func.func @main(%x: tensor<16x8xf32>, %w: tensor<4x8xf32>, %b: tensor<4xf32>) -> tensor<16x4xf32> {
  %0 = func.call @tvmgen_default_cutlass_main_0(%x, %w, %b) : (tensor<16x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<16x4xf32>
  %1 = func.call @helper(%0) : (tensor<16x4xf32>) -> tensor<16x4xf32>
  %2 = func.call @tvmgen_default_cutlass_main_0(%x, %w, %b) : (tensor<16x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<16x4xf32>
  %3 = nn.add %1, %2 : (tensor<16x4xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
  func.return %3 : tensor<16x4xf32>
}
"""


def seed_args():
    rng = np.random.default_rng(1)
    return [rng.standard_normal(s).astype(np.float32) for s in ((16, 8), (4, 8), (4,))]


def test_inline_then_outline_gives_back_the_module():
    original = parse(OUTLINED)
    inlined = apply(original, InlineCompilerFunctions())
    assert set(functions(inlined)) == {"helper", "main"}
    assert sum(isinstance(op, PartitionOp) for op in inlined.walk()) == 3
    outlined = apply(inlined, OutlineCompilerFunctions())
    assert original.is_structurally_equivalent(outlined)
    assert not original.is_structurally_equivalent(inlined)
    args = seed_args()
    expected = run(original, *args)
    for module in (inlined, outlined):
        np.testing.assert_array_equal(run(module, *args)[0], expected[0])


def test_inline_one_compiler_round_trip():
    original = parse(OUTLINED)
    inlined = apply(original, InlineCompilerFunctions(compiler="cublas"))
    assert "tvmgen_default_cutlass_main_0" in functions(inlined)
    assert [op.compiler for op in inlined.walk() if isinstance(op, PartitionOp)] == ["cublas"]
    assert original.is_structurally_equivalent(apply(inlined, OutlineCompilerFunctions(compiler="cublas")))


def test_inlined_partition_without_global_symbol_gets_the_function_name():
    text = OUTLINED.replace(', byoc.global_symbol = "tvmgen_default_cublas_main_0"', "")
    inlined = apply(parse(text), InlineCompilerFunctions())
    (relu,) = [op for op in inlined.walk() if isinstance(op, PartitionOp) and op.compiler == "cublas"]
    assert relu.global_symbol == "tvmgen_default_cublas_main_0"
    assert relu.attributes["byoc.composite"] == StringAttr("cublas.relu")


def test_outline_without_global_symbol_is_a_located_error():
    inlined = apply(parse(OUTLINED), InlineCompilerFunctions())
    partition = next(op for op in inlined.walk() if isinstance(op, PartitionOp))
    del partition.attributes["byoc.global_symbol"]
    with pytest.raises(PartitaError, match=r"test.mlir:\d+:\d+: error: 'byoc.partition' op has no 'byoc.global_symbol'"):
        OutlineCompilerFunctions().apply(CTX, inlined)


def test_outline_partitions_api_and_custom_fresh_names():
    inlined = apply(parse(OUTLINED), InlineCompilerFunctions())
    for op in inlined.walk():
        if isinstance(op, PartitionOp):
            del op.attributes["byoc.global_symbol"]
    names = FreshSymbolNames(template="collage_{compiler}_{k}")
    cache = StructuralDedupCache(inlined, names=names)
    chosen = outline_partitions(inlined, cache)
    # Two equal cutlass partitions share one function; the cublas one lives in @helper.
    assert sorted(chosen.values()) == ["collage_cublas_0", "collage_cutlass_0", "collage_cutlass_0"]
    assert {"collage_cublas_0", "collage_cutlass_0"} <= set(functions(inlined))
    np.testing.assert_array_equal(run(inlined, *seed_args())[0], run(parse(OUTLINED), *seed_args())[0])


def test_dedup_never_merges_different_partitions_with_one_global_symbol():
    text = _partition_text(attr='byoc.compiler = "cutlass", byoc.global_symbol = "g"')
    text = text.replace("  func.return %0", """  %1 = byoc.partition(%0, %y) {byoc.compiler = "cutlass", byoc.global_symbol = "g"} ({
  ^bb0(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>):
    %t = nn.multiply %a, %b : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    byoc.yield %t : tensor<8x8xf32>
  }) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  func.return %1""").replace("func.return %1 : tensor<8x8xf32>\n  func.return", "func.return")
    module = parse(text)
    for dedup in (False, True):
        with pytest.raises(PartitaError, match="cannot be outlined as @g"):
            OutlineCompilerFunctions(dedup=dedup).apply(CTX, module.clone())


def test_existing_cache_requires_global_symbol():
    module = apply(parse(OUTLINED), InlineCompilerFunctions())
    partition = next(op for op in module.walk() if isinstance(op, PartitionOp))
    assert ExistingGlobalSymbolCache().symbol_for(partition) == partition.global_symbol


# --------------------------------------------------------------------------------------
# Random graphs: outlining, dedup, inlining and extern lowering never change results.
# --------------------------------------------------------------------------------------

T = "tensor<8x8xf32>"
# Partition bodies over block arguments %a, %b (two of them are dense, so share "w").
TEMPLATES = [
    [("nn.add", "%a", "%b"), ("nn.relu", "%t0")],
    [("nn.dense", "%a", "%b"), ("nn.tanh", "%t0")],
    [("nn.relu", "%b"), ("nn.multiply", "%a", "%t0")],
]
PLAIN_OPS = ["nn.add", "nn.multiply", "nn.relu", "nn.tanh", "nn.dense"]
ARITY = {"nn.add": 2, "nn.multiply": 2, "nn.dense": 2, "nn.relu": 1, "nn.tanh": 1}

plain_step = st.tuples(st.just("op"), st.sampled_from(PLAIN_OPS), st.integers(0, 99), st.integers(0, 99))
partition_step = st.tuples(
    st.just("part"), st.integers(0, len(TEMPLATES) - 1), st.sampled_from(["cutlass", "cublas"]),
    st.integers(0, 99), st.integers(0, 99), st.booleans(),
)
graphs = st.lists(st.one_of(plain_step, partition_step), min_size=1, max_size=7)


def build_graph(steps, always_symbol: bool) -> tuple[str, set[tuple[int, str]]]:
    """Text of @main(%x, %y) over the steps; returns it and the distinct partition kinds."""
    values = ["%x", "%y"]
    lines, kinds = [], set()
    for i, step in enumerate(steps):
        out = f"%v{i}"
        if step[0] == "op":
            _, name, p, q = step
            operands = [values[p % len(values)], values[q % len(values)]][: ARITY[name]]
            types = ", ".join([T] * len(operands))
            lines.append(f"  {out} = {name} {', '.join(operands)} : ({types}) -> {T}")
        else:
            _, template, compiler, p, q, symbol = step
            kinds.add((template, compiler))
            attrs = f'byoc.compiler = "{compiler}"'
            if symbol or always_symbol:
                attrs += f', byoc.global_symbol = "g_{compiler}_{template}"'
            body = []
            for j, (name, *operands) in enumerate(TEMPLATES[template]):
                types = ", ".join([T] * len(operands))
                body.append(f"    %t{j} = {name} {', '.join(operands)} : ({types}) -> {T}")
            last = len(TEMPLATES[template]) - 1
            lines.append(
                f"  {out} = byoc.partition({values[p % len(values)]}, {values[q % len(values)]}) {{{attrs}}} ({{\n"
                f"  ^bb0(%a: {T}, %b: {T}):\n" + "\n".join(body) + f"\n    byoc.yield %t{last} : {T}\n"
                f"  }}) : ({T}, {T}) -> {T}"
            )
        values.append(out)
    lines.append(f"  func.return {values[-1]} : {T}")
    text = f"func.func @main(%x: {T}, %y: {T}) -> {T} {{\n" + "\n".join(lines) + "\n}\n"
    return text, kinds


def random_inputs(seed: int):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((8, 8)) * 0.5).astype(np.float32) for _ in range(2)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs, st.integers(0, 2**16))
def test_outline_inline_preserve_semantics(steps, seed):
    text, kinds = build_graph(steps, always_symbol=True)
    module = parse(text)
    args = random_inputs(seed)
    (expected,) = run(module, *args)

    outlined = apply(module, OutlineCompilerFunctions())
    assert not any(isinstance(op, PartitionOp) for op in outlined.walk())
    assert len(functions(outlined)) == 1 + len(kinds)  # equal global symbols reuse one
    np.testing.assert_array_equal(run(outlined, *args)[0], expected)

    inlined = apply(outlined, InlineCompilerFunctions())
    assert inlined.is_structurally_equivalent(module)
    np.testing.assert_array_equal(run(inlined, *args)[0], expected)

    lowered = apply(outlined, MarkCompilerFunctionsAsExtern(), LowerExternCalls())
    assert not any(isinstance(op, func.CallOp) for op in functions(lowered)["main"].walk())
    assert sum(isinstance(op, CallExternOp) for op in lowered.walk()) == sum(s[0] == "part" for s in steps)
    np.testing.assert_array_equal(run(lowered, *args)[0], expected)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs, st.integers(0, 2**16))
def test_dedup_preserves_semantics_and_shares_functions(steps, seed):
    text, kinds = build_graph(steps, always_symbol=False)
    module = parse(text)
    args = random_inputs(seed)
    (expected,) = run(module, *args)
    deduped = apply(module, OutlineCompilerFunctions(dedup=True))
    assert len(functions(deduped)) == 1 + len(kinds)  # one function per distinct partition
    np.testing.assert_array_equal(run(deduped, *args)[0], expected)
    round_trip = apply(deduped, InlineCompilerFunctions(), OutlineCompilerFunctions(dedup=True))
    np.testing.assert_array_equal(run(round_trip, *args)[0], expected)


# --------------------------------------------------------------------------------------
# Dynamic shapes: lower-extern-calls with shape functions, run for two batch sizes.
# --------------------------------------------------------------------------------------

DYNAMIC = """
func.func @main(%x: tensor<?x768xf16>, %w: tensor<2304x768xf16>, %b: tensor<2304xf16>, %img: tensor<?x3x?x?xf32>, %k: tensor<4x3x3x3xf32>) -> (tensor<?x2304xf16>, tensor<?x4x?x?xf32>, tensor<?x8xf32>) {
  %0 = byoc.partition(%x, %w, %b) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} ({
  ^bb0(%a: tensor<?x768xf16>, %c: tensor<2304x768xf16>, %d: tensor<2304xf16>):
    %1 = nn.dense %a, %c : (tensor<?x768xf16>, tensor<2304x768xf16>) -> tensor<?x2304xf16>
    %2 = nn.add %1, %d : (tensor<?x2304xf16>, tensor<2304xf16>) -> tensor<?x2304xf16>
    byoc.yield %2 : tensor<?x2304xf16>
  }) : (tensor<?x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<?x2304xf16>
  %3:2 = byoc.partition(%img, %k) {byoc.compiler = "cudnn", byoc.global_symbol = "conv"} ({
  ^bb0(%i: tensor<?x3x?x?xf32>, %f: tensor<4x3x3x3xf32>):
    %4 = nn.conv2d %i, %f {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>} : (tensor<?x3x?x?xf32>, tensor<4x3x3x3xf32>) -> tensor<?x4x?x?xf32>
    %5 = nn.max_pool2d %4 {pool_size = array<i64: 2, 2>, strides = array<i64: 2, 2>, ceil_mode = true} : (tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
    %6 = nn.reshape %5 : (tensor<?x4x?x?xf32>) -> tensor<?x8xf32>
    byoc.yield %5, %6 : tensor<?x4x?x?xf32>, tensor<?x8xf32>
  }) : (tensor<?x3x?x?xf32>, tensor<4x3x3x3xf32>) -> (tensor<?x4x?x?xf32>, tensor<?x8xf32>)
  func.return %0, %3#0, %3#1 : tensor<?x2304xf16>, tensor<?x4x?x?xf32>, tensor<?x8xf32>
}
"""


@pytest.mark.parametrize("batch,height,width", [(3, 9, 7), (5, 12, 16)])
def test_lowered_dynamic_partitions_match_the_unlowered_module(batch, height, width):
    module = parse(DYNAMIC)
    lowered = apply(module, OutlineCompilerFunctions(), MarkCompilerFunctionsAsExtern(), LowerExternCalls())
    assert {"tvmgen_default_cutlass_main_0_shape_func", "conv_shape_func"} <= set(functions(lowered))
    rng = np.random.default_rng(batch)
    args = [
        rng.standard_normal((batch, 768)).astype(np.float16),
        (rng.standard_normal((2304, 768)) * 0.05).astype(np.float16),
        rng.standard_normal(2304).astype(np.float16),
        rng.standard_normal((batch, 3, height, width)).astype(np.float32),
        rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
    ]
    expected = run(module, *args)
    actual = run(lowered, *args)
    assert expected[0].shape == (batch, 2304)
    for e, a in zip(expected, actual, strict=True):
        assert e.shape == a.shape
        np.testing.assert_array_equal(a, e)


def test_lowering_without_reference_bodies_fails_only_for_dynamic_shapes():
    module = apply(parse(DYNAMIC), OutlineCompilerFunctions(), MarkCompilerFunctionsAsExtern(keep_reference=False))
    assert set(functions(module)) == {"tvmgen_default_cutlass_main_0", "conv", "main"}
    with pytest.raises(PartitaError, match="is missing"):
        LowerExternCalls().apply(CTX, module)


def test_call_extern_without_reference_cannot_be_emulated():
    module = apply(parse(OUTLINED), MarkCompilerFunctionsAsExtern(keep_reference=False), LowerExternCalls())
    with pytest.raises(PartitaError, match="cannot emulate @tvmgen_default_cutlass_main_0"):
        run(module, *seed_args())


# --------------------------------------------------------------------------------------
# Structural hash.
# --------------------------------------------------------------------------------------

def _partition_text(names=("a", "b", "t"), attr='byoc.compiler = "cutlass"', pad="", first="nn.add"):
    a, b, t = names
    return f"""
func.func @main(%x: {T}, %y: {T}) -> {T} {{
{pad}  %0 = byoc.partition(%x, %y) {{{attr}}} ({{
  ^bb0(%{a}: {T}, %{b}: {T}):
    %{t} = {first} %{a}, %{b} : ({T}, {T}) -> {T}
    %r = nn.relu %{t} : ({T}) -> {T}
    byoc.yield %r : {T}
  }}) : ({T}, {T}) -> {T}
  func.return %0 : {T}
}}
"""


def _partition(text: str) -> PartitionOp:
    return next(op for op in parse(text).walk() if isinstance(op, PartitionOp))


def test_structural_hash_ignores_names_and_locations():
    p = _partition(_partition_text())
    q = _partition(_partition_text(names=("u", "v", "w"), pad="\n\n  // moved down\n"))
    assert p.location != q.location
    assert structural_hash(p) == structural_hash(q)
    assert structural_hash(p.body) == structural_hash(q.body)
    assert structurally_equal(p.body, q.body)
    assert structural_hash(p) == structural_hash(p.clone())


def test_structural_hash_sees_attributes_ops_and_operand_order():
    base = structural_hash(_partition(_partition_text()))
    assert structural_hash(_partition(_partition_text(attr='byoc.compiler = "cublas"'))) != base
    assert structural_hash(_partition(_partition_text(attr='byoc.compiler = "cutlass", byoc.primitive'))) != base
    assert structural_hash(_partition(_partition_text(first="nn.multiply"))) != base
    swapped = _partition(_partition_text().replace("nn.add %a, %b", "nn.add %b, %a"))
    assert structural_hash(swapped) != base
    assert not structurally_equal(swapped.body, _partition(_partition_text()).body)


def test_structural_hash_sees_result_types():
    p = _partition(_partition_text())
    q = p.clone()
    relu = list(q.body.block.ops)[1]
    # Same ops and operands, different result type (not checked by xDSL's equivalence).
    from xdsl.dialects.builtin import TensorType, f32
    relu.results[0]._type = TensorType(f32, [64])  # noqa: SLF001 - test-only surgery
    assert structural_hash(p.body) != structural_hash(q.body)
    assert not structurally_equal(p.body, q.body)
