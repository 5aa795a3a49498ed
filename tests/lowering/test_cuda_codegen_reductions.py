"""Native CUDA kernels beyond injective ops: row reductions (softmax, layer_norm, reductions
over the last axes), GEMMs (dense, matmul, batch_matmul) and pools (max / avg / global avg,
both layouts), each with its fused element-wise epilogue, and the index-remapping injective
ops (pad, concatenate). NVRTC compiles every kernel and dtype in one program; the lowered
module runs like the original; the kernels, built for the host with a block emulation,
compute the reference semantics; the device path launches the recorded geometry with
arguments the cubin agrees with."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from support.cuda_host import HostKernels, have_gxx  # tests/support/cuda_host.py
from support.recording_driver import recorded_run  # tests/support/recording_driver.py
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import PassPipeline

from partita.dialects import make_context
from partita.ir import parse_module
from partita.lowering.cubin import kernel_params, kernel_symbols
from partita.lowering.cuda.codegen import program_of
from partita.runtime.extern import (
    FusedKernelHandle,
    GemmKernelHandle,
    RowwiseKernelHandle,
    WindowKernelHandle,
    kernel_handles,
)
from partita.runtime.plan import Runtime
from partita.runtime.reference import run
from partita.transforms import get_all_passes

DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}

# Attention (matmul + scale epilogue, softmax, matmul), an MLP block (dense + bias + gelu,
# layer_norm + residual), batch_matmul both ways (a broadcast batch, transposes), a
# matmul broadcasting a rank-2 rhs over a dynamic batch with sizes off the 16x16 tiles,
# a softmax with an epilogue and a layer_norm over two axes.
TEMPLATE = """
func.func @attn_T(%q: tensor<?x4x16x8xT>, %k: tensor<?x4x8x16xT>, %s: tensor<T>, %v: tensor<?x4x16x8xT>) -> tensor<?x4x16x8xT> {
  %0 = nn.matmul %q, %k : (tensor<?x4x16x8xT>, tensor<?x4x8x16xT>) -> tensor<?x4x16x16xT>
  %1 = nn.divide %0, %s : (tensor<?x4x16x16xT>, tensor<T>) -> tensor<?x4x16x16xT>
  %2 = nn.softmax %1 : (tensor<?x4x16x16xT>) -> tensor<?x4x16x16xT>
  %3 = nn.matmul %2, %v : (tensor<?x4x16x16xT>, tensor<?x4x16x8xT>) -> tensor<?x4x16x8xT>
  func.return %3 : tensor<?x4x16x8xT>
}
func.func @mlp_T(%x: tensor<?x8x32xT>, %w: tensor<24x32xT>, %b: tensor<24xT>, %g: tensor<24xT>, %be: tensor<24xT>, %r: tensor<?x8x24xT>) -> tensor<?x8x24xT> {
  %0 = nn.dense %x, %w : (tensor<?x8x32xT>, tensor<24x32xT>) -> tensor<?x8x24xT>
  %1 = nn.bias_add %0, %b : (tensor<?x8x24xT>, tensor<24xT>) -> tensor<?x8x24xT>
  %2 = nn.gelu %1 : (tensor<?x8x24xT>) -> tensor<?x8x24xT>
  %3 = nn.layer_norm %2, %g, %be : (tensor<?x8x24xT>, tensor<24xT>, tensor<24xT>) -> tensor<?x8x24xT>
  %4 = nn.add %3, %r : (tensor<?x8x24xT>, tensor<?x8x24xT>) -> tensor<?x8x24xT>
  func.return %4 : tensor<?x8x24xT>
}
func.func @bmm_T(%a: tensor<3x40x20xT>, %b: tensor<1x40x12xT>, %c: tensor<2x20x40xT>, %d: tensor<2x12x40xT>) -> (tensor<3x20x12xT>, tensor<2x20x12xT>) {
  %0 = nn.batch_matmul %a, %b {transpose_a = true, transpose_b = false} : (tensor<3x40x20xT>, tensor<1x40x12xT>) -> tensor<3x20x12xT>
  %1 = nn.relu %0 : (tensor<3x20x12xT>) -> tensor<3x20x12xT>
  %2 = nn.batch_matmul %c, %d : (tensor<2x20x40xT>, tensor<2x12x40xT>) -> tensor<2x20x12xT>
  func.return %1, %2 : tensor<3x20x12xT>, tensor<2x20x12xT>
}
func.func @misc_T(%a: tensor<?x3x17x9xT>, %b: tensor<9x33xT>, %x: tensor<?x6x50xT>, %y: tensor<50xT>, %g: tensor<6x50xT>, %be: tensor<6x50xT>) -> (tensor<?x3x17x33xT>, tensor<?x6x50xT>, tensor<?x6x50xT>) {
  %0 = nn.matmul %a, %b : (tensor<?x3x17x9xT>, tensor<9x33xT>) -> tensor<?x3x17x33xT>
  %1 = nn.softmax %x {axis = 2 : i64} : (tensor<?x6x50xT>) -> tensor<?x6x50xT>
  %2 = nn.multiply %1, %y : (tensor<?x6x50xT>, tensor<50xT>) -> tensor<?x6x50xT>
  %3 = nn.layer_norm %x, %g, %be {axis = 1 : i64, epsilon = 1.0e-3 : f64} : (tensor<?x6x50xT>, tensor<6x50xT>, tensor<6x50xT>) -> tensor<?x6x50xT>
  func.return %0, %2, %3 : tensor<?x3x17x33xT>, tensor<?x6x50xT>, tensor<?x6x50xT>
}
func.func @pool_T(%x: tensor<?x4x9x9xT>, %b: tensor<4xT>, %y: tensor<2x7x7x3xT>, %z: tensor<?x6x5x3xT>) -> (tensor<?x4x5x5xT>, tensor<2x4x4x3xT>, tensor<?x1x1x3xT>) {
  %0 = nn.max_pool2d %x {pool_size = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 0, 0>, ceil_mode = true} : (tensor<?x4x9x9xT>) -> tensor<?x4x5x5xT>
  %1 = nn.bias_add %0, %b {axis = 1 : i64} : (tensor<?x4x5x5xT>, tensor<4xT>) -> tensor<?x4x5x5xT>
  %2 = nn.relu %1 : (tensor<?x4x5x5xT>) -> tensor<?x4x5x5xT>
  %3 = nn.avg_pool2d %y {layout = "NHWC", pool_size = array<i64: 3, 2>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilation = array<i64: 1, 2>, count_include_pad = true} : (tensor<2x7x7x3xT>) -> tensor<2x4x4x3xT>
  %4 = nn.avg_pool2d %x {pool_size = array<i64: 2, 2>, strides = array<i64: 2, 2>, ceil_mode = true} : (tensor<?x4x9x9xT>) -> tensor<?x4x5x5xT>
  %5 = nn.add %2, %4 : (tensor<?x4x5x5xT>, tensor<?x4x5x5xT>) -> tensor<?x4x5x5xT>
  %6 = nn.global_avg_pool2d %z {layout = "NHWC"} : (tensor<?x6x5x3xT>) -> tensor<?x1x1x3xT>
  %7 = nn.sigmoid %6 : (tensor<?x1x1x3xT>) -> tensor<?x1x1x3xT>
  func.return %5, %3, %7 : tensor<?x4x5x5xT>, tensor<2x4x4x3xT>, tensor<?x1x1x3xT>
}
func.func @padcat_T(%x: tensor<?x3x4x5xT>, %w: tensor<?x3x2x7xT>) -> tensor<?x3x8x7xT> {
  %0 = nn.relu %x : (tensor<?x3x4x5xT>) -> tensor<?x3x4x5xT>
  %1 = nn.pad %0 {pad_before = array<i64: 0, 0, 1, 2>, pad_after = array<i64: 0, 0, 1, 0>, pad_value = -1.5 : f64} : (tensor<?x3x4x5xT>) -> tensor<?x3x6x7xT>
  %2 = nn.concatenate %1, %w {axis = 2 : i64} : (tensor<?x3x6x7xT>, tensor<?x3x2x7xT>) -> tensor<?x3x8x7xT>
  %3 = nn.tanh %2 : (tensor<?x3x8x7xT>) -> tensor<?x3x8x7xT>
  func.return %3 : tensor<?x3x8x7xT>
}
"""
MODEL = "".join(TEMPLATE.replace("T", t) for t in DTYPES)  # T only spells the dtype
PIPELINE = "fuse-native-kernels,cuda-codegen{{arch=sm_90 cache-dir=\"{cache}\"}},lower-extern-calls"
# Per dtype: (kernel, kind, ops).
KERNELS = [
    ("attn_{}_fused_0", "gemm", ("nn.matmul", "nn.divide")),
    ("attn_{}_fused_1", "rowwise", ("nn.softmax",)),
    ("attn_{}_fused_2", "gemm", ("nn.matmul",)),
    ("mlp_{}_fused_0", "gemm", ("nn.dense", "nn.bias_add", "nn.gelu")),
    ("mlp_{}_fused_1", "rowwise", ("nn.layer_norm", "nn.add")),
    ("bmm_{}_fused_0", "gemm", ("nn.batch_matmul", "nn.relu")),
    ("bmm_{}_fused_1", "gemm", ("nn.batch_matmul",)),
    ("misc_{}_fused_0", "gemm", ("nn.matmul",)),
    ("misc_{}_fused_1", "rowwise", ("nn.softmax", "nn.multiply")),
    ("misc_{}_fused_2", "rowwise", ("nn.layer_norm",)),
    ("pool_{}_fused_0", "window", ("nn.avg_pool2d",)),
    ("pool_{}_fused_1", "window", ("nn.avg_pool2d",)),
    ("pool_{}_fused_2", "window", ("nn.max_pool2d", "nn.bias_add", "nn.relu", "nn.add")),
    ("pool_{}_fused_3", "window", ("nn.global_avg_pool2d", "nn.sigmoid")),
    ("padcat_{}_fused_0", "fused", ("nn.relu", "nn.pad", "nn.concatenate", "nn.tanh")),
]
HANDLES = {"rowwise": RowwiseKernelHandle, "gemm": GemmKernelHandle, "window": WindowKernelHandle, "fused": FusedKernelHandle}
TOLERANCE = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2}


def _args(function: str, dtype: str, batch: int) -> list[np.ndarray]:
    shapes = {
        "attn": [(batch, 4, 16, 8), (batch, 4, 8, 16), (), (batch, 4, 16, 8)],
        "mlp": [(batch, 8, 32), (24, 32), (24,), (24,), (24,), (batch, 8, 24)],
        "bmm": [(3, 40, 20), (1, 40, 12), (2, 20, 40), (2, 12, 40)],
        "misc": [(batch, 3, 17, 9), (9, 33), (batch, 6, 50), (50,), (6, 50), (6, 50)],
        "pool": [(batch, 4, 9, 9), (4,), (2, 7, 7, 3), (batch, 6, 5, 3)],
        "padcat": [(batch, 3, 4, 5), (batch, 3, 2, 7)],
    }[function]
    rng = np.random.default_rng(batch)
    out = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    if function == "attn":
        out[2] = np.array(2.5, np.float32)
    return [a.astype(DTYPES[dtype]) for a in out]


@pytest.fixture(scope="module")
def lowered(tmp_path_factory: pytest.TempPathFactory):
    """The model through fuse-native-kernels, cuda-codegen and lower-extern-calls (one
    NVRTC program, 45 kernels), and the fused module before codegen."""
    cache = tmp_path_factory.mktemp("cubins")
    ctx = make_context()
    fused = parse_module(MODEL, ctx, "model.mlir")
    PassPipeline.parse_spec(get_all_passes(), "fuse-native-kernels").apply(ctx, fused)
    module = parse_module(MODEL, ctx, "model.mlir")
    pipeline = PassPipeline.parse_spec(get_all_passes(), PIPELINE.format(cache=cache))
    pipeline.apply(ctx, module)
    (codegen,) = [p for p in pipeline.passes if p.name == "cuda-codegen"]
    assert (codegen.statistics.compiled, codegen.statistics.cached) == (1, 0)
    return module, fused


def test_every_kernel_and_dtype_compiles_into_one_cubin(lowered) -> None:
    module, fused = lowered
    handles = kernel_handles(module)
    want = {name.format(t): (kind, ops) for t in DTYPES for name, kind, ops in KERNELS}
    assert {n: (h.kind, h.record.ops) for n, h in handles.items()} == want
    assert all(type(h) is HANDLES[h.kind] for h in handles.values())
    (path,) = {h.path for h in handles.values()}
    assert kernel_symbols(path.read_bytes()) == {h.record.entry for h in handles.values()}
    # Nothing is left on the host: every nn op of the entries went into a kernel.
    for op in module.ops:
        if op.name == "func.func" and not op.sym_name.data.endswith(("_reference", "_shape_func")) and op.body.blocks:
            assert not [o.name for o in op.body.walk() if o.name.startswith("nn.")], op.sym_name.data


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_lowered_module_runs_like_the_original(lowered, dtype: str) -> None:
    module, _ = lowered
    original = parse_module(MODEL, make_context(), "model.mlir")
    launches = 0
    for function in ("attn", "mlp", "bmm", "misc", "pool", "padcat"):
        runtime = Runtime(module, "simulated", entry=f"{function}_{dtype}")
        for batch in (1, 3):
            args = _args(function, dtype, batch)
            got = runtime.run(*args)
            want = run(original, *args, entry=f"{function}_{dtype}")
            for g, w in zip(got, want, strict=True):
                assert g.shape == w.shape and g.dtype == DTYPES[dtype]
                np.testing.assert_array_equal(g, w)
        assert not runtime.stats["host_steps"]
        launches += runtime.device.counts["launch"]
    assert launches == 2 * len(KERNELS)


# -- the kernels' semantics, built for the host -------------------------------------------


@pytest.fixture(scope="module")
def host_kernels(lowered, tmp_path_factory: pytest.TempPathFactory) -> HostKernels:
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    module, fused = lowered
    records = [h.record for h in kernel_handles(module).values()]
    return HostKernels(program_of(fused).code, records, tmp_path_factory.mktemp("host"))


def _run_function(function, args):
    """The reference executor on one private function (wrapped as a module's entry)."""
    clone = function.clone()
    clone.sym_visibility = StringAttr("public")
    return run(ModuleOp([clone]), *args, entry=clone.sym_name.data)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_kernels_compute_the_reference_semantics(lowered, host_kernels: HostKernels, dtype: str) -> None:
    """Each kernel, launched with its recorded block and a grid of at most two blocks on
    the axes the kernels stride over (rows, M tiles, batch), against the reference."""
    module, fused = lowered
    handles = kernel_handles(module)
    functions = {f.sym_name.data: f for f in fused.ops if hasattr(f, "sym_name")}
    for k, (pattern, _, _) in enumerate(KERNELS):
        name = pattern.format(dtype)
        rec = handles[name].record
        rng = np.random.default_rng(k)
        args = [rng.standard_normal(tuple(3 if d < 0 else d for d in s)).astype(np.float32).astype(DTYPES[dtype])
                for s in rec.inputs]
        (expected,) = _run_function(functions[name], args)
        out = np.zeros(expected.shape, DTYPES[dtype])
        grid, block = rec.geometry(out.shape)
        grid = (grid[0], min(grid[1], 2), min(grid[2], 2)) if handles[name].kind == "gemm" else (min(grid[0], 2), 1, 1)
        host_kernels.launch(rec, grid, block, args, out)
        tol = TOLERANCE[dtype]
        np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), rtol=tol, atol=tol, err_msg=name)


