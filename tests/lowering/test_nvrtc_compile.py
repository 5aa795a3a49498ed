"""NVRTC compilation of emitted CUTLASS modules (no GPU needed).

NVRTC runs are slow (~4-15 s each), so the kernels are grouped: one program per
arch (compiled in parallel): sm_90 holding every supported op x dtype x epilogue,
sm_80 every op x dtype with its widest epilogue (the epilogues are the same C++ on
either arch; the main loops are what ptxas builds per arch); one small program for
the special configurations, one deliberately broken program.
"""

import pytest

from partita.lowering import cubin, nvrtc
from partita.lowering.cutlass import (
    DTYPES,
    SUPPORTED_EPILOGUES,
    KernelSpec,
    choose_config,
    emit_module,
)
from partita.lowering.cutlass.kernels import FP8_DTYPES, INT8_DTYPES

ARCHS = ("sm_80", "sm_90")


WIDEST = {"dense": ("bias_gelu",), "batch_matmul": ("bias",), "conv2d": ("bias_relu",)}
"""The one epilogue per op the sm_80 program holds."""


def _all_kernels(sm: int):
    ks = []
    epilogues = SUPPORTED_EPILOGUES if sm == 90 else WIDEST
    for dt in DTYPES:
        if dt in INT8_DTYPES + FP8_DTYPES:  # dense TN GEMMs only: test_cutlass_int8.py and
            continue                        # tests/ops/test_ops_float8_gemm.py compile them
        t = {"float16": "h", "bfloat16": "b", "float32": "s"}[dt]
        for ep in epilogues["dense"]:
            if ep == "bias_residual" and dt != "float16":
                continue  # its own kernel template: one tensor-op type here, one SIMT type below
            ks.append((f"dense_{t}_{ep}",
                       KernelSpec.dense(None if ep == "bias_gelu" else 256, 512, 768, dt, ep)))
        for ep in epilogues["batch_matmul"]:
            ks.append((f"bmm_{t}_{ep}",
                       KernelSpec.batch_matmul(None if ep == "none" else 4, 128, 64, 64, dt, ep)))
        for ep in epilogues["conv2d"]:
            if "residual" in ep and (dt != "float16" or ep != "bias_residual_relu"):
                continue  # the broadcast convolution: one type here (ReLU or not is its thread op)
            ks.append((f"conv_{t}_{ep}",
                       KernelSpec.conv2d((None if ep == "bias" else 2, 16, 16, 32), (64, 3, 3, 32),
                                         strides=1, padding=1, dtype=dt, epilogue=ep)))
    kernels = [(n, s, choose_config(s, sm)) for n, s in ks]
    if sm == 90:  # exact f32 (no TF32): the broadcast epilogue over CUTLASS's SIMT main loop
        spec = KernelSpec.dense(None, 512, 768, "float32", "bias_residual")
        kernels.append(("dense_s_bias_residual_ffma", spec, choose_config(spec, sm, f32_math="ffma")))
    return kernels


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """Both arch programs, compiled in parallel into a fresh cache."""
    cache = tmp_path_factory.mktemp("cubins")
    sources = {arch: emit_module(_all_kernels(int(arch[3:]))) for arch in ARCHS}
    bins = nvrtc.compile_many([(sources[a], {"arch": a}) for a in ARCHS], jobs=2,
                              cache_dir=cache)
    assert len(bins) == len(ARCHS) and not any(b.cache_hit for b in bins)
    return cache, sources, dict(zip(ARCHS, bins))


@pytest.mark.parametrize("arch", ARCHS)
def test_every_op_dtype_epilogue_compiles(compiled, arch):
    _, sources, bins = compiled
    src, binary = sources[arch], bins[arch]
    assert not binary.cache_hit and binary.cubin[:4] == b"\x7fELF"
    syms = cubin.kernel_symbols(binary.cubin)
    assert {e.name for e in src.entries.values()} == syms  # one entry per kernel type
    for name, e in src.entries.items():
        params = cubin.kernel_params(binary.cubin, e.name)
        assert [p.size for p in params] == [p.size for p in e.params], name
        smem = cubin.read_int_global(binary.cubin, e.smem_symbol)
        # main loop: stages * (A tile + B tile) bytes, the epilogue shares it
        tm, tn, tk = e.config.threadblock
        elt = 2 if e.spec.dtype in ("float16", "bfloat16") else 4
        assert smem >= e.config.stages * (tm + tn) * tk * elt > 0, name


def test_warm_compile_is_a_cache_hit(compiled):
    cache, sources, bins = compiled
    for arch in ARCHS:
        again = nvrtc.compile_cuda(sources[arch], arch=arch, cache_dir=cache)
        assert again.cache_hit and again.cubin == bins[arch].cubin
        assert again.key == bins[arch].key
    # the key depends on arch and options
    assert bins["sm_80"].key != bins["sm_90"].key
    cached = sorted(p.name for p in cache.iterdir())
    # a ref per key and a cubin named by its digest; no temporary files left
    assert cached == sorted([f"{b.key}.ref" for b in bins.values()] + [f"{b.digest}.cubin" for b in bins.values()])


