"""CUDA driver runtime: availability, C-ABI packing, launch geometry, GPU runs."""

import numpy as np
import pytest

from partita.lowering import cubin, nvrtc
from partita.lowering.cutlass import KernelSpec, choose_config, emit_module
from partita.runtime.arguments import pack_kernel_args
from partita.runtime.cuda import CudaDevice, cuda_available, launch_entry
from partita.runtime.profile import time_steps

gpu = pytest.mark.skipif(not cuda_available(), reason="no CUDA device")


def test_cuda_available_never_raises():
    assert cuda_available() in (True, False)
    assert cuda_available() is cuda_available()  # cached


def test_pack_kernel_args_c_abi():
    buf, offs = pack_kernel_args([("ptr", 0x1000), ("int", 7), ("ptr", 0x2000), ("int", -1),
                                  ("int", 3)])
    assert offs == [0, 8, 16, 24, 28]
    assert len(buf) == 32
    assert int.from_bytes(buf[16:24], "little") == 0x2000
    assert int.from_bytes(buf[24:28], "little", signed=True) == -1
    assert pack_kernel_args([("int", 1), ("int", 2)]) == (b"\1\0\0\0\2\0\0\0", [0, 4])
    with pytest.raises(ValueError):
        pack_kernel_args([("float128", 1)])


SPECS = {
    "tvmgen_default_cutlass_main_0": KernelSpec.dense(None, 64, 64, "float16", "bias_relu"),
    "tvmgen_default_cutlass_main_1": KernelSpec.dense(32, 32, 4096, "float16", "none"),
    "tvmgen_default_cutlass_main_2": KernelSpec.batch_matmul(None, None, 64, 32, "float32"),
}


def _build(arch: str, cache):
    sm = int(arch[3:5])
    src = emit_module([(n, s, choose_config(s, sm)) for n, s in SPECS.items()])
    return src, nvrtc.compile_cuda(src, arch=arch, cache_dir=cache)


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    """Compile-only checks: sm_80 here; GPU tests build for the device's own arch."""
    return _build("sm_80", tmp_path_factory.mktemp("cubins"))


def test_packing_matches_cubin_kparam_info(module):
    src, binary = module
    for name, entry in src.entries.items():
        dims = {d: 17 for d in entry.dynamic_dims}
        ptrs = {p.name: 0x7F0000000000 + 256 * i for i, p in enumerate(entry.params)}
        buf, offsets = pack_kernel_args(entry.args(ptrs, dims))
        info = cubin.kernel_params(binary.cubin, entry.name)
        assert [p.ordinal for p in info] == list(range(len(entry.params)))
        assert [p.offset for p in info] == offsets, name
        assert [p.size for p in info] == [p.size for p in entry.params], name
        assert len(buf) >= info[-1].offset + info[-1].size
    # the split-k entry carries a workspace pointer, the batched one four ints (two run-time)
    assert [p.name for p in src.entries["tvmgen_default_cutlass_main_1"].params][-4] == "workspace"
    assert [p.name for p in src.entries["tvmgen_default_cutlass_main_2"].params][-4:] == ["batch", "M", "N", "K"]
    assert src.entries["tvmgen_default_cutlass_main_2"].dynamic_dims == ("batch", "M")


