"""Hopper launches (``cutlass_sm90`` records): TMA descriptors encoded when a shape is bound,
``Params`` packed from the kernel's layout probe, cluster launches. Checked against the
driver's rules on the recording driver (``cuTensorMapEncodeTiled``, ``cuLaunchKernelEx``,
shared-memory opt-in) and for results on the simulated device; ``gpu`` tests run the same
model on an H100/H200 against NumPy."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import math
import struct

import numpy as np
import pytest
from support.artifact_files import reseal
from support.recording_driver import RecordingDriver, recorded_run
from xdsl.dialects.builtin import BFloat16Type

import partita
from partita.dialects import byoc
from partita.dialects.nn import numpy_dtype
from partita.ir import PartitaError
from partita.lowering.cutlass.kernels import KernelSpec
from partita.lowering.cutlass.sm90 import STREAM_K_PROBE
from partita.runtime.arguments import pack_kernel_args
from partita.runtime.cuda import CudaDevice, CudaError, cuda_status
from partita.runtime.device import SimulatedDevice
from partita.runtime.plan import Runtime
from partita.runtime.tma import (
    TensorMapRequest,
    operand_map,
    simulated_tensor_map,
    sm90_arguments,
    sm90_grid,
    stream_k_schedule,
)
from partita.transforms.tune_cutlass_kernels import TUNING_FILE

# a dense with a bias + GELU epilogue at a run-time M, and a TN batched bf16 GEMM (Q·Kᵀ)
MODEL = """
func.func @main(%x: tensor<?x256xf16>, %w: tensor<128x256xf16>, %b: tensor<128xf16>, %q: tensor<4x64x64xbf16>, %k: tensor<4x32x64xbf16>) -> (tensor<?x128xf16>, tensor<4x64x32xbf16>) {
  %0 = nn.dense %x, %w : (tensor<?x256xf16>, tensor<128x256xf16>) -> tensor<?x128xf16>
  %1 = nn.add %0, %b : (tensor<?x128xf16>, tensor<128xf16>) -> tensor<?x128xf16>
  %2 = nn.gelu %1 : (tensor<?x128xf16>) -> tensor<?x128xf16>
  %3 = nn.batch_matmul %q, %k : (tensor<4x64x64xbf16>, tensor<4x32x64xbf16>) -> tensor<4x64x32xbf16>
  func.return %2, %3 : tensor<?x128xf16>, tensor<4x64x32xbf16>
}
"""
TARGETS = ["cuda -arch=sm_90a", "cutlass", "llvm"]
bf16_type = BFloat16Type()


def _hopper() -> CudaDevice:
    """The CUDA device when it is an H100 / H200 (what the sm_90a kernels run on); else the
    test is skipped."""
    device = CudaDevice()
    if device.arch not in ("sm_90", "sm_90a"):
        pytest.skip(f"the sm_90a kernels need an H100/H200, not {device.arch}")
    return device


def _inputs(m: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    bf16 = numpy_dtype(bf16_type)
    return [(rng.standard_normal((m, 256)) * 0.25).astype(np.float16),
            (rng.standard_normal((128, 256)) * 0.25).astype(np.float16),
            rng.standard_normal(128).astype(np.float16),
            (rng.standard_normal((4, 64, 64)) * 0.25).astype(bf16),
            (rng.standard_normal((4, 32, 64)) * 0.25).astype(bf16)]


def _expected(x, w, b, q, k) -> list[np.ndarray]:
    h = x.astype(np.float32) @ w.astype(np.float32).T + b.astype(np.float32)
    erf = np.vectorize(math.erf)  # SciPy is no dependency
    return [0.5 * h * (1 + erf(h / np.sqrt(2))), np.einsum("bmk,bnk->bmn", q.astype(np.float32), k.astype(np.float32))]


@pytest.fixture(scope="module")
def compiled():
    # the Hopper kernels take ~1-2 minutes of NVRTC when cold (one program per
    # configuration, compiled in parallel); the cubin cache serves them after
    lines: list[str] = []
    exe = partita.compile(MODEL, TARGETS, partitioner="eager", progress=lambda name, i, n: lines.append(name))
    return exe, lines


@pytest.fixture(scope="module")
def exe(compiled):
    return compiled[0]


def test_compile_progress_names_each_program(compiled) -> None:
    """Each NVRTC program says when it is done: one per Hopper configuration here."""
    _, lines = compiled
    done = [line for line in lines if line.startswith("cutlass-codegen: ")]
    assert len(done) == 2, lines
    assert any("cutlass3x_sm90_tensorop_gemm_f16_f16_f32_128x128x64_1x1x1_tn_warpspecialized_bias_gelu" in line
               for line in done)
    assert all(" for sm_90a [" in line for line in done)
def test_sm90a_compiles_both_gemms_to_hopper_kernels(exe) -> None:
    """``cuda -arch=sm_90a`` picks the CUTLASS 3 kernels: a ``_tma`` cubin per configuration,
    each record carrying the Params layout its probe reported."""
    binaries = [op for op in exe.module.ops if isinstance(op, byoc.BinaryOp) and "_tma" in op.sym_name.data]
    assert len(binaries) == 2 and {b.attributes["arch"].data for b in binaries} == {"sm_90a"}
    records = [r for b in binaries for r in b.attributes["kernels"].data.values()]
    assert len(records) == 2
    for record in records:
        assert record.data["kind"].data == "cutlass_sm90"
        layout = record.data["layout"].data
        assert layout["params_size"].value.data % 64 == 0
        assert layout["smem"].value.data > 48 * 1024  # TMA stages: the opt-in is needed
    assert not [op for op in exe.module.ops if isinstance(op, byoc.BinaryOp) and "_tma" not in op.sym_name.data
                and "cutlass" in op.sym_name.data]


def test_hopper_gemms_match_numpy_on_the_simulated_device(exe) -> None:
    """The plan binds both Hopper steps (descriptors encoded in the simulated format, Params
    packed) and their reference semantics run at the pointers inside those Params."""
    device = SimulatedDevice()
    runtime = Runtime(exe.module, device)
    for m in (1, 130):  # one row; more rows than one 128-row tile
        args = _inputs(m, seed=m)
        got = runtime.run(*args)
        for g, w in zip(got, _expected(*args), strict=True):
            np.testing.assert_allclose(g.astype(np.float32), w, rtol=3e-2, atol=3e-2)
    assert device.counts["encode_tensor_map"] == 2 * 2 * 2  # 2 kernels x (A, B) x 2 shape signatures
    (bound, _) = runtime._bound.values()
    assert {s.cluster for s in bound.steps} == {(1, 1, 1)}


def test_recording_driver_sees_tma_descriptors_and_cluster_launches(exe) -> None:
    """On a (recording) H100: every operand's descriptor passes cuTensorMapEncodeTiled's
    rules with the box CUTLASS expects, the kernels opt in to their shared memory, and
    each call is one cuLaunchKernelEx with a cluster attribute."""
    args = _inputs(200)
    drv, launched, _ = recorded_run(exe.module, "main", args)
    assert drv.calls["cuTensorMapEncodeTiled"] == 4 and drv.calls["cuLaunchKernelEx"] == 2
    assert drv.calls["cuLaunchKernel"] == 0
    maps = {m["dims"]: m for m in drv.tensor_maps}
    # dense: x [200, 256] and w [128, 256] as (K, rows, batch), boxes one 64-wide K tile by the tile's rows
    x_map, w_map = maps[(256, 200, 1)], maps[(256, 128, 1)]
    assert x_map["box"] == (64, 128, 1) and w_map["box"] == (64, 128, 1)
    assert x_map["strides"] == (512, 200 * 512) and x_map["swizzle"] == 128 and x_map["dtype"] == 1  # UINT16
    q_map = maps[(64, 64, 4)]  # Q [4, 64, 64] in 64-row tiles, its batch stride 64*64*2
    assert q_map["box"] == (64, 64, 1) and q_map["strides"] == (128, 8192)
    assert all(m["address"] % 16 == 0 for m in drv.tensor_maps)
    clusters = [r["cluster"] for r in drv.launches]
    assert clusters == [(1, 1, 1), (1, 1, 1)]
    grids = sorted(r["grid"] for r in drv.launches)
    assert grids == [(1, 1, 4), (2, 1, 1)]  # Q·Kᵀ: one 64x128 tile per batch; dense: 200 rows in 2 tiles
    smem_opt_in = [v for (name, attr), v in drv.func_attributes.items()]
    assert len(smem_opt_in) == 2 and all(v > 200 * 1024 for v in smem_opt_in)


def test_a_hopper_launch_is_refused_where_a_gpu_would_refuse_it(exe) -> None:
    """A cubin for sm_90a does not load on an A100; a descriptor for a misaligned operand or
    an oversized box, a launch without the shared-memory opt-in and a cluster that does
    not divide the grid are driver errors."""
    with pytest.raises(PartitaError, match=r"built for sm_90a and does not run on Recording GPU \(sm_80\)"):
        recorded_run(exe.module, "main", _inputs(8), arch=(8, 0))
    device = CudaDevice(driver=RecordingDriver())
    good = operand_map(0x10000, 128, 256, 1, 128, 64, "", 2)
    assert device.encode_tensor_map(good).raw[:8] == struct.pack("<Q", 0x10000)
    with pytest.raises(CudaError, match="cuTensorMapEncodeTiled"):
        device.encode_tensor_map(good.at(0x10008))  # 8-byte aligned only
    with pytest.raises(CudaError, match="cuTensorMapEncodeTiled"):
        device.encode_tensor_map(operand_map(0x10000, 512, 256, 1, 512, 64, "", 2))  # box of 512 rows
    drv = device.drv
    drv.cuCtxSetCurrent("ctx")
    config = drv.CUlaunchConfig()
    config.blockDimX, config.gridDimX, config.sharedMemBytes = 256, 2, 200 * 1024
    cluster = drv.CUlaunchAttribute()
    cluster.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z = 2, 1, 1
    config.attrs, config.numAttrs = [cluster], 1
    kernel = ("function", "k")
    assert drv.cuLaunchKernelEx(config, kernel, 0, 0)[0] != 0  # 200 KiB without the opt-in
    drv.cuFuncSetAttribute(kernel, drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 200 * 1024)
    assert drv.cuLaunchKernelEx(config, kernel, 0, 0)[0] == 0
    config.gridDimX = 3
    assert drv.cuLaunchKernelEx(config, kernel, 0, 0)[0] != 0  # a grid of 3 CTAs in clusters of 2
    config.gridDimX, cluster.value.clusterDim.x = 16, 16
    assert drv.cuLaunchKernelEx(config, kernel, 0, 0)[0] != 0  # 16 CTAs: past the portable 8


@pytest.mark.parametrize(("change", "why"), [
    ({"address": 0x1008}, "16-byte aligned"),
    ({"strides": (520,)}, "multiples of 16"),
    ({"box": (64, 300)}, "1..256"),
    ({"box": (128, 64)}, "exceeds the 128-byte swizzle"),
    ({"dims": (0, 4)}, "1..2\\^32"),
    ({"dtype": "float64"}, "not a tensor-map type"),
])
def test_tensor_map_rules(change: dict, why: str) -> None:
    """The simulated device refuses the encodes the driver refuses, saying why."""
    request = TensorMapRequest("uint16", 0x1000, (256, 64), (512,), (64, 64), 128, (1, 1))
    assert request.why_invalid() is None
    bad = TensorMapRequest(**{**request.__dict__, **change})
    assert bad.why_invalid() is not None
    with pytest.raises(ValueError, match=why):
        simulated_tensor_map(bad)


def test_params_bytes_follow_the_probed_layout() -> None:
    """``sm90_arguments`` writes every field at the probe's offset, and the pieces pack to
    exactly ``sizeof(Params)`` with the descriptors 64-byte aligned."""
    layout = {"params_size": 640, "problem_shape": 0, "shape_offsets": (0, 4, 8, 12), "tma_a": 64, "tma_b": 256,
              "tma_desc": 0, "tx_bytes": 448, "tx_bytes_mk": 452, "tx_bytes_nk": 456, "tx_bytes_value": 32768,
              "tx_bytes_mk_value": 16384, "tx_bytes_nk_value": 16384, "alpha": 512, "beta": 516, "ptr_c": 552,
              "stride_c": 560, "ptr_d": 576, "stride_d": 584, "stride_offsets": (0, 8), "promotion": -1}
    pointers = {"a": 0x10000, "b": 0x20000, "bias": 0x30000, "residual": 0x50000, "out": 0x40000}
    args = sm90_arguments(layout, (128, 128, 64), (1, 1, 1), 2, (300, 128, 256, 3), pointers, "bias",
                          simulated_tensor_map)
    blob, offsets = pack_kernel_args(args.args)
    assert len(blob) == 640
    assert struct.unpack_from("<4i", blob, 0) == (300, 128, 256, 3)
    assert struct.unpack_from("<3I", blob, 448) == (32768, 16384, 16384)
    assert struct.unpack_from("<2f", blob, 512) == (1.0, 1.0)
    assert struct.unpack_from("<Q2q", blob, 552) == (0x30000, 0, 0)  # the bias row, broadcast
    assert struct.unpack_from("<Q2q", blob, 576) == (0x40000, 128, 300 * 128)
    assert struct.unpack_from("<Q", blob, 64)[0] == 0x10000 and struct.unpack_from("<Q", blob, 256)[0] == 0x20000
    assert [offsets[args.index[r]] for r in ("a", "b", "bias", "out")] == [64, 256, 552, 576]
    no_bias = sm90_arguments(layout, (128, 128, 64), (1, 1, 1), 2, (300, 128, 256, 3), pointers, "",
                             simulated_tensor_map)
    blob = pack_kernel_args(no_bias.args)[0]
    assert struct.unpack_from("<f", blob, 516)[0] == 0.0 and "bias" not in no_bias.index
    # a residual is C laid out as D (beta 1): its rows N apart, its batches M x N
    residual = sm90_arguments(layout, (128, 128, 64), (1, 1, 1), 2, (300, 128, 256, 3), pointers, "residual",
                              simulated_tensor_map)
    blob, offsets = pack_kernel_args(residual.args)
    assert struct.unpack_from("<2f", blob, 512) == (1.0, 1.0)
    assert struct.unpack_from("<Q2q", blob, 552) == (0x50000, 128, 300 * 128)
    assert offsets[residual.index["residual"]] == 552 and "bias" not in residual.index
    with pytest.raises(ValueError, match="a bias or a residual"):
        sm90_arguments(layout, (128, 128, 64), (1, 1, 1), 2, (300, 128, 256, 3), pointers, "shortcut",
                       simulated_tensor_map)
    # a bias beside the residual (the broadcast epilogue): C0 the residual, the bias where
    # the probe placed its pointer
    both = sm90_arguments({**layout, "ptr_bias": 600}, (128, 128, 64), (1, 1, 1), 2, (300, 128, 256, 3), pointers,
                          "residual", simulated_tensor_map)
    blob, offsets = pack_kernel_args(both.args)
    assert len(blob) == 640 and struct.unpack_from("<2f", blob, 512) == (1.0, 1.0)
    assert struct.unpack_from("<Q2q", blob, 552) == (0x50000, 128, 300 * 128)
    assert struct.unpack_from("<Q", blob, 600)[0] == 0x30000
    assert offsets[both.index["bias"]] == 600 and offsets[both.index["residual"]] == 552
    with pytest.raises(ValueError, match="bias beside a residual"):
        sm90_arguments({**layout, "ptr_bias": 600}, (128, 128, 64), (1, 1, 1), 2, (300, 128, 256, 3), pointers,
                       "bias", simulated_tensor_map)
    assert sm90_grid((300, 128, 256, 3), (128, 128, 64), (2, 1, 1)) == (4, 1, 3)  # 3 tiles, whole clusters
    # an FP8 main loop's promotion interval, where its probe placed it (and only there)
    fp8 = {**layout, "promotion": 460}
    with pytest.raises(ValueError, match="promotion interval"):
        sm90_arguments(fp8, (128, 128, 128), (1, 1, 1), 1, (300, 128, 256, 3), pointers, "", simulated_tensor_map)
    blob = pack_kernel_args(sm90_arguments(fp8, (128, 128, 128), (1, 1, 1), 1, (300, 128, 256, 3), pointers, "",
                                           simulated_tensor_map, promotion_interval=4).args)[0]
    assert struct.unpack_from("<4I", blob, 448) == (32768, 16384, 16384, 4)


# A projection large enough for the persistent cooperative kernel (128x256 tiles, two
# consumer warp groups, one CTA an SM walking the tiles): its M is known at compile time
LARGE = """
func.func @main(%x: tensor<{M}x512xf16>, %w: tensor<768x512xf16>, %b: tensor<768xf16>) -> tensor<{M}x768xf16> {{
  %0 = nn.dense %x, %w : (tensor<{M}x512xf16>, tensor<768x512xf16>) -> tensor<{M}x768xf16>
  %1 = nn.bias_add %0, %b : (tensor<{M}x768xf16>, tensor<768xf16>) -> tensor<{M}x768xf16>
  func.return %1 : tensor<{M}x768xf16>
}}
"""
LARGE_M = (300, 3000, 100000)
"""A few tiles; more than a wave of one CTA an SM; many waves."""


@pytest.fixture(scope="module")
def cooperative() -> dict[int, partita.Executable]:
    # one kernel type for all three (shapes are run-time arguments): one NVRTC program
    return {m: partita.compile(LARGE.format(M=m), TARGETS, partitioner="eager") for m in LARGE_M}


def _large_inputs(m: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((m, 512)) * 0.25).astype(np.float16),
            (rng.standard_normal((768, 512)) * 0.25).astype(np.float16), rng.standard_normal(768).astype(np.float16)]


def test_a_persistent_kernel_is_launched_with_its_tile_schedule(cooperative) -> None:
    """The cooperative kernel on a (recording) H100 of 132 SMs: 384 threads, a grid of one
    CTA per SM at most (fewer when there are fewer tiles), and the tile scheduler's fields
    in its Params, where its probe placed them (CUTLASS's own values: the host test)."""
    from partita.runtime.tma import persistent_schedule

    for m, tiles in ((3000, 24 * 3), (100000, 782 * 3)):
        (handle,) = cooperative[m].runtime.handles.values()
        assert handle.entry.config.persistent and handle.layout["threads"] == 384
        offsets = handle.layout["scheduler"]
        drv, launched, (out,) = recorded_run(cooperative[m].module, "main", _large_inputs(m))
        ((grid, block, args, _),) = launched.values()
        assert block == (384, 1, 1) and grid == (1, min(132, tiles), 1)  # along N: 3 tiles of N, M / 128 of M
        assert grid == persistent_schedule((m, 768, 512, 1), (128, 256, 64), (1, 1, 1), 132).grid
        blob = pack_kernel_args(args)[0]
        assert struct.unpack_from("<2i", blob, offsets[0]) == (132, 0)  # hw_info: the SMs, no cluster query
        assert struct.unpack_from("<Q", blob, offsets[6])[0] == tiles  # blocks_per_problem
        assert struct.unpack_from("<3I", blob, offsets[9]) == (-(-m // 128), 3, 1)  # tiles of M, N and batches
        assert drv.launches[-1]["cluster"] == (1, 1, 1)


def test_a_persistent_kernel_matches_numpy_on_the_simulated_device(cooperative) -> None:
    for m in (300, 3000):
        x, w, b = _large_inputs(m, seed=m)
        (got,) = Runtime(cooperative[m].module, SimulatedDevice()).run(x, w, b)
        want = x.astype(np.float32) @ w.astype(np.float32).T + b.astype(np.float32)
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=3e-2, atol=3e-2)


@pytest.mark.gpu
@pytest.mark.skipif(cuda_status() is not None, reason=f"needs a CUDA device ({cuda_status()})")
def test_a_persistent_kernel_on_the_gpu(cooperative) -> None:
    """On an H100/H200: the cooperative kernel against NumPy at a few tiles (a partial one
    among them), more than a wave of them, and many waves."""
    device = _hopper()
    for m in LARGE_M:
        x, w, b = _large_inputs(m, seed=m)
        (got,) = Runtime(cooperative[m].module, device).run(x, w, b)
        want = x.astype(np.float32) @ w.astype(np.float32).T + b.astype(np.float32)
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=3e-2, atol=3e-2)


@pytest.mark.gpu
@pytest.mark.skipif(cuda_status() is not None, reason=f"needs a CUDA device ({cuda_status()})")
def test_hopper_gemms_on_the_gpu(exe) -> None:
    """On an H100/H200: both Hopper kernels against NumPy (f16/bf16 inputs, f32 accumulation)."""
    device = _hopper()
    runtime = Runtime(exe.module, device)
    for m in (1, 77, 1000):
        args = _inputs(m, seed=m)
        for g, w in zip(runtime.run(*args), _expected(*args), strict=True):
            np.testing.assert_allclose(g.astype(np.float32), w, rtol=3e-2, atol=3e-2)


def test_graph_replays_and_repointed_operands_re_encode(exe) -> None:
    """A captured graph replays the cluster launches; pointing a launch's operand elsewhere
    (a zero-copy input) encodes its descriptor again, since a descriptor's address is opaque."""
    drv = RecordingDriver(arch=(9, 0))
    device = CudaDevice(driver=drv)
    runtime = Runtime(exe.module, device)
    args = _inputs(3)
    runtime.run(*args)
    runtime.run(*args)  # the signature's second run replays its graph
    assert drv.calls["cuGraphLaunch"] >= 1
    replayed = [r for r in drv.launches if r.get("graph")]
    assert len(replayed) == 2 and all(r["cluster"] == (1, 1, 1) for r in replayed)
    runtime.close()

    device.make_current()
    request = operand_map(0x10000, 128, 256, 1, 128, 64, "", 2)
    tensor_map = device.encode_tensor_map(request)
    launch = device.prepare_launch(type("F", (), {"handle": ("function", "k"), "name": "k"})(), (1, 1, 1),
                                   (256, 1, 1), 0, [("bytes64", bytes(64)), ("tensormap", tensor_map)], cluster=(1, 1, 1))
    encodes = drv.calls["cuTensorMapEncodeTiled"]
    launch.set_pointer(1, 0x50000)
    assert drv.calls["cuTensorMapEncodeTiled"] == encodes + 1 and drv.tensor_maps[-1]["address"] == 0x50000
    assert struct.unpack_from("<Q", launch.params, 64)[0] == 0x50000


# A decode step's row by a large weight: 32 output tiles of 128x128 for 132 SMs, unless
# each tile's K range is cut (CUTLASS's stream-K scheduler: split-K in 4, or its heuristic,
# which takes stream-K here: 132 units of 15 or 16 of the row's 2048 K tiles), as a tuning
# record found fastest
DECODE = """
func.func @main(%x: tensor<1x4096xf16>, %w: tensor<4096x4096xf16>, %b: tensor<4096xf16>) -> tensor<1x4096xf16> {
  %0 = nn.dense %x, %w : (tensor<1x4096xf16>, tensor<4096x4096xf16>) -> tensor<1x4096xf16>
  %1 = nn.bias_add %0, %b : (tensor<1x4096xf16>, tensor<4096xf16>) -> tensor<1x4096xf16>
  func.return %1 : tensor<1x4096xf16>
}
"""
DECOMPOSED = {"split_k": "128x128x64_1x1x1_cooperative_k4", "stream_k": "128x128x64_1x1x1_cooperative_streamk"}


@pytest.fixture(scope="module")
def decomposed(tmp_path_factory) -> dict[str, partita.Executable]:
    # the record a tuning on an H100 would leave; the compile times nothing (no GPU) and
    # pins its winner. A cold cache: about 15 s of NVRTC for the one kernel type of both
    key = json.dumps(["sm_90a", 1, dataclasses.asdict(KernelSpec.dense(1, 4096, 4096, "float16", "bias"))],
                     sort_keys=True)
    exes = {}
    cache = tmp_path_factory.mktemp("tuned")
    for mode, label in DECOMPOSED.items():
        (cache / TUNING_FILE).write_text(json.dumps({"version": 1, "problems": {
            key: {"kernel": label, "seconds": {label: 4e-6, "128x256x64_1x1x1_cooperative": 9e-6}}}}))
        exes[mode] = partita.compile(DECODE, TARGETS, partitioner="eager", cost="measure", cache_dir=cache)
    return exes


def _decode_inputs(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((1, 4096)) * 0.25).astype(np.float16),
            (rng.standard_normal((4096, 4096)) * 0.25).astype(np.float16), rng.standard_normal(4096).astype(np.float16)]


