"""cuBLAS partitions: cuBLASLt records from ``cublas-codegen``, the handle's descriptors
checked through a recording cuBLASLt that computes from them, and (GPU) the real thing."""

from __future__ import annotations

import ml_dtypes  # noqa: E402
import numpy as np
import pytest
from support.recording_driver import RecordingDriver
from support.recording_libs import RecordingCublasLt

import partita
from partita.dialects import make_context
from partita.ir import PartitaError, parse_module
from partita.runtime.cuda import CudaDevice, cuda_available
from partita.runtime.extern import kernel_handles
from partita.runtime.libraries.cublas import CublasLtHandle
from partita.runtime.plan import Runtime
from partita.runtime.reference import run

DT = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32}
TYPES = {"f16": "CUDA_R_16F", "bf16": "CUDA_R_16BF", "f32": "CUDA_R_32F"}


def _dense(dtype: str, epilogue: str) -> tuple[str, list[tuple[int, ...]]]:
    t = lambda s: f"tensor<{s}x{dtype}>"  # noqa: E731
    body = [f"%0 = nn.dense %x, %w : ({t('?x24')}, {t('40x24')}) -> {t('?x40')}"]
    last = "%0"
    args = [f"%x: {t('?x24')}", f"%w: {t('40x24')}"]
    shapes = [(5, 24), (40, 24)]
    if epilogue != "none":
        args.append(f"%b: {t('40')}")
        shapes.append((40,))
        body.append(f"%1 = nn.bias_add %0, %b : ({t('?x40')}, {t('40')}) -> {t('?x40')}")
        last = "%1"
    if epilogue in ("relu", "gelu"):
        attr = ' {approximate = "tanh"}' if epilogue == "gelu" else ""
        body.append(f"%2 = nn.{epilogue} %1{attr} : ({t('?x40')}) -> {t('?x40')}")
        last = "%2"
    text = (f"func.func @main({', '.join(args)}) -> {t('?x40')} {{\n  " + "\n  ".join(body)
            + f"\n  func.return {last} : {t('?x40')}\n}}\n")
    return text, shapes


BATCH_MATMUL = """
func.func @main(%a: tensor<3x{ka}x{dt}>, %b: tensor<3x{kb}x{dt}>) -> tensor<3x6x10x{dt}> {{
  %0 = nn.batch_matmul %a, %b {{transpose_a = {ta}, transpose_b = {tb}}} : (tensor<3x{ka}x{dt}>, tensor<3x{kb}x{dt}>) -> tensor<3x6x10x{dt}>
  func.return %0 : tensor<3x6x10x{dt}>
}}
"""

MATMUL_4D = """
func.func @main(%q: tensor<?x4x16x8xf32>, %k: tensor<?x4x8x16xf32>) -> tensor<?x4x16x16xf32> {
  %0 = nn.matmul %q, %k : (tensor<?x4x16x8xf32>, tensor<?x4x8x16xf32>) -> tensor<?x4x16x16xf32>
  func.return %0 : tensor<?x4x16x16xf32>
}
"""


def _compile(text: str):
    return partita.compile(text, ["cuda -arch=sm_90", "cublas", "llvm"], partitioner="eager")


def _recorded_runtime(exe, graphs: bool = False) -> tuple[Runtime, RecordingCublasLt, RecordingDriver]:
    """The launch plan on a recording CUDA device with a recording cuBLASLt: the library
    computes every GEMM from its descriptors in the plan's device memory."""
    drv = RecordingDriver()
    lib = RecordingCublasLt(drv)
    return Runtime(exe.module, CudaDevice(driver=drv), graphs=graphs, libraries={"cublas": lib}), lib, drv


def _run_recorded(exe, args):
    runtime, lib, drv = _recorded_runtime(exe)
    return runtime.run(*args), lib, runtime, drv


def _args(shapes, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * 0.5).astype(DT[dtype]) for s in shapes]


