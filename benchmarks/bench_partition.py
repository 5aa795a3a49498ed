"""Partitioning stays linear: time ``partition-eager`` (+ outlining) and Collage
(``collage_partition``: matching, candidates, search, rewrite, dedup outlining) on
@main made of N encoder-MLP blocks (dense+bias+gelu, dense+bias, residual add; f16),
built in memory (parsing would dominate), and print per-block times.

``--recurrent`` times Collage on an ONNX LSTM unrolled over N steps instead (about 17 ops
a step around one hub: the hoisted input projection every step slices), the graph shape
that made candidate generation and MaxCoalesce superlinear.

    python benchmarks/bench_partition.py [sizes...] [--profile N] [--recurrent]
"""

from __future__ import annotations

import sys
import time

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType, f16
from xdsl.ir import Block, Region

from partita.dialects import make_context, nn

TOKENS, HIDDEN, FFN = 128, 768, 3072
TARGETS = "cuda,cutlass,cublas,cudnn,llvm"


def build(n_blocks: int) -> ModuleOp:
    """@main(x, w1, b1, w2, b2): ``n_blocks`` MLP blocks sharing their weights."""
    x_t = TensorType(f16, [TOKENS, HIDDEN])
    args = [x_t, TensorType(f16, [FFN, HIDDEN]), TensorType(f16, [FFN]),
            TensorType(f16, [HIDDEN, FFN]), TensorType(f16, [HIDDEN])]
    block = Block(arg_types=args)
    x, w1, b1, w2, b2 = block.args
    for _ in range(n_blocks):
        h = nn.DenseOp(x, w1)
        hb = nn.BiasAddOp(h, b1)
        g = nn.GeluOp(hb)
        o = nn.DenseOp(g, w2)
        ob = nn.BiasAddOp(o, b2)
        r = nn.AddOp(ob, x)
        block.add_ops([h, hb, g, o, ob, r])
        x = r.results[0]
    block.add_op(func.ReturnOp(x))
    return ModuleOp([func.FuncOp("main", (args, [x_t]), Region(block))])


def time_eager(n: int) -> float:
    from partita.transforms.outline_compiler_functions import OutlineCompilerFunctions
    from partita.transforms.partition_eager import PartitionEager

    ctx = make_context()
    module = build(n)
    start = time.perf_counter()
    PartitionEager(backends=("cutlass", "cublas", "cudnn")).apply(ctx, module)
    OutlineCompilerFunctions(dedup=True).apply(ctx, module)
    return time.perf_counter() - start


def time_collage(n: int) -> tuple[float, int]:
    from partita.collage import RooflineEstimator
    from partita.transforms.collage.partitioner import collage_partition

    ctx = make_context()
    module = build(n)
    start = time.perf_counter()
    report = collage_partition(module, TARGETS, RooflineEstimator("h100"), 3, baseline=False, ctx=ctx)
    elapsed = time.perf_counter() - start
    functions = sum(isinstance(op, func.FuncOp) for op in module.ops) - 1
    assert len(report.partitions) >= n
    return elapsed, functions


def build_recurrent(steps: int) -> ModuleOp:
    """@main(x): one ONNX LSTM (batch 2, 16 inputs, 32 hidden) over ``steps`` time steps."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    from partita.frontends.onnx import import_onnx

    rng = np.random.default_rng(0)
    weights = {"W": (1, 128, 16), "R": (1, 128, 32), "B": (1, 256)}
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=32)
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, 2, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in weights.items()])
    return import_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]))


def time_recurrent(steps: int) -> tuple[float, int]:
    from partita.collage import RooflineEstimator
    from partita.transforms.collage.partitioner import collage_partition

    module = build_recurrent(steps)
    ops = sum(1 for _ in module.walk()) - 3
    start = time.perf_counter()
    collage_partition(module, "cuda,cutlass,llvm", RooflineEstimator("h100"), 3, baseline=False, ctx=make_context())
    return time.perf_counter() - start, ops


def main(sizes: list[int]) -> None:
    print(f"{'blocks':>6} {'ops':>6} {'eager (s)':>10} {'us/block':>9} {'collage (s)':>11} {'us/block':>9} {'functions':>9}")
    for n in sizes:
        eager = time_eager(n)
        collage, functions = time_collage(n)
        print(f"{n:>6} {6 * n:>6} {eager:>10.3f} {eager / n * 1e6:>9.0f} {collage:>11.3f} {collage / n * 1e6:>9.0f} {functions:>9}")


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv[:1] == ["--profile"]:
        import cProfile
        import pstats

        n = int(argv[1]) if len(argv) > 1 else 1000
        cProfile.run(f"time_collage({n})", "/tmp/bench_partition.prof")
        pstats.Stats("/tmp/bench_partition.prof").sort_stats("cumulative").print_stats(30)
    elif "--recurrent" in argv:
        print(f"{'steps':>6} {'ops':>6} {'collage (s)':>11} {'ms/step':>8}")
        for steps in [int(a) for a in argv if a != "--recurrent"] or [50, 100, 200]:
            seconds, ops = time_recurrent(steps)
            print(f"{steps:>6} {ops:>6} {seconds:>11.2f} {seconds / steps * 1e3:>8.1f}")
    else:
        main([int(a) for a in argv] or [1, 10, 100, 1000])