@pytest.mark.parametrize("mode", DECOMPOSED)
def test_a_decomposed_kernel_zeroes_its_barriers_every_run(decomposed, mode: str) -> None:
    """The pinned split-K or stream-K kernel (one kernel type): a full persistent grid (132
    CTAs), its Params holding the decomposition's counts and the workspace the plan placed,
    and before each launch a memset of the reduction barriers behind the partials, which the
    kernel leaves counted up. A graph replay zeroes them too (the memset is a node)."""
    (handle,) = decomposed[mode].runtime.handles.values()
    cfg = handle.entry.config
    assert (cfg.tile, cfg.decomposition, cfg.splits) == ((128, 128, 64), mode, 4 if mode == "split_k" else 1)
    (split,) = decomposed["split_k"].runtime.handles.values()
    assert handle.layout["stream_k"] and handle.entry.name == split.entry.name  # one kernel for both
    schedule = stream_k_schedule((1, 4096, 4096, 1), (128, 128, 64), (1, 1, 1), 132, cfg.splits)
    assert schedule.mode == mode
    drv = RecordingDriver(arch=(9, 0))
    runtime = Runtime(decomposed[mode].module, CudaDevice(driver=drv))
    args = _decode_inputs()
    runtime.run(*args)
    (bound,) = runtime._bound.values()
    zero, launch = bound.steps
    assert launch.grid == schedule.grid == (132, 1, 1) and launch.block == (384, 1, 1)
    blob = pack_kernel_args(launch.args)[0]
    at = dict(zip((name for name, _ in STREAM_K_PROBE.params), handle.layout["stream_k"]))
    workspace = struct.unpack_from("<Q", blob, at["reduction_workspace"])[0]
    assert workspace and struct.unpack_from("<Q", blob, at["workspace"])[0] == workspace
    # FastDivmod's divisor first: 4 slices of 64 K tiles, or 132 units of 15 (+1) K tiles
    assert struct.unpack_from("<i", blob, at["divmod_splits"])[0] == cfg.splits
    assert struct.unpack_from("<i", blob, at["divmod_k_tiles_per_sk_unit"])[0] == (16 if mode == "split_k" else 15)
    assert struct.unpack_from("<I", blob, at["sk_units"])[0] == (0 if mode == "split_k" else 132)
    assert (zero.ptr, zero.nbytes) == (workspace + schedule.reduction_bytes, schedule.barrier_bytes)
    for _ in range(2):  # the second run captured into a graph and launched, the third a replay
        ctypes.memmove(zero.ptr, b"\x07" * zero.nbytes, zero.nbytes)  # what a finished run leaves
        runtime.run(*args)
        assert drv.read(zero.ptr, zero.nbytes) == bytes(zero.nbytes)
    assert drv.calls["cuGraphLaunch"] == 2
    runtime.close()


