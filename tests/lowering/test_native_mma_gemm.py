"""The native GEMM on tensor cores: f16 / bf16 GEMM kernels of ``cuda-codegen`` tile
128x128 outputs over 8 warps, each a 64x32 register tile of ``mma.sync`` m16n8k16 products,
K in steps of 32 through two shared-memory stages of the operands' own type; the integer
product ``nn.matmul_integer`` (i8 / u8) the same tiles of m16n8k32 products, K in steps of
64, exact s32 sums with its zero points applied in the epilogue.

Checked without a GPU twice over: the kernels built for the host with g++ (where
``partita_mma_*`` computes the same fragment product from warp shuffles) match the
reference on odd sizes, every transpose and broadcast form and fused epilogues; and the
NVRTC sm_90 cubin's SASS multiplies with HMMA."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_check import (  # tests/support/kernel_check.py
    build_for_host,
    check_kernels,
    fuse,
    fused_functions,
    host_ops,
    launch_beside_reference,
    random_input,
)

from partita.lowering.cuda.codegen import program_of
from partita.lowering.cuda.records import RECORDS, fused_record

# odd M, N, K (several tiles and K steps, no aligned extent), every operand layout,
# batch broadcasting, and epilogues fused after the product
GEMMS = """
func.func @mm_T(%a: tensor<2x?x37xT>, %b: tensor<37x100xT>, %bias: tensor<100xT>) -> tensor<2x?x100xT> {
  %0 = nn.matmul %a, %b : (tensor<2x?x37xT>, tensor<37x100xT>) -> tensor<2x?x100xT>
  %1 = nn.add %0, %bias : (tensor<2x?x100xT>, tensor<100xT>) -> tensor<2x?x100xT>
  %2 = nn.gelu %1 : (tensor<2x?x100xT>) -> tensor<2x?x100xT>
  func.return %2 : tensor<2x?x100xT>
}
func.func @dense_T(%x: tensor<?x70x33xT>, %w: tensor<90x33xT>) -> tensor<?x70x90xT> {
  %0 = nn.dense %x, %w : (tensor<?x70x33xT>, tensor<90x33xT>) -> tensor<?x70x90xT>
  %1 = nn.relu %0 : (tensor<?x70x90xT>) -> tensor<?x70x90xT>
  func.return %1 : tensor<?x70x90xT>
}
func.func @bmm_nn_T(%a: tensor<?x67x19xT>, %b: tensor<?x19x65xT>) -> tensor<?x67x65xT> {
  %0 = nn.batch_matmul %a, %b {transpose_b = false} : (tensor<?x67x19xT>, tensor<?x19x65xT>) -> tensor<?x67x65xT>
  func.return %0 : tensor<?x67x65xT>
}
func.func @bmm_tn_T(%a: tensor<?x19x67xT>, %b: tensor<?x19x65xT>) -> tensor<?x67x65xT> {
  %0 = nn.batch_matmul %a, %b {transpose_a = true, transpose_b = false} : (tensor<?x19x67xT>, tensor<?x19x65xT>) -> tensor<?x67x65xT>
  func.return %0 : tensor<?x67x65xT>
}
func.func @bmm_tt_T(%a: tensor<1x19x67xT>, %b: tensor<?x65x19xT>) -> tensor<?x67x65xT> {
  %0 = nn.batch_matmul %a, %b {transpose_a = true} : (tensor<1x19x67xT>, tensor<?x65x19xT>) -> tensor<?x67x65xT>
  func.return %0 : tensor<?x67x65xT>
}
"""


def _module(dtypes=("f16", "bf16")):
    return fuse("\n".join(GEMMS.replace("T", t) for t in dtypes))


def test_f16_and_bf16_gemms_become_mma_kernels() -> None:
    module = _module()
    assert host_ops(module) == []
    program = program_of(module)
    assert program is not None
    for name, kernel in program.kernels.items():
        assert kernel.kind == "gemm", name
        dtype = "bf16" if "bf16" in name else "f16"
        assert f"partita_mma_{dtype}(acc[mi][ni], af[mi], &bf[ni >> 1][(ni & 1) * 2]);" in kernel.code, name
        record = RECORDS["gemm"].from_attr(fused_record(kernel))
        # 128x128 tiles of 256 threads; grid: N tiles, M tiles, batch
        batch = 3 if record.batch else 1
        assert record.geometry((3, 170, 290)) == ((3, -(-(510 // batch) // 128), batch), (256, 1, 1))
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in program.code
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in program.code


def test_f32_gemms_keep_the_simt_kernel() -> None:
    """f32 GEMMs (exact, like the reference) stay on the 16x16 SIMT tiles."""
    program = program_of(_module(("f32",)))
    assert program is not None and "partita_mma" not in program.code
    record = RECORDS["gemm"].from_attr(fused_record(next(iter(program.kernels.values()))))
    assert record.geometry((3, 70, 90))[1] == (16, 16, 1)


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_mma_kernels_compute_the_reference_semantics(tmp_path: Path) -> None:
    anchors = check_kernels(_module(), tmp_path)
    assert anchors == ["nn.matmul", "nn.dense", "nn.batch_matmul", "nn.batch_matmul", "nn.batch_matmul"] * 2


SPILL_RELOADS = 10
"""Local-memory accesses a K step of the tensor-core tiles may make: at the 128-register
cap of two blocks an SM, the 64 accumulators, the prefetched vectors and split-K's slice
bounds leave ptxas a few index values to reload from L1 a step (0 to 9 across these
kernels, beside 32 MMAs and 12 ldmatrix)."""


def _k_loop(body: str) -> str:
    """The SASS of the tiles' K loop, with its once-a-tile head: between the barrier after
    the first stage and the loop's own."""
    bars = [m.start() for m in re.finditer(r"BAR\.SYNC", body)]
    return body[bars[0]:bars[1]]


