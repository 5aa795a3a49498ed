"""``tune-cutlass-kernels``: each CUTLASS partition's candidate kernels built with real
NVRTC and timed through their launch plans on a CUDA device driven by the recording
driver (whose stand-in clock gives each kernel the time the test says), the fastest
pinned (``cutlass.kernel``) and built by ``cutlass-codegen``, the times kept in the
tuning record so that the next compile times nothing."""

from __future__ import annotations

import dataclasses
import json

import pytest
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py
from xdsl.dialects.builtin import StringAttr

from partita.dialects import byoc, make_context
from partita.ir import PartitaError, parse_module
from partita.lowering import nvrtc
from partita.lowering.cutlass import KernelSpec, choose_config
from partita.lowering.cutlass.codegen import CutlassCodegen, cutlass_functions, kernel_candidates, partition_kernel
from partita.lowering.cutlass.emitter import entry_name
from partita.lowering.cutlass.options import CutlassOptions
from partita.lowering.cutlass.tuning import KERNEL_ATTR, SM80_CANDIDATES, SM90_CANDIDATES, sm90_label
from partita.lowering.functions import outline_compiler_partitions
from partita.runtime.cuda import CudaDevice
from partita.transforms.tune_cutlass_kernels import TUNING_FILE, TuneCutlassKernels


def _dense(m: int, n: int, k: int, dtype: str = "f16") -> str:
    x, w, y = f"tensor<{m}x{k}x{dtype}>", f"tensor<{n}x{k}x{dtype}>", f"tensor<{m}x{n}x{dtype}>"
    return f"""
func.func @main(%x: {x}, %w: {w}) -> {y} {{
  %0 = byoc.partition(%x, %w) {{byoc.compiler = "cutlass", byoc.global_symbol = "dense_0"}} ({{
  ^bb0(%a: {x}, %b: {w}):
    %1 = nn.dense %a, %b : ({x}, {w}) -> {y}
    byoc.yield %1 : {y}
  }}) : ({x}, {w}) -> {y}
  func.return %0 : {y}
}}"""


DENSE = _dense(256, 1024, 512)
SPEC = KernelSpec.dense(256, 1024, 512, "float16")


def _module(text: str = DENSE):
    return parse_module(text, make_context(), "tune.mlir")


def _kernel(text: str = DENSE):
    module = _module(text)
    outline_compiler_partitions(module, "cutlass")
    (function,) = cutlass_functions(module)
    return partition_kernel(function)


def _entry(label: str) -> str:
    """The entry the recording driver sees launched for the candidate ``label``."""
    return entry_name(SPEC, choose_config(SPEC, 90, kernel=label))


def test_candidates_are_the_tables_choice_then_the_others_the_arch_holds() -> None:
    kernel = _kernel()
    labels = kernel_candidates(kernel, CutlassOptions(sm=90), hopper=False)
    assert labels[0] == "128x128x32_2x2x1_3"  # choose_config's tile for a big f16 problem
    assert len(labels) == len(set(labels))
    # 128x128x64 in 4 stages stages 128 KiB: past the 99 KiB of an sm_86 block
    on_86 = kernel_candidates(kernel, CutlassOptions(sm=86), hopper=False)
    assert "128x128x64_2x2x1_4" in labels and "128x128x64_2x2x1_4" not in on_86 and on_86[0] == labels[0]
    # 16 128x128 tiles (64 of 64x64) fill less than a wave: those two tiles split 2 and 4 ways
    # too (8 would leave a slice one 32-deep K tile of 512)
    splits = ["128x128x32_2x2x1_3_k2", "128x128x32_2x2x1_3_k4", "64x64x32_2x2x1_3_k2", "64x64x32_2x2x1_3_k4"]
    assert labels[len(SM80_CANDIDATES):] == splits
    # sm_90a: the Hopper kernels, the table's persistent 128x256 first, then 2-CTA clusters and the
    # rest, then the Sm80 ones
    hopper = kernel_candidates(kernel, CutlassOptions(sm=90), hopper=True)
    assert hopper[0] == "128x256x64_1x1x1_cooperative" and "128x256x64_2x1x1_cooperative" in hopper
    # and, the 16 tiles filling less than a wave, the persistent 128x128 and 128x256 tiles
    # split 2 ways (4 would leave a slice one 64-deep K tile of 512)
    hopper_splits = ["128x128x64_1x1x1_cooperative_k2", "128x256x64_1x1x1_cooperative_k2"]
    assert hopper == [sm90_label(*c) for c in SM90_CANDIDATES] + hopper_splits + labels
    # f32 (TF32 by default) and exact f32 have one kernel each: nothing to time
    assert kernel_candidates(_kernel(_dense(256, 1024, 512, "f32")), CutlassOptions(sm=90), hopper=False) == []
    # a decode step's row: the table's 64x64 tile first, split 2, 4 and 8 ways (K = 4096 keeps
    # 4 K tiles a slice at 8), the 64-key tile of 512 only 2 and 4 ways
    one_row = kernel_candidates(_kernel(_dense(1, 4096, 4096)), CutlassOptions(sm=90), hopper=False)
    assert one_row[0] == "64x64x32_2x2x1_3" and one_row[-3:] == [f"64x64x32_2x2x1_3_k{s}" for s in (2, 4, 8)]
    # on sm_90a the table's choice for the row is the 128x128 persistent kernel in CUTLASS's
    # stream-K heuristic; then the others, and the persistent tiles cut along K: split 2, 4,
    # 8 ways, and stream-K (a partial wave of tiles, more than 8 K tiles each)
    hopper_row = kernel_candidates(_kernel(_dense(1, 4096, 4096)), CutlassOptions(sm=90), hopper=True)
    assert hopper_row[0] == "128x128x64_1x1x1_cooperative_streamk" and "64x128x64_1x1x1_ws" in hopper_row
    assert [label for label in hopper_row if "cooperative_" in label] == [hopper_row[0]] + [
        f"{tile}_1x1x1_cooperative_{cut}" for tile in ("128x128x64", "128x256x64") for cut in ("k2", "k4", "k8", "streamk")
        if f"{tile}_{cut}" != "128x128x64_streamk"]
    short_k = kernel_candidates(_kernel(_dense(1, 4096, 512)), CutlassOptions(sm=90), hopper=False)
    assert [label for label in short_k if "_k" in label] == ["64x64x32_2x2x1_3_k2", "64x64x32_2x2x1_3_k4"]


