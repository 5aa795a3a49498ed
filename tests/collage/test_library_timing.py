"""Collage's measured costs for library candidates: lowered by their codegen, planned once,
then only the library call is timed (stand-in libraries and a fake device's timer)."""

from __future__ import annotations

import pytest
from support.fake_cuda import FakeDevice
from support.recording_libs import RecordingCublasLt, RecordingCudnn
from xdsl.dialects.func import FuncOp

from partita.dialects import make_context
from partita.ir import parse_module
from partita.transforms.collage.measure import CandidateTimer

GEMM = """
func.func @main(%x: tensor<?x64xf16>, %w: tensor<128x64xf16>, %b: tensor<128xf16>) -> tensor<?x128xf16> {
  %0 = nn.dense %x, %w : (tensor<?x64xf16>, tensor<128x64xf16>) -> tensor<?x128xf16>
  %1 = nn.bias_add %0, %b : (tensor<?x128xf16>, tensor<128xf16>) -> tensor<?x128xf16>
  %2 = nn.softmax %1 : (tensor<?x128xf16>) -> tensor<?x128xf16>
  func.return %2 : tensor<?x128xf16>
}
"""


class TimingDevice(FakeDevice):
    """A fake device whose timer calls the function and reports a fixed time per call."""

    def __init__(self, ms: float) -> None:
        super().__init__()
        self.ms, self.timed_calls = ms, 0

    def time_calls(self, fn, warmup: int, repeat: int) -> float:
        for _ in range(warmup + repeat):
            fn()
            self.timed_calls += 1
        return self.ms


def _ops(text: str):
    func = next(op for op in parse_module(text, make_context()).ops if isinstance(op, FuncOp))
    return [op for op in func.body.block.ops if op.name.startswith("nn.")]


def test_a_cublas_candidate_is_planned_once_and_its_call_timed() -> None:
    device = TimingDevice(0.25)
    lib = RecordingCublasLt(device)
    timer = CandidateTimer(device, libraries={"cublas": lib}, dynamic_dim=32, warmup=2, repeat=3, rounds=2)
    seconds = timer.time(_ops(GEMM)[:2], "cublas")
    assert seconds == pytest.approx(0.25e-3)
    assert [c[0] for c in lib.calls].count("heuristic") == 1
    assert [c[0] for c in lib.calls].count("matmul") == device.timed_calls == 2 + 3 * 2
    (_, _desc, _a, b, d, _) = next(c for c in lib.calls if c[0] == "heuristic")
    assert (b.cols, d.cols) == (32, 32)  # the dynamic M took the timer's dynamic_dim
    assert timer.measured == 1 and not timer.unmeasured


def test_a_candidate_the_codegen_rejects_is_unmeasured() -> None:
    device = TimingDevice(1.0)
    timer = CandidateTimer(device, libraries={"cublas": RecordingCublasLt(device)})
    assert timer.time(_ops(GEMM)[2:], "cublas") is None  # a softmax is no GEMM
    assert timer.unmeasured == {"not a cublas partition": 1} and device.timed_calls == 0


def test_cudnn_conv_candidates_are_timed_through_the_graph() -> None:
    text = """
func.func @main(%x: tensor<1x8x8x16xf16>, %w: tensor<32x3x3x16xf16>) -> tensor<1x6x6x32xf16> {
  %0 = nn.conv2d %x, %w {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<1x8x8x16xf16>, tensor<32x3x3x16xf16>) -> tensor<1x6x6x32xf16>
  %1 = nn.relu %0 : (tensor<1x6x6x32xf16>) -> tensor<1x6x6x32xf16>
  func.return %1 : tensor<1x6x6x32xf16>
}
"""
    device = TimingDevice(0.5)
    lib = RecordingCudnn(device)
    timer = CandidateTimer(device, libraries={"cudnn": lib}, warmup=0, repeat=1, rounds=1)
    assert timer.time(_ops(text), "cudnn") == pytest.approx(0.5e-3)
    (graph,) = lib.graphs
    assert [n[0] for n in graph.nodes] == ["conv_fprop", "relu"] and len(lib.executed) == 1