def test_sm90_cubin_multiplies_with_hmma() -> None:
    from support.sass import sass_by_function, sass_of

    from partita.lowering import nvrtc

    program = program_of(_module())
    assert program is not None
    binary = nvrtc.compile_cuda(program, arch="sm_90", name="partita_fused.cu")
    per_function = sass_by_function(sass_of(binary.path))
    for name, kernel in program.kernels.items():
        body = per_function[kernel.entry]
        hmma = len(re.findall(r"\bHMMA\.16816\.F32", body))
        # 4x4 products per k16, two k16 a K step of 32, the loop not unrolled further
        assert hmma == 32, f"{name}: {hmma} HMMA"
        # the fragments are read from shared memory with ldmatrix: a k16's 16 MMAs take 4
        # for A's 16x16 fragments and 2 for B's pairs of n8 ones (32-bit loads took 24;
        # the 64x64 tiles of floats before read 32 a k16 for 8 MMAs), and no other shared
        # load in the main loop
        main = _k_loop(body)
        assert len(re.findall(r"\bHMMA\.16816\.F32", main)) == 32, name
        assert len(re.findall(r"\bLDSM\.16\.M88\.4\b", main)) == 12, name
        assert not re.findall(r"\bLDS\b", main), name
        # the accumulators stay in registers; a few spilled indices are reloaded
        local = len(re.findall(r"\b(?:STL|LDL)\b", main))
        assert local <= SPILL_RELOADS, f"{name}: {local} local-memory accesses a K step"
        assert body.count("STL") <= 8, f"{name}: {body.count('STL')} STL"


def test_records_from_before_gemv_schedules_read_as_tiles_only() -> None:
    """A gemm record written before a gemm kernel could hold a warp-per-output schedule
    (no ``gemv_rows``) reads back as tiles at every row count."""
    from xdsl.dialects.builtin import DictionaryAttr

    program = program_of(_module(("f16",)))
    assert program is not None
    record = fused_record(next(iter(program.kernels.values())))
    old = RECORDS["gemm"].from_attr(DictionaryAttr({k: v for k, v in record.data.items() if k != "gemv_rows"}))
    assert old.gemv_rows == 0 and old == RECORDS["gemm"].from_attr(record)
    assert old.geometry((3, 1, 290)) == ((3, 1, 3), (256, 1, 1))