def _check(out, ref, dtype):
    # f32 runs COMPUTE_32F_FAST_TF32: inputs rounded to 10 mantissa bits, as on a GPU.
    tol = {"f16": 2e-2, "bf16": 8e-2}.get(dtype, 1e-2)
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(ref, np.float32), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("epilogue", ["none", "bias", "relu", "gelu"])
def test_dense_descriptors_and_result(dtype: str, epilogue: str) -> None:
    text, shapes = _dense(dtype, epilogue)
    exe = _compile(text)
    (handle,) = [h for h in kernel_handles(exe.module).values() if isinstance(h, CublasLtHandle)]
    r = handle.record
    assert (r.op, r.m, r.n, r.k, r.batch) == ("dense", -1, 40, 24, 1)
    assert r.epilogue == {"none": "DEFAULT", "bias": "BIAS", "relu": "RELU_BIAS", "gelu": "GELU_BIAS"}[epilogue]
    assert r.compute_type == ("COMPUTE_32F_FAST_TF32" if dtype == "f32" else "COMPUTE_32F")
    args = _args(shapes, dtype)
    (out,), lib, runtime, drv = _run_recorded(exe, args)
    _check(out, run(parse_module(text, make_context()), *args)[0], dtype)
    assert [launch["name"] for launch in drv.launches] == ["cublasLtMatmul"]  # no kernel, no host step
    (_, desc, a, b, d, pref) = next(c for c in lib.calls if c[0] == "heuristic")
    # Dᵀ(40x5) = op(A = W stored [40, 24] -> col-major 24x40, T) · (B = X, col-major 24x5, N)
    assert desc.attrs["TRANSA"] == 1 and desc.attrs["TRANSB"] == 0
    assert (a.rows, a.cols, a.ld) == (24, 40, 24)
    assert (b.rows, b.cols, b.ld) == (24, 5, 24)
    assert (d.rows, d.cols, d.ld) == (40, 5, 40)
    assert a.type == b.type == d.type == lib.CudaDataType[TYPES[dtype]]
    assert desc.compute_type.name == r.compute_type and desc.scale_type.name == "CUDA_R_32F"
    assert lib.Epilogue(desc.attrs["EPILOGUE"]).name == r.epilogue
    assert pref["MAX_WORKSPACE_BYTES"] == 32 << 20
    (_, *_, workspace, ws_size, stream) = next(c for c in lib.calls if c[0] == "matmul")
    # The workspace is the plan's (in its arena), the call on the runtime's stream.
    assert ws_size == lib.algo_workspace and lib.memory.buffer(workspace + ws_size - 1)
    assert stream == runtime.stream


@pytest.mark.parametrize("graphs", [False, True])
def test_plans_are_made_once_per_shape_signature(graphs: bool) -> None:
    text, shapes = _dense("f32", "bias")
    exe = _compile(text)
    runtime, lib, drv = _recorded_runtime(exe, graphs=graphs)
    assert [c[0] for c in lib.calls].count("heuristic") == 0  # M is dynamic: planned at the first bind
    for m in (5, 5, 7):
        args = _args([(m, 24), *shapes[1:]], "f32", seed=m)
        _check(runtime.run(*args)[0], run(parse_module(text, make_context()), *args)[0], "f32")
    assert [c[0] for c in lib.calls].count("heuristic") == 2
    # Eager: one call per run. Graphs: the first run of a shape is eager (the warm-up),
    # then one call is captured; the second run of that shape replays it.
    assert [c[0] for c in lib.calls].count("matmul") == (4 if graphs else 3)
    assert lib.products == 3
    assert drv.calls["cuGraphLaunch"] == (1 if graphs else 0)


def test_a_static_plan_is_made_at_load() -> None:
    exe = _compile(BATCH_MATMUL.format(ka="6x7", kb="10x7", dt="f16", ta="false", tb="true"))
    runtime, lib, drv = _recorded_runtime(exe)
    assert [c[0] for c in lib.calls] == ["create", "heuristic"]  # before any run
    assert "1 library call(s) (cublas)" in runtime.describe()


@pytest.mark.parametrize("ta,tb", [(False, True), (False, False), (True, True), (True, False)])
def test_batch_matmul_transposes(ta: bool, tb: bool) -> None:
    ka = "7x6" if ta else "6x7"
    kb = "10x7" if tb else "7x10"
    text = BATCH_MATMUL.format(ka=ka, kb=kb, dt="f32", ta=str(ta).lower(), tb=str(tb).lower())
    exe = _compile(text)
    (handle,) = kernel_handles(exe.module).values()
    assert (handle.record.transa, handle.record.transb) == ("T" if tb else "N", "T" if ta else "N")
    args = _args([tuple(map(int, ("3x" + ka).split("x"))), tuple(map(int, ("3x" + kb).split("x")))], "f32")
    (out,), lib, _, _ = _run_recorded(exe, args)
    _check(out, run(parse_module(text, make_context()), *args)[0], "f32")
    (_, _desc, a, b, d, _) = next(c for c in lib.calls if c[0] == "heuristic")
    assert d.attrs == {"BATCH_COUNT": 3, "STRIDED_BATCH_OFFSET": 60}
    assert a.attrs["STRIDED_BATCH_OFFSET"] == 70 and b.attrs["STRIDED_BATCH_OFFSET"] == 42
    assert (a.ld, b.ld, d.ld) == ((7 if tb else 10), (6 if ta else 7), 10)


