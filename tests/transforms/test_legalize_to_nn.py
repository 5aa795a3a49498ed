"""Standard-dialect IR (linalg, tensor, arith/math, tosa) through partita.compile:
legalize-to-nn runs first, and the compiled model computes what NumPy computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import partita
from partita.ir import PartitaError

LEGALIZE_LIT = Path(__file__).parents[1] / "filecheck" / "transforms" / "frontends" / "legalize-to-nn.mlir"


def chunk(name: str) -> str:
    """The function ``@name`` of the lit test's input (one chunk of it)."""
    for part in LEGALIZE_LIT.read_text().split("// -----"):
        if f"func.func @{name}(" in part:
            return "\n".join(line for line in part.splitlines() if not line.startswith("//"))
    raise KeyError(name)


def compile_host(name: str) -> partita.Executable:
    # Everything on the (simulated) host: the nn ops' reference semantics, no NVRTC.
    return partita.compile(chunk(name), entry=name, partitioner="none", fallback_device="cpu")


rng = np.random.default_rng(7)


def f32(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_matmul_into_a_zero_fill() -> None:
    a, b = f32(4, 8), f32(8, 16)
    np.testing.assert_allclose(compile_host("matmul").run(a, b)[0], a @ b, rtol=1e-5, atol=1e-5)


def test_matmul_accumulates_into_its_destination() -> None:
    a, b, c = f32(4, 8), f32(8, 16), f32(4, 16)
    np.testing.assert_allclose(compile_host("matmul_accumulates").run(a, b, c)[0], a @ b + c, rtol=1e-5, atol=1e-5)


def test_generic_elementwise_with_a_broadcast_operand() -> None:
    x, bias = f32(4, 16), f32(16)
    np.testing.assert_allclose(compile_host("bias_gelu_like").run(x, bias)[0], np.maximum(x + bias, 0), rtol=1e-6)


def test_generic_reduction() -> None:
    x = f32(4, 16)
    np.testing.assert_allclose(compile_host("row_sum").run(x)[0], x.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_tensor_ops_and_arith_math_on_tensors() -> None:
    x, y = f32(2, 3, 4), f32(6, 4)
    c = x.reshape(6, 4)
    want = np.concatenate([np.exp(c + y), c], axis=0)
    np.testing.assert_allclose(compile_host("tensors").run(x, y)[0], want, rtol=1e-5)


def test_slice_and_pad() -> None:
    x = f32(8, 8)
    want = np.pad(x[1:5, 2:6], 1)
    np.testing.assert_array_equal(compile_host("slice_pad").run(x)[0], want)


def test_tosa_matmul_clamp_reduce() -> None:
    a, b = f32(1, 4, 8), f32(1, 8, 2)
    want = np.clip(a @ b, 0, 6).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(compile_host("tosa").run(a, b)[0], want, rtol=1e-5, atol=1e-5)


def test_conv_and_pool() -> None:
    import torch

    x, w = f32(1, 3, 8, 8), f32(4, 3, 3, 3)
    want = torch.nn.functional.max_pool2d(torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w)), 2)
    np.testing.assert_allclose(compile_host("conv_pool").run(x, w)[0], want.numpy(), rtol=1e-4, atol=1e-4)


def test_copy_broadcast_and_reduce_into_a_filled_destination() -> None:
    x, v = f32(4, 16), f32(16)
    want = np.maximum((x + v).max(axis=1), 0)
    np.testing.assert_allclose(compile_host("more").run(x, v)[0], want, rtol=1e-6)


def test_tosa_elementwise_pools_and_concat() -> None:
    torch = pytest.importorskip("torch")
    a, b = f32(1, 4, 4, 2), f32(1, 4, 4, 2)
    n = torch.from_numpy(np.sin((a + b - b) * a)).permute(0, 3, 1, 2)  # to NCHW for torch's pools
    pooled = [torch.nn.functional.max_pool2d(n, 2), torch.nn.functional.avg_pool2d(n, 2)]
    want = torch.cat(pooled, dim=1).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(compile_host("tosa_more").run(a, b)[0], want, rtol=1e-5, atol=1e-6)


def test_insert_slice() -> None:
    x, y = f32(2, 2), f32(4, 5)
    want = y.copy()
    want[1:3, 2:4] = x
    np.testing.assert_array_equal(compile_host("insert").run(x, y)[0], want)


def test_the_pipeline_lists_legalize_to_nn_only_when_needed() -> None:
    assert compile_host("matmul").pipeline.split(",")[0] == "legalize-to-nn"
    plain = "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>\n  func.return %0 : tensor<4xf32>\n}\n"
    exe = partita.compile(plain, partitioner="none", fallback_device="cpu")
    assert "legalize-to-nn" not in exe.pipeline


def test_what_cannot_run_fails_at_compile_time_with_a_location() -> None:
    text = """func.func @main(%x: tensor<2x2xf32>, %y: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = tensor.insert_slice %x into %y[0, 0] [2, 2] [2, 2] : tensor<2x2xf32> into tensor<4x4xf32>
  func.return %r : tensor<4x4xf32>
}
"""
    with pytest.raises(PartitaError) as caught:
        partita.compile(text, partitioner="none", fallback_device="cpu")
    assert str(caught.value).startswith("<string>:2:3: error: 'tensor.insert_slice' op cannot be lowered by Partita")