def test_a_stream_k_kernel_is_sized_by_the_devices_sms(decomposed) -> None:
    """On an H100 PCIe (114 SMs) the stream-K decomposition is that device's: a grid of 114
    CTAs, 114 units, and the workspace the plan places sized for them (its barriers right
    behind its partials)."""
    schedule = stream_k_schedule((1, 4096, 4096, 1), (128, 128, 64), (1, 1, 1), 114)
    assert schedule.mode == "stream_k" and schedule.sk_units == 114
    drv = RecordingDriver(arch=(9, 0), sm_count=114)
    runtime = Runtime(decomposed["stream_k"].module, CudaDevice(driver=drv))
    runtime.run(*_decode_inputs())
    (bound,) = runtime._bound.values()
    zero, launch = bound.steps
    (handle,) = decomposed["stream_k"].runtime.handles.values()
    at = dict(zip((name for name, _ in STREAM_K_PROBE.params), handle.layout["stream_k"]))
    blob = pack_kernel_args(launch.args)[0]
    assert launch.grid == schedule.grid == (114, 1, 1) and struct.unpack_from("<I", blob, at["sk_units"])[0] == 114
    workspace = struct.unpack_from("<Q", blob, at["reduction_workspace"])[0]
    assert (zero.ptr - workspace, zero.nbytes) == (schedule.reduction_bytes, schedule.barrier_bytes)
    (size,) = bound.workspaces.values()
    assert size == schedule.workspace_bytes
    runtime.close()