def test_the_fastest_candidate_is_pinned_built_and_recorded(kernel_cache, tmp_path, monkeypatch) -> None:
    labels = kernel_candidates(_kernel(), CutlassOptions(sm=90), hopper=False)
    fastest = "64x128x32_2x2x1_4"
    times = {_entry(label): 40.0 + i for i, label in enumerate(labels)}
    times[_entry(fastest)] = 7.0
    drv = RecordingDriver(kernel_us=times)
    device = CudaDevice(driver=drv)
    module = _module()
    record = tmp_path / "tuning.json"
    tune = TuneCutlassKernels(sm=90, cache_dir=str(kernel_cache), record=str(record), measure_device=device)
    tune.apply(make_context(), module)
    (function,) = cutlass_functions(module)
    assert function.attributes[KERNEL_ATTR] == StringAttr(fastest)
    ((choice,),) = tune.reports
    assert choice.function == "dense_0" and choice.kernel == fastest and choice.measured
    assert choice.seconds[fastest] == pytest.approx(7e-6) and len(choice.seconds) == len(labels)
    # every candidate ran (warm-up and timed runs, bursts of 8 launches)
    assert {launch["name"] for launch in drv.launches} == set(times)
    # cutlass-codegen builds the pinned kernel
    CutlassCodegen(sm=90, cache_dir=str(kernel_cache)).apply(make_context(), module)
    (binary,) = [op for op in module.walk() if isinstance(op, byoc.BinaryOp)]
    assert binary.attributes["kernels"].data["dense_0"].data["entry"].data == _entry(fastest)
    (problem,) = json.loads(record.read_text())["problems"].values()
    assert problem["kernel"] == fastest and set(problem["seconds"]) == set(labels)

    # The next compile of the problem (any model) reads the record: nothing compiled or run.
    def no_nvrtc(*args, **kwargs):
        raise AssertionError("a tuned problem was compiled again")

    monkeypatch.setattr(nvrtc, "_nvrtc_compile", no_nvrtc)
    drv = RecordingDriver(kernel_us={name: 1.0 for name in times})
    module = _module()
    tune = TuneCutlassKernels(sm=90, cache_dir=str(kernel_cache), record=str(record),
                              measure_device=CudaDevice(driver=drv))
    tune.apply(make_context(), module)
    assert drv.launches == [] and not tune.reports[0][0].measured
    assert cutlass_functions(module)[0].attributes[KERNEL_ATTR] == StringAttr(fastest)
    # measure=false pins what the record holds, and nothing where it holds nothing
    module = _module()
    TuneCutlassKernels(sm=90, record=str(record), measure=False).apply(make_context(), module)
    assert cutlass_functions(module)[0].attributes[KERNEL_ATTR] == StringAttr(fastest)
    module = _module()
    empty = tmp_path / "empty"
    TuneCutlassKernels(sm=90, cache_dir=str(empty), measure=False).apply(make_context(), module)
    assert KERNEL_ATTR not in cutlass_functions(module)[0].attributes and not (empty / TUNING_FILE).exists()


