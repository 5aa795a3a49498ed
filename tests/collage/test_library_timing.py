"""Collage's measured costs for library candidates: lowered by their codegen to a launch
plan whose library plan is made once, at load; the call is then timed as a step of the
plan (stand-in libraries on the recording driver, whose clock gives each call a time)."""

from __future__ import annotations

import pytest
from support.recording_driver import RecordingDriver
from support.recording_libs import RecordingCublasLt, RecordingCudnn
from xdsl.dialects.func import FuncOp

from partita.dialects import make_context
from partita.ir import parse_module
from partita.runtime.cuda import CudaDevice
from partita.transforms.collage.measure import CandidateTimer

GEMM = """
func.func @main(%x: tensor<?x64xf16>, %w: tensor<128x64xf16>, %b: tensor<128xf16>) -> tensor<?x128xf16> {
  %0 = nn.dense %x, %w : (tensor<?x64xf16>, tensor<128x64xf16>) -> tensor<?x128xf16>
  %1 = nn.bias_add %0, %b : (tensor<?x128xf16>, tensor<128xf16>) -> tensor<?x128xf16>
  %2 = nn.softmax %1 : (tensor<?x128xf16>) -> tensor<?x128xf16>
  func.return %2 : tensor<?x128xf16>
}
"""


def recording_device(**library_us: float) -> tuple[RecordingDriver, CudaDevice]:
    drv = RecordingDriver(library_us=library_us)
    return drv, CudaDevice(driver=drv)


def _ops(text: str):
    func = next(op for op in parse_module(text, make_context()).ops if isinstance(op, FuncOp))
    return [op for op in func.body.block.ops if op.name.startswith("nn.")]


def test_a_cublas_candidate_is_planned_once_and_its_call_timed() -> None:
    drv, device = recording_device(cublasLtMatmul=250.0)
    lib = RecordingCublasLt(drv)
    timer = CandidateTimer(device, libraries={"cublas": lib}, dynamic_dim=32, warmup=2, repeat=3, burst=4)
    seconds = timer.time(_ops(GEMM)[:2], "cublas")
    assert seconds == pytest.approx(250e-6)  # the mean of a burst of calls is one call's time
    assert [c[0] for c in lib.calls].count("heuristic") == 1
    calls = [launch for launch in drv.launches if launch.get("library")]
    assert [c[0] for c in lib.calls].count("matmul") == len(calls) == 2 + 3 * 4
    (_, _desc, _a, b, d, _) = next(c for c in lib.calls if c[0] == "heuristic")
    assert (b.cols, d.cols) == (32, 32)  # the dynamic M took the timer's dynamic_dim
    assert timer.measured == 1 and not timer.unmeasured


def test_a_candidate_the_codegen_rejects_is_unmeasured() -> None:
    drv, device = recording_device()
    timer = CandidateTimer(device, libraries={"cublas": RecordingCublasLt(drv)})
    assert timer.time(_ops(GEMM)[2:], "cublas") is None  # a softmax is no GEMM
    assert timer.unmeasured == {"not a cublas partition": 1} and not drv.launches


def test_cudnn_conv_candidates_are_timed_through_the_graph() -> None:
    text = """
func.func @main(%x: tensor<1x8x8x16xf16>, %w: tensor<32x3x3x16xf16>) -> tensor<1x6x6x32xf16> {
  %0 = nn.conv2d %x, %w {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<1x8x8x16xf16>, tensor<32x3x3x16xf16>) -> tensor<1x6x6x32xf16>
  %1 = nn.relu %0 : (tensor<1x6x6x32xf16>) -> tensor<1x6x6x32xf16>
  func.return %1 : tensor<1x6x6x32xf16>
}
"""
    drv, device = recording_device(cudnnGraphExecute=500.0)
    lib = RecordingCudnn(drv)
    timer = CandidateTimer(device, libraries={"cudnn": lib}, warmup=0, repeat=1, burst=1)
    assert timer.time(_ops(text), "cudnn") == pytest.approx(500e-6)
    (graph,) = lib.graphs
    assert [n[0] for n in graph.nodes] == ["conv_fprop", "relu"] and len(lib.executed) == 1