@pytest.mark.parametrize("mode", DECOMPOSED)
def test_a_decomposed_kernel_matches_numpy_on_the_simulated_device(decomposed, mode: str) -> None:
    x, w, b = _decode_inputs(seed=1)
    (got,) = Runtime(decomposed[mode].module, SimulatedDevice()).run(x, w, b)
    want = x.astype(np.float32) @ w.astype(np.float32).T + b.astype(np.float32)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=3e-2, atol=3e-2)


@pytest.mark.gpu
@pytest.mark.skipif(cuda_status() is not None, reason=f"needs a CUDA device ({cuda_status()})")
@pytest.mark.parametrize("mode", DECOMPOSED)
def test_a_decomposed_kernel_on_the_gpu(decomposed, mode: str) -> None:
    """On an H100/H200: the split-K and stream-K kernels against NumPy, run after run (the
    third a graph replay: a barrier left counted up by the run before would hang it or
    corrupt its sums)."""
    device = _hopper()
    runtime = Runtime(decomposed[mode].module, device)
    for seed in (1, 2, 3):
        x, w, b = _decode_inputs(seed=seed)
        (got,) = runtime.run(x, w, b)
        want = x.astype(np.float32) @ w.astype(np.float32).T + b.astype(np.float32)
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=3e-2, atol=3e-2)
    runtime.close()


