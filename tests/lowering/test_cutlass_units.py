"""CUTLASS units are keyed by kernel configuration, not by module: one NVRTC program per
kernel type, with one entry named after the configuration that takes every problem dim as
an argument. Partitions (of any module, at any shape) of one configuration share its
cubin; each partition's record carries its static dims, packed as the entry's arguments
when a shape signature is bound. No GPU is needed."""

from __future__ import annotations

import hashlib
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from support.artifact_files import compile_and_save, reseal  # tests/support/artifact_files.py

import partita
from partita.dialects import byoc, make_context
from partita.ir import PartitaError, parse_module
from partita.lowering import nvrtc
from partita.lowering.binaries import cubin_file
from partita.lowering.contracts import contract_symbol
from partita.lowering.cubin import kernel_params, kernel_symbols, read_global
from partita.lowering.cutlass import KernelSpec, choose_config
from partita.lowering.cutlass.codegen import CutlassCodegen, CutlassCppTarget
from partita.lowering.cutlass.emitter import emit_units, type_key
from partita.runtime.device import SimulatedDevice
from partita.runtime.extern import kernel_handles
from partita.runtime.plan import Runtime


def _dense_module(name: str, m: int | str, n: int, k: int) -> str:
    """One cutlass partition ``@name``: ``x[m, k] @ w[n, k]^T + b`` (``m`` may be ``?``)."""
    x, w, b, y = f"tensor<{m}x{k}xf16>", f"tensor<{n}x{k}xf16>", f"tensor<{n}xf16>", f"tensor<{m}x{n}xf16>"
    return f"""
func.func @main(%x: {x}, %w: {w}, %b: {b}) -> {y} {{
  %0 = byoc.partition(%x, %w, %b) {{byoc.compiler = "cutlass", byoc.global_symbol = "{name}"}} ({{
  ^bb0(%a: {x}, %c: {w}, %d: {b}):
    %1 = nn.dense %a, %c : ({x}, {w}) -> {y}
    %2 = nn.bias_add %1, %d : ({y}, {b}) -> {y}
    byoc.yield %2 : {y}
  }}) : ({x}, {w}, {b}) -> {y}
  func.return %0 : {y}
}}
"""


def _binaries(module) -> list[byoc.BinaryOp]:
    return [op for op in module.ops if isinstance(op, byoc.BinaryOp)]