# -- the device path, with a fake device ----------------------------------------------------


def test_device_path_launches_the_recorded_geometry(lowered) -> None:
    from partita.runtime.arguments import pack_kernel_args

    module, _ = lowered
    handles = kernel_handles(module)
    batch = 5
    args = _args("mlp", "f16", batch)
    drv, launches, (out,) = recorded_run(module, "mlp_f16", args)
    cubin = handles["mlp_f16_fused_0"].path.read_bytes()
    assert sorted(launches) == ["mlp_f16_fused_0", "mlp_f16_fused_1"]
    # The f16 GEMM on tensor cores: 8 warps per 128x128 tile, N = 24 -> 1 tile,
    # M = 5 * 8 = 40 -> 1 tile, no batch.
    grid, block, gemm_args, smem = launches["mlp_f16_fused_0"]
    assert (grid, block, smem) == ((1, 1, 1), (256, 1, 1), 0)
    # The layer_norm: short rows, a warp each, four a block of 128 threads (5 * 8 rows).
    grid, block, row_args, smem = launches["mlp_f16_fused_1"]
    assert (grid, block, smem) == ((10, 1, 1), (128, 1, 1), 0)
    # the GEMM's last two: no workspace and the whole K range (K = 32: too short to split)
    assert gemm_args[-2:] == [("ptr", 0), ("int", 1)]
    for name, kernel_args in (("mlp_f16_fused_0", gemm_args[:-2]), ("mlp_f16_fused_1", row_args)):
        handle = handles[name]
        assert kernel_args[-1] == ("int", batch)
        packed = gemm_args if name == "mlp_f16_fused_0" else kernel_args
        _, offsets = pack_kernel_args(packed)
        params = kernel_params(cubin, handle.record.entry)
        assert [(p.offset, p.size) for p in params] == [
            (offset, 8 if kind == "ptr" else 4) for offset, (kind, _) in zip(offsets, packed)
        ]
        assert len(params) == len(handle.record.params)
    # The GEMM read x, w and the bias byte for byte; the layer_norm reads where the GEMM
    # wrote, and the residual.
    assert [drv.read(p, a.nbytes) for (_, p), a in zip(gemm_args[:3], args[:3])] == [a.tobytes() for a in args[:3]]
    assert row_args[0] == gemm_args[len(handles["mlp_f16_fused_0"].record.inputs)]
    assert drv.read(row_args[3][1], args[5].nbytes) == args[5].tobytes()
    assert out.shape == (batch, 8, 24) and len(drv.launches) == 2


