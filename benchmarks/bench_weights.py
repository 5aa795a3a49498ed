"""Compile and load models of N GB of random weights, and show how time and peak memory
grow with size (issue 25, item 4).

    python benchmarks/bench_weights.py --sizes 0.1,0.25,0.5 [--hidden 2048] [--keep DIR]
        [--form matmul|gemm] [--precision fp32|fp16|bf16]

Each model is built from code with ``onnx.helper`` (no download): a stack of
``MatMul -> Add -> Relu`` layers of ``hidden x hidden`` f32 weights, as many as make the
size, saved with its weights as ONNX external data next to the model file. For each size
it runs ``partita-compile`` and then ``partita-run`` of the compiled file (simulated
device) in fresh processes, and prints their wall time and peak resident memory
(the child's own ``VmHWM`` from ``/proc``: ``ru_maxrss`` would count the parent's) as a
multiple of the weights.

Measured on the 2-core, 24 GB development VM (idle), default targets, matmul form (each
weight a ``perm [1, 0]`` parameter of the ONNX data file)::

        GB layers | compile s  peak GB   x w | file GB | load s  s/GB |  run s  peak GB   x w
      0.50     30 |       7.1     0.15  0.29 |    0.50 |    1.3   2.5 |    4.4     0.59  1.18
      1.01     60 |      12.4     0.15  0.15 |    1.01 |    2.4   2.4 |    4.9     1.10  1.09
      2.00    119 |      19.6     0.15  0.07 |    2.00 |    4.7   2.3 |    8.8     2.09  1.05
      3.99    238 |      46.3     0.15  0.04 |    4.00 |   10.8   2.7 |   16.1     4.09  1.02

(load at 1 GB was 4.0 s with the weights hashed one after the other: each is now hashed on
a thread of its own.)

The same with every weight inside the ``.onnx`` file (``--storage embedded``, as exporters
write models under 2 GB), before the importer named embedded payloads in place (b283e1a)
and after::

        GB layers | compile s  peak GB   x w | file GB | load s  s/GB |  run s  peak GB   x w
    before
      0.50     30 |       9.4     2.60  5.16 |    0.50 |    1.0   2.0 |    2.8     0.59  1.18
      1.01     60 |      16.9     5.12  5.08 |    1.01 |    1.8   1.7 |    3.7     1.10  1.09
    after
      0.50     30 |       5.3     0.15  0.29 |    0.50 |    1.1   2.1 |    2.3     0.59  1.18
      1.01     60 |       8.5     0.20  0.20 |    1.01 |    1.7   1.7 |    3.4     1.10  1.09

Compile memory no longer grows with the weights (they are mapped, never read into the
IR; the file is written a 4 MiB chunk at a time). A run's peak is the weights themselves:
the simulated device reads them where the file is mapped, and those pages count as
resident. Loading is sha256 (about 0.3 GB/s a core on this VM, which has no SHA
extensions), on every core at once; a run adds the simulated device's NumPy GEMMs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_CHILD = r"""
import json, re, sys, time
start = time.perf_counter()
from partita.tools import {tool}
code = {tool}.main({argv!r})
seconds = time.perf_counter() - start
peak = int(re.search(r'VmHWM:\s*(\d+)', open('/proc/self/status').read()).group(1))
print(json.dumps({{"code": code, "seconds": seconds, "peak_kib": peak}}), file=sys.stderr)
sys.exit(code)
"""

# Loading alone: the file mapped, every weight's sha256 checked, the launch plan made on the
# simulated device (weights as views of the mapping); the time after the imports (partita
# imports its driver lazily: a second or two of the first call otherwise).
_LOAD = r"""
import json, re, sys, time
import partita, partita.driver, partita.runtime.plan_load, partita.runtime.reference  # imported before the clock starts
start = time.perf_counter()
partita.load({path!r}).load("simulated")
seconds = time.perf_counter() - start
peak = int(re.search(r'VmHWM:\s*(\d+)', open('/proc/self/status').read()).group(1))
print(json.dumps({{"code": 0, "seconds": seconds, "peak_kib": peak}}), file=sys.stderr)
"""


def _external(name: str, dims: list[int], handle, location: str) -> onnx.TensorProto:
    """An f32 initializer whose data is the next bytes written to ``handle``."""
    tensor = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
    tensor.data_location = TensorProto.EXTERNAL
    length = int(np.prod(dims)) * 4
    for key, value in (("location", location), ("offset", str(handle.tell())), ("length", str(length))):
        tensor.external_data.add(key=key, value=value)
    return tensor


def build_model(path: Path, gigabytes: float, hidden: int, form: str = "matmul", seed: int = 0,
                storage: str = "external") -> int:
    """Writes the MLP of about ``gigabytes`` of f32 weights to ``path``; returns the bytes
    of weights. ``storage``: ``external`` (ONNX external data in ``path.name + '.data'``,
    written a layer at a time: building a 4 GB model takes one layer of memory) or
    ``embedded`` (every initializer's ``raw_data`` inside the ``.onnx`` file, as exporters
    write models under 2 GB; built in memory). ``form``: ``matmul`` (``MatMul`` by a [K, N]
    weight, imported as a transposed copy) or ``gemm`` (``Gemm`` with ``transB``, as torch
    exports ``nn.Linear``: the weight is used as stored)."""
    rng = np.random.default_rng(seed)
    per_layer = hidden * hidden * 4 + hidden * 4
    layers = max(1, round(gigabytes * 1e9 / per_layer))
    nodes, inits, x = [], [], "x"
    location = path.name + ".data"
    with open(path.parent / location if storage == "external" else os.devnull, "wb") as data:
        for i in range(layers):
            w = rng.standard_normal((hidden, hidden), dtype=np.float32)
            w /= np.float32(np.sqrt(hidden))
            b = rng.standard_normal(hidden, dtype=np.float32) * np.float32(0.01)
            if storage == "embedded":
                inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
            else:
                inits.append(_external(f"w{i}", [hidden, hidden], data, location))
                data.write(w.tobytes())
                inits.append(_external(f"b{i}", [hidden], data, location))
                data.write(b.tobytes())
            if form == "gemm":
                nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"a{i}"], transB=1))
            else:
                nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                          helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"])]
            nodes.append(helper.make_node("Relu", [f"a{i}"], [f"h{i}"]))
            x = f"h{i}"
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, hidden])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, hidden])], inits,
    )
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return layers * per_layer


def measure(tool: str, argv: list[str], cwd: Path, script: str | None = None) -> dict:
    script = script or _CHILD.format(tool=tool, argv=argv)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=cwd, check=False)
    last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else ""
    if done.returncode != 0 or not last.startswith("{"):
        raise SystemExit(f"{tool} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(last)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="0.1,0.25", help="comma-separated sizes in GB (default: %(default)s)")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--targets", default="cuda -arch=sm_90,llvm")
    parser.add_argument("--keep", type=Path, help="build the models in this folder and keep them")
    parser.add_argument("--form", choices=("matmul", "gemm"), default="matmul",
                        help="MatMul by [K, N] weights (transposed on import) or Gemm transB=1 (used as stored)")
    parser.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32")
    parser.add_argument("--storage", choices=("external", "embedded"), default="external",
                        help="weights as ONNX external data, or inside the .onnx file (under 2 GB)")
    args = parser.parse_args()
    print(f"{args.form}, {args.storage}, {args.precision}, targets {args.targets!r}")
    print(f"{'GB':>6} {'layers':>6} | {'compile s':>9} {'peak GB':>8} {'x w':>5} | {'file GB':>7} |"
          f" {'load s':>6} {'s/GB':>5} | {'run s':>6} {'peak GB':>8} {'x w':>5}")
    for size in (float(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as scratch:
            folder = args.keep or Path(scratch)
            folder.mkdir(parents=True, exist_ok=True)
            model = folder / f"mlp_{size:g}gb.onnx"
            compiled = model.with_suffix(".partita")
            weights = build_model(model, size, args.hidden, args.form, storage=args.storage)
            # Another working directory: external data must be found next to the model.
            cwd = Path(tempfile.mkdtemp())
            start = time.perf_counter()
            c = measure("compile", [str(model), "-o", str(compiled), "-q", "--targets", args.targets,
                                    "--precision", args.precision], cwd)
            c["seconds"] = time.perf_counter() - start
            load = measure("load", [], cwd, _LOAD.format(path=str(compiled)))
            start = time.perf_counter()
            r = measure("run", [str(compiled), "-q"], cwd)
            r["seconds"] = time.perf_counter() - start
            gb = 1e9
            print(f"{weights / gb:6.2f} {round(weights / (args.hidden * (args.hidden + 1) * 4)):6d} | "
                  f"{c['seconds']:9.1f} {c['peak_kib'] * 1024 / gb:8.2f} {c['peak_kib'] * 1024 / weights:5.2f} | "
                  f"{compiled.stat().st_size / gb:7.2f} | "
                  f"{load['seconds']:6.1f} {load['seconds'] * gb / weights:5.1f} | "
                  f"{r['seconds']:6.1f} {r['peak_kib'] * 1024 / gb:8.2f} {r['peak_kib'] * 1024 / weights:5.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
