"""``combine-parallel-dense`` on named parameters: the concatenated weight is written once
to ``<cache-dir>/parameters`` (row blocks of the mapped parts, permuted ones included) and
named by the new constant; the module computes what it computed before; a second compile
finds the file instead of writing it again. (The dense-attribute forms: the lit test
``tests/filecheck/transforms/combine-parallel-dense.mlir``.)"""

from __future__ import annotations

import numpy as np

from partita.dialects import make_context, nn
from partita.ir import parse_module
from partita.ir.parameters import ParameterAttr, parameter_values
from partita.runtime.reference import run
from partita.transforms.combine_parallel_dense import CombineParallelDense


def _module(path, bias_offset: int) -> str:
    # Q's weight stored [K, N] (an ONNX MatMul weight, perm [1, 0]), K's stored [N, K];
    # Q's bias a parameter too.
    return f"""
func.func @main(%x: tensor<3x16xf32>) -> (tensor<3x24xf32>, tensor<3x8xf32>) {{
  %wq = nn.constant #nn.parameter<"q.weight" : tensor<24x16xf32>, file "{path}" at 0 perm [1, 0]>
  %bq = nn.constant #nn.parameter<"q.bias" : tensor<24xf32>, file "{path}" at {bias_offset}>
  %q = nn.dense %x, %wq : (tensor<3x16xf32>, tensor<24x16xf32>) -> tensor<3x24xf32>
  %qb = nn.add %q, %bq : (tensor<3x24xf32>, tensor<24xf32>) -> tensor<3x24xf32>
  %wk = nn.constant #nn.parameter<"k.weight" : tensor<8x16xf32>, file "{path}" at {16 * 24 * 4}>
  %k = nn.dense %x, %wk : (tensor<3x16xf32>, tensor<8x16xf32>) -> tensor<3x8xf32>
  func.return %qb, %k : tensor<3x24xf32>, tensor<3x8xf32>
}}"""


def test_parameters_are_concatenated_into_a_file_of_the_cache(tmp_path):
    rng = np.random.default_rng(3)
    wq, wk, bq = (rng.standard_normal(s).astype(np.float32) for s in ((16, 24), (8, 16), (24,)))
    path = tmp_path / "weights.bin"
    path.write_bytes(wq.tobytes() + wk.tobytes() + bq.tobytes())
    text = _module(path, wq.nbytes + wk.nbytes)
    x = rng.standard_normal((3, 16)).astype(np.float32)
    before = run(parse_module(text, make_context(), "m.mlir"), x)

    cache = tmp_path / "cache"
    module = parse_module(text, make_context(), "m.mlir")
    CombineParallelDense(cache_dir=str(cache)).apply(make_context(), module)
    (dense,) = [op for op in module.walk() if isinstance(op, nn.DenseOp)]
    weight = dense.weight.owner.value
    assert isinstance(weight, ParameterAttr) and weight.key.data == "q.weight+k.weight"
    (written,) = (cache / "parameters").iterdir()
    assert weight.file.data == str(written) and written.stat().st_size == 32 * 16 * 4
    np.testing.assert_array_equal(parameter_values(weight), np.concatenate([wq.T, wk]))
    assert [op.name for op in module.walk() if op.name.startswith("nn.")].count("nn.strided_slice") == 2
    after = run(module, x)
    for a, b in zip(before, after):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)

    # A second compile names the same file and does not write it again.
    stamp = written.stat().st_mtime_ns
    again = parse_module(text, make_context(), "m.mlir")
    CombineParallelDense(cache_dir=str(cache)).apply(make_context(), again)
    (dense,) = [op for op in again.walk() if isinstance(op, nn.DenseOp)]
    assert dense.weight.owner.value.file.data == str(written) and written.stat().st_mtime_ns == stamp
    assert list((cache / "parameters").iterdir()) == [written]


def test_an_unwritable_cache_leaves_the_gemms_apart(tmp_path):
    """The combined weight's file cannot be written (its directory is a file): the denses
    stay as they were and the module still computes the same."""
    rng = np.random.default_rng(4)
    wq, wk, bq = (rng.standard_normal(s).astype(np.float32) for s in ((16, 24), (8, 16), (24,)))
    path = tmp_path / "weights.bin"
    path.write_bytes(wq.tobytes() + wk.tobytes() + bq.tobytes())
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    module = parse_module(_module(path, wq.nbytes + wk.nbytes), make_context(), "m.mlir")
    CombineParallelDense(cache_dir=str(blocked)).apply(make_context(), module)
    assert [op.name for op in module.walk() if op.name.startswith("nn.")].count("nn.dense") == 2
    assert "nn.strided_slice" not in [op.name for op in module.walk()]