def test_a_candidate_that_fails_to_build_is_left_out(tmp_path, monkeypatch) -> None:
    """NVRTC refusing one candidate leaves it unmeasured (null in the record), and the
    fastest of the rest is pinned; a kernel pinned by hand is kept untimed. (A private
    cubin cache: the refused kernel must reach NVRTC.)"""
    compile_ = nvrtc._nvrtc_compile

    def refuse_wide(source, name, options):
        if "GemmShape<128, 256, 32>" in source:
            return None, "error: injected for the test"
        return compile_(source, name, options)

    monkeypatch.setattr(nvrtc, "_nvrtc_compile", refuse_wide)
    batches = []
    compile_many = nvrtc.compile_many

    def count(sources, **kwargs):
        batches.append(len(sources))
        return compile_many(sources, **kwargs)

    monkeypatch.setattr(nvrtc, "compile_many", count)
    labels = kernel_candidates(_kernel(), CutlassOptions(sm=90), hopper=False)
    times = {_entry(label): 30.0 for label in labels}
    times[_entry("128x256x32_2x4x1_3")] = 1.0  # would win, if it built
    times[_entry("128x64x32_2x2x1_3")] = 9.0
    module = _module()
    tune = TuneCutlassKernels(sm=90, cache_dir=str(tmp_path),
                              measure_device=CudaDevice(driver=RecordingDriver(kernel_us=times)))
    tune.apply(make_context(), module)
    ((choice,),) = tune.reports
    assert choice.kernel == "128x64x32_2x2x1_3" and choice.seconds["128x256x32_2x4x1_3"] is None
    # every candidate compiled in one batch of NVRTC programs, side by side (one a configuration)
    assert batches[0] == len(labels)

    module = _module(DENSE.replace('byoc.global_symbol = "dense_0"',
                                   'byoc.global_symbol = "dense_0", cutlass.kernel = "64x64x32_2x2x1_3"'))
    tune = TuneCutlassKernels(sm=90, cache_dir=str(tmp_path / "other"),
                              measure_device=CudaDevice(driver=RecordingDriver()))
    tune.apply(make_context(), module)
    assert tune.reports == [[]]
    assert cutlass_functions(module)[0].attributes[KERNEL_ATTR] == StringAttr("64x64x32_2x2x1_3")


def test_options_are_checked_and_timing_needs_a_device(tmp_path, monkeypatch) -> None:
    from partita.transforms.collage import measure

    with pytest.raises(PartitaError, match="dynamic-dim must be >= 1"):
        TuneCutlassKernels(dynamic_dim=0, cache_dir=str(tmp_path)).apply(make_context(), _module())
    with pytest.raises(PartitaError, match="option 'sm' of pass 'tune-cutlass-kernels' takes a compute capability"):
        TuneCutlassKernels(sm="ampere", cache_dir=str(tmp_path)).apply(make_context(), _module())
    monkeypatch.setattr(measure, "cuda_available", lambda: False)
    with pytest.raises(PartitaError, match="timing kernels needs a CUDA device and none is available; measure=false"):
        TuneCutlassKernels(sm=90, cache_dir=str(tmp_path)).apply(make_context(), _module())


def test_compile_tunes_cutlass_kernels_when_it_measures() -> None:
    from partita.driver import build_pipeline
    from partita.target import CompilationConfig

    config = CompilationConfig.parse(["cuda -arch=sm_90a", "cutlass", "llvm"])
    for cost, tuned in (("measure", True), ("roofline", False)):
        model = _module("""
func.func @main(%x: tensor<256x512xf16>, %w: tensor<1024x512xf16>) -> tensor<256x1024xf16> {
  %0 = nn.dense %x, %w : (tensor<256x512xf16>, tensor<1024x512xf16>) -> tensor<256x1024xf16>
  func.return %0 : tensor<256x1024xf16>
}""")
        steps = build_pipeline(model, config, partitioner="collage", cost=cost, device="h100", max_depth=3,
                               cache_dir=None, layout="auto")
        codegen = steps.index("cutlass-codegen{sm=90a}")
        assert ("tune-cutlass-kernels{sm=90a}" in steps) == tuned
        if tuned:
            assert steps.index("tune-cutlass-kernels{sm=90a}") == codegen - 1


