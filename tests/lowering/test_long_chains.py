"""A flat chain of hundreds of element-wise ops fuses into one kernel whose emission is a
loop over the chain (it used to recurse once per fused op and overflowed Python's stack
at about 400 ops); the kernel, built for the host, computes what the reference does."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_check import check_kernels, fuse  # tests/support/kernel_check.py

OPS = ["nn.tanh", "nn.sigmoid", "nn.neg", "nn.relu"]


def chain(length: int) -> str:
    lines = ["func.func @main(%x: tensor<4x16xf32>, %b: tensor<4x16xf32>) -> tensor<4x16xf32> {"]
    previous = "%x"
    for i in range(length):
        if i % 50 == 49:  # a binary op now and then
            lines.append(f"  %v{i} = nn.add {previous}, %b : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>")
        else:
            lines.append(f"  %v{i} = {OPS[i % len(OPS)]} {previous} : (tensor<4x16xf32>) -> tensor<4x16xf32>")
        previous = f"%v{i}"
    lines.append(f"  func.return {previous} : tensor<4x16xf32>\n}}")
    return "\n".join(lines)


@pytest.mark.skipif(not have_gxx(), reason="needs g++ to build the kernels for the host")
def test_a_chain_of_1000_element_wise_ops_is_one_correct_kernel(tmp_path: Path) -> None:
    module = fuse(chain(1000))
    fused = [op for op in module.walk() if op.name == "func.func" and "fused" in op.sym_name.data]
    assert len(fused) == 1  # one kernel for the whole chain
    check_kernels(module, tmp_path)