class _CountingNvrtc:
    """``nvrtc._nvrtc_compile`` with a count of the programs it compiled."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.real, self.calls = nvrtc._nvrtc_compile, 0
        monkeypatch.setattr(nvrtc, "_nvrtc_compile", self)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.real(*args, **kwargs)


def test_two_modules_of_one_configuration_compile_one_program(tmp_path: Path, monkeypatch) -> None:
    """Dense + bias at two shapes (other partition names, other N and K, a run-time M in
    both): one configuration, so the second module is a cache hit, with no NVRTC call."""
    count = _CountingNvrtc(monkeypatch)
    first = parse_module(_dense_module("model_a_cutlass_0", "?", 1000, 1096), make_context(), "a.mlir")
    second = parse_module(_dense_module("model_b_cutlass_3", "?", 64, 256), make_context(), "b.mlir")
    codegen = CutlassCodegen(sm=80, cache_dir=str(tmp_path))
    codegen.apply(make_context(), first)
    assert count.calls == 1 and (codegen.statistics.compiled, codegen.statistics.cached) == (1, 0)
    codegen = CutlassCodegen(sm=80, cache_dir=str(tmp_path))
    codegen.apply(make_context(), second)
    assert count.calls == 1 and (codegen.statistics.compiled, codegen.statistics.cached) == (0, 1)

    (a,), (b,) = _binaries(first), _binaries(second)
    assert a.attributes[byoc.DIGEST] == b.attributes[byoc.DIGEST]  # the same cubin
    record_a = a.attributes["kernels"].data["model_a_cutlass_0"].data
    record_b = b.attributes["kernels"].data["model_b_cutlass_3"].data
    assert record_a["entry"] == record_b["entry"]  # the configuration's one entry
    assert record_a["spec"].data["N"].value.data == 1000 and record_b["spec"].data["N"].value.data == 64


def test_the_unit_names_no_partition_and_no_shape() -> None:
    """The emitted unit depends on the configuration alone: byte-identical for two
    partitions of other names and shapes, neither of whose names or dims it holds."""
    specs = {"part_one": KernelSpec.dense(None, 1000, 1096, epilogue="bias"),
             "part_two": KernelSpec.dense(None, 2008, 3048, epilogue="bias")}
    configs = {n: choose_config(s, 80) for n, s in specs.items()}
    assert type_key(specs["part_one"], configs["part_one"]) == type_key(specs["part_two"], configs["part_two"])
    (unit,) = emit_units([(n, s, configs[n]) for n, s in specs.items()])
    alone = [emit_units([(n, s, configs[n])])[0] for n, s in specs.items()]
    assert unit.code == alone[0].code == alone[1].code
    for word in ("part_one", "part_two", "1000", "1096", "2008", "3048"):
        assert word not in unit.code, word
    # one entry, one shared-memory size and one contract, whatever the partitions
    assert len(nvrtc.declared_entries(unit.code)) == 1
    assert unit.code.count("_smem_bytes =") == unit.code.count("_contract[32]") == 1
    one, two = unit.entries["part_one"], unit.entries["part_two"]
    assert one.name == two.name and one.name.startswith(configs["part_one"].name + "_")
    assert [p.name for p in one.params] == ["x", "w", "bias", "out", "M", "N", "K"]
    # the record's static dims are the entry's arguments; M is read off the operands
    pointers = {"x": 1, "w": 2, "bias": 3, "out": 4}
    assert one.args(pointers, {"M": 7})[4:] == [("int", 7), ("int", 1000), ("int", 1096)]
    assert two.args(pointers, {"M": 9})[4:] == [("int", 9), ("int", 2008), ("int", 3048)]


def test_entry_names_tell_kernel_types_apart() -> None:
    """Split-k slice counts do not show in CUTLASS's name; the entry's key digest does."""
    spec = KernelSpec.dense(64, 64, 8192)
    two, four = (choose_config(spec, 80, split_k_slices=s) for s in (2, 4))
    assert two.name == four.name
    units = emit_units([("a", spec, two), ("b", spec, four)])
    assert len(units) == 2 and units[0].entries["a"].name != units[1].entries["b"].name


CONV_TEMPLATE = """
  %{r} = byoc.partition(%{x}, %k, %kb) {{byoc.compiler = "cutlass", byoc.global_symbol = "{name}"}} ({{
  ^bb0(%a: {xt}, %c: tensor<32x3x3x16xf16>, %d: tensor<32xf16>):
    %1 = nn.conv2d %a, %c {{data_layout = "NHWC", kernel_layout = "OHWI", padding = array<i64: 1, 1, 1, 1>}} : ({xt}, tensor<32x3x3x16xf16>) -> {yt}
    %2 = nn.bias_add %1, %d {{axis = 3 : i64}} : ({yt}, tensor<32xf16>) -> {yt}
    byoc.yield %2 : {yt}
  }}) : ({xt}, tensor<32x3x3x16xf16>, tensor<32xf16>) -> {yt}"""

# Two dense partitions of one configuration at other shapes (run-time M; N and K differ),
# two conv2d fprop partitions of one configuration at other image sizes.
TWO_SHAPES = """
func.func @main(%x: tensor<?x64xf16>, %w: tensor<32x64xf16>, %b: tensor<32xf16>,
                %x2: tensor<?x32xf16>, %w2: tensor<16x32xf16>, %b2: tensor<16xf16>,
                %i: tensor<2x8x8x16xf16>, %j: tensor<1x6x10x16xf16>, %k: tensor<32x3x3x16xf16>, %kb: tensor<32xf16>)
    -> (tensor<?x32xf16>, tensor<?x16xf16>, tensor<2x8x8x32xf16>, tensor<1x6x10x32xf16>) {
  %0 = byoc.partition(%x, %w, %b) {byoc.compiler = "cutlass", byoc.global_symbol = "dense_big"} ({
  ^bb0(%a: tensor<?x64xf16>, %c: tensor<32x64xf16>, %d: tensor<32xf16>):
    %1 = nn.dense %a, %c : (tensor<?x64xf16>, tensor<32x64xf16>) -> tensor<?x32xf16>
    %2 = nn.bias_add %1, %d : (tensor<?x32xf16>, tensor<32xf16>) -> tensor<?x32xf16>
    byoc.yield %2 : tensor<?x32xf16>
  }) : (tensor<?x64xf16>, tensor<32x64xf16>, tensor<32xf16>) -> tensor<?x32xf16>
  %3 = byoc.partition(%x2, %w2, %b2) {byoc.compiler = "cutlass", byoc.global_symbol = "dense_small"} ({
  ^bb0(%a: tensor<?x32xf16>, %c: tensor<16x32xf16>, %d: tensor<16xf16>):
    %1 = nn.dense %a, %c : (tensor<?x32xf16>, tensor<16x32xf16>) -> tensor<?x16xf16>
    %2 = nn.bias_add %1, %d : (tensor<?x16xf16>, tensor<16xf16>) -> tensor<?x16xf16>
    byoc.yield %2 : tensor<?x16xf16>
  }) : (tensor<?x32xf16>, tensor<16x32xf16>, tensor<16xf16>) -> tensor<?x16xf16>""" + \
    CONV_TEMPLATE.format(r=4, x="i", name="conv_a", xt="tensor<2x8x8x16xf16>", yt="tensor<2x8x8x32xf16>") + \
    CONV_TEMPLATE.format(r=5, x="j", name="conv_b", xt="tensor<1x6x10x16xf16>", yt="tensor<1x6x10x32xf16>") + """
  func.return %0, %3, %4, %5 : tensor<?x32xf16>, tensor<?x16xf16>, tensor<2x8x8x32xf16>, tensor<1x6x10x32xf16>
}
"""


def _conv_reference(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NHWC x OHWI, 3x3, padding 1, stride 1, in f32."""
    n, h, wd, _ = x.shape
    padded = np.pad(x.astype(np.float32), ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((n, h, wd, w.shape[0]), np.float32)
    for r in range(3):
        for s in range(3):
            out += np.einsum("nhwc,kc->nhwk", padded[:, r:r + h, s:s + wd], w[:, r, s].astype(np.float32))
    return out + b.astype(np.float32)


@pytest.fixture(scope="module")
def two_shapes(tmp_path_factory):
    """The module compiled as partitioned (no partitioner): the Sm80 units for sm_80,
    progress lines naming each NVRTC program."""
    lines: list[str] = []
    exe = partita.compile(TWO_SHAPES, "cuda -arch=sm_80,cutlass,llvm", partitioner="none",
                          cache_dir=tmp_path_factory.mktemp("cubins"), progress=lambda name, i, n: lines.append(name))
    return exe.module, [line for line in lines if line.startswith("cutlass-codegen: ")]


def test_partitions_of_one_configuration_share_one_unit(two_shapes) -> None:
    module, progress = two_shapes
    assert len(progress) == 2, progress  # two NVRTC programs: the dense type and the conv type
    by_function = {f: b for b in _binaries(module) for f in b.attributes["kernels"].data}
    assert by_function["dense_big"] is by_function["dense_small"]
    assert by_function["conv_a"] is by_function["conv_b"] is not by_function["dense_big"]
    handles = kernel_handles(module)
    for pair in (("dense_big", "dense_small"), ("conv_a", "conv_b")):
        first, second = (handles[f] for f in pair)
        assert first.entry.name == second.entry.name and first.entry.spec != second.entry.spec
        cubin = cubin_file(by_function[pair[0]]).read_bytes()
        assert kernel_symbols(cubin) == {first.entry.name}
        # the cubin's parameter table is the one the records pack: every problem dim an int
        assert [p.size for p in kernel_params(cubin, first.entry.name)] == [p.size for p in first.entry.params]
    assert [p.name for p in handles["conv_a"].entry.params][4:] == [
        "N", "H", "W", "C", "K", "R", "S", "P", "Q", "pad_h", "pad_w", "stride_h", "stride_w",
        "dilation_h", "dilation_w"]


def test_both_partitions_run_with_their_own_dims(two_shapes) -> None:
    """On the simulated device each launch runs its partition's reference at the packed
    pointers; the dims each launch packed are its own partition's."""
    module, _ = two_shapes
    rng = np.random.default_rng(1)
    arrays = [(rng.standard_normal(s) * 0.5).astype(np.float16) for s in (
        (5, 64), (32, 64), (32,), (3, 32), (16, 32), (16,), (2, 8, 8, 16), (1, 6, 10, 16), (32, 3, 3, 16), (32,))]
    x, w, b, x2, w2, b2, i, j, k, kb = arrays
    runtime = Runtime(module, SimulatedDevice())
    got = runtime.run(*arrays)
    want = [x.astype(np.float32) @ w.astype(np.float32).T + b, x2.astype(np.float32) @ w2.astype(np.float32).T + b2,
            _conv_reference(i, k, kb), _conv_reference(j, k, kb)]
    for g, e in zip(got, want, strict=True):
        np.testing.assert_allclose(g.astype(np.float32), e, rtol=2e-2, atol=2e-2)

    (bound,) = runtime._bound.values()
    dims = {}
    for launch in bound.steps:
        ints = [struct.unpack_from("<i", launch.params, at)[0] for at in launch.offsets[-_dim_count(launch):]]
        dims.setdefault(launch.function.name, []).append(tuple(ints))
    (dense_entry,) = [n for n in dims if "gemm" in n]
    (conv_entry,) = [n for n in dims if "fprop" in n]
    assert dims[dense_entry] == [(5, 32, 64), (3, 16, 32)]  # M, N, K of each partition
    assert dims[conv_entry] == [(2, 8, 8, 16, 32, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1),
                                (1, 6, 10, 16, 32, 3, 3, 6, 10, 1, 1, 1, 1, 1, 1)]


def _dim_count(launch) -> int:
    return 15 if "fprop" in launch.function.name else 3


def test_cutlass_cpp_prints_one_unit_per_configuration() -> None:
    import io

    module = parse_module(TWO_SHAPES, make_context(), "two_shapes.mlir")
    from partita.transforms.outline_compiler_functions import OutlineCompilerFunctions

    OutlineCompilerFunctions(compiler="cutlass").apply(make_context(), module)
    out = io.StringIO()
    CutlassCppTarget(sm=80).emit(make_context(), module, out)
    text = out.getvalue()
    assert text.count("#include <cutlass/cutlass.h>") == 2
    assert len(nvrtc.declared_entries(text)) == 2
    assert "// @dense_small: " in text and "dims M=?, N=16, K=32)" in text
    assert "// @conv_b: " in text and "dims N=1, H=6, W=10, C=16, K=32" in text


# -- the load-time check of a unit's launch contract -------------------------------------

MODEL = """
func.func @main(%x: tensor<?x64xf16>, %w: tensor<32x64xf16>, %b: tensor<32xf16>) -> tensor<?x32xf16> {
  %0 = nn.dense %x, %w : (tensor<?x64xf16>, tensor<32x64xf16>) -> tensor<?x32xf16>
  %1 = nn.bias_add %0, %b : (tensor<?x32xf16>, tensor<32xf16>) -> tensor<?x32xf16>
  func.return %1 : tensor<?x32xf16>
}
"""
RNG = np.random.default_rng(0)
X, W, B = (RNG.standard_normal(s).astype(np.float16) * 0.5 for s in ((4, 64), (32, 64), (32,)))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return compile_and_save(MODEL, "cuda -arch=sm_90,cutlass,llvm", tmp_path_factory.mktemp("unit_contracts"))


def _cutlass_binary(exe) -> tuple[str, bytes, str]:
    (handle,) = [h for h in kernel_handles(exe.module).values() if h.kind == "cutlass"]
    return handle.binary, exe.binaries.get(handle.binary) or handle.path.read_bytes(), handle.entry.name


def test_a_cubin_whose_contract_differs_is_refused_at_load(saved, tmp_path) -> None:
    exe, data = saved
    symbol, cubin, entry = _cutlass_binary(exe)
    held = read_global(cubin, contract_symbol(entry))
    assert cubin.count(held) == 1
    path = tmp_path / "model.partita"
    path.write_bytes(reseal(data))
    (out,) = partita.load(path).run(X, W, B)
    np.testing.assert_allclose(out.astype(np.float32), X.astype(np.float32) @ W.astype(np.float32).T + B,
                               rtol=2e-2, atol=2e-2)

    # a cubin of the same entry and parameters compiled for another contract (a stale one)
    stale = cubin.replace(held, bytes(b ^ 0xFF for b in held))
    old, new = hashlib.sha256(cubin).hexdigest(), hashlib.sha256(stale).hexdigest()

    def edit_parts(parts: dict[str, bytes]) -> None:
        parts[f"cubin/@{symbol}"] = stale

    path.write_bytes(reseal(data, lambda text: text.replace(old, new), edit_parts))
    with pytest.raises(PartitaError, match=rf"kernel '{entry}' of @{symbol} was not generated for the launch the "
                                           r"record of @\w+ describes \(its launch contract differs\)"):
        partita.load(path).load(SimulatedDevice()).run(X, W, B)


def test_a_record_naming_a_partition_entry_is_refused(saved, tmp_path) -> None:
    """A record of a per-partition entry (the units before one entry per configuration)
    names no entry of its kernel type: refused, saying to compile again."""
    exe, data = saved
    _, _, entry = _cutlass_binary(exe)
    path = tmp_path / "model.partita"
    path.write_bytes(reseal(data, lambda text: re.sub(rf'entry = "{entry}"', 'entry = "tvmgen_default_cutlass_main_0"',
                                                      text)))
    with pytest.raises(PartitaError, match="is not '.*', the entry of its kernel type; compile the model again"):
        partita.load(path).load(SimulatedDevice()).run(X, W, B)
