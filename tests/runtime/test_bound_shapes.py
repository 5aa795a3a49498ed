"""Dynamic dims are checked when the launch plan binds a shape signature: an input whose
dims verify against ``?`` but not against the ops (a 3-column input to a dense over 8)
is a located error naming the op, raised before any step runs, for host ops and for the
partitions a kernel runs alike (``partita.analysis.bound_shapes``)."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType

import partita
from partita.analysis.bound_shapes import FunctionShapes
from partita.dialects import make_context, nn
from partita.ir import PartitaError, parse_module
from partita.runtime.plan import Runtime

DENSE = """
func.func @main(%x: tensor<?x?xf32>, %w: tensor<6x8xf32>) -> tensor<?x6xf32> {
  %y = nn.dense %x, %w : (tensor<?x?xf32>, tensor<6x8xf32>) -> tensor<?x6xf32>
  %z = nn.relu %y : (tensor<?x6xf32>) -> tensor<?x6xf32>
  func.return %z : tensor<?x6xf32>
}
"""

W = np.arange(48, dtype=np.float32).reshape(6, 8) / 48


@pytest.mark.parametrize(("targets", "partitioner"), [("llvm", "none"), ("cuda -arch=sm_90,llvm", "eager")])
def test_an_input_that_does_not_fit_is_refused_at_bind(targets, partitioner) -> None:
    exe = partita.compile(DENSE, targets=targets, partitioner=partitioner)
    x = np.ones((2, 8), np.float32)
    np.testing.assert_allclose(exe.run(x, W)[0], np.maximum(x @ W.T, 0), rtol=1e-5)
    runtime = Runtime(exe.module, "simulated", embedded=exe.binaries)
    try:
        with pytest.raises(PartitaError, match=r"<string>:3:\d+: error: 'nn.dense' op cannot run on operands of "
                                               r"shapes \(2x3, 6x8\) bound from these inputs: .*3 vs 8"):
            runtime.run(np.ones((2, 3), np.float32), W)
        # Refused while binding: no signature bound, no step ran.
        assert runtime.stats["binds"] == runtime.stats["host_steps"] == runtime.stats["runs"] == 0
        np.testing.assert_allclose(runtime.run(x, W)[0], np.maximum(x @ W.T, 0), rtol=1e-5)
    finally:
        runtime.close()


def test_host_ops_get_the_bound_result_shape() -> None:
    # The relu after the dense gets the dense's bound shape, not its declared ?x6.
    exe = partita.compile(DENSE, targets="llvm", partitioner="none")
    for rows in (1, 5):
        (y,) = exe.run(np.ones((rows, 8), np.float32), W)
        assert y.shape == (rows, 6)


def test_a_reference_body_is_checked_at_bound_shapes_without_changing_its_ir() -> None:
    """``FunctionShapes`` reads a body once: only the ops a dynamic dim reaches are bound
    again (the rest keep their declared shapes); each is checked by its own rule at the
    bound shapes (``nn.operand_shapes``), and the IR's types stay what they were."""
    module = parse_module("""
func.func @f(%x: tensor<?x8xf32>, %w: tensor<6x8xf32>, %b: tensor<6xf32>) -> (tensor<?x6xf32>, tensor<6xf32>) {
  %y = nn.dense %x, %w : (tensor<?x8xf32>, tensor<6x8xf32>) -> tensor<?x6xf32>
  %c = nn.relu %b : (tensor<6xf32>) -> tensor<6xf32>
  %z = nn.bias_add %y, %c {axis = 1 : i64} : (tensor<?x6xf32>, tensor<6xf32>) -> tensor<?x6xf32>
  func.return %z, %c : tensor<?x6xf32>, tensor<6xf32>
}
""", make_context())
    (function,) = [op for op in module.walk() if isinstance(op, func.FuncOp)]
    rules = FunctionShapes(function)
    assert [type(op) for op, _, _ in rules.steps] == [nn.DenseOp, nn.BiasAddOp]
    assert rules.bind([(3, 8), (6, 8), (6,)]) == [(3, 6), (6,)]
    assert rules.bind([(5, 8), (6, 8), (6,)]) == [(5, 6), (6,)]
    with pytest.raises(PartitaError, match=r"'nn.dense' op cannot run on operands of shapes \(0x9, 6x8\)"):
        rules.bind([(0, 9), (6, 8), (6,)])
    dense = rules.steps[0][0]
    assert dense.operands[0].type == TensorType(nn.f32, [nn.DYN, 8])
    assert nn.DenseOp.infer_shape(dense) == (nn.DYN, 6)  # no bound shape outlives the check
