"""Round trip (parse, verify, print: what ``partita-opt`` does) of a module with many functions.

xDSL 0.74 verifies every func.call by scanning the module, which is quadratic; Partita's
verifier indexes symbols once, so the round trip should grow linearly. Target: a
10,000-function module well under 10 s on a 2-core machine.

    python benchmarks/bench_roundtrip.py [n ...]
"""

from __future__ import annotations

import sys
import time
from io import StringIO

from xdsl.printer import Printer

from partita.dialects import make_context
from partita.ir import parse_module, verify_module


def make_module_text(n: int) -> str:
    lines = []
    for i in range(n):
        lines.append(
            f"func.func private @f{i}(%x: tensor<8x16xf16>) -> tensor<8x16xf16> "
            'attributes {byoc.compiler = "cutlass", byoc.global_symbol = "f' + str(i) + '"} {\n'
            "  %0 = nn.relu %x : (tensor<8x16xf16>) -> tensor<8x16xf16>\n"
            "  func.return %0 : tensor<8x16xf16>\n}"
        )
    body = ["func.func @main(%x: tensor<8x16xf16>) -> tensor<8x16xf16> {"]
    prev = "%x"
    for i in range(n):
        body.append(f"  %v{i} = func.call @f{i}({prev}) : (tensor<8x16xf16>) -> tensor<8x16xf16>")
        prev = f"%v{i}"
    body.append(f"  func.return {prev} : tensor<8x16xf16>\n}}")
    return "\n".join(lines + ["\n".join(body)]) + "\n"


def measure(n: int) -> dict[str, float]:
    text = make_module_text(n)
    ctx = make_context()
    t0 = time.perf_counter()
    module = parse_module(text, ctx, "bench.mlir", verify=False)
    t1 = time.perf_counter()
    verify_module(module)
    t2 = time.perf_counter()
    out = StringIO()
    Printer(stream=out).print_op(module)
    t3 = time.perf_counter()
    assert out.getvalue().count("func.func") == n + 1
    return {"parse": t1 - t0, "verify": t2 - t1, "print": t3 - t2, "total": t3 - t0}


def main(sizes: list[int]) -> None:
    print(f"{'functions':>10} {'parse s':>9} {'verify s':>9} {'print s':>9} {'total s':>9} {'us/func':>9}")
    for n in sizes:
        r = measure(n)
        print(
            f"{n:>10} {r['parse']:>9.2f} {r['verify']:>9.2f} {r['print']:>9.2f}"
            f" {r['total']:>9.2f} {1e6 * r['total'] / n:>9.0f}"
        )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1000, 10000])
