"""The measuring cost estimator: candidates compiled with real NVRTC, lowered to a launch
plan and profiled on a CUDA device driven by the recording driver (whose stand-in clock
gives each kernel a fixed time), the roofline for what cannot be measured, and
``collage-partition{cost=measure}`` choosing by the measured times.

NVRTC compiles are the slow part: every test uses the module's cubin cache and the
same function text, so the CUTLASS dense+bias kernel is compiled once for the file."""

from __future__ import annotations

import numpy as np
import pytest
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py
from xdsl.dialects.func import FuncOp

from partita.collage.cost import CostCache, RooflineEstimator
from partita.collage.graph import DataflowGraph
from partita.dialects import make_context
from partita.ir import PartitaError, parse_module
from partita.lowering import nvrtc
from partita.lowering.binaries import binary_images
from partita.lowering.cutlass import KernelSpec, choose_config
from partita.lowering.cutlass.emitter import entry_name
from partita.runtime.cuda import CudaDevice, cuda_available
from partita.transforms import collage_partition as cp
from partita.transforms.collage import measure
from partita.transforms.collage.measure import FUNCTION, CandidateTimer, candidate_module, measuring_estimator
from partita.transforms.collage.partitioner import function_candidates

DENSE = """
func.func @main(%x: tensor<?x64xf16>, %w: tensor<128x64xf16>, %b: tensor<128xf16>) -> tensor<?x128xf16> {
  %0 = nn.dense %x, %w : (tensor<?x64xf16>, tensor<128x64xf16>) -> tensor<?x128xf16>
  %1 = nn.bias_add %0, %b : (tensor<?x128xf16>, tensor<128xf16>) -> tensor<?x128xf16>
  func.return %1 : tensor<?x128xf16>
}
"""

ELEMENTWISE = """
func.func @main(%x: tensor<32x128xf16>, %y: tensor<32x128xf16>) -> tensor<32x128xf16> {
  %0 = nn.relu %x : (tensor<32x128xf16>) -> tensor<32x128xf16>
  %1 = nn.add %0, %y : (tensor<32x128xf16>, tensor<32x128xf16>) -> tensor<32x128xf16>
  func.return %1 : tensor<32x128xf16>
}
"""

CONV = """
func.func @main(%x: tensor<1x8x16x16xf16>, %w: tensor<8x8x3x3xf16>) -> tensor<1x8x14x14xf16> {
  %0 = nn.conv2d %x, %w : (tensor<1x8x16x16xf16>, tensor<8x8x3x3xf16>) -> tensor<1x8x14x14xf16>
  %1 = nn.relu %0 : (tensor<1x8x14x14xf16>) -> tensor<1x8x14x14xf16>
  func.return %1 : tensor<1x8x14x14xf16>
}
"""

def _cutlass_entry(epilogue: str) -> str:
    """The CUTLASS entry DENSE's dense (with ``epilogue``) launches: its kernel
    configuration's, shared by every partition and shape that configuration serves."""
    spec = KernelSpec.dense(None, 128, 64, "float16", epilogue)
    return entry_name(spec, choose_config(spec, 90))


CUTLASS_KERNEL = _cutlass_entry("bias")  # cutlass.dense_bias
CUTLASS_DENSE = _cutlass_entry("none")  # cutlass.dense, the bias_add left to a native kernel
FUSED_KERNEL = f"{FUNCTION}_fused_0"  # fuse-native-kernels' first group of it


def recording_device(kernel_us=None) -> tuple[RecordingDriver, CudaDevice]:
    """A CUDA device (sm_90) on the recording driver; ``kernel_us``: microseconds per launch."""
    drv = RecordingDriver(kernel_us=kernel_us)
    return drv, CudaDevice(driver=drv)


