"""The exported fixtures' attention in Partita's flash kernel: compiled at f16
(``precision="fp16"``), BERT (its padding mask [B, 1, S, S] simplified to the key padding
mask [B, 1, 1, S]), GPT-2 and LLaMA (causal, from Hugging Face's Range mask, with their key
padding mask; LLaMA with GQA) and ViT (no mask) each have one attention kernel, in the
``[B, S, H, D]`` layout where the exporter's head transposes allow it, reading Q, K and V
where they lie in the packed QKV projection, at head dim 8: its
SASS is the flash kernel's (``mma.sync`` as HMMA, ``ldmatrix`` as LDSM), and a forward
through the recording driver launches it once per layer. The kernel's numerics at these
shapes are the host emulation's (``tests/lowering/test_flash_attention_layouts.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py
from support.sass import sass_by_function, sass_of  # tests/support/sass.py

import partita
from partita.dialects import byoc
from partita.lowering.binaries import cubin_file
from partita.runtime.cuda import CudaDevice
from partita.runtime.plan import Runtime

EXPORTED = Path(__file__).resolve().parent / "exported"
# fixture -> layout of its attention (each projects to [B, S, H, D]; LLaMA's Q and K through
# rotary embeddings that take that layout too)
FLASH = {"bert": "BSHD", "bert_opset14": "BSHD", "gpt2": "BSHD", "llama": "BSHD", "vit": "BSHD"}
# Q, K and V are slices of one projection (GPT-2's c_attn; the others' three GEMMs after
# combine-parallel-dense): the slices the attention reads in place (LLaMA's Q and K as
# head slices of their one merged rotary embedding's output).
SLICES = {"bert": 3, "bert_opset14": 3, "gpt2": 3, "llama": 3, "vit": 3}
# GEMM calls per forward whose epilogue adds the residual, after a bias (the broadcast
# epilogue) and without: two a layer, the projections back into the residual stream (GPT-2's
# and ViT's after a bias, LLaMA's without), except where the norm reads the sum (BERT's
# post-norms, as their row kernels' prologue; at opset 14 the norm fused from its parts) or
# where Collage gives the GEMM a cast to take too (LLaMA's last down-projection, read by the
# final norm in f32: a native GEMM kernel with the residual add and the cast).
RESIDUAL_GEMMS = {"bert": (0, 0), "bert_opset14": (0, 0), "gpt2": (4, 0), "llama": (0, 3), "vit": (4, 0)}


@pytest.fixture(scope="module")
def cache(kernel_cache: Path) -> Path:
    return kernel_cache


@pytest.mark.parametrize("name", sorted(FLASH))
def test_fixture_attention_runs_in_the_flash_kernel(name: str, cache: Path) -> None:
    exe = partita.compile(EXPORTED / f"{name}.onnx", precision="fp16", cache_dir=cache)
    rows = [r for r in exe.report().rows if "nn.attention" in r.ops]
    assert len(rows) == 1 and rows[0].calls == 2, rows
    # Besides the attention, only the views it reads through: the head-split reshapes and
    # the slices of the packed QKV projection.
    ops = list(rows[0].ops)
    ops.remove("nn.attention")
    assert set(ops) <= {"nn.reshape", "nn.strided_slice"}, rows
    assert ops.count("nn.strided_slice") == SLICES[name], rows
    kernel = rows[0].kernel.split(" (")[0]
    kernels = [(r.kernel or "", r.calls) for r in exe.report().rows]
    assert (sum(n for k, n in kernels if k.endswith("_bias_residual")),
            sum(n for k, n in kernels if k.endswith("_tn_align8_residual"))) == RESIDUAL_GEMMS[name], kernels
    attention = [op for op in exe.module.walk() if op.name == "nn.attention"]
    assert {a.layout for a in attention} == {FLASH[name]} and all(str(a.result.type.element_type) == "f16"
                                                                 for a in attention)
    images, sass = {}, {}
    for op in exe.module.walk():
        if isinstance(op, byoc.BinaryOp) and not op.is_inline:
            path = cubin_file(op, cache)
            images[op.sym_name.data] = path.read_bytes()
            sass.update(sass_by_function(sass_of(path)))
    body = sass[kernel]
    assert body.count("HMMA.16816.F32") >= 8 and "LDSM" in body  # mma.sync + ldmatrix: the flash kernel
    # One forward on the recording driver: the attention kernel is launched once a layer.
    drv = RecordingDriver()
    runtime = Runtime(exe.module, CudaDevice(driver=drv), graphs=False, embedded=images)
    sample = dict(np.load(EXPORTED / f"{name}.npz"))
    runtime.run(*sample.values())
    assert [launch["name"] for launch in drv.launches].count(kernel) == 2
    runtime.close()