# a bf16 projection back into a residual stream, (x @ wᵀ) + r: 64 rows take the 64x128
# tile, the kernel type of MODEL's Q·Kᵀ (one instantiation serves both)
MODEL_RESIDUAL = """
func.func @main(%x: tensor<64x64xbf16>, %w: tensor<96x64xbf16>, %r: tensor<64x96xbf16>) -> tensor<64x96xbf16> {
  %0 = nn.dense %x, %w : (tensor<64x64xbf16>, tensor<96x64xbf16>) -> tensor<64x96xbf16>
  %1 = nn.add %r, %0 : (tensor<64x96xbf16>, tensor<64x96xbf16>) -> tensor<64x96xbf16>
  func.return %1 : tensor<64x96xbf16>
}
"""


def test_a_residual_is_the_hopper_epilogue_source(compiled) -> None:
    """A residual add after a dense is the Hopper kernel's source C (beta 1, laid out as D):
    one launch, no add of its own; its Params carry the residual's pointer where C goes."""
    exe = partita.compile(MODEL_RESIDUAL, TARGETS, partitioner="eager")
    records = [r for op in exe.module.ops if isinstance(op, byoc.BinaryOp)
               for r in op.attributes["kernels"].data.values()]
    assert [(r.data["kind"].data, r.data["spec"].data["epilogue"].data) for r in records] == \
        [("cutlass_sm90", "residual")]
    bf16 = numpy_dtype(bf16_type)
    rng = np.random.default_rng(5)
    x, w, r = ((rng.standard_normal(s) * 0.25).astype(bf16) for s in ((64, 64), (96, 64), (64, 96)))
    want = x.astype(np.float32) @ w.astype(np.float32).T + r.astype(np.float32)
    (got,) = Runtime(exe.module, SimulatedDevice()).run(x, w, r)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=3e-2, atol=3e-2)

    drv = RecordingDriver(arch=(9, 0))
    runtime = Runtime(exe.module, CudaDevice(driver=drv))
    runtime.run(x, w, r)
    ((bound, _),) = [(b, k) for k, b in runtime._bound.items()]
    (step,) = bound.steps
    layout = next(iter(runtime.plan.handles.values())).layout
    assert struct.unpack_from("<f", step.params, layout["beta"])[0] == 1.0
    residual = bound.tensor(runtime.plan.block.args[2]).ptr
    assert struct.unpack_from("<Q", step.params, layout["ptr_c"])[0] == residual
    runtime.close()