def test_dense_takes_every_dim_as_int(compiled):
    _, sources, bins = compiled
    for arch in ARCHS:
        params = cubin.kernel_params(bins[arch].cubin, sources[arch].entries["dense_h_bias_gelu"].name)
        # x, w, bias, out, M, N, K
        assert [(p.ordinal, p.offset, p.size) for p in params] == [
            (0, 0, 8), (1, 8, 8), (2, 16, 8), (3, 24, 8), (4, 32, 4), (5, 36, 4), (6, 40, 4)]
    static = cubin.kernel_params(bins["sm_90"].cubin, sources["sm_90"].entries["dense_h_bias"].name)
    assert [p.size for p in static] == [8, 8, 8, 8, 4, 4, 4]  # a static M is an argument too


def test_special_configs_compile(tmp_path):
    """Odd K (f16 on tensor cores at alignment 1, CUTLASS's 2-stage pipeline), 4-element
    alignment, serial split-k, shared types."""
    specs = {
        "f16_odd_k": KernelSpec.dense(64, 64, 99, "float16", "bias_relu"),
        "f16_align4": KernelSpec.dense(None, 36, 68, "float16", "bias"),
        "f16_splitk": KernelSpec.dense(64, 64, 8192, "float16", "bias_gelu"),
        "f16_splitk_again": KernelSpec.dense(64, 64, 4096, "float16", "bias_gelu"),
        "conv_c4": KernelSpec.conv2d((1, 9, 9, 4), (8, 3, 3, 4), strides=2, padding=(1, 1, 0, 0)),
    }
    ks = [(n, s, choose_config(s, 80)) for n, s in specs.items()]
    src = emit_module(ks)
    e = src.entries
    odd = e["f16_odd_k"].config
    assert (odd.opcode_class, odd.stages, odd.alignment_a, odd.alignment_b) == ("tensorop", 2, 1, 1)
    assert e["f16_splitk"].config.split_k > 1
    assert e["f16_splitk"].kernel_type == e["f16_splitk_again"].kernel_type
    assert e["f16_splitk"].name == e["f16_splitk_again"].name
    binary = nvrtc.compile_cuda(src, arch="sm_80", cache_dir=tmp_path)
    assert not binary.cache_hit
    assert {entry.name for entry in e.values()} == cubin.kernel_symbols(binary.cubin)
    ps = cubin.kernel_params(binary.cubin, e["f16_splitk"].name)
    assert [p.size for p in ps] == [8, 8, 8, 8, 8, 4, 4, 4]  # x, w, bias, out, workspace, M, N, K


def test_broken_kernel_raises_with_log(tmp_path):
    good, other = KernelSpec.dense(64, 64, 64), KernelSpec.dense(64, 64, 64, epilogue="bias")
    src = emit_module([("tvmgen_default_cutlass_main_0", good, choose_config(good, 80)),
                       ("tvmgen_default_cutlass_main_1", other, choose_config(other, 80))])
    lo, hi = src.entries["tvmgen_default_cutlass_main_1"].lines
    lines = src.code.split("\n")
    lines[hi - 3] += " this_is_not_cxx;"  # inside the second entry's body
    broken = type(src)(code="\n".join(lines), entries=src.entries, kernel_lines=src.kernel_lines)
    with pytest.raises(nvrtc.NvrtcError) as info:
        nvrtc.compile_cuda(broken, arch="sm_80", cache_dir=tmp_path)
    err = info.value
    assert "this_is_not_cxx" in err.log and "error" in err.log
    assert err.entries == ["tvmgen_default_cutlass_main_1"]
    assert "tvmgen_default_cutlass_main_1" in str(err) and err.log in str(err)
    assert not list(tmp_path.iterdir())  # nothing cached


def test_include_paths_come_from_wheels():
    paths = nvrtc.cuda_include_paths()
    assert any(p.endswith("cutlass_library/source/include") for p in paths)
    assert any(p.endswith("cu13/include") for p in paths)
    assert any(p.endswith("cu13/include/cccl") for p in paths)


def test_two_processes_compiling_the_same_key(tmp_path):
    """Concurrent cold compiles of one key both succeed, NVRTC runs once (the other waits
    for the key's lock and reads the cubin), and one cache file is left, no lock."""
    src = 'extern "C" __global__ void tiny(int* p, int n) { if (threadIdx.x < n) p[threadIdx.x] = n; }\n'
    a, b = nvrtc.compile_many([src, src], jobs=2, arch="sm_80", cache_dir=tmp_path)
    assert [a.cache_hit, b.cache_hit].count(False) == 1 and a.key == b.key
    assert a.digest == b.digest
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{a.key}.ref", f"{a.digest}.cubin"])
    assert cubin.kernel_symbols(a.cubin) == {"tiny"}
    assert [(p.offset, p.size) for p in cubin.kernel_params(a.cubin, "tiny")] == [(0, 8), (8, 4)]
    (c,) = nvrtc.compile_many([src], jobs=2, arch="sm_80", cache_dir=tmp_path)
    assert c.cache_hit


