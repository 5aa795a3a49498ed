"""A serial split-k GEMM runs its thread epilogue once per K partition: the partial sums
of every partition but the last must pass through unchanged (``alpha * acc + beta * C``,
no activation), the last applies the activation to the whole sum. CUTLASS's own functor
code decides this (``set_k_partition``), so it is built here with the host's C++ compiler
from the very type the emitter declares, and run on a fragment.

On an H200, a split-k GEMM with ``LinearCombinationRelu`` wrote NaN everywhere: that
functor disables ReLU on the partial sums with a NaN threshold, which CUTLASS 4's
NaN-propagating ``ReLu`` passes on."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from partita.lowering import nvrtc
from partita.lowering.cutlass.emitter import thread_epilogue
from partita.lowering.cutlass.kernels import KernelSpec, choose_config

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++ for CUTLASS's host code")

ACC = [-2.0, -0.5, 0.5, 3.0]
SOURCE = [0.25, 0.25, -1.0, 0.0]  # the bias row (partition 0) or the partial sum so far (later ones)
PARTITIONS = 2

_MAIN = r'''
#include <cstdio>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/thread/linear_combination.h>
#include <cutlass/epilogue/thread/linear_combination_relu.h>
#include <cutlass/epilogue/thread/linear_combination_gelu.h>
#include <cutlass/epilogue/thread/linear_combination_generic.h>
using Epilogue = EPILOGUE;
int main() {
  typename Epilogue::FragmentAccumulator acc;
  typename Epilogue::FragmentSource source;
  const float a[4] = {ACC}, c[4] = {SOURCE};
  for (int i = 0; i < 4; ++i) { acc[i] = a[i]; source[i] = c[i]; }
  for (int k = 0; k < PARTITIONS; ++k) {
    Epilogue op(typename Epilogue::Params(1.0f, 1.0f));
    op.set_k_partition(k, PARTITIONS);
    auto out = op(acc, source);
    std::printf("%d", k);
    for (int i = 0; i < 4; ++i) std::printf(" %.9g", float(out[i]));
    std::printf("\n");
  }
}
'''


def _run(epilogue: str, where: Path) -> dict[int, np.ndarray]:
    source = where / "epilogue.cpp"
    source.write_text(_MAIN.replace("EPILOGUE", epilogue).replace("PARTITIONS", str(PARTITIONS))
                      .replace("ACC", ", ".join(map(str, ACC))).replace("SOURCE", ", ".join(map(str, SOURCE))))
    binary = where / "epilogue"
    subprocess.run(["g++", "-std=c++17", "-O0", "-w", "-fpermissive", *(f"-I{p}" for p in nvrtc.cuda_include_paths()),
                    str(source), "-o", str(binary)], check=True, capture_output=True, timeout=300)
    lines = subprocess.run([str(binary)], check=True, capture_output=True, text=True, timeout=60).stdout.split("\n")
    return {int(w[0]): np.array(w[1:], np.float32) for w in (line.split() for line in lines) if w}


@pytest.mark.parametrize(("epilogue", "activation"), [
    ("bias_relu", lambda x: np.maximum(x, 0.0)),
    ("bias", lambda x: x),
])
def test_split_k_partial_sums_skip_the_activation(tmp_path, epilogue: str, activation) -> None:
    spec = KernelSpec.dense(32, 32, 4096, "float16", epilogue=epilogue)
    cfg = choose_config(spec, 80, split_k_slices=PARTITIONS)
    assert cfg.split_k == PARTITIONS
    out = _run(thread_epilogue(spec, cfg, "float, 4, float, float"), tmp_path)
    total = np.array(ACC, np.float32) + np.array(SOURCE, np.float32)
    np.testing.assert_array_equal(out[0], total)  # a partial sum: no activation, no NaN
    np.testing.assert_array_equal(out[PARTITIONS - 1], activation(total))