# a pre-norm transformer's projection back into the residual stream, r + (x wᵀ + b), at
# a run-time M: the kernel type of test_cutlass_sm90's bias_residual (one compile serves both)
MODEL_BIAS_RESIDUAL = """
func.func @main(%x: tensor<?x256xf16>, %w: tensor<128x256xf16>, %b: tensor<128xf16>, %r: tensor<?x128xf16>) -> tensor<?x128xf16> {
  %0 = nn.dense %x, %w : (tensor<?x256xf16>, tensor<128x256xf16>) -> tensor<?x128xf16>
  %1 = nn.add %0, %b : (tensor<?x128xf16>, tensor<128xf16>) -> tensor<?x128xf16>
  %2 = nn.add %r, %1 : (tensor<?x128xf16>, tensor<?x128xf16>) -> tensor<?x128xf16>
  func.return %2 : tensor<?x128xf16>
}
"""


@pytest.fixture(scope="module")
def bias_residual():
    exe = partita.compile(MODEL_BIAS_RESIDUAL, TARGETS, partitioner="eager")  # cold: about a minute of NVRTC
    rng = np.random.default_rng(11)
    m = 200
    args = [(rng.standard_normal((m, 256)) * 0.25).astype(np.float16),
            (rng.standard_normal((128, 256)) * 0.25).astype(np.float16),
            rng.standard_normal(128).astype(np.float16), rng.standard_normal((m, 128)).astype(np.float16)]
    x, w, b, r = (a.astype(np.float32) for a in args)
    return exe, args, (x @ w.T + b) + r


def test_a_bias_beside_the_residual_is_one_hopper_kernel(bias_residual) -> None:
    """``r + (x wᵀ + b)`` on sm_90a is one Hopper launch (the tensor-broadcast epilogue): no
    Sm80 kernel and no add of its own; its Params hold the residual where C0 goes and the
    bias at the probe's bias pointer; right on the simulated device."""
    exe, args, want = bias_residual
    records = [r for op in exe.module.ops if isinstance(op, byoc.BinaryOp)
               for r in op.attributes["kernels"].data.values()]
    assert [(r.data["kind"].data, r.data["spec"].data["epilogue"].data) for r in records] == \
        [("cutlass_sm90", "bias_residual")]
    (got,) = Runtime(exe.module, SimulatedDevice()).run(*args)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=3e-2, atol=3e-2)

    drv = RecordingDriver(arch=(9, 0))
    runtime = Runtime(exe.module, CudaDevice(driver=drv))
    runtime.run(*args)
    ((bound, _),) = [(b, k) for k, b in runtime._bound.items()]
    (step,) = bound.steps
    layout = next(iter(runtime.plan.handles.values())).layout
    block = runtime.plan.block.args
    assert struct.unpack_from("<f", step.params, layout["beta"])[0] == 1.0
    assert struct.unpack_from("<Q", step.params, layout["ptr_c"])[0] == bound.tensor(block[3]).ptr  # r
    assert struct.unpack_from("<Q", step.params, layout["ptr_bias"])[0] == bound.tensor(block[2]).ptr  # b
    assert drv.calls["cuLaunchKernel"] == 0  # cluster launches only (cuLaunchKernelEx)
    runtime.close()


@pytest.mark.gpu
@pytest.mark.skipif(cuda_status() is not None, reason=f"needs a CUDA device ({cuda_status()})")
def test_a_bias_beside_the_residual_on_the_gpu(bias_residual) -> None:
    exe, args, want = bias_residual
    device = _hopper()
    (got,) = Runtime(exe.module, device).run(*args)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=3e-2, atol=3e-2)


# an exported MatMul with its weight [K, N] (B N-major) and a bias, at a run-time M
MODEL_KN = """
func.func @main(%x: tensor<?x256xf16>, %w: tensor<256x96xf16>, %b: tensor<96xf16>) -> tensor<?x96xf16> {
  %0 = nn.matmul %x, %w : (tensor<?x256xf16>, tensor<256x96xf16>) -> tensor<?x96xf16>
  %1 = nn.add %0, %b : (tensor<?x96xf16>, tensor<96xf16>) -> tensor<?x96xf16>
  func.return %1 : tensor<?x96xf16>
}
"""