def test_a_compile_waits_for_the_process_compiling_its_key(tmp_path):
    """While another compiler holds ``<key>.lock``, a compile of that key waits, then takes
    the cubin the other stored instead of running NVRTC again."""
    import fcntl
    import threading

    src = 'extern "C" __global__ void waits(int* p) { p[threadIdx.x] = 7; }\n'
    key = nvrtc.cache_key(src, nvrtc.build_options("sm_80"), "sm_80")
    other = open(tmp_path / f"{key}.lock", "a+b")  # noqa: SIM115 - the other compiler's lock
    fcntl.flock(other.fileno(), fcntl.LOCK_EX)
    done: dict = {}
    waiter = threading.Thread(target=lambda: done.update(binary=nvrtc.compile_cuda(src, arch="sm_80",
                                                                                      cache_dir=tmp_path)))
    waiter.start()
    waiter.join(2.0)
    assert waiter.is_alive() and not done  # NVRTC alone takes a fraction of that
    theirs = nvrtc.compile_cuda(src, arch="sm_80", use_cache=False)
    nvrtc._cache_store(tmp_path, key, theirs.cubin)  # what the other compiler stores
    fcntl.flock(other.fileno(), fcntl.LOCK_UN)
    other.close()
    waiter.join(60)
    assert done["binary"].cache_hit and done["binary"].cubin == theirs.cubin


def test_gelu_epilogues_are_the_erf_form_and_the_tanh_approximation(compiled):
    """``bias_gelu`` evaluates erf (no tanh instruction), ``bias_gelu_tanh`` is
    CUTLASS's ``GELU_taylor``: the hardware tanh (``MUFU.TANH``) in its epilogue."""
    from support.sass import sass_by_function, sass_of  # tests/support/sass.py

    _, sources, bins = compiled
    functions = sass_by_function(sass_of(bins["sm_90"].cubin))

    def body(label: str) -> str:  # the entry and the runner it calls
        entry = sources["sm_90"].entries[label]
        return functions.get(entry.name, "") + functions.get(entry.kernel_type + "_run", "")

    for t in ("h", "b", "s"):
        assert "MUFU.TANH" in body(f"dense_{t}_bias_gelu_tanh"), t
        assert "MUFU.TANH" not in body(f"dense_{t}_bias_gelu"), t


def test_the_broadcast_epilogue_keeps_the_main_loop_and_reads_bias_and_residual(compiled):
    """``bias_residual`` (GemmWithFusedEpilogue): the same tensor-core main loop as the plain
    bias kernel (as many HMMA, the same cp.async loads), no spills, and 128-bit loads in
    its epilogue (the residual C and the bias vector); the SIMT variant multiplies with
    FFMA. Its entry takes x, w, bias, residual, out and the three dims. The broadcast
    convolution (``bias_residual_relu``) keeps its implicit GEMM's HMMA count and stores
    nothing to local memory from its main loop on."""
    import re
    from collections import Counter

    from support.sass import sass_by_function, sass_of

    _, sources, bins = compiled
    functions = sass_by_function(sass_of(bins["sm_90"].cubin))

    def mix(label: str) -> Counter:
        entry = sources["sm_90"].entries[label]
        body = functions.get(entry.name, "") + functions.get(entry.kernel_type + "_run", "")
        return Counter(re.findall(r"\b(HMMA|LDGSTS|FFMA|STL|LDL)\b|\b(LDG\.E)\.(?:LTC128B\.)?128\b", body))

    fused, bias = mix("dense_h_bias_residual"), mix("dense_h_bias")
    assert fused[("HMMA", "")] == bias[("HMMA", "")] > 0 and fused[("LDGSTS", "")] == bias[("LDGSTS", "")]
    assert not fused[("STL", "")] and not fused[("LDL", "")]
    assert fused[("", "LDG.E")] >= 2  # the residual's and the bias vector's 128-bit loads
    simt = mix("dense_s_bias_residual_ffma")
    assert simt[("FFMA", "")] > 0 and not simt[("HMMA", "")] and not simt[("STL", "")]
    conv, conv_relu = mix("conv_h_bias_residual_relu"), mix("conv_h_bias_relu")
    assert conv[("HMMA", "")] == conv_relu[("HMMA", "")] > 0
    # a convolution's runner builds its implicit GEMM's Params in local memory (STL) before
    # the main loop, the plain kernels' too: nothing is stored there from the loop on
    entry = sources["sm_90"].entries["conv_h_bias_residual_relu"]
    body = (functions.get(entry.name, "") + functions.get(entry.kernel_type + "_run", "")).splitlines()
    stores = [i for i, line in enumerate(body) if re.search(r"\bSTL\b", line)]
    assert max(stores, default=-1) < min(i for i, line in enumerate(body) if "HMMA" in line)
    for label in ("dense_h_bias_residual", "dense_s_bias_residual_ffma"):
        entry = sources["sm_90"].entries[label]
        assert [p.name for p in entry.params] == ["x", "w", "bias", "residual", "out", "M", "N", "K"]
        assert [p.size for p in cubin.kernel_params(bins["sm_90"].cubin, entry.name)] == [8] * 5 + [4] * 3
