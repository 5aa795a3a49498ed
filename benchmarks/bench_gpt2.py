"""A GPT-2 of 0.81 GB as a new user would try it (issue 25): random weights, 12 layers,
hidden 1024, exported by torch's dynamo exporter once with ONNX external data and once with
its weights inside the ``.onnx`` file; for each, ``partita-compile`` and ``partita-run`` of
the compiled file (simulated device) in fresh processes, with wall time and peak resident
memory (``/proc/self/status`` ``VmHWM`` of the child), and onnxruntime on the same input.

Exporting needs torch, transformers and onnxscript, which Partita does not depend on; give
their interpreter with ``--export-python`` (the measured runs use this one)::

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch transformers onnx onnxscript
    python benchmarks/bench_gpt2.py --export-python /tmp/torchenv/bin/python [--keep DIR]

The table in the README (section "Compile once, run many") was measured with it on the
2-core development VM, warm kernel cache.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import textwrap
from pathlib import Path

import numpy as np
from bench_weights import measure  # benchmarks/: the child process that reports its own peak

_EXPORT = textwrap.dedent("""
    import sys, numpy as np, onnx, torch, transformers
    folder, tokens = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=1024, n_layer=12, n_head=16, vocab_size=50257, n_positions=1024,
                                     use_cache=False)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = np.random.default_rng(0).integers(0, config.vocab_size, (1, tokens)).astype(np.int64)
    torch.onnx.export(model, (torch.from_numpy(ids),), f"{folder}/external/gpt2.onnx", input_names=["input_ids"],
                      output_names=["logits"], dynamo=True, external_data=True)
    onnx.save_model(onnx.load(f"{folder}/external/gpt2.onnx"), f"{folder}/embedded/gpt2.onnx")
    np.savez(f"{folder}/inputs.npz", input_ids=ids)
""")

_ORT = textwrap.dedent("""
    import json, re, sys, time
    import numpy as np, onnxruntime as ort
    start = time.perf_counter()
    session = ort.InferenceSession({model!r}, providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, dict(np.load({inputs!r})))
    seconds = time.perf_counter() - start
    np.save({out!r}, logits)
    peak = int(re.search(r'VmHWM:\\s*(\\d+)', open('/proc/self/status').read()).group(1))
    print(json.dumps({{"code": 0, "seconds": seconds, "peak_kib": peak}}), file=sys.stderr)
""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export-python", required=True, help="a Python with torch, transformers and onnxscript")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--keep", type=Path, help="export into this folder and keep it")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        for storage in ("external", "embedded"):
            (folder / storage).mkdir(parents=True, exist_ok=True)
        subprocess.run([args.export_python, "-c", _EXPORT, str(folder), str(args.tokens)], check=True,
                       capture_output=True)
        weights = (folder / "external" / "gpt2.onnx.data").stat().st_size
        print(f"GPT-2, {weights / 1e9:.2f} GB of f32 weights, {args.tokens} tokens")
        print(f"{'weights':>9} | {'compile s':>9} {'peak GB':>8} {'x w':>5} | {'run s':>6} {'peak GB':>8} {'x w':>5} |"
              f" {'ort s':>6} {'peak GB':>8} | {'max |diff|':>10}")
        for storage in ("external", "embedded"):
            model, cwd = folder / storage / "gpt2.onnx", Path(tempfile.mkdtemp())
            compiled, out, ort_out = cwd / "gpt2.partita", cwd / "y.npz", cwd / "ort.npy"
            c = measure("compile", [str(model), "-o", str(compiled), "-q"], cwd)
            r = measure("run", [str(compiled), "-q", "--inputs", str(folder / "inputs.npz"), "--output", str(out)], cwd)
            o = measure("onnxruntime", [], cwd, _ORT.format(model=str(model), inputs=str(folder / "inputs.npz"),
                                                            out=str(ort_out)))
            got = np.load(out)
            diff = float(np.abs(got[next(iter(got.keys()))] - np.load(ort_out)).max())
            gb = 1e9
            print(f"{storage:>9} | {c['seconds']:9.1f} {c['peak_kib'] * 1024 / gb:8.2f} {c['peak_kib'] * 1024 / weights:5.2f}"
                  f" | {r['seconds']:6.1f} {r['peak_kib'] * 1024 / gb:8.2f} {r['peak_kib'] * 1024 / weights:5.2f}"
                  f" | {o['seconds']:6.1f} {o['peak_kib'] * 1024 / gb:8.2f} | {diff:10.2e}", flush=True)


if __name__ == "__main__":
    main()
