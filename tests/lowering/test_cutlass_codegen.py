"""The cutlass-codegen pass: one NVRTC program per kernel configuration, cached, with
records that rebuild what the emitter produced. Compile-only: no GPU is needed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import FuncOp

from partita.dialects import byoc, make_context
from partita.ir import PartitaError, parse_module
from partita.lowering import nvrtc
from partita.lowering.binaries import cubin_file
from partita.lowering.cubin import kernel_params, kernel_symbols
from partita.lowering.cutlass import choose_config, emit_module
from partita.lowering.cutlass.codegen import CutlassCodegen, cutlass_functions, partition_kernel
from partita.lowering.cutlass.records import entry_from_record

# Two compilers, three cutlass partitions (two of them identical kernels), one dynamic.
MODULE = """
func.func @main(%x: tensor<?x64xf16>, %w: tensor<128x64xf16>, %b: tensor<128xf16>,
                %i: tensor<2x8x8x16xf32>, %k: tensor<32x3x3x16xf32>, %kb: tensor<32xf32>)
    -> (tensor<?x128xf16>, tensor<2x8x8x32xf32>) {
  %0 = byoc.partition(%x, %w, %b) {byoc.compiler = "cutlass", byoc.global_symbol = "dense_a"} ({
  ^bb0(%a: tensor<?x64xf16>, %c: tensor<128x64xf16>, %d: tensor<128xf16>):
    %1 = nn.dense %a, %c : (tensor<?x64xf16>, tensor<128x64xf16>) -> tensor<?x128xf16>
    %2 = nn.bias_add %1, %d : (tensor<?x128xf16>, tensor<128xf16>) -> tensor<?x128xf16>
    %3 = nn.relu %2 : (tensor<?x128xf16>) -> tensor<?x128xf16>
    byoc.yield %3 : tensor<?x128xf16>
  }) : (tensor<?x64xf16>, tensor<128x64xf16>, tensor<128xf16>) -> tensor<?x128xf16>
  %4 = byoc.partition(%w, %x) {byoc.compiler = "cutlass", byoc.global_symbol = "dense_b"} ({
  ^bb0(%c: tensor<128x64xf16>, %a: tensor<?x64xf16>):
    %s = nn.dense %a, %c : (tensor<?x64xf16>, tensor<128x64xf16>) -> tensor<?x128xf16>
    byoc.yield %s : tensor<?x128xf16>
  }) : (tensor<128x64xf16>, tensor<?x64xf16>) -> tensor<?x128xf16>
  %5 = byoc.partition(%x, %w) {byoc.compiler = "cublas", byoc.global_symbol = "cublas_0"} ({
  ^bb0(%a: tensor<?x64xf16>, %c: tensor<128x64xf16>):
    %1 = nn.dense %a, %c : (tensor<?x64xf16>, tensor<128x64xf16>) -> tensor<?x128xf16>
    byoc.yield %1 : tensor<?x128xf16>
  }) : (tensor<?x64xf16>, tensor<128x64xf16>) -> tensor<?x128xf16>
  %6 = byoc.partition(%i, %k, %kb) {byoc.compiler = "cutlass", byoc.global_symbol = "conv_0"} ({
  ^bb0(%a: tensor<2x8x8x16xf32>, %c: tensor<32x3x3x16xf32>, %d: tensor<32xf32>):
    %1 = nn.conv2d %a, %c {data_layout = "NHWC", kernel_layout = "OHWI", padding = array<i64: 1, 1, 1, 1>} : (tensor<2x8x8x16xf32>, tensor<32x3x3x16xf32>) -> tensor<2x8x8x32xf32>
    %2 = nn.bias_add %1, %d {axis = 3 : i64} : (tensor<2x8x8x32xf32>, tensor<32xf32>) -> tensor<2x8x8x32xf32>
    byoc.yield %2 : tensor<2x8x8x32xf32>
  }) : (tensor<2x8x8x16xf32>, tensor<32x3x3x16xf32>, tensor<32xf32>) -> tensor<2x8x8x32xf32>
  func.return %0, %6 : tensor<?x128xf16>, tensor<2x8x8x32xf32>
}
"""


def _module() -> ModuleOp:
    return parse_module(MODULE, make_context(), "test.mlir")


def _binaries(module: ModuleOp) -> list[byoc.BinaryOp]:
    return [op for op in module.ops if isinstance(op, byoc.BinaryOp)]


def test_one_program_per_configuration_then_cache_hits(tmp_path: Path, monkeypatch) -> None:
    ctx = make_context()
    module = _module()
    codegen = CutlassCodegen(sm=80, cache_dir=str(tmp_path))
    codegen.apply(ctx, module)
    # three configurations (dense + bias + ReLU, plain dense, f32 conv2d + bias): three programs
    assert (codegen.statistics.compiled, codegen.statistics.cached) == (3, 0)

    binaries = _binaries(module)
    kernels = {f: r for b in binaries for f, r in b.attributes["kernels"].data.items()}
    assert sorted(kernels) == ["conv_0", "dense_a", "dense_b"]  # cublas is not ours
    for binary in binaries:
        (record,) = binary.attributes["kernels"].data.values()
        # the cubin's one kernel is the configuration's entry, no partition's
        assert kernel_symbols(cubin_file(binary).read_bytes()) == {record.data["entry"].data}

    # Every cutlass function is now an extern declaration; the cublas one is untouched.
    funcs = {op.sym_name.data: op for op in module.ops if isinstance(op, FuncOp)}
    for name in kernels:
        assert not funcs[name].body.blocks and set(funcs[name].attributes) == {byoc.EXTERN}
    assert not any(isinstance(op, byoc.PartitionOp) and op.compiler == "cutlass" for op in module.walk())

    # Warm: the same module compiles with no NVRTC work at all.
    def no_nvrtc(*args, **kwargs):
        raise AssertionError("NVRTC ran on a warm cache")

    monkeypatch.setattr(nvrtc, "_nvrtc_compile", no_nvrtc)
    warm = _module()
    codegen = CutlassCodegen(sm=80, cache_dir=str(tmp_path))
    codegen.apply(ctx, warm)
    assert (codegen.statistics.compiled, codegen.statistics.cached) == (0, 3)
    assert "cache_hit" not in str(warm)  # the printed IR does not depend on the cache


def test_records_rebuild_the_emitted_entries(tmp_path: Path) -> None:
    module = _module()
    from partita.transforms.outline_compiler_functions import OutlineCompilerFunctions

    OutlineCompilerFunctions(compiler="cutlass").apply(make_context(), module)
    kernels = [partition_kernel(f) for f in cutlass_functions(module)]
    emitted = emit_module([(k.name, k.spec, choose_config(k.spec, 80, f32_math="tf32")) for k in kernels]).entries

    CutlassCodegen(sm=80, cache_dir=str(tmp_path)).apply(make_context(), module)
    records = {}
    for binary in _binaries(module):
        cubin = cubin_file(binary).read_bytes()
        for name, record in binary.attributes["kernels"].data.items():
            entry, roles = entry_from_record(record)
            # Everything but the source line range (the record rebuilds no unit).
            assert dataclasses.replace(entry, lines=emitted[name].lines) == emitted[name]
            # The packed parameter list the launcher builds matches the cubin's own table.
            sizes = [p.size for p in kernel_params(cubin, entry.name)]
            assert sizes == [p.size for p in entry.params]
            records[name] = record
    dense_a, _ = entry_from_record(records["dense_a"])
    assert dense_a.dynamic_dims == ("M",) and dense_a.spec.epilogue == "bias_relu"


def test_argument_roles_follow_the_function_signature() -> None:
    module = _module()
    from partita.transforms.outline_compiler_functions import OutlineCompilerFunctions

    OutlineCompilerFunctions(compiler="cutlass").apply(make_context(), module)
    roles = {k.name: k.inputs for k in map(partition_kernel, cutlass_functions(module))}
    # dense_b takes (w, x): its arguments are in another order than the kernel's.
    assert roles == {"dense_a": ("x", "w", "bias"), "dense_b": ("w", "x"), "conv_0": ("x", "w", "bias")}


def test_unused_argument_is_a_located_error() -> None:
    # A partition that ignores an argument: the kernel has no operand for it.
    module = parse_module(
        MODULE.replace("byoc.partition(%w, %x)", "byoc.partition(%w, %x, %b)")
        .replace("^bb0(%c: tensor<128x64xf16>, %a: tensor<?x64xf16>)", "^bb0(%c: tensor<128x64xf16>, %a: tensor<?x64xf16>, %d: tensor<128xf16>)")
        .replace("(tensor<128x64xf16>, tensor<?x64xf16>) -> tensor<?x128xf16>", "(tensor<128x64xf16>, tensor<?x64xf16>, tensor<128xf16>) -> tensor<?x128xf16>"),
        make_context(),
        "test.mlir",
    )
    with pytest.raises(PartitaError, match=r"test.mlir:\d+:\d+: error: 'func.func' op argument #2 is not an operand"):
        CutlassCodegen(sm=80).apply(make_context(), module)


def test_nvrtc_failure_names_the_partition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from partita.lowering.cutlass import codegen as cutlass_codegen

    real = cutlass_codegen.emit_units

    def broken(kernels):  # a kernel whose C++ does not compile
        units = real(kernels)
        (source,) = [u for u in units if "dense_a" in u.entries]
        entry = source.entries["dense_a"]
        lines = source.code.split("\n")
        lines[entry.lines[0]] += "\n  this_is_not_cxx;"
        return [type(source)("\n".join(lines), source.entries, source.kernel_lines) if u is source else u
                for u in units]

    monkeypatch.setattr(cutlass_codegen, "emit_units", broken)
    module = _module()
    with pytest.raises(PartitaError, match=r"(?s)NVRTC failed to compile the CUTLASS kernels of @dense_a.*this_is_not_cxx"):
        CutlassCodegen(sm=80, cache_dir=str(tmp_path)).apply(make_context(), module)


RESIDUAL = """
func.func @main(%x: tensor<?x64xf16>, %w: tensor<32x64xf16>, %r: tensor<?x32xf16>) -> tensor<?x32xf16> {
  %0 = nn.dense %x, %w : (tensor<?x64xf16>, tensor<32x64xf16>) -> tensor<?x32xf16>
  %1 = nn.add %r, %0 : (tensor<?x32xf16>, tensor<?x32xf16>) -> tensor<?x32xf16>
  func.return %1 : tensor<?x32xf16>
}
"""


def test_a_residual_add_is_the_dense_kernels_epilogue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``r + x @ w^T`` is one CUTLASS kernel (NVRTC-compiled) whose entry takes the residual,
    and the compiled model computes the sum."""
    import numpy as np

    import partita
    from partita.runtime.extern import kernel_handles

    monkeypatch.setenv("PARTITA_CACHE_DIR", str(tmp_path))
    exe = partita.compile(RESIDUAL, targets="cuda -arch=sm_90,cutlass,llvm", partitioner="eager")
    (handle,) = kernel_handles(exe.module).values()  # the add is no kernel of its own
    assert handle.kind == "cutlass" and handle.entry.spec.epilogue == "residual"
    assert [p.name for p in handle.entry.params] == ["x", "w", "residual", "out", "M", "N", "K"]
    rng = np.random.default_rng(0)
    x, w, r = (rng.standard_normal(s).astype(np.float16) for s in ((6, 64), (32, 64), (6, 32)))
    (out,) = exe.load("simulated").run(x, w, r)
    want = r.astype(np.float32) + x.astype(np.float32) @ w.astype(np.float32).T
    np.testing.assert_allclose(out.astype(np.float32), want, rtol=2e-2, atol=2e-2)