def test_launch_geometry_from_tiles(module):
    src, binary = module
    e = src.entries["tvmgen_default_cutlass_main_0"]
    tm, tn, _ = e.config.threadblock
    assert e.grid({"M": 1}) == (1, 1, 1)
    assert e.grid({"M": 10 * tm + 1}) == (11, -(-64 // tn), 1)
    assert e.block == (e.config.threads, 1, 1)
    s = src.entries["tvmgen_default_cutlass_main_1"]
    assert s.grid()[2] == s.config.split_k > 1
    assert s.workspace_bytes() == 4
    b = src.entries["tvmgen_default_cutlass_main_2"]
    assert b.grid({"batch": 3, "M": 100}) == (-(-100 // b.config.threadblock[0]), 1, 3)
    assert cubin.read_int_global(binary.cubin, e.smem_symbol) <= 48 * 1024


def _bias_relu_reference(x, w, bias):
    return np.maximum(x.astype(np.float32) @ w.astype(np.float32).T + bias.astype(np.float32), 0)


@pytest.mark.gpu
@gpu
def test_run_dense_bias_relu_on_device(tmp_path):
    dev = CudaDevice(0)
    major, _ = dev.compute_capability
    sm = major * 10 + dev.compute_capability[1]
    spec = KernelSpec.dense(None, 64, 64, "float16", "bias_relu")
    src = emit_module([("k", spec, choose_config(spec, sm))])
    binary = nvrtc.compile_cuda(src, arch=dev.arch, cache_dir=tmp_path)
    mod = dev.load_module(binary.cubin)
    rng = np.random.default_rng(0)
    M = 100
    x = rng.standard_normal((M, 64)).astype(np.float16)
    w = rng.standard_normal((64, 64)).astype(np.float16)
    bias = rng.standard_normal(64).astype(np.float16)
    bufs = {"x": dev.to_device(x), "w": dev.to_device(w), "bias": dev.to_device(bias),
            "out": dev.alloc(M * 64 * 2)}
    e = src.entries["k"]
    launch_entry(mod, e, {k: v.ptr for k, v in bufs.items()}, {"M": M})
    dev.synchronize()
    out = dev.from_device(bufs["out"], (M, 64), np.float16)
    np.testing.assert_allclose(out.astype(np.float32), _bias_relu_reference(x, w, bias),
                               rtol=2e-2, atol=2e-1)
    smem = mod.global_int(e.smem_symbol)
    launch = dev.prepare_launch(mod.kernel(e.name, smem), e.grid({"M": M}), e.block, smem,
                                e.args({k: v.ptr for k, v in bufs.items()}, {"M": M}))
    (seconds,) = time_steps(dev, [launch], repeat=3)
    assert seconds > 0
    for b in bufs.values():
        b.free()
    mod.unload()
    dev.close()


@pytest.mark.gpu
@gpu
def test_run_split_k_and_batched_f32_on_device(tmp_path):
    dev = CudaDevice(0)
    src, binary = _build(dev.arch, tmp_path)  # loading an sm_80 cubin on an sm_90 device fails
    mod = dev.load_module(binary.cubin)
    rng = np.random.default_rng(1)
    # split-k f16 dense, static 32x32x4096
    e = src.entries["tvmgen_default_cutlass_main_1"]
    x = (rng.standard_normal((32, 4096)) / 8).astype(np.float16)
    w = (rng.standard_normal((32, 4096)) / 8).astype(np.float16)
    bx, bw, bo = dev.to_device(x), dev.to_device(w), dev.alloc(32 * 32 * 2)
    ws = dev.alloc(e.workspace_bytes())
    dev.memset0(ws)
    launch_entry(mod, e, {"x": bx.ptr, "w": bw.ptr, "out": bo.ptr, "workspace": ws.ptr})
    dev.synchronize()
    out = dev.from_device(bo, (32, 32), np.float16).astype(np.float32)
    np.testing.assert_allclose(out, x.astype(np.float32) @ w.astype(np.float32).T, rtol=3e-2, atol=1e-1)
    # batched f32 with run-time batch and M
    b = src.entries["tvmgen_default_cutlass_main_2"]
    A = rng.standard_normal((3, 50, 32)).astype(np.float32)
    B = rng.standard_normal((3, 64, 32)).astype(np.float32)
    ba, bb, bo2 = dev.to_device(A), dev.to_device(B), dev.alloc(3 * 50 * 64 * 4)
    launch_entry(mod, b, {"a": ba.ptr, "b": bb.ptr, "out": bo2.ptr}, {"batch": 3, "M": 50})
    dev.synchronize()
    out2 = dev.from_device(bo2, (3, 50, 64), np.float32)
    np.testing.assert_allclose(out2, A @ B.transpose(0, 2, 1), rtol=1e-4, atol=1e-4)
    for buf in (bx, bw, bo, ws, ba, bb, bo2):
        buf.free()
    mod.unload()
    dev.close()
