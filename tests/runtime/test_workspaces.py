"""Workspaces in a bound plan's arena: a call's scratch lives at the call and shares its
bytes with buffers live at other times; a workspace its kernel counts on finding zeroed
(CUTLASS's serial split-K semaphores, zeroed once) shares them with nothing, or an input
uploaded there (or any buffer written there) would leave its values in it for the next
run. A call that takes no workspace passes a null pointer, which keeps its launches
shareable with the next call of its kernel."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import partita
from partita.runtime.cuda import CudaDevice
from partita.target import Target

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support.recording_driver import RecordingDriver  # noqa: E402


def _two_split_k_gemms(rows: int):
    """x[rows, 1024] @ w, relu, @ w2: two CUTLASS GEMMs, each with a serial split-K
    semaphore workspace when compiled with ``split_k_slices``."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((1024, 64)) / 32).astype(np.float16)
    w2 = (rng.standard_normal((64, 64)) / 8).astype(np.float16)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"]),
         helper.make_node("MatMul", ["z", "w2"], ["o"])], "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [rows, 1024])],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT16, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _overlaps(bound) -> list[tuple[str, str]]:
    """Pairs (a zeroed workspace's call, another root) whose bytes overlap in the arena."""
    zeroed = bound._zeroed(bound.workspaces)
    sizes = {op: n for op, n in bound.workspaces.items()}
    for value, _, itemsize in bound.plan.dynamic_buffers[bound.stage]:
        sizes[value] = int(np.prod(bound.shapes[value])) * itemsize
    spans = {root: (bound.pointers[root], bound.pointers[root] + n) for root, n in sizes.items() if n}
    return [(op.callee.string_value(), str(other)[:40]) for op in zeroed for other, (lo, hi) in spans.items()
            if other is not op and lo < spans[op][1] and spans[op][0] < hi]


def test_a_split_k_semaphore_workspace_shares_no_bytes(tmp_path) -> None:
    targets = ["cuda -arch=sm_90", Target("cutlass -sm=90", {"split_k_slices": 4}), "llvm"]
    exe = partita.compile(_two_split_k_gemms(64), targets, partitioner="eager", cache_dir=tmp_path / "cache")
    kernels = [row.kernel for row in exe.report().rows if row.target == "cutlass"]
    assert len(kernels) == 2 and all(k.endswith("splitk") for k in kernels), kernels
    exe.load(CudaDevice(driver=RecordingDriver()))
    x = np.random.default_rng(1).standard_normal((64, 1024)).astype(np.float16)
    exe.run(x)
    (bound,) = exe.runtime._bound.values()
    assert len(bound._zeroed(bound.workspaces)) == 2
    assert _overlaps(bound) == []
    # with shape buckets the plan's buffers go to the pool's arena, apart there too
    exe.load(CudaDevice(driver=RecordingDriver()), buckets="pow2")
    exe.run(x)
    (bound,) = exe.runtime._bound.values()
    assert bound.shared is not None and len(bound._zeroed(bound.workspaces)) == 2
    assert _overlaps(bound) == []
    exe.close()


def test_calls_of_a_gemm_kernel_without_its_workspace_share_launches(tmp_path) -> None:
    """A native GEMM kernel has a workspace parameter for its K slices; a call that does
    not split passes a null pointer there, which holds no tensor: the next call of the
    same kernel at the same shapes (the next layer's) still copies the first's launches
    with its own pointers patched in, instead of binding its own."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((64, 64)) / 8).astype(np.float16), f"w{i}") for i in range(3)]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w0"], ["a"]), helper.make_node("MatMul", ["a", "w1"], ["b"]),
         helper.make_node("MatMul", ["b", "w2"], ["y"])], "layers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["rows", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)], weights)
    exe = partita.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                          ["cuda -arch=sm_90", "llvm"], cache_dir=tmp_path / "cache")
    assert [row.kernel.split()[0] for row in exe.report().rows] == ["main_fused_0"]  # one kernel, three calls
    exe.load(CudaDevice(driver=RecordingDriver()))
    for rows in (3, 5):
        exe.run(rng.standard_normal((rows, 64)).astype(np.float16))
    assert exe.runtime.stats["launches_patched"] == 2 * 2, dict(exe.runtime.stats)
    exe.close()
