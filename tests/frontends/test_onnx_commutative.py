"""Commutative ONNX ops put a constant operand on the right (MLIR's canonical form): the
TorchScript exporter writes ``nn.Linear`` on a 3-D input as ``Add(bias, MatMul(x, Wᵀ))``,
which is then ``nn.dense`` + bias, the form the GEMM epilogue patterns take."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from xdsl.traits import Commutative

import partita
from partita.dialects import nn
from partita.frontends.onnx import import_onnx


def _linear(path: Path, bias_first: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((64, 32)) / 8).astype(np.float32)
    b = rng.standard_normal(32).astype(np.float32)
    add = ["b", "m"] if bias_first else ["m", "b"]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", add, ["y"])], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8, 32])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return w, b


def test_add_and_multiply_are_commutative_and_others_are_not() -> None:
    assert nn.AddOp.has_trait(Commutative) and nn.MultiplyOp.has_trait(Commutative)
    assert not nn.SubtractOp.has_trait(Commutative) and not nn.DivideOp.has_trait(Commutative)


def test_a_constant_first_add_imports_with_the_constant_on_the_right(tmp_path: Path) -> None:
    _linear(tmp_path / "m.onnx", bias_first=True)
    (add,) = [op for op in import_onnx(tmp_path / "m.onnx").walk() if isinstance(op, nn.AddOp)]
    assert isinstance(add.lhs.owner, nn.DenseOp) and isinstance(add.rhs.owner, nn.ConstantOp)


def test_the_bias_of_an_exported_linear_joins_the_cutlass_gemm(tmp_path: Path, kernel_cache: Path) -> None:
    """Either operand order: one CUTLASS kernel with a bias epilogue, nothing after it."""
    x = np.random.default_rng(1).standard_normal((3, 8, 64)).astype(np.float32)
    for bias_first in (True, False):
        path = tmp_path / f"linear_{bias_first}.onnx"
        w, b = _linear(path, bias_first)
        exe = partita.compile(path, ["cuda -arch=sm_90", "cutlass", "llvm"], partitioner="eager",
                              cache_dir=kernel_cache)
        rows = exe.report().rows
        assert [(r.target, r.ops) for r in rows if r.target != "buffer alias"] == [("cutlass", ("nn.dense", "nn.add"))], rows
        np.testing.assert_allclose(exe.run(x)[0], x @ w + b, rtol=1e-5, atol=1e-5)