def test_device_path_launches_window_kernels(lowered) -> None:
    """The pools launch one thread per output element; the packed arguments match the
    cubin's parameter table; the epilogue's inputs (the bias, the other pool's result)
    are arguments of the max pool's kernel."""
    from partita.runtime.arguments import pack_kernel_args

    module, _ = lowered
    handles = kernel_handles(module)
    batch = 70
    args = _args("pool", "f32", batch)
    drv, launches, outs = recorded_run(module, "pool_f32", args)
    cubin = handles["pool_f32_fused_0"].path.read_bytes()
    assert sorted(launches) == [f"pool_f32_fused_{k}" for k in range(4)]
    numel = {0: 2 * 4 * 4 * 3, 1: batch * 4 * 5 * 5, 2: batch * 4 * 5 * 5, 3: batch * 3}
    for k, (grid, block, kernel_args, smem) in enumerate(launches[f"pool_f32_fused_{k}"] for k in range(4)):
        handle = handles[f"pool_f32_fused_{k}"]
        assert isinstance(handle, WindowKernelHandle)
        assert (grid, block, smem) == ((-(-numel[k] // 256), 1, 1), (256, 1, 1), 0)
        _, offsets = pack_kernel_args(kernel_args)
        params = kernel_params(cubin, handle.record.entry)
        assert [(p.offset, p.size) for p in params] == [
            (offset, 8 if kind == "ptr" else 4) for offset, (kind, _) in zip(offsets, kernel_args)
        ]
        assert len(params) == len(handle.record.params)
    # The max pool's kernel: x, the bias, the avg pool's output (where its kernel
    # wrote), out, then the batch of x and of the avg pool's output.
    fused = launches["pool_f32_fused_2"][2]
    assert fused[4:] == [("int", batch), ("int", batch)] and [kind for kind, _ in fused[:4]] == ["ptr"] * 4
    assert drv.read(fused[0][1], args[0].nbytes) == args[0].tobytes()
    assert drv.read(fused[1][1], args[1].nbytes) == args[1].tobytes()
    assert fused[2] == launches["pool_f32_fused_1"][2][len(handles["pool_f32_fused_1"].record.inputs)]
    assert [o.shape for o in outs] == [(batch, 4, 5, 5), (2, 4, 4, 3), (batch, 1, 1, 3)]
    assert sorted(launch["name"] for launch in drv.launches) == [f"pool_f32_fused_{k}" for k in range(4)]


# -- reductions over the last axes: rowwise kernels on the device path ----------------------

ROW_REDUCTIONS = """
func.func @stats(%x: tensor<?x4x4096xf16>, %e: tensor<f16>, %img: tensor<?x8x7x7xf32>) -> (tensor<?x4x1xf16>, tensor<?x8xf32>, tensor<?x4xi64>) {
  %0 = nn.reduce_mean %x {axes = array<i64: 2>} : (tensor<?x4x4096xf16>) -> tensor<?x4x1xf16>
  %1 = nn.add %0, %e : (tensor<?x4x1xf16>, tensor<f16>) -> tensor<?x4x1xf16>
  %2 = nn.sqrt %1 : (tensor<?x4x1xf16>) -> tensor<?x4x1xf16>
  %3 = nn.reduce_mean %img {axes = array<i64: 2, 3>, keepdims = false} : (tensor<?x8x7x7xf32>) -> tensor<?x8xf32>
  %4 = nn.argmax %x {axis = 2 : i64, keepdims = false} : (tensor<?x4x4096xf16>) -> tensor<?x4xi64>
  func.return %2, %3, %4 : tensor<?x4x1xf16>, tensor<?x8xf32>, tensor<?x4xi64>
}
"""


def test_device_path_launches_row_reductions(tmp_path) -> None:
    """RMSNorm's statistics (mean over 4096, + eps, sqrt), global average pooling and an
    argmax over the last axes: a row per output element, a block of 256 threads each for
    rows of 4096, a warp each (4 rows a block of 128) for rows of 49, arguments as the
    cubin's parameter table."""
    from partita.runtime.arguments import pack_kernel_args

    ctx = make_context()
    module = parse_module(ROW_REDUCTIONS, ctx, "stats.mlir")
    PassPipeline.parse_spec(get_all_passes(), PIPELINE.format(cache=tmp_path)).apply(ctx, module)
    handles = kernel_handles(module)
    assert {n: (h.kind, h.record.ops) for n, h in handles.items()} == {
        "stats_fused_0": ("rowwise", ("nn.reduce_mean", "nn.add", "nn.sqrt")),
        "stats_fused_1": ("rowwise", ("nn.reduce_mean",)),
        "stats_fused_2": ("rowwise", ("nn.argmax",)),
    }
    assert all(isinstance(h, RowwiseKernelHandle) for h in handles.values())
    batch = 3
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((batch, 4, 4096)).astype(np.float16), np.array(1e-3, np.float16),
            rng.standard_normal((batch, 8, 7, 7)).astype(np.float32)]
    _, launches, outs = recorded_run(module, "stats", args)
    cubin = handles["stats_fused_0"].path.read_bytes()
    geometry = {"stats_fused_0": (batch * 4, 256), "stats_fused_1": (batch * 8 // 4, 128), "stats_fused_2": (batch * 4, 256)}
    for name, (rows, threads) in geometry.items():
        grid, block, kernel_args, smem = launches[name]
        assert (grid, block, smem) == ((rows, 1, 1), (threads, 1, 1), 0)
        _, offsets = pack_kernel_args(kernel_args)
        params = kernel_params(cubin, handles[name].record.entry)
        assert [(p.offset, p.size) for p in params] == [
            (offset, 8 if kind == "ptr" else 4) for offset, (kind, _) in zip(offsets, kernel_args)]
    assert [o.shape for o in outs] == [(batch, 4, 1), (batch, 8), (batch, 4)]
