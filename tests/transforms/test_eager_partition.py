"""The eager BYOC partitioner: structure and semantics (reference executor)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.func import FuncOp

from partita.backends import register_backend, unregister_backend
from partita.dialects import make_context
from partita.dialects.byoc import COMPILER, COMPOSITE, GLOBAL_SYMBOL, PartitionOp
from partita.dialects.nn import numpy_dtype
from partita.ir import parse_module
from partita.lowering.cutlass.codegen import partition_kernel
from partita.runtime.reference import run
from partita.tools.opt import main as opt_main
from partita.transforms.outline_compiler_functions import OutlineCompilerFunctions
from partita.transforms.partition_eager import PartitionEager

MODEL = """func.func @main(%x: tensor<8x16xf32>, %w1: tensor<16x16xf32>, %b1: tensor<16xf32>,
                 %w2: tensor<8x16xf32>, %img: tensor<1x6x6x4xf32>, %k: tensor<8x3x3x4xf32>,
                 %kb: tensor<8xf32>) -> (tensor<8x8xf32>, tensor<1x4x4x8xf32>) {
  %0 = nn.dense %x, %w1 : (tensor<8x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  %1 = nn.add %0, %b1 : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  %2 = nn.gelu %1 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %3 = nn.tanh %2 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %c = nn.constant dense<0.5> : tensor<8x16xf32>
  %4 = nn.dense %3, %c : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x8xf32>
  %5 = nn.dense %3, %w2 : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x8xf32>
  %6 = nn.add %4, %5 : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %7 = nn.softmax %6 : (tensor<8x8xf32>) -> tensor<8x8xf32>
  %8 = nn.conv2d %img, %k {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<1x6x6x4xf32>, tensor<8x3x3x4xf32>) -> tensor<1x4x4x8xf32>
  %9 = nn.bias_add %8, %kb {axis = 3 : i64} : (tensor<1x4x4x8xf32>, tensor<8xf32>) -> tensor<1x4x4x8xf32>
  %10 = nn.relu %9 : (tensor<1x4x4x8xf32>) -> tensor<1x4x4x8xf32>
  func.return %7, %10 : tensor<8x8xf32>, tensor<1x4x4x8xf32>
}"""


def _inputs(module, seed=0):
    rng = np.random.default_rng(seed)
    func = next(op for op in module.ops if isinstance(op, FuncOp))
    return [rng.standard_normal(t.get_shape()).astype(numpy_dtype(t.element_type))
            for t in func.function_type.inputs.data]


def _partitions(module):
    return [op for op in module.walk() if isinstance(op, PartitionOp)]


@pytest.mark.parametrize(
    "options",
    [dict(backends="cutlass"), dict(backends=("cutlass", "cublas", "cudnn")),
     dict(backends=("cublas", "cudnn"), bind_constants=True), dict(backends="cublas", merge=True)],
)
def test_partitioning_preserves_reference_semantics(options):
    ctx = make_context()
    before = parse_module(MODEL, ctx, "model")
    after = before.clone()
    PartitionEager(**options).apply(ctx, after)
    after.verify()
    assert _partitions(after), "expected at least one partition"
    args = _inputs(before)
    for want, got in zip(run(before, *args), run(after, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_partition_structure_all_backends():
    ctx = make_context()
    module = parse_module(MODEL, ctx, "model")
    PartitionEager(backends=("cutlass", "cublas", "cudnn")).apply(ctx, module)
    # The softmax stays in main: cuDNN here runs convolutions and whole attentions only.
    top = [op for op in module.walk() if isinstance(op, PartitionOp)]
    got = [(p.attributes[COMPOSITE].data, p.compiler, p.global_symbol) for p in top]
    # Block order; symbols are numbered per compiler in block order.
    assert got == [
        ("cutlass.dense_bias_gelu", "cutlass", "tvmgen_default_cutlass_main_0"),
        ("cutlass.dense", "cutlass", "tvmgen_default_cutlass_main_1"),
        # dense(%3, %c) + dense(%3, %w2): the first GEMM reads the second one's result as its residual
        ("cutlass.dense_residual", "cutlass", "tvmgen_default_cutlass_main_2"),
        ("cutlass.conv2d_bias_relu", "cutlass", "tvmgen_default_cutlass_main_3"),
    ]
    assert len({p.global_symbol for p in top}) == len(top)
    # The constant stays outside, as an operand.
    const_users = [p for p in top if any(getattr(v.owner, "name", "") == "nn.constant" for v in p.inputs)]
    assert len(const_users) == 1


def test_single_op_backend_regions_merge_only_when_convex():
    name = "testsingleops"  # the target kind stays registered: one registration per session
    register_backend(name, ops=["nn.tanh", "nn.relu", "nn.add"])
    text = """func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = nn.tanh %x : (tensor<4xf32>) -> tensor<4xf32>
  %1 = nn.relu %0 : (tensor<4xf32>) -> tensor<4xf32>
  %2 = nn.sigmoid %0 : (tensor<4xf32>) -> tensor<4xf32>
  %3 = nn.add %1, %2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %3 : tensor<4xf32>
}"""
    ctx = make_context()
    before = parse_module(text, ctx, "t")
    after = before.clone()
    try:
        PartitionEager(backends=name).apply(ctx, after)
    finally:
        unregister_backend(name)
    after.verify()
    parts = _partitions(after)
    # tanh+relu merge; add cannot join them (the path through the sigmoid would leave
    # and re-enter the region), so it is a partition of its own.
    contents = sorted(tuple(op.name for op in p.body.block.ops)[:-1] for p in parts)
    assert contents == [("nn.add",), ("nn.tanh", "nn.relu")]
    assert all(p.compiler == name and COMPOSITE not in p.attributes for p in parts)
    assert all(COMPILER not in op.attributes for p in parts for op in p.body.block.ops)
    args = _inputs(before)
    np.testing.assert_allclose(run(after, *args)[0], run(before, *args)[0], rtol=1e-6)


def test_existing_partition_is_not_repartitioned():
    text = """func.func @main(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cublas", byoc.global_symbol = "keep"} ({
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<4x4xf32>):
    %r = nn.dense %a, %b : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  func.return %0 : tensor<2x4xf32>
}"""
    ctx = make_context()
    module = parse_module(text, ctx, "t")
    expected = str(module)
    PartitionEager(backends=("cutlass", "cublas", "cudnn")).apply(ctx, module)
    assert str(module) == expected
    assert [p.attributes[GLOBAL_SYMBOL].data for p in _partitions(module)] == ["keep"]


def test_unknown_backend_is_a_located_user_error(tmp_path, capsys):
    path = tmp_path / "m.mlir"
    path.write_text("func.func @main() {\n  func.return\n}\n")
    assert opt_main([str(path), "-p", "partition-eager{backends=nope}"]) != 0
    err = capsys.readouterr().err
    assert "unknown backend 'nope'" in err and "Traceback" not in err


def test_both_gelu_forms_are_the_cutlass_epilogue():
    # CUTLASS has both GELUs as epilogues: the erf form (LinearCombinationGELU) and the
    # tanh approximation (GELU_taylor); the kernel spec says which.
    text = """
    func.func @main(%x: tensor<16x32xf16>, %w: tensor<64x32xf16>, %b: tensor<64xf16>) -> tensor<16x64xf16> {
      %0 = nn.dense %x, %w : (tensor<16x32xf16>, tensor<64x32xf16>) -> tensor<16x64xf16>
      %1 = nn.bias_add %0, %b : (tensor<16x64xf16>, tensor<64xf16>) -> tensor<16x64xf16>
      %2 = nn.gelu %1 {approximate = "APPROX"} : (tensor<16x64xf16>) -> tensor<16x64xf16>
      func.return %2 : tensor<16x64xf16>
    }
    """
    composites, epilogues = {}, {}
    for approximate in ("none", "tanh"):
        module = parse_module(text.replace("APPROX", approximate), make_context(), "gelu.mlir")
        PartitionEager(backends="cutlass").apply(make_context(), module)
        composites[approximate] = [p.attributes[COMPOSITE].data for p in _partitions(module)]
        OutlineCompilerFunctions().apply(make_context(), module)
        (function,) = [f for f in module.ops if isinstance(f, FuncOp) and f.sym_name.data != "main"]
        epilogues[approximate] = partition_kernel(function).spec.epilogue
    assert composites == {"none": ["cutlass.dense_bias_gelu"], "tanh": ["cutlass.dense_bias_gelu"]}
    assert epilogues == {"none": "bias_gelu", "tanh": "bias_gelu_tanh"}