@pytest.fixture(scope="module")
def cubins(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("cubins")


def candidates(text: str, targets: str):
    module = parse_module(text, make_context(), "measure.mlir")
    (main,) = [op for op in module.ops if isinstance(op, FuncOp)]
    graph, ops, cands = function_candidates(main, targets, RooflineEstimator("h100"), 3)
    return graph, ops, {(c.label, tuple(sorted(c.nodes))): c for c in cands}


def test_candidate_module_takes_outside_values_as_arguments() -> None:
    _, ops, _ = candidates(DENSE, "cuda,cutlass")
    module = candidate_module(ops[1:])  # the bias_add alone: the dense result enters
    (function,) = module.ops
    assert isinstance(function, FuncOp) and function.sym_name.data == FUNCTION
    assert [str(t) for t in function.function_type.inputs] == ["tensor<?x128xf16>", "tensor<128xf16>"]
    assert [str(t) for t in function.function_type.outputs] == ["tensor<?x128xf16>"]
    assert [op.name for op in function.body.block.ops] == ["nn.bias_add", "func.return"]
    # The original function is untouched (the candidate's ops were cloned).
    assert ops[1].parent is not None and ops[0].results[0].uses


def test_cutlass_and_fused_candidates_are_compiled_and_timed(cubins) -> None:
    drv, device = recording_device({CUTLASS_KERNEL: 250.0, FUSED_KERNEL: 4.0})
    timer = CandidateTimer(device, cache_dir=cubins, dynamic_dim=16, warmup=1, repeat=3, burst=2)

    graph, _, cands = candidates(DENSE, "cuda,cutlass")
    dense_bias = cands[("cutlass.dense_bias", (0, 1))]
    assert timer(graph, dense_bias) == pytest.approx(250e-6)
    # The cubin reached the driver as the cache holds it (read through its sha256).
    (cubin,) = list(cubins.glob("*.cubin"))
    assert drv.images == [cubin.read_bytes()]
    # Whole runs of the candidate's launch plan, one warm-up and three timed, each with
    # events around two launches in a row (the burst), timed as their mean; the inputs
    # took M = dynamic_dim.
    assert [launch["name"] for launch in drv.launches] == [CUTLASS_KERNEL] * (1 + 3 * 2)
    assert drv.calls["cuEventRecord"] == 3 * 2
    assert drv.calls["cuMemcpyHtoDAsync:bytes"] == 4 * (16 * 64 + 128 * 64 + 128) * 2
    assert drv.calls["cuMemcpyDtoHAsync:bytes"] == 4 * 16 * 128 * 2

    graph, _, cands = candidates(ELEMENTWISE, "cuda")
    fused = cands[("cuda.fused", (0, 1))]
    assert timer(graph, fused) == pytest.approx(4e-6)
    assert drv.launches[-1]["name"] == FUSED_KERNEL
    assert timer.measured == 2 and not timer.unmeasured
    # Every plan was closed: nothing allocated, loaded or created is left but the context.
    device.close()
    assert drv.live() == {}


@pytest.mark.parametrize(("arch", "sm"), [("sm_90a", "90a"), ("sm_90", 90), ("sm_80", 80)])
def test_cutlass_candidates_are_built_for_the_timers_arch(arch, sm, monkeypatch) -> None:
    """A timer for ``sm_90a`` lowers CUTLASS candidates as ``cutlass-codegen{sm=90a}``: it
    times the CUTLASS 3 Hopper kernel a compile for that arch runs, not the Sm80 one."""
    seen = []

    class Codegen:
        def __init__(self, sm, cache_dir):
            seen.append(sm)

        def apply(self, ctx, module):
            raise PartitaError("stop here: only the arch is checked")

    monkeypatch.setattr(measure, "CutlassCodegen", Codegen)
    _, device = recording_device()
    graph, _, cands = candidates(DENSE, "cuda,cutlass")
    with pytest.raises(PartitaError, match="stop here"):
        CandidateTimer(device, arch=arch)(graph, cands[("cutlass.dense_bias", (0, 1))])
    assert seen == [sm]


def test_a_device_without_a_clock_measures_nothing(cubins) -> None:
    """The simulated device runs the candidate's plan but has no clock: cost=measure says
    so rather than costing candidates with invented times."""
    from partita.runtime.device import SimulatedDevice

    timer = CandidateTimer(SimulatedDevice(), cache_dir=cubins, dynamic_dim=16, warmup=0, repeat=1)
    graph, _, cands = candidates(ELEMENTWISE, "cuda")
    with pytest.raises(PartitaError, match="simulated device \\(CPU\\) has no device clock"):
        timer(graph, cands[("cuda.fused", (0, 1))])
    assert timer.measured == 0


def test_unmeasurable_candidates_fall_back_to_the_roofline(cubins) -> None:
    drv, device = recording_device()
    roofline = RooflineEstimator("h100", dynamic_dim_hint=16)
    timer = CandidateTimer(device, cache_dir=cubins, dynamic_dim=16)
    estimator = measuring_estimator(timer, roofline)
    # No cuDNN library on this device (a fake with no stand-in): its candidates take the
    # roofline estimate.
    graph, _, cands = candidates(CONV, "cuda,cudnn")
    key = ("cudnn.conv2d", (0,))
    assert estimator.estimate(graph, cands[key]) == roofline.estimate(graph, cands[key])
    # A graph not built from IR has no ops to compile.
    graph, _, cands = candidates(DENSE, "cuda,cutlass")
    plain = DataflowGraph(graph.nodes, graph.outputs)
    key = ("cutlass.dense_bias", (0, 1))
    assert estimator.estimate(plain, cands[key]) == roofline.estimate(graph, cands[key])
    assert drv.images == [] and timer.measured == 0
    assert timer.unmeasured == {
        "no cudnn library": 1,
        "graph not built from IR": 1,
    }
    assert estimator.name == f"measure:Recording GPU:sm_90:h16/{roofline.name}"


def placement(report) -> dict[str, str]:
    (function,) = report.functions
    return {op: g.target for g in function.groups for op in g.ops}


def test_collage_partition_chooses_by_measured_times(cubins, tmp_path, monkeypatch) -> None:
    def partition(times, cache=""):
        drv, device = recording_device({name: ms * 1e3 for name, ms in times.items()})
        module = parse_module(DENSE, make_context(), "dense.mlir")
        pass_ = cp.CollagePartition(targets="cuda,cutlass,llvm", cost="measure", cache=cache,
                                    cache_dir=str(cubins), dynamic_dim=16, measure_device=device)
        pass_.apply(make_context(), module)
        assert len(pass_.reports) == 1
        return pass_.last_report, drv

    fast, drv = partition({CUTLASS_KERNEL: 0.001, CUTLASS_DENSE: 0.001, FUSED_KERNEL: 0.002})
    assert placement(fast) == {"nn.dense": "cutlass", "nn.bias_add": "cutlass"}
    assert fast.partitions[0].label == "cutlass.dense_bias"
    assert fast.estimator.startswith("measure:Recording GPU:sm_90:h16/roofline:h100:h16")
    # Measured once each (2 warm-up and 10 timed runs of its plan, each a burst of 8
    # launches): cutlass.dense and cutlass.dense_bias, and native kernels (the bias_add;
    # the native dense too where cuda-codegen has a GEMM kernel).
    timed = [launch["name"] for launch in drv.launches]
    assert timed.count(CUTLASS_KERNEL) == timed.count(CUTLASS_DENSE) == 2 + 10 * 8
    assert set(timed) == {CUTLASS_KERNEL, CUTLASS_DENSE, FUSED_KERNEL}
    # CUTLASS reported slow: the dense goes native.
    slow, _ = partition({CUTLASS_KERNEL: 50.0, CUTLASS_DENSE: 50.0, FUSED_KERNEL: 0.002})
    assert placement(slow) == {"nn.dense": "cuda", "nn.bias_add": "cuda"}
    assert not slow.partitions and slow.total < 50e-3

    # With a persistent cost cache the second run compiles and launches nothing.
    costs = str(tmp_path / "costs.json")
    first, _ = partition({CUTLASS_KERNEL: 0.001, CUTLASS_DENSE: 0.001, FUSED_KERNEL: 0.002}, costs)
    def no_nvrtc(*args, **kwargs):
        raise AssertionError("a cached cost was compiled again")

    monkeypatch.setattr(nvrtc, "_nvrtc_compile", no_nvrtc)
    second, drv = partition({CUTLASS_KERNEL: 50.0, CUTLASS_DENSE: 50.0, FUSED_KERNEL: 0.002}, costs)
    assert drv.images == [] and drv.launches == []
    assert placement(second) == placement(first) == placement(fast)
    assert second.total == first.total


def test_measure_options_are_checked() -> None:
    module = parse_module(DENSE, make_context(), "dense.mlir")
    for device in (recording_device()[1], None):  # options are checked before any device is opened
        with pytest.raises(PartitaError, match="dynamic-dim must be >= 1"):
            cp.CollagePartition(targets="cuda,cutlass", cost="measure", dynamic_dim=0,
                                measure_device=device).apply(make_context(), module)
        with pytest.raises(PartitaError, match="unknown device"):
            cp.CollagePartition(targets="cuda,cutlass", cost="measure", device="tpu",
                                measure_device=device).apply(make_context(), module)


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")
def test_measures_a_real_kernel(cubins) -> None:
    from partita.runtime.cuda import CudaDevice

    with CudaDevice() as device:
        timer = CandidateTimer(device, cache_dir=cubins, dynamic_dim=256)
        graph, _, cands = candidates(ELEMENTWISE, "cuda")
        seconds = timer(graph, cands[("cuda.fused", (0, 1))])
        assert seconds is not None and 0.0 < seconds < 1.0
        estimator = CostCache(None, measuring_estimator(timer, RooflineEstimator("h100")))
        cand = cands[("cuda.fused", (0, 1))]
        assert estimator.estimate(graph, cand) > 0.0
        estimator.estimate(graph, cand)
        assert timer.measured == 2 and estimator.hits == 1
    assert np.isfinite(seconds)


def test_a_measured_cubin_is_checked_against_its_sha256(tmp_path, monkeypatch) -> None:
    """Collage loads a candidate's cubin as the launch plan does: the bytes must match the
    digest its byoc.binary recorded, or the driver never sees them."""
    from partita.lowering.cuda import codegen as cuda_codegen

    original = cuda_codegen.CudaCodegen.apply

    def apply_then_damage(self, ctx, module) -> None:
        original(self, ctx, module)
        for image in binary_images(module).values():  # where the cubin cache keeps each
            assert image.path.parent == tmp_path  # this test's own cache, never the shared one
            image.path.unlink()
            image.path.write_bytes(b"\x7fELF damaged")

    monkeypatch.setattr(cuda_codegen.CudaCodegen, "apply", apply_then_damage)
    drv, device = recording_device()
    timer = CandidateTimer(device, cache_dir=tmp_path, dynamic_dim=16)
    graph, _, cands = candidates(ELEMENTWISE, "cuda")
    with pytest.raises(PartitaError, match="does not match the sha256 recorded at compile time"):
        timer(graph, cands[("cuda.fused", (0, 1))])
    assert drv.images == []