# K, and the contiguous M or N of the transposed forms, multiples of 8: every operand may
# be staged 16 bytes a load
ALIGNED = """
func.func @dense_v(%x: tensor<?x64xf16>, %w: tensor<72x64xf16>) -> tensor<?x72xf16> {
  %0 = nn.dense %x, %w : (tensor<?x64xf16>, tensor<72x64xf16>) -> tensor<?x72xf16>
  func.return %0 : tensor<?x72xf16>
}
func.func @bmm_nn_v(%a: tensor<?x24x40xf16>, %b: tensor<?x40x72xf16>) -> tensor<?x24x72xf16> {
  %0 = nn.batch_matmul %a, %b {transpose_b = false} : (tensor<?x24x40xf16>, tensor<?x40x72xf16>) -> tensor<?x24x72xf16>
  func.return %0 : tensor<?x24x72xf16>
}
func.func @bmm_tn_v(%a: tensor<?x40x24xf16>, %b: tensor<?x40x72xf16>) -> tensor<?x24x72xf16> {
  %0 = nn.batch_matmul %a, %b {transpose_a = true, transpose_b = false} : (tensor<?x40x24xf16>, tensor<?x40x72xf16>) -> tensor<?x24x72xf16>
  func.return %0 : tensor<?x24x72xf16>
}
"""


def _at_offset(array: np.ndarray, offset: int) -> np.ndarray:
    """``array``'s values in a buffer ``offset`` elements past a fresh allocation's start."""
    buffer = np.empty(array.size + 8, array.dtype)
    view = buffer[offset:offset + array.size].reshape(array.shape)
    view[...] = array
    return view


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_aligned_and_unaligned_operands_stage_alike(tmp_path: Path) -> None:
    """Each operand is staged 8 elements a vector along its contiguous axis (K for ``x`` and
    a dense weight, N for a ``[K, N]`` right operand, M for a transposed left one): where
    the pointer is 16-byte aligned, one cp.async global -> shared along K or one 16-byte
    load along M or N, 8 element loads where it is not. Built for the host, both paths
    equal the reference on the same values."""
    module = fuse(ALIGNED)
    program, records, host = build_for_host(module, tmp_path)
    for name, function in fused_functions(module).items():
        code, rec = program.kernels[name].code, records[name]
        # a K-contiguous vector by cp.async (x, a dense weight, a [.., M, K] left operand),
        # one along M or N by a 16-byte load into registers
        assert "if (a_vec) {" in code or "a_vec && " in code, name
        assert "if (b_vec) {" in code or "b_vec && " in code, name
        rng = np.random.default_rng(3)
        values = [random_input(tuple(1 if d < 0 else d for d in shape), t, rng) for shape, t in zip(rec.inputs, rec.dtypes)]
        outs = []
        for offset in (0, 1):  # 0: numpy's 16-byte aligned allocation; 1: two bytes past it
            args = [_at_offset(v, offset) for v in values]
            assert all((a.ctypes.data % 16 == 0) == (offset == 0) for a in args)
            out, expected = launch_beside_reference(function, name, rec, host, args)
            np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64), rtol=2e-3, atol=2e-3,
                                       err_msg=f"{name} at offset {offset}")
            outs.append(out)
        np.testing.assert_array_equal(outs[0], outs[1], err_msg=name)  # the same products, in the same order