def test_n_major_weights_run_through_tma() -> None:
    """``x @ w[K,N] + b`` on sm_90a: a Hopper kernel whose B descriptor is N-major (box one
    128-byte row of N by a K tile), right on the simulated device, the descriptors valid on
    the recording driver."""
    exe = partita.compile(MODEL_KN, TARGETS, partitioner="eager")  # cold: about a minute of NVRTC
    (binary,) = [op for op in exe.module.ops if isinstance(op, byoc.BinaryOp)]
    (record,) = binary.attributes["kernels"].data.values()
    assert record.data["kind"].data == "cutlass_sm90" and record.data["spec"].data["layout"].data == "tt"
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((50, 256)) * 0.25).astype(np.float16)
    w = (rng.standard_normal((256, 96)) * 0.25).astype(np.float16)
    b = rng.standard_normal(96).astype(np.float16)
    want = x.astype(np.float32) @ w.astype(np.float32) + b.astype(np.float32)
    (got,) = Runtime(exe.module, SimulatedDevice()).run(x, w, b)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=3e-2, atol=3e-2)
    drv, _, _ = recorded_run(exe.module, "main", [x, w, b])
    maps = {m["dims"]: m for m in drv.tensor_maps}
    assert maps[(96, 256, 1)]["box"] == (64, 64, 1) and maps[(96, 256, 1)]["strides"] == (192, 96 * 256 * 2)
    assert maps[(256, 50, 1)]["box"] == (64, 128, 1)  # x: K-major, 128-row tiles (M is a run-time dim)


def test_a_compiled_model_file_carries_the_hopper_kernels(exe, tmp_path) -> None:
    """Saved and loaded (the file holds every cubin, digest-checked), the Hopper steps run
    as before: records, layouts and cubins travel without NVRTC or the cache."""
    path = tmp_path / "hopper.partita"
    exe.save(path)
    loaded = partita.load(path)
    args = _inputs(9, seed=9)
    for g, w in zip(loaded.load("simulated").run(*args), _expected(*args), strict=True):
        np.testing.assert_allclose(g.astype(np.float32), w, rtol=3e-2, atol=3e-2)


def test_a_params_size_the_cubin_contradicts_is_refused_at_load(exe, tmp_path) -> None:
    """A file whose probe layout says ``Params`` is larger than the kernel's parameter (a
    valid layout on its own) is refused when the plan is loaded, before any bind."""
    path = tmp_path / "hopper.partita"
    exe.save(path)
    edited = tmp_path / "edited.partita"
    edited.write_bytes(reseal(path.read_bytes(), lambda text: text.replace("params_size = 640 : i64",
                                                                           "params_size = 704 : i64")))
    loaded = partita.load(edited)
    with pytest.raises(PartitaError, match=r"'byoc.call_extern' op kernel '\w+' of @\w+: its record packs arguments "
                                           r"as \(offset, size\) \[\(\d+, 704\)\], but the kernel takes \[\(\d+, 640\)\]"):
        loaded.load(SimulatedDevice())


# An f32 model on an H100: its dense (bias + GELU, a run-time M) multiplies as TF32 on
# Hopper's wgmma (the cutlass target's default use_tf32), K tiles of 32 floats
MODEL_TF32 = """
func.func @main(%x: tensor<?x256xf32>, %w: tensor<128x256xf32>, %b: tensor<128xf32>) -> tensor<?x128xf32> {
  %0 = nn.dense %x, %w : (tensor<?x256xf32>, tensor<128x256xf32>) -> tensor<?x128xf32>
  %1 = nn.add %0, %b : (tensor<?x128xf32>, tensor<128xf32>) -> tensor<?x128xf32>
  %2 = nn.gelu %1 : (tensor<?x128xf32>) -> tensor<?x128xf32>
  func.return %2 : tensor<?x128xf32>
}
"""


@pytest.fixture(scope="module")
def tf32() -> partita.Executable:
    return partita.compile(MODEL_TF32, TARGETS, partitioner="eager")  # cold: about a minute of NVRTC


def _tf32_inputs(m: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * 0.25).astype(np.float32) for s in ((m, 256), (128, 256))] + \
        [rng.standard_normal(128).astype(np.float32)]


def _gelu_dense(x, w, b) -> np.ndarray:
    h = x @ w.T + b
    return 0.5 * h * (1 + np.vectorize(math.erf)(h / np.sqrt(2)))


