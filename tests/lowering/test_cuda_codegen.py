"""Native CUDA codegen for fused injective groups: NVRTC compiles every op and dtype,
the lowered module runs like the original (emulated without a GPU), the kernels' index
math matches NumPy (the same CUDA C built for the host, tests/support/cuda_host.py), and the
device path launches with arguments the cubin's KPARAM table agrees with. (Reductions and
GEMMs: tests/lowering/test_cuda_codegen_reductions.py.)"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from support.cuda_host import HostKernels, have_gxx  # tests/support/cuda_host.py
from support.recording_driver import recorded_run  # tests/support/recording_driver.py
from xdsl.passes import PassPipeline

from partita.dialects import make_context
from partita.ir import parse_module
from partita.lowering import nvrtc
from partita.lowering.cubin import kernel_params, kernel_symbols
from partita.lowering.cuda.codegen import cuda_from_binaries, program_of
from partita.runtime.extern import FusedKernelHandle, RowwiseKernelHandle, kernel_handles
from partita.runtime.plan import Runtime
from partita.runtime.reference import run
from partita.transforms import get_all_passes

DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}

# Every fusable op, dynamic batch; the softmax (a rowwise kernel of its own: a transpose
# cannot be its epilogue) splits the injective ops of @main into two kernels; @perm has a
# transpose that is not its own inverse.
TEMPLATE = """
func.func @main_T(%x: tensor<?x8x16xT>, %y: tensor<16xT>, %z: tensor<8x1xT>, %b: tensor<8xT>) -> tensor<?x16x8xT> {
  %0 = nn.add %x, %y : (tensor<?x8x16xT>, tensor<16xT>) -> tensor<?x8x16xT>
  %1 = nn.relu %0 : (tensor<?x8x16xT>) -> tensor<?x8x16xT>
  %2 = nn.multiply %1, %z : (tensor<?x8x16xT>, tensor<8x1xT>) -> tensor<?x8x16xT>
  %3 = nn.subtract %2, %x : (tensor<?x8x16xT>, tensor<?x8x16xT>) -> tensor<?x8x16xT>
  %4 = nn.sigmoid %3 : (tensor<?x8x16xT>) -> tensor<?x8x16xT>
  %5 = nn.divide %3, %4 : (tensor<?x8x16xT>, tensor<?x8x16xT>) -> tensor<?x8x16xT>
  %6 = nn.tanh %5 : (tensor<?x8x16xT>) -> tensor<?x8x16xT>
  %7 = nn.gelu %6 {approximate = "tanh"} : (tensor<?x8x16xT>) -> tensor<?x8x16xT>
  %8 = nn.softmax %7 : (tensor<?x8x16xT>) -> tensor<?x8x16xT>
  %9 = nn.transpose %8 {perm = array<i64: 0, 2, 1>} : (tensor<?x8x16xT>) -> tensor<?x16x8xT>
  %10 = nn.bias_add %9, %b {axis = 2 : i64} : (tensor<?x16x8xT>, tensor<8xT>) -> tensor<?x16x8xT>
  %11 = nn.gelu %10 : (tensor<?x16x8xT>) -> tensor<?x16x8xT>
  %12 = nn.reshape %11 : (tensor<?x16x8xT>) -> tensor<?x128xT>
  %13 = nn.clip %12 {min = -0.25 : f64, max = 0.5 : f64} : (tensor<?x128xT>) -> tensor<?x128xT>
  %14 = nn.reshape %13 : (tensor<?x128xT>) -> tensor<?x16x8xT>
  %15 = nn.multiply %14, %10 : (tensor<?x16x8xT>, tensor<?x16x8xT>) -> tensor<?x16x8xT>
  func.return %15 : tensor<?x16x8xT>
}
func.func @perm_T(%x: tensor<2x3x4xT>) -> tensor<4x2x3xT> {
  %0 = nn.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xT>) -> tensor<4x2x3xT>
  %1 = nn.clip %0 {min = -1.0 : f64, max = 1.0 : f64} : (tensor<4x2x3xT>) -> tensor<4x2x3xT>
  func.return %1 : tensor<4x2x3xT>
}
"""
MODEL = "".join(TEMPLATE.replace("T", t) for t in DTYPES)  # T only spells the dtype
PIPELINE = "fuse-native-kernels,cuda-codegen{{arch=sm_90 cache-dir=\"{cache}\"}},lower-extern-calls"


def _inputs(dtype: str, batch: int) -> list[np.ndarray]:
    rng = np.random.default_rng(batch)
    shapes = [(batch, 8, 16), (16,), (8, 1), (8,)]
    return [rng.standard_normal(s).astype(np.float32).astype(DTYPES[dtype]) for s in shapes]


@pytest.fixture(scope="module")
def lowered(tmp_path_factory: pytest.TempPathFactory):
    """The model through fuse-native-kernels, cuda-codegen and lower-extern-calls: one
    NVRTC program with twelve kernels (four per dtype); the fused, not yet compiled module
    too."""
    cache = tmp_path_factory.mktemp("cubins")
    ctx = make_context()
    fused = parse_module(MODEL, ctx, "model.mlir")
    PassPipeline.parse_spec(get_all_passes(), "fuse-native-kernels").apply(ctx, fused)
    module = parse_module(MODEL, ctx, "model.mlir")
    pipeline = PassPipeline.parse_spec(get_all_passes(), PIPELINE.format(cache=cache))
    pipeline.apply(ctx, module)
    (codegen,) = [p for p in pipeline.passes if p.name == "cuda-codegen"]
    assert (codegen.statistics.compiled, codegen.statistics.cached) == (1, 0)  # one NVRTC program, compiled (a fresh cache)
    return module, fused, cache


def test_every_op_and_dtype_compiles_into_one_cubin(lowered) -> None:
    module, fused, cache = lowered
    handles = kernel_handles(module)
    assert sorted(handles) == sorted([f"main_{t}_fused_{k}" for t in DTYPES for k in (0, 1, 2)] + [f"perm_{t}_fused_0" for t in DTYPES])
    (path,) = {h.path for h in handles.values()}
    cubin = path.read_bytes()
    assert kernel_symbols(cubin) == {h.record.entry for h in handles.values()}
    # The same source again is a cache hit, and the source rebuilt from the lowered
    # module's records and references is byte for byte what was compiled.
    program = program_of(fused)
    again = nvrtc.compile_cuda(program, arch="sm_90", name="partita_fused.cu", cache_dir=cache)
    assert again.cache_hit and again.path == path
    rebuilt = cuda_from_binaries(module)
    assert rebuilt.startswith("// byoc.binary @cuda_sm90\n") and rebuilt.endswith(program.code)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_lowered_module_runs_like_the_original(lowered, dtype: str) -> None:
    module, _, _ = lowered
    runtime = Runtime(module, "simulated", entry=f"main_{dtype}")
    original = parse_module(MODEL, make_context(), "model.mlir")
    for batch in (1, 5):
        args = _inputs(dtype, batch)
        (out,) = runtime.run(*args)
        (expected,) = run(original, *args, entry=f"main_{dtype}")
        assert out.shape == (batch, 16, 8) and out.dtype == DTYPES[dtype]
        np.testing.assert_array_equal(out, expected)
    # Three kernels a run, each emulated at its packed pointers; nothing left to the host.
    assert runtime.device.counts["launch"] == 2 * 3 and not runtime.stats["host_steps"]


# -- the kernels' semantics, built for the host -------------------------------------------

@pytest.fixture(scope="module")
def host_kernels(lowered, tmp_path_factory: pytest.TempPathFactory) -> HostKernels:
    """The emitted CUDA C compiled as host C++, to check the index math and the arithmetic."""
    if not have_gxx():
        pytest.skip("needs g++ to build the kernels for the host")
    module, fused, _ = lowered
    records = [h.record for h in kernel_handles(module).values()]
    return HostKernels(program_of(fused).code, records, tmp_path_factory.mktemp("host"))


@pytest.mark.parametrize("dtype", sorted(DTYPES))
def test_kernels_compute_the_reference_semantics(lowered, host_kernels: HostKernels, dtype: str) -> None:
    """Each kernel with its recorded block and a grid of at most two blocks (the kernels
    stride over the rest), against the reference executor."""
    module, fused, _ = lowered
    handles = kernel_handles(module)
    functions = {f.sym_name.data: f for f in fused.ops if hasattr(f, "sym_name")}
    names = [f"main_{dtype}_fused_{k}" for k in (0, 1, 2)] + [f"perm_{dtype}_fused_0"]
    for k, name in enumerate(names):
        rec = handles[name].record
        rng = np.random.default_rng(k)
        shapes = [tuple(3 if d < 0 else d for d in s) for s in rec.inputs]
        args = [rng.standard_normal(s).astype(np.float32).astype(DTYPES[dtype]) for s in shapes]
        (expected,) = _run_function(functions[name], args)
        out = np.zeros(expected.shape, DTYPES[dtype])
        grid, block = rec.geometry(out.shape)
        host_kernels.launch(rec, (min(grid[0], 2), 1, 1), block, args, out)
        tol = {"f32": 1e-5, "f16": 2e-3, "bf16": 1.6e-2}[dtype]
        np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), rtol=tol, atol=tol, err_msg=name)


def _run_function(function, args):
    """The reference executor on one private function (wrapped as a module's entry)."""
    from xdsl.dialects.builtin import ModuleOp, StringAttr

    clone = function.clone()
    clone.sym_visibility = StringAttr("public")
    return run(ModuleOp([clone]), *args, entry=clone.sym_name.data)


# -- the device path, with a fake device ----------------------------------------------------


def test_device_path_launches_what_the_cubin_declares(lowered) -> None:
    from partita.runtime.arguments import pack_kernel_args

    module, _, _ = lowered
    handles = kernel_handles(module)
    batch = 700
    args = _inputs("f16", batch)
    drv, launches, (out,) = recorded_run(module, "main_f16", args)
    assert drv.calls["cuModuleLoadData"] == 1  # one cubin, loaded once for the three kernels
    cubin = handles["main_f16_fused_0"].path.read_bytes()
    assert sorted(launches) == ["main_f16_fused_0", "main_f16_fused_1", "main_f16_fused_2"]
    numel = batch * 8 * 16
    for name, (grid, block, kernel_args, smem) in launches.items():
        handle = handles[name]
        assert block == (256, 1, 1) and smem == 0
        if name == "main_f16_fused_1":  # the softmax: one block per row
            assert isinstance(handle, RowwiseKernelHandle) and grid == (batch * 8, 1, 1)
        else:
            assert isinstance(handle, FusedKernelHandle) and handle.kind == "fused"
            assert grid == (-(-numel // 256), 1, 1)
        assert [kind for kind, _ in kernel_args][-1] == "int" and kernel_args[-1][1] == batch
        # The packed buffer matches the kernel's parameter table in the cubin.
        _, offsets = pack_kernel_args(kernel_args)
        params = kernel_params(cubin, handle.record.entry)
        assert [(p.offset, p.size) for p in params] == [
            (offset, 8 if kind == "ptr" else 4) for offset, (kind, _) in zip(offsets, kernel_args)
        ]
        assert len(params) == len(handle.record.params)
    # The first kernel read x and the two broadcast operands byte for byte; the softmax
    # reads where the first wrote; the last kernel's output is what the host got back.
    first = launches["main_f16_fused_0"][2]
    assert drv.read(first[0][1], args[0].nbytes) == args[0].tobytes()
    assert drv.read(first[2][1], args[2].nbytes) == args[2].tobytes()
    assert launches["main_f16_fused_1"][2][0] == first[len(handles["main_f16_fused_0"].record.inputs)]
    last = launches["main_f16_fused_2"][2][len(handles["main_f16_fused_2"].record.inputs)]
    assert out.shape == (batch, 16, 8) and drv.read(last[1], out.nbytes) == out.tobytes()
    assert [launch["name"] for launch in drv.launches] == [f"main_f16_fused_{k}" for k in (0, 1, 2)]


def test_binding_rejects_operands_that_do_not_fit(lowered) -> None:
    from partita.ir import PartitaError
    from partita.runtime.device import SimulatedDevice
    from partita.runtime.extern import PreparedFused
    from partita.runtime.plan import Tensor

    module, _, _ = lowered
    handle = kernel_handles(module)["main_f32_fused_0"]
    prepared = PreparedFused(handle, kernel=None)
    device = SimulatedDevice()
    x, y, z, _ = _inputs("f32", 2)

    def tensors(*arrays):
        return [Tensor(0x1000 * (k + 1), a.shape, a.dtype) for k, a in enumerate(arrays)]

    (out,) = tensors(np.empty((2, 8, 16), np.float32))
    with pytest.raises(PartitaError, match=r"@main_f32_fused_0: input #1 has shape \(15,\), the kernel takes \(16,\)"):
        prepared.bind(device, tensors(x, y[:15], z), [out], None)
    with pytest.raises(PartitaError, match="input #0 is float16, the kernel takes float32"):
        prepared.bind(device, tensors(x.astype(np.float16), y, z), [out], None)
    assert not device.counts  # nothing was packed or allocated