FLOAT8 = """
func.func @fp8_weight(%x: tensor<?x40xf8E4M3FN>, %w: tensor<72x40xf8E5M2>, %s: tensor<f32>) -> tensor<?x72xf32> {
  %0 = nn.matmul_float8 %x, %w {transpose_b = true} : (tensor<?x40xf8E4M3FN>, tensor<72x40xf8E5M2>) -> tensor<?x72xf32>
  %1 = nn.multiply %0, %s : (tensor<?x72xf32>, tensor<f32>) -> tensor<?x72xf32>
  func.return %1 : tensor<?x72xf32>
}
func.func @fp8_activations(%q: tensor<?x3x24x40xf8E4M3FN>, %k: tensor<?x3x33x40xf8E4M3FN>) -> tensor<?x3x24x33xf32> {
  %0 = nn.matmul_float8 %q, %k {transpose_b = true} : (tensor<?x3x24x40xf8E4M3FN>, tensor<?x3x33x40xf8E4M3FN>) -> tensor<?x3x24x33xf32>
  func.return %0 : tensor<?x3x24x33xf32>
}
"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_fp8_products_take_the_tensor_core_tiles(tmp_path: Path) -> None:
    """``nn.matmul_float8`` where no library takes it (a target without FP8 tensor cores, or
    operands no library form fits, such as two batched activations): the tensor-core tiles
    in f16, which holds every E4M3 and E5M2 value exactly, the products summed in f32; its
    scale fused after. Built for the host they equal the reference (f32 sums of exact
    products: rounding apart)."""
    module = fuse(FLOAT8)
    program = program_of(module)
    assert program is not None
    for kernel in program.kernels.values():
        assert kernel.kind == "gemm" and "partita_mma_f16(acc[mi][ni], af[mi], &bf[ni >> 1][(ni & 1) * 2]);" in kernel.code
        assert "a_vec" not in kernel.code  # 8-bit operands are converted as they are staged
    anchors = check_kernels(module, tmp_path, dynamic=2)
    assert anchors == ["nn.matmul_float8"] * 2


# i8 / u8 either side; K past one 64-deep stage and not a multiple of 16 (element loads),
# or a multiple (16-byte loads); a [K, N] right operand (staged down columns); rows past
# one tile; the dequantizing scale fused after the s32 sums
INTEGER = """
func.func @mi_tn(%a: tensor<?x150xui8>, %w: tensor<90x150xi8>, %za: tensor<ui8>, %zb: tensor<i8>, %s: tensor<f32>) -> tensor<?x90xf32> {
  %0 = nn.matmul_integer %a, %w, %za, %zb {transpose_b = true} : (tensor<?x150xui8>, tensor<90x150xi8>, tensor<ui8>, tensor<i8>) -> tensor<?x90xi32>
  %1 = nn.cast %0 : (tensor<?x90xi32>) -> tensor<?x90xf32>
  %2 = nn.multiply %1, %s : (tensor<?x90xf32>, tensor<f32>) -> tensor<?x90xf32>
  func.return %2 : tensor<?x90xf32>
}
func.func @mi_aligned(%a: tensor<?x160xi8>, %w: tensor<72x160xi8>, %za: tensor<1xi8>, %zb: tensor<i8>) -> tensor<?x72xi32> {
  %0 = nn.matmul_integer %a, %w, %za, %zb {transpose_b = true} : (tensor<?x160xi8>, tensor<72x160xi8>, tensor<1xi8>, tensor<i8>) -> tensor<?x72xi32>
  func.return %0 : tensor<?x72xi32>
}
func.func @mi_nn(%a: tensor<?x2x37x70xi8>, %b: tensor<?x2x70x48xui8>, %za: tensor<i8>, %zb: tensor<ui8>) -> tensor<?x2x37x48xi32> {
  %0 = nn.matmul_integer %a, %b, %za, %zb : (tensor<?x2x37x70xi8>, tensor<?x2x70x48xui8>, tensor<i8>, tensor<ui8>) -> tensor<?x2x37x48xi32>
  func.return %0 : tensor<?x2x37x48xi32>
}
"""


def _full_range(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Every value of an 8-bit type (u8 above 127 reads differently as s8); f32 scales as
    they come."""
    if dtype == "f32":
        return rng.standard_normal(shape).astype(np.float32)
    np_dtype = {"i8": np.int8, "ui8": np.uint8}[dtype]
    info = np.iinfo(np_dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(np_dtype)


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_integer_products_take_the_int8_tensor_core_tiles(tmp_path: Path) -> None:
    """``nn.matmul_integer`` where no library takes it (a right operand that is an
    activation, a batched product): the 128x128 tiles with m16n8k32 s8 / u8 products and
    exact s32 sums, the zero points subtracted in the epilogue through the tile's row sums.
    Built for the host, equal to the reference on full-range values with non-zero zero
    points, and with zero ones (whose row sums are skipped)."""
    module = fuse(INTEGER)
    assert host_ops(module) == []
    program, records, host = build_for_host(module, tmp_path)
    helpers = {"mi_tn": "partita_mma_ui8_i8", "mi_aligned": "partita_mma_i8_i8", "mi_nn": "partita_mma_i8_ui8"}
    for name, function in fused_functions(module).items():
        code, rec = program.kernels[name].code, records[name]
        base = name.split("_fused")[0]
        assert rec.anchor == "nn.matmul_integer" and f"{helpers[base]}(acc[mi][ni], af[mi], &bf[ni >> 1][(ni & 1) * 2]);" in code, name
        assert "int acc[4][4][4];" in code and "- zr[mi][ce >> 1] - zc[ni][ce & 1]" in code, name
        rng = np.random.default_rng(5)
        values = [_full_range(tuple(130 if d < 0 else d for d in shape), t, rng) for shape, t in zip(rec.inputs, rec.dtypes)]
        for zero in (False, True):
            args = [np.zeros_like(v) if zero and v.size == 1 and v.dtype != np.float32 else v for v in values]
            out, expected = launch_beside_reference(function, name, rec, host, args)
            if expected.dtype == np.int32:
                np.testing.assert_array_equal(out, expected, err_msg=f"{name}, zero points 0: {zero}")
            else:  # the same s32 sums, then one f32 multiply
                np.testing.assert_allclose(out, expected, rtol=1e-6, err_msg=f"{name}, zero points 0: {zero}")
    assert "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32" in program.code


def test_sm90_integer_cubin_multiplies_with_imma() -> None:
    """The integer tiles' sm_90 SASS: 32 IMMA m16n8k32 a 64-deep K stage (4x4 a warp, two
    instructions a stage), fed by the same 12 ldmatrix as the f16 tiles (a byte fragment
    is a 16-bit one of byte pairs); the
    zero points' row sums as 4-way dot products (IDP.4A) of 16-byte shared loads; the s32
    accumulators in registers (``SPILL_RELOADS``)."""
    from support.sass import sass_by_function, sass_of

    from partita.lowering import nvrtc

    program = program_of(fuse(INTEGER))
    assert program is not None
    binary = nvrtc.compile_cuda(program, arch="sm_90", name="partita_fused.cu")
    per_function = sass_by_function(sass_of(binary.path))
    for name, kernel in program.kernels.items():
        body = per_function[kernel.entry]
        assert len(re.findall(r"\bIMMA\.16832\.[SU]8\.[SU]8\b", body)) == 32, name
        # a row of A or of B a thread, 64 bytes: 4 loads, 16 dot products (either branch)
        assert len(re.findall(r"\bLDS\.128\b", body)) == 8, name
        assert len(re.findall(r"\bIDP\.4A\b", body)) == 32, name
        main = _k_loop(body)
        assert len(re.findall(r"\bLDSM\.16\.M88\.4\b", main)) == 12, name
        local = len(re.findall(r"\b(?:STL|LDL)\b", main))
        assert local <= SPILL_RELOADS, f"{name}: {local} local-memory accesses a K step"


# few tiles, long K: what split-K takes (a dense f16 with its epilogue, a batched NN
# product, an integer product with its zero points)
SPLIT = """
func.func @dense_split(%x: tensor<?x1100xf16>, %w: tensor<72x1100xf16>, %b: tensor<72xf16>) -> tensor<?x72xf16> {
  %0 = nn.dense %x, %w : (tensor<?x1100xf16>, tensor<72x1100xf16>) -> tensor<?x72xf16>
  %1 = nn.add %0, %b : (tensor<?x72xf16>, tensor<72xf16>) -> tensor<?x72xf16>
  %2 = nn.gelu %1 : (tensor<?x72xf16>) -> tensor<?x72xf16>
  func.return %2 : tensor<?x72xf16>
}
func.func @bmm_split(%a: tensor<?x40x530xbf16>, %b: tensor<?x530x24xbf16>) -> tensor<?x40x24xbf16> {
  %0 = nn.batch_matmul %a, %b {transpose_b = false} : (tensor<?x40x530xbf16>, tensor<?x530x24xbf16>) -> tensor<?x40x24xbf16>
  func.return %0 : tensor<?x40x24xbf16>
}
func.func @mi_split(%a: tensor<?x2100xui8>, %w: tensor<50x2100xi8>, %za: tensor<ui8>, %zb: tensor<i8>) -> tensor<?x50xi32> {
  %0 = nn.matmul_integer %a, %w, %za, %zb {transpose_b = true} : (tensor<?x2100xui8>, tensor<50x2100xi8>, tensor<ui8>, tensor<i8>) -> tensor<?x50xi32>
  func.return %0 : tensor<?x50xi32>
}
"""


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_split_k_passes_add_up_to_the_whole_product(tmp_path: Path) -> None:
    """A product of one or a few tiles and a long K runs in K slices (``SPLIT_K_MAX``): the
    record asks for two launches, the slices' pass (grid z = batch x slices, partial tiles
    into the workspace) and the pass adding them and running the epilogue. Built for the
    host, the two passes equal the reference (the integer product, zero points and all,
    exactly: the same s32 sums in another order) and the one-pass launch of the same kernel
    within the rounding of a reassociated f32 sum."""
    from support.kernel_check import random_input

    module = fuse(SPLIT)
    program, records, host = build_for_host(module, tmp_path)
    rng = np.random.default_rng(11)
    for name, function in fused_functions(module).items():
        rec = records[name]
        assert rec.split_k == 8 and "int k_slices" in program.kernels[name].code, name
        values = [(_full_range if t in ("i8", "ui8") else random_input)(tuple(2 if d < 0 else d for d in shape), t, rng)
                  for shape, t in zip(rec.inputs, rec.dtypes)]
        whole, expected = launch_beside_reference(function, name, rec, host, values)
        shapes = [v.shape for v in values]
        passes = rec.launches(shapes, expected.shape)
        slices = {"dense": 4, "bmm": 2, "mi": 8}[name.split("_")[0]]  # the last of 8 slices of 2100 is empty
        assert [k for _, _, k in passes] == [slices, -slices], (name, passes)
        assert passes[0][0][2] == passes[1][0][2] * slices, name
        workspace = np.full(rec.workspace_bytes(shapes, expected.shape) // 4, 7, np.int32)  # scratch: any contents
        out = np.zeros_like(expected)
        for grid, block, k_slices in passes:
            host.launch(rec, grid, block, values, out, workspace, k_slices)
        if expected.dtype == np.int32:
            np.testing.assert_array_equal(out, expected, err_msg=name)
        else:
            np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64), rtol=2e-2, atol=2e-2,
                                       err_msg=name)
            np.testing.assert_allclose(out.astype(np.float64), whole.astype(np.float64), rtol=1e-2, atol=1e-2,
                                       err_msg=name)


