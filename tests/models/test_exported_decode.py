"""A decode step as the TorchScript exporter writes a LLaMA attention layer with a static KV
cache (``tests/models/export_models.py``: ``StaticCacheAttention``; this test needs no
torch): the rotary embedding read at the position from precomputed tables, ``index_copy``
(ScatterElements) into the caches, ``repeat_kv``, ``masked_fill(finfo.min)``. Compiled with
the default targets, its rotations, attention and cache writes are one kernel each family,
the caches are written in place, and a decode loop matches onnxruntime step by step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py
from xdsl.ir import BlockArgument

import partita
from partita.dialects import byoc, nn
from partita.runtime.cuda import CudaDevice
from partita.runtime.plan import Runtime

ort = pytest.importorskip("onnxruntime")

MODEL = Path(__file__).resolve().parent / "exported_decode" / "llama_static_cache.onnx"


@pytest.fixture(scope="module")
def exe() -> partita.Executable:
    return partita.compile(str(MODEL))


def test_the_step_fuses_rotary_attention_and_in_place_cache_writes(exe) -> None:
    kernels = [row.ops for row in exe.report().rows]
    assert not exe.runtime.plan.host_ops
    assert sum("nn.rotary_embedding" in ops for ops in kernels) == 1  # Q's and K's rotations, one kernel
    # the cos / sin rows gathered at the position are read by the rotary kernel in place
    assert [ops.count("nn.take") for ops in kernels if "nn.take" in ops] == [2]
    assert all("nn.rotary_embedding" in ops for ops in kernels if "nn.take" in ops)
    assert sum(row.calls for row in exe.report().rows if row.kernel) == 6  # launches a step
    assert sum("nn.attention" in ops for ops in kernels) == 1  # scores, mask, softmax and P·V
    (attention,) = [op for op in exe.module.walk() if isinstance(op, nn.AttentionOp)]
    assert attention.mask_fill == float(np.finfo(np.float32).min) and attention.groups == 2
    # the mask arange(32) <= position is the position: no kernel computes it
    assert attention.mask_kind == "last_key" and not any("nn.greater" in ops for ops in kernels)
    in_place = [op for op in exe.module.walk() if isinstance(op, byoc.CallExternOp)
                and any(isinstance(out, BlockArgument) for out in op.outs)]
    assert len(in_place) == 2  # index_copy of the key and of the value, into the caches' buffers


def test_a_decode_loop_matches_onnxruntime(exe) -> None:
    session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    sample = dict(np.load(MODEL.with_suffix(".npz")))
    (want, *_), got = session.run(None, sample), exe.run(**sample)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    rng = np.random.default_rng(0)
    key = value = np.zeros_like(sample["key_cache"])
    want_key = want_value = key
    for position in range(9):
        feeds = {"hidden": rng.standard_normal(sample["hidden"].shape).astype(np.float32),
                 "position": np.array([position], np.int64)}
        want, want_key, want_value = session.run(None, {**feeds, "key_cache": want_key, "value_cache": want_value})
        got, key, value = exe.run(**feeds, key_cache=key, value_cache=value, outputs="device")
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5, err_msg=f"position {position}")
    np.testing.assert_allclose(key.numpy(), want_key, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value.numpy(), want_value, rtol=1e-5, atol=1e-6)


def test_a_decode_step_on_a_gpu_copies_nothing(exe) -> None:
    """On the recording driver: the caches fed back on the device are written in place;
    a step uploads its token and position and launches one graph."""
    drv = RecordingDriver()
    runtime = Runtime(exe.module, CudaDevice(driver=drv))
    sample = dict(np.load(MODEL.with_suffix(".npz")))
    _, key, value = runtime.run(**sample, outputs="device")
    drv.reset()
    for position in range(6, 10):
        _, key, value = runtime.run(hidden=sample["hidden"], position=np.array([position], np.int64),
                                    key_cache=key, value_cache=value, outputs="device")
    calls = drv.calls
    assert calls["cuMemcpyDtoDAsync"] == 0 and calls["cuMemAlloc"] == 0 and calls["cuGraphLaunch"] == 4
    assert calls["cuMemcpyHtoDAsync"] == 2 * 4 and runtime.stats["binds"] == 1
    runtime.close()
