"""A KV-cache decode loop through the launch plan: per-token latency on the simulated device,
and per token on a CUDA device driven by the recording driver: launches, copies (the cache
stays on the device: each step's ``present`` key/values, returned with
``outputs="device"``, are the next step's ``past`` inputs, read in place), allocations,
binds, graph instantiations and graph updates, with exact signatures and with shape buckets.

    python benchmarks/bench_decode.py [--tokens 64]

The decoder step is the one-layer attention step of ``tests/frontends/test_kv_cache_import.py``
(positions ``Range(past, past + 1)``, causal mask, cache concatenated along the sequence).
With exact signatures every new past length binds (allocates) a plan and instantiates a
graph. With ``buckets="pow2"`` (``partita.runtime.arenas``) the lengths of one power-of-two
bucket share two arenas (the step alternates between them, reading the cache in place) and
their graphs, updated in place per token (only the kernel nodes whose launch changed are
set): a handful of allocations and instantiations for the whole loop.

The fixed-capacity form (``tests/ops/test_ops_kv_cache.py``: TensorScatter writes each
step's row at its position) has one shape for every step: no bind and one graph for the
whole loop, and its scatters are tied to the caches (``tie-in-place-updates``): each step
stores its new row into the cache's own buffer, the presents are the pasts' buffers, and
feeding them back copies nothing.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

import partita

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "examples"))
from frontends.test_kv_cache_import import HD, D, H, _decoder_step  # noqa: E402 (tests/ on the path first)
from ops.test_ops_kv_cache import _static_cache_step  # noqa: E402
from support.recording_driver import RecordingDriver  # noqa: E402

from partita.runtime.cuda import CudaDevice  # noqa: E402

STATIC: dict[str, int] = {}
"""The fixed-capacity decoder's dims (D, H, HD and the capacity L), once it is built."""


def decode(exe: partita.Executable, tokens: int, cache=None, seed: int = 0) -> tuple[list[float], tuple]:
    """Runs ``tokens`` decode steps from ``cache`` (default: empty); host seconds per
    step, and the cache (on the device) after them."""
    rng = np.random.default_rng(seed)
    past_key, past_value = cache or (np.zeros((1, H, 0, HD), np.float32),) * 2
    seconds = []
    for _ in range(tokens):
        x = rng.standard_normal((1, 1, D)).astype(np.float32)
        start = time.perf_counter()
        _, past_key, past_value = exe.run(x=x, past_key=past_key, past_value=past_value, outputs="device")
        seconds.append(time.perf_counter() - start)
    return seconds, (past_key, past_value)


def decode_static(exe: partita.Executable, tokens: int, cache=None, seed: int = 0) -> tuple[list[float], tuple]:
    """The same loop over the fixed-capacity cache of ``tests/ops/test_ops_kv_cache.py``
    (TensorScatter writes each step's row at ``position``): every step has one shape."""
    rng = np.random.default_rng(seed)
    position, key, value = cache or (0, *(np.zeros((1, STATIC["H"], STATIC["L"], STATIC["HD"]), np.float32),) * 2)
    seconds = []
    for _ in range(tokens):
        x = rng.standard_normal((1, 1, STATIC["D"])).astype(np.float32)
        start = time.perf_counter()
        _, key, value = exe.run(x=x, position=np.array(position, np.int64), key_cache=key, value_cache=value,
                                outputs="device")
        seconds.append(time.perf_counter() - start)
        position += 1
    return seconds, (position, key, value)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args(argv)
    # The model's weights are parameters read from the file when the plan loads: the
    # directory lives as long as the executable.
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "step.onnx"
        _decoder_step(path, 1)
        exe = partita.compile(str(path))
        for buckets in (None, "pow2"):
            print(f"-- concatenated cache, {'exact signatures' if buckets is None else 'shape buckets: ' + buckets}")
            run(exe, args.tokens, buckets)
        static = Path(tmp) / "static.onnx"
        STATIC.update(_static_cache_step(static))
        exe = partita.compile(str(static))
        for buckets in (None, "pow2"):
            print(f"-- fixed-capacity cache (TensorScatter), "
                  f"{'exact signatures' if buckets is None else 'shape buckets: ' + buckets}")
            run(exe, min(args.tokens, STATIC["L"]), buckets, decode_static)
        print("-- the runtime's cost per token: the example decoder (concatenated caches), shape buckets, "
              "recording driver (no kernel runs)")
        for layers in (1, 4):
            print(f"{layers} layer(s): {host_per_token(layers, args.tokens, Path(tmp)) * 1e3:.2f} ms host time per token")