def test_a_pinned_split_k_kernel_and_an_sm80_kernel_on_sm90a(kernel_cache) -> None:
    """A decode step's row pinned to 4 split-K slices builds the serial split-K kernel (its
    semaphore workspace a parameter); on sm_90a a problem the Hopper kernels take still
    builds the Sm80 kernel its pin names (what tuning found faster), for the arch."""
    for sm, tag in ((90, "cutlass_sm90"), ("90a", "cutlass_sm90a")):
        module = _module(_dense(1, 4096, 4096).replace('byoc.global_symbol = "dense_0"',
                                                       'byoc.global_symbol = "dense_0", cutlass.kernel = '
                                                       '"64x64x32_2x2x1_3_k4"'))
        CutlassCodegen(sm=sm, cache_dir=str(kernel_cache)).apply(make_context(), module)
        (binary,) = [op for op in module.walk() if isinstance(op, byoc.BinaryOp)]
        assert binary.sym_name.data == tag  # no "_tma": not a CUTLASS 3 kernel
        record = binary.attributes["kernels"].data["dense_0"].data
        spec = KernelSpec.dense(1, 4096, 4096, "float16")
        assert record["entry"].data == entry_name(spec, choose_config(spec, 90, kernel="64x64x32_2x2x1_3_k4"))
        assert "workspace:ptr:8" in [p.data for p in record["params"].data]
    with pytest.raises(PartitaError, match="splits K, which only a dense product of static M"):
        module = _module(_dense(256, 1024, 512).replace('byoc.global_symbol = "dense_0"',
                                                        'byoc.global_symbol = "dense_0", cutlass.kernel = '
                                                        '"64x64x32_2x2x1_3_k4"').replace("256x", "?x"))
        CutlassCodegen(sm=90, cache_dir=str(kernel_cache)).apply(make_context(), module)


def test_a_damaged_record_is_tuned_again(tmp_path) -> None:
    """A record of another version, or a problem whose entry is not a kernel and numbers,
    pins nothing (measure=false) rather than failing the compile."""
    record = tmp_path / "tuning.json"
    for text in ("not json", json.dumps({"version": 0, "problems": {}}),
                 json.dumps({"version": 1, "problems": {"x": {"kernel": 3, "seconds": {}}}})):
        record.write_text(text)
        module = _module()
        TuneCutlassKernels(sm=90, record=str(record), measure=False).apply(make_context(), module)
        assert KERNEL_ATTR not in cutlass_functions(module)[0].attributes
    # the real key with a damaged entry: not pinned either
    module = _module()
    key = json.dumps(["sm_90", 1, dataclasses.asdict(SPEC)], sort_keys=True)
    record.write_text(json.dumps({"version": 1, "problems": {key: {"kernel": "64x64x32_2x2x1_3",
                                                                   "seconds": {"64x64x32_2x2x1_3": "fast"}}}}))
    TuneCutlassKernels(sm=90, record=str(record), measure=False).apply(make_context(), module)
    assert KERNEL_ATTR not in cutlass_functions(module)[0].attributes
    record.write_text(json.dumps({"version": 1, "problems": {key: {"kernel": "64x64x32_2x2x1_3",
                                                                   "seconds": {"64x64x32_2x2x1_3": 1e-5}}}}))
    TuneCutlassKernels(sm=90, record=str(record), measure=False).apply(make_context(), module)
    assert cutlass_functions(module)[0].attributes[KERNEL_ATTR] == StringAttr("64x64x32_2x2x1_3")


def test_a_pinned_hopper_cluster_is_built_by_the_codegen(kernel_cache) -> None:
    """A 2-CTA cluster pinned on sm_90a (what tuning may choose) reaches the Hopper codegen:
    the CUTLASS 3 binary's record names that tile and cluster, so the runtime launches it in
    clusters of two."""
    module = _module(DENSE.replace('byoc.global_symbol = "dense_0"',
                                   'byoc.global_symbol = "dense_0", cutlass.kernel = "128x128x64_2x1x1_ws"'))
    CutlassCodegen(sm="90a", cache_dir=str(kernel_cache)).apply(make_context(), module)
    (binary,) = [op for op in module.walk() if isinstance(op, byoc.BinaryOp)]
    assert binary.sym_name.data == "cutlass_sm90a_tma"
    config = binary.attributes["kernels"].data["dense_0"].data["config"].data
    assert [a.value.data for a in config["tile"].data] == [128, 128, 64]
    assert [a.value.data for a in config["cluster"].data] == [2, 1, 1]