def test_batched_matmul_with_a_dynamic_batch() -> None:
    exe = _compile(MATMUL_4D)
    (handle,) = kernel_handles(exe.module).values()
    assert (handle.record.op, handle.record.batch, handle.record.m) == ("matmul", -1, 16)
    args = _args([(2, 4, 16, 8), (2, 4, 8, 16)], "f32")
    (out,), lib, _, _ = _run_recorded(exe, args)
    _check(out, run(parse_module(MATMUL_4D, make_context()), *args)[0], "f32")
    (_, _, _a, _b, d, _) = next(c for c in lib.calls if c[0] == "heuristic")
    assert d.attrs["BATCH_COUNT"] == 8


def test_erf_gelu_stays_outside_the_cublas_partition() -> None:
    text, _ = _dense("f32", "gelu")
    exe = _compile(text.replace('{approximate = "tanh"}', ""))
    handles = kernel_handles(exe.module).values()
    (handle,) = [h for h in handles if isinstance(h, CublasLtHandle)]
    assert handle.record.epilogue == "BIAS"
    assert [h.kind for h in handles if h is not handle] == ["fused"]  # the erf GELU: a native kernel


def test_without_a_device_the_reference_body_runs() -> None:
    text, shapes = _dense("f32", "relu")
    exe = _compile(text)
    args = _args(shapes, "f32")
    runtime = Runtime(exe.module, "simulated")  # no library is loaded
    (out,) = runtime.run(*args)
    _check(out, run(parse_module(text, make_context()), *args)[0], "f32")
    assert runtime.device.counts["launch"] == 1 and not runtime.plan.libraries


def test_the_real_binding_has_every_name_the_handle_uses() -> None:
    pytest.importorskip("nvmath", reason="nvmath-python (the cublas extra) is not installed")
    from partita.runtime.libraries.cublas import CublasLtBinding

    lib = CublasLtBinding()
    for enum, names in (
        ("Epilogue", ["DEFAULT", "BIAS", "RELU_BIAS", "GELU_BIAS", "RELU", "GELU"]),
        ("MatmulDescAttribute", ["TRANSA", "TRANSB", "EPILOGUE", "BIAS_POINTER", "BIAS_DATA_TYPE"]),
        ("MatrixLayoutAttribute", ["BATCH_COUNT", "STRIDED_BATCH_OFFSET"]),
        ("MatmulPreferenceAttribute", ["MAX_WORKSPACE_BYTES"]),
        ("CudaDataType", ["CUDA_R_16F", "CUDA_R_16BF", "CUDA_R_32F"]),
        ("ComputeType", ["COMPUTE_32F", "COMPUTE_32F_FAST_TF32"]),
        ("Operation", ["N", "T"]),
    ):
        for name in names:
            assert hasattr(getattr(lib, enum), name), f"{enum}.{name}"
    assert lib.matmul_heuristic_result_dtype == RecordingCublasLt.matmul_heuristic_result_dtype


def test_a_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "nvmath", None)  # import nvmath -> ImportError
    from partita.runtime.libraries.cublas import CublasLtBinding

    with pytest.raises(PartitaError, match=r"pip install 'partita\[cublas\]'"):
        CublasLtBinding()


def _gpu_cases() -> list[tuple[str, list, str]]:
    cases = [(*_dense(dtype, epilogue), dtype) for dtype in ("f16", "bf16", "f32")
             for epilogue in ("none", "bias", "relu", "gelu")]
    for ta, tb in ((False, True), (True, False)):
        ka, kb = ("7x6" if ta else "6x7"), ("10x7" if tb else "7x10")
        text = BATCH_MATMUL.format(ka=ka, kb=kb, dt="f16", ta=str(ta).lower(), tb=str(tb).lower())
        cases.append((text, [tuple(map(int, ("3x" + ka).split("x"))), tuple(map(int, ("3x" + kb).split("x")))], "f16"))
    cases.append((MATMUL_4D, [(2, 4, 16, 8), (2, 4, 8, 16)], "f32"))
    return cases


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("case", range(len(_gpu_cases())))
def test_on_a_gpu_cublaslt_matches_numpy(case: int) -> None:  # pragma: no cover
    pytest.importorskip("nvmath", reason="the cublas extra is not installed")
    text, shapes, dtype = _gpu_cases()[case]
    exe = _compile(text)
    args = _args(shapes, dtype)
    runtime = exe.load("cuda")
    (out,) = runtime.run(*args)
    _check(out, run(parse_module(text, make_context()), *args)[0], dtype)
    assert "1 library call(s) (cublas)" in runtime.describe() and not runtime.plan.host_ops