def host_per_token(layers: int, tokens: int, tmp: Path) -> float:
    """Median host seconds per token of the example decoder (``examples/make_models.py``)
    with ``layers`` layers on the recording driver with shape buckets: kernels do not run,
    so this is what the runtime costs per token: a new signature binds each one, from the
    one before (only what reads the grown cache is bound again, and a layer's calls copy
    the launches of the layer before at the same shapes)."""
    from make_models import make_decoder_step  # examples/ on the path

    path = tmp / f"decoder{layers}.onnx"
    onnx.save(make_decoder_step(layers=layers), str(path))
    exe = partita.compile(str(path))
    exe.load(CudaDevice(driver=RecordingDriver()), buckets="pow2")
    suffixes = [""] if layers == 1 else [f".{i}" for i in range(layers)]
    names = [f"{kv}{s}" for s in suffixes for kv in ("key", "value")]
    cache = {f"past_{n}": np.zeros((1, 4, 0, 16), np.float32) for n in names}
    rng = np.random.default_rng(0)
    seconds = []
    for _ in range(tokens):
        x = rng.standard_normal((1, 1, 64)).astype(np.float32)
        start = time.perf_counter()
        _, *presents = exe.run(input_embeds=x, **cache, outputs="device")
        seconds.append(time.perf_counter() - start)
        cache = {f"past_{n}": p for n, p in zip(names, presents)}
    exe.close()
    return statistics.median(seconds[tokens // 4:])


def run(exe: partita.Executable, tokens: int, buckets: str | None = None, loop=decode) -> None:
    exe.load("simulated", buckets=buckets)
    per_token, _ = loop(exe, tokens)
    stats = exe.runtime.stats
    print(f"simulated device: {statistics.median(per_token) * 1e3:.3f} ms per token (median host time of "
          f"{tokens} tokens), {stats['binds'] / tokens:.2f} binds, {stats['allocations'] / tokens:.2f} allocations, "
          f"{stats['captures'] / tokens:.2f} graph instantiations and {stats['graph_updates'] / tokens:.2f} graph "
          "updates per token")

    drv = RecordingDriver()
    exe.load(CudaDevice(driver=drv), buckets=buckets)
    half = tokens // 2
    _, cache = loop(exe, half)  # the second half is counted, the cache grown by the first
    drv.reset()
    before = dict(exe.runtime.stats)
    loop(exe, tokens - half, cache, seed=1)
    n = tokens - half
    calls, stats = drv.calls, exe.runtime.stats
    print(f"recording driver, per token over tokens {half + 1}..{tokens}: "
          f"{len(drv.launches) / n:.1f} kernel launches, "
          f"{calls['cuMemcpyHtoDAsync'] / n:.1f} uploads ({calls['cuMemcpyHtoDAsync:bytes'] / n:.0f} B), "
          f"{calls['cuMemcpyDtoHAsync'] / n:.1f} downloads ({calls['cuMemcpyDtoHAsync:bytes'] / n:.0f} B), "
          f"{calls['cuMemcpyDtoDAsync'] / n:.1f} device copies ({calls['cuMemcpyDtoDAsync:bytes'] / n:.0f} B), "
          f"{calls['cuMemAlloc'] / n:.1f} allocations, "
          f"{(stats['binds'] - before['binds']) / n:.1f} binds, {calls['cuGraphInstantiate'] / n:.2f} graph "
          f"instantiations, {calls['cuGraphExecUpdate'] / n:.2f} whole-graph updates, "
          f"{calls['cuGraphExecKernelNodeSetParams'] / n:.1f} kernel nodes set; over all {tokens} tokens: "
          f"{stats['allocations']} allocations, {stats['captures']} graphs instantiated")
    exe.close()


if __name__ == "__main__":
    main()