def test_an_f32_dense_is_a_tf32_hopper_kernel(tf32) -> None:
    """On sm_90a an f32 dense is the TF32 Hopper kernel (its record names it), launched with
    TFLOAT32 descriptors of 32-float K tiles (CUTLASS's own, ``test_cutlass_sm90_host``), and
    its reference semantics match NumPy on the simulated device."""
    (binary,) = [op for op in tf32.module.ops if isinstance(op, byoc.BinaryOp) and "cutlass" in op.sym_name.data]
    assert "_tma" in binary.sym_name.data
    (record,) = binary.attributes["kernels"].data.values()
    assert record.data["kernel"].data == \
        "cutlass3x_sm90_tensorop_gemm_tf32_tf32_f32_128x128x32_1x1x1_tn_warpspecialized_bias_gelu"
    args = _tf32_inputs(200, 0)
    drv, launched, outputs = recorded_run(tf32.module, "main", args)
    assert drv.calls["cuTensorMapEncodeTiled"] == 2 and drv.calls["cuLaunchKernelEx"] == 1
    maps = {m["dims"]: m for m in drv.tensor_maps}
    x_map, w_map = maps[(256, 200, 1)], maps[(256, 128, 1)]
    assert x_map["dtype"] == w_map["dtype"] == 11  # TFLOAT32: the copy rounds to TF32
    assert x_map["box"] == w_map["box"] == (32, 128, 1) and x_map["strides"] == (1024, 200 * 1024)
    runtime = Runtime(tf32.module, SimulatedDevice())
    for m in (1, 130):
        args = _tf32_inputs(m, m)
        (got,) = runtime.run(*args)
        np.testing.assert_allclose(got, _gelu_dense(*args), rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.skipif(cuda_status() is not None, reason=f"needs a CUDA device ({cuda_status()})")
def test_a_tf32_hopper_kernel_on_the_gpu(tf32) -> None:
    """On an H100/H200: the TF32 kernel against NumPy's f32 (TF32's 10-bit mantissa)."""
    device = _hopper()
    runtime = Runtime(tf32.module, device)
    for m in (1, 77, 1000):
        args = _tf32_inputs(m, m)
        (got,) = runtime.run(*args)
        np.testing.assert_allclose(got, _gelu_dense(*args), rtol=1e-2, atol=1e-2)


# A ResNet bottleneck's pointwise convolution (1x1, unit strides, no padding), NHWC with a
# run-time batch: on sm_90a the Hopper dense kernel over its pixels, [N*H*W, C] x [K, C]^T
MODEL_POINTWISE = """
func.func @main(%x: tensor<?x14x14x256xf16>, %w: tensor<64x1x1x256xf16>, %b: tensor<64xf16>) -> tensor<?x14x14x64xf16> {
  %0 = nn.conv2d %x, %w {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<?x14x14x256xf16>, tensor<64x1x1x256xf16>) -> tensor<?x14x14x64xf16>
  %1 = nn.bias_add %0, %b {axis = 3 : i64} : (tensor<?x14x14x64xf16>, tensor<64xf16>) -> tensor<?x14x14x64xf16>
  %2 = nn.relu %1 : (tensor<?x14x14x64xf16>) -> tensor<?x14x14x64xf16>
  func.return %2 : tensor<?x14x14x64xf16>
}
"""


def test_a_pointwise_convolution_is_a_hopper_gemm() -> None:
    """The convolution's partition (its bias and ReLU in the epilogue) launches the Hopper
    dense kernel: the recording driver sees the pixels as the GEMM's rows and the filter
    as its [K, C] weight, and the simulated device matches NumPy at two batch sizes."""
    exe = partita.compile(MODEL_POINTWISE, TARGETS, partitioner="eager")  # cold: about a minute of NVRTC
    (binary,) = [op for op in exe.module.ops if isinstance(op, byoc.BinaryOp) and "cutlass" in op.sym_name.data]
    (record,) = binary.attributes["kernels"].data.values()
    assert "_tma" in binary.sym_name.data and record.data["kernel"].data == \
        "cutlass3x_sm90_tensorop_gemm_f16_f16_f32_128x128x64_1x1x1_tn_warpspecialized_bias_relu"
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((64, 1, 1, 256)) * 0.1).astype(np.float16)
    b = rng.standard_normal(64).astype(np.float16)
    x = (rng.standard_normal((3, 14, 14, 256)) * 0.5).astype(np.float16)
    drv, _, _ = recorded_run(exe.module, "main", [x, w, b])
    maps = {m["dims"]: m for m in drv.tensor_maps}
    assert set(maps) == {(256, 3 * 14 * 14, 1), (256, 64, 1)} and drv.calls["cuLaunchKernelEx"] == 1
    runtime = Runtime(exe.module, SimulatedDevice())
    for batch in (1, 3):
        x = (rng.standard_normal((batch, 14, 14, 256)) * 0.5).astype(np.float16)
        (got,) = runtime.run(x, w, b)
        want = np.maximum(x.astype(np.float32).reshape(-1, 256) @ w.astype(np.float32).reshape(64, 256).T
                          + b.astype(np.float32), 0)
        np.testing.assert_allclose(got.astype(np.float32).reshape(-1, 64), want, rtol=2e-2, atol=2e-2)


# A ResNet bottleneck's last convolution: pointwise, its batch norm folded into the bias,
# the shortcut added and the block's ReLU, relu((x wᵀ + b) + r): the Hopper kernel's tensor-
# broadcast epilogue with the ReLU after the add
MODEL_BLOCK_END = """
func.func @main(%x: tensor<2x7x7x128xf16>, %w: tensor<256x1x1x128xf16>, %b: tensor<256xf16>, %r: tensor<2x7x7x256xf16>) -> tensor<2x7x7x256xf16> {
  %0 = nn.conv2d %x, %w {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<2x7x7x128xf16>, tensor<256x1x1x128xf16>) -> tensor<2x7x7x256xf16>
  %1 = nn.bias_add %0, %b {axis = 3 : i64} : (tensor<2x7x7x256xf16>, tensor<256xf16>) -> tensor<2x7x7x256xf16>
  %2 = nn.add %1, %r : (tensor<2x7x7x256xf16>, tensor<2x7x7x256xf16>) -> tensor<2x7x7x256xf16>
  %3 = nn.relu %2 : (tensor<2x7x7x256xf16>) -> tensor<2x7x7x256xf16>
  func.return %3 : tensor<2x7x7x256xf16>
}
"""


def test_a_resnet_blocks_last_convolution_is_one_hopper_kernel() -> None:
    """``relu((conv1x1(x) + b) + r)`` is one Hopper launch (UnaryOp ReLU after the tensor-
    broadcast epilogue's add) whose result matches NumPy on the simulated device, negative
    sums clamped after the shortcut, not before."""
    exe = partita.compile(MODEL_BLOCK_END, TARGETS, partitioner="eager")  # cold: about a minute of NVRTC
    (binary,) = [op for op in exe.module.ops if isinstance(op, byoc.BinaryOp) and "cutlass" in op.sym_name.data]
    (record,) = binary.attributes["kernels"].data.values()
    assert record.data["kernel"].data.endswith("_tn_warpspecialized_bias_residual_relu")
    assert record.data["entry"].data.startswith("cutlass3x_sm90_tensorop_gemm_f16_64x128x64_1x1x1_tn_bias_residual_relu_")
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((2, 7, 7, 128)) * 0.5).astype(np.float16)
    w = (rng.standard_normal((256, 1, 1, 128)) * 0.1).astype(np.float16)
    b = rng.standard_normal(256).astype(np.float16)
    r = rng.standard_normal((2, 7, 7, 256)).astype(np.float16)
    (got,) = Runtime(exe.module, SimulatedDevice()).run(x, w, b, r)
    acc = x.astype(np.float32).reshape(-1, 128) @ w.astype(np.float32).reshape(256, 128).T + b.astype(np.float32)
    want = np.maximum(acc + r.astype(np.float32).reshape(-1, 256), 0)
    assert (acc < 0).any() and (want > 0).any()  # some sums change sign with the shortcut
    np.testing.assert_allclose(got.astype(np.float32).reshape(-1, 256), want, rtol=2e-2, atol=2e-2)