def test_a_short_product_runs_in_k_slices_through_the_plan(tmp_path: Path) -> None:
    """Through compile, bind and the recording driver: a 40-row product with K = 2048 (one
    tile) is two launches, 8 slices of 256 then their sum, into a workspace the plan
    places; 20,000 rows (157 tiles, over half the H100's 264 slots) run unsplit, one
    launch, and 11,520 (90 tiles) in 2 slices there, unsplit on a GPU of 58 SMs.
    The simulated device's run equals the product."""
    from onnx import TensorProto, helper, numpy_helper
    from support.recording_driver import RecordingDriver

    import partita
    from partita.runtime.cuda import CudaDevice

    rng = np.random.default_rng(2)
    k, n = 2048, 96
    w = (rng.standard_normal((k, n)) / 32).astype(np.float16)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])], "short",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["rows", k])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT16, None)], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    exe = partita.compile(model, ["cuda -arch=sm_90", "llvm"], cache_dir=tmp_path / "cache")
    x = rng.standard_normal((40, k)).astype(np.float16)
    (y,) = exe.run(x)
    want = np.maximum(x.astype(np.float32) @ w.astype(np.float32), 0)
    np.testing.assert_allclose(y.astype(np.float32), want, rtol=2e-2, atol=2e-2)
    driver = RecordingDriver()
    exe.load(CudaDevice(driver=driver))
    for rows, grids in ((40, [(1, 1, 8), (1, 1, 1)]), (20000, [(1, 157, 1)]), (11520, [(1, 90, 2), (1, 90, 1)])):
        driver.reset()
        exe.run(rng.standard_normal((rows, k)).astype(np.float16))
        assert [launch["grid"] for launch in driver.launches] == grids, rows
    # The device's own SMs: 90 tiles fill over half of a 58-SM GPU's 116 slots, unsplit there.
    driver = RecordingDriver(sm_count=58)
    exe.load(CudaDevice(driver=driver))
    exe.run(rng.standard_normal((11520, k)).astype(np.float16))
    assert [launch["grid"] for launch in driver.launches] == [(1, 90, 1)]
    exe.close()


