"""Outlining with deduplication stays linear: time ``outline-compiler-functions{dedup=true}``
on modules of 1,000 and 10,000 partitions (one in ten distinct), built in memory (parsing
would dominate), and print total and per-partition times.

    /tmp/pvenv/bin/python benchmarks/bench_outline.py [sizes...]
"""

from __future__ import annotations

import sys
import time

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr, TensorType, f32
from xdsl.ir import Block, Region

from partita.dialects import make_context, nn
from partita.dialects.byoc import COMPILER, PartitionOp, YieldOp

T = TensorType(f32, [8, 8])


def build(n_partitions: int, n_distinct: int) -> ModuleOp:
    """@main: a chain of partitions add -> clip -> relu; partition i clips at
    ``(i % n_distinct) / n_distinct`` so exactly ``n_distinct`` of them differ."""
    block = Block(arg_types=[T, T])
    x, value = block.args
    for i in range(n_partitions):
        body = Block(arg_types=[T, T])
        a, b = body.args
        add = nn.AddOp(a, b)
        clip = nn.ClipOp(add, -(i % n_distinct) / n_distinct, 1.0)
        relu = nn.ReluOp(clip)
        body.add_ops([add, clip, relu, YieldOp(relu)])
        partition = PartitionOp([value, x], [T], Region(body), {COMPILER: StringAttr("cutlass")})
        block.add_op(partition)
        value = partition.results[0]
    block.add_op(func.ReturnOp(value))
    return ModuleOp([func.FuncOp("main", ([T, T], [T]), Region(block))])


def main(sizes: list[int]) -> None:
    from partita.transforms.outline_compiler_functions import OutlineCompilerFunctions

    ctx = make_context()
    print(f"{'partitions':>10} {'distinct':>8} {'functions':>9} {'total (s)':>10} {'per partition (us)':>19}")
    for n in sizes:
        module = build(n, max(1, n // 10))
        start = time.perf_counter()
        OutlineCompilerFunctions(dedup=True).apply(ctx, module)
        elapsed = time.perf_counter() - start
        n_functions = sum(isinstance(op, func.FuncOp) for op in module.ops) - 1
        print(f"{n:>10} {max(1, n // 10):>8} {n_functions:>9} {elapsed:>10.3f} {elapsed / n * 1e6:>19.1f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1_000, 10_000])