def test_records_from_before_split_k_launch_once_and_bad_slices_are_refused() -> None:
    """A gemm record written before split-K (no ``split_k`` nor ``k_source``) reads as a
    kernel of one launch at any shape; a record (untrusted text) naming more slices than a
    kernel takes, or a K that is no input's axis, is refused as it is read."""
    from xdsl.dialects.builtin import DictionaryAttr

    from partita.lowering.records import to_attr

    program = program_of(fuse(SPLIT))
    assert program is not None
    record = fused_record(program.kernels["dense_split_fused_0"])
    current = RECORDS["gemm"].from_attr(record)
    assert current.launches([(40, 1100), (72, 1100), (72,)], (40, 72))[0][2] == 4
    old = RECORDS["gemm"].from_attr(DictionaryAttr({k: v for k, v in record.data.items() if k not in ("split_k", "k_source")}))
    assert old.split_k == 0 and old.arg_kinds == current.arg_kinds[:-2]
    assert old.launches([(40, 1100), (72, 1100), (72,)], (40, 72)) == [((1, 1, 1), (256, 1, 1), 1)]
    for field, value, why in (("split_k", 9, "not a slice count"), ("k_source", (3, 0), "names no input axis"),
                              ("k_source", (0, 2), "names no input axis"), ("k_source", (-1, 0), "names no input")):
        with pytest.raises(ValueError, match=why):
            RECORDS["gemm"].from_attr(DictionaryAttr({**record.data, field: to_attr(value)}))


def test_sm90_aligned_k_vectors_are_copied_by_cp_async() -> None:
    """K-contiguous vectors of an aligned operand go global -> shared with cp.async
    (LDGSTS: a thread's 2 vectors an operand, in the first stage and in the loop; a wait
    before each barrier that publishes a stage); one along N (a ``[K, N]`` right operand)
    stays a 16-byte load into registers, stored after the MMAs."""
    from support.sass import sass_by_function, sass_of

    from partita.lowering import nvrtc

    program = program_of(fuse(ALIGNED))
    assert program is not None
    binary = nvrtc.compile_cuda(program, arch="sm_90", name="partita_fused.cu")
    per_function = sass_by_function(sass_of(binary.path))
    copies = {"dense_v_fused_0": (8, 0), "bmm_nn_v_fused_0": (4, 4)}  # (LDGSTS, LDG.E.128): x and w; a
    for name, (async_copies, loads) in copies.items():
        body = per_function[program.kernels[name].entry]
        assert len(re.findall(r"\bLDGSTS\.E\.BYPASS\.128\b", body)) == async_copies, name
        assert len(re.findall(r"\bLDG\.E\.128\b", body)) == loads, name
        assert len(re.findall(r"\bDEPBAR\b", body)) == 2, name
