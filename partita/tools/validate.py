"""The steps of ``partita-doctor --validate``: on a GPU, proof that Partita works there.

Each step runs in a child process with a time limit (``--step-timeout``, 600 s by default;
``--total-timeout``, 1200 s, bounds them all: a step that would start with less than a
minute left is reported as not run), so one hung kernel or a cold compile cannot stall the
rest. A child writes its rows to a JSON file after every item, so a step that runs out of
time still reports what it finished.

* ``gpu-tests``: ``pytest -m gpu tests`` of the checkout (``--repo``), read back from its
  JUnit XML. The suite's guard (``tests/support/gpu_guard.py``) fails a ``gpu`` test that ran on
  the simulated device instead.
* ``benchmarks``: GEMM TFLOP/s (CUTLASS, cuBLASLt, and on an H100/H200 the CUTLASS 3
  Hopper kernel ``sm_90a`` builds) against ``torch.matmul``, a row
  reduction's GB/s against ``torch.sum``, attention against
  ``torch.nn.functional.scaled_dot_product_attention``, and a 4-bit projection
  (onnxruntime's MatMulNBits: a decode step's GEMV in GB/s, a prefill's tiles in TFLOP/s)
  against ``torch.matmul`` of its f16 weight, on the same device.
* ``models``: the bundled models (``examples/*.onnx``) and the exported ones
  (``tests/models/exported/*.onnx``, with their recorded inputs), compiled for this GPU's
  arch, run, and compared with onnxruntime on the CPU; their latency run eagerly, replayed
  as CUDA graphs, and under onnxruntime's CUDA provider where it is installed.
  A KV-cache decoder step (``examples/decoder_step.onnx``: ``past*`` inputs, ``present*``
  outputs) is also decoded for 64 tokens, its caches fed back on the device, each step
  against onnxruntime, in ms per token with shape buckets (graphs updated in place) and
  with exact signatures; ``examples/static_decoder_step.onnx`` likewise, its static caches
  updated in place by their scatter kernels.

The parent prints one table (step, item, metric, Partita, reference, status) and writes
the JSON (environment, steps, rows). It exits 0 when every step ran and nothing failed,
else 1. ``python -m partita.tools.validate STEP --out FILE`` runs one step's child.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import numpy as np

from partita.ir import PartitaError

STEP_NAMES = ("gpu-tests", "benchmarks", "models")
"""In the order they run: the models (cold compiles of a dozen models) last, so that a step
running out of the total budget costs the fewest results."""
GEMM_SHAPES = ((4096, 4096, 4096), (192, 4096, 4096), (1, 4096, 4096))
"""The f16 GEMMs the benchmarks time (M, N, K): a large square one (on an H100 / H200 the
persistent cooperative Hopper kernel), a few rows by a large weight (its 128x128
one-consumer kernel) and a decode step's row (the persistent kernel in CUTLASS's stream-K
heuristic: its tuning rows time that default against the 64-row tiles and split-K)."""
ATTENTION_SHAPES = ((8, 16, 1024, 64), (1, 32, 2048, 128))
"""The f16 attentions the benchmarks time (batch, heads, sequence, head dim): Q in
registers at head dim 64, and a LLaMA layer's 32 heads of 128 at 2048 tokens (Q in shared
memory, FlashAttention-2's form there)."""
MIN_STEP_SECONDS = 60.0
"""A step is not started with less time than this left in the total budget."""


@dataclass
class Row:
    step: str
    item: str
    metric: str = ""
    partita: float | str | None = None
    reference: float | str | None = None
    status: str = "ok"
    """``ok``, ``FAIL``, ``skipped`` or ``info``."""
    note: str = ""


@dataclass
class Step:
    name: str
    argv: list[str]
    """The child's command line; ``{out}`` is replaced by its JSON file, ``{dir}`` by a
    scratch directory."""
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    read: Callable[[Path, Path], list[Row]] | None = None
    """Reads the child's rows from (its JSON file, the scratch directory); default: the JSON."""


@dataclass
class StepResult:
    name: str
    status: str
    """``ok``, ``failed``, ``timeout``, ``not run``."""
    seconds: float
    rows: list[Row]
    log: str = ""


# ----------------------------------------------------------------------------- parent


def find_repo(repo: str | None) -> Path | None:
    """The checkout whose ``tests/`` the gpu tests come from: ``repo``, else the current
    directory or the one above the imported package, whichever has ``tests/``."""
    if repo is not None:
        path = Path(repo)
        if not (path / "tests").is_dir():
            raise PartitaError(f"--repo '{repo}' has no tests/ directory")
        return path.resolve()
    import partita

    for candidate in (Path.cwd(), Path(partita.__file__).resolve().parents[1]):
        if (candidate / "tests").is_dir() and (candidate / "pyproject.toml").is_file():
            return candidate
    return None


def select_steps(names: str | None) -> list[str]:
    if names is None:
        return list(STEP_NAMES)
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in STEP_NAMES]
    if unknown or not chosen:
        raise PartitaError(f"unknown validation step(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(STEP_NAMES)}")
    return chosen


def gpu_test_step(repo: Path) -> Step:
    return Step("gpu-tests",
                [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider",
                 "--junitxml={dir}/gpu-tests.xml", "tests"],
                cwd=repo, read=lambda out, scratch: junit_rows(scratch / "gpu-tests.xml", "gpu-tests"))


def child_step(name: str, repo: Path | None) -> Step:
    argv = [sys.executable, "-m", "partita.tools.validate", name, "--out", "{out}"]
    if repo is not None:
        argv += ["--repo", str(repo)]
    return Step(name, argv)


def default_steps(names: Sequence[str], repo: Path | None) -> list[Step]:
    out = []
    for name in names:
        if name == "gpu-tests" and repo is not None:
            out.append(gpu_test_step(repo))
        elif name == "gpu-tests":
            out.append(Step(name, []))  # reported as not run: no checkout
        else:
            out.append(child_step(name, repo))
    return out


def _read_rows(path: Path) -> list[Row]:
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
    except ValueError:
        return []
    return [Row(**row) for row in data.get("rows", [])]


def run_step(step: Step, timeout: float) -> StepResult:
    """Runs ``step``'s child with at most ``timeout`` seconds; on time-out its whole
    process group is killed and the rows it wrote so far are kept."""
    if not step.argv:
        return StepResult(step.name, "not run", 0.0,
                          [Row(step.name, "(all)", status="skipped", note="no Partita checkout with tests/ (--repo)")])
    with tempfile.TemporaryDirectory(prefix=f"partita-{step.name}-") as scratch_name:
        scratch = Path(scratch_name)
        out = scratch / "rows.json"
        argv = [a.replace("{out}", str(out)).replace("{dir}", str(scratch)) for a in step.argv]
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=step.cwd, env={**os.environ, **step.env}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            log, _ = proc.communicate(timeout=timeout)
            status = "ok" if proc.returncode == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            log, _ = proc.communicate()
            status = "timeout"
        seconds = time.perf_counter() - start
        rows = (step.read or (lambda o, _s: _read_rows(o)))(out, scratch)
    if status == "ok" and any(r.status == "FAIL" for r in rows):
        status = "failed"
    if status == "failed" and not rows:
        rows = [Row(step.name, "(step)", status="FAIL", note=f"exit {proc.returncode}: {_tail(log)}")]
    if status == "timeout":
        rows.append(Row(step.name, "(step)", status="FAIL", note=f"stopped after {timeout:.0f}s (the step's limit)"))
    return StepResult(step.name, status, seconds, rows, log)


def _tail(log: str, lines: int = 3) -> str:
    return " | ".join(line for line in log.strip().splitlines()[-lines:])


def run_steps(steps: Sequence[Step], step_timeout: float, total_timeout: float,
              clock: Callable[[], float] = time.perf_counter) -> list[StepResult]:
    start, results = clock(), []
    for step in steps:
        left = total_timeout - (clock() - start)
        if left < min(MIN_STEP_SECONDS, step_timeout):
            results.append(StepResult(step.name, "not run", 0.0, [
                Row(step.name, "(step)", status="skipped", note=f"the {total_timeout:.0f}s budget is spent")]))
            continue
        print(f"partita-doctor: {step.name} (at most {min(step_timeout, left):.0f}s) ...", file=sys.stderr, flush=True)
        results.append(run_step(step, min(step_timeout, left)))
    return results


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def render_table(results: Sequence[StepResult]) -> str:
    """One table of every row, then one line per step."""
    header = ("step", "item", "metric", "Partita", "reference", "status", "note")
    body = [(r.step, r.item, r.metric, _cell(r.partita), _cell(r.reference), r.status, r.note)
            for result in results for r in result.rows]
    widths = [max([len(h)] + [len(row[i]) for row in body]) for i, h in enumerate(header[:-1])]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)) + "  " + cells[-1]

    lines = [fmt(header), fmt(tuple("-" * w for w in widths) + ("-" * 4,))]
    lines += [fmt(row).rstrip() for row in body]
    lines.append("")
    lines += [f"{r.name}: {r.status} in {r.seconds:.0f}s" for r in results]
    return "\n".join(lines)


def report(results: Sequence[StepResult], environment: dict[str, str]) -> dict[str, Any]:
    return {
        "environment": environment,
        "steps": [{"name": r.name, "status": r.status, "seconds": round(r.seconds, 1)} for r in results],
        "rows": [asdict(row) for r in results for row in r.rows],
        "passed": all(r.status == "ok" for r in results),
    }


def run_validation(names: Sequence[str], repo: Path | None, json_path: Path, *, environment: dict[str, str],
                   step_timeout: float = 600.0, total_timeout: float = 1200.0,
                   steps: Sequence[Step] | None = None) -> int:
    """Runs the steps, prints the table, writes the JSON; 0 when every step passed."""
    results = run_steps(steps if steps is not None else default_steps(names, repo), step_timeout, total_timeout)
    print()
    print(render_table(results))
    data = report(results, environment)
    json_path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    print(f"wrote {json_path}")
    return 0 if data["passed"] else 1


def junit_rows(path: Path, step: str) -> list[Row]:
    """The tests of a pytest JUnit XML file: a summary row, then every test that did not pass."""
    if not path.is_file():
        return [Row(step, "(step)", status="FAIL", note="pytest wrote no report (it failed to start)")]
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    rows = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        if outcome is None:
            counts["passed"] += 1
            continue
        message = (outcome.get("message") or outcome.text or "").strip().splitlines()
        note = message[0][:160] if message else ""
        if outcome.tag == "skipped":
            counts["skipped"] += 1
            rows.append(Row(step, name, status="skipped", note=note))
        else:
            counts["failed"] += 1
            rows.append(Row(step, name, status="FAIL", note=note))
    summary = Row(step, "(all gpu tests)", "tests", counts["passed"], sum(counts.values()),
                  "FAIL" if counts["failed"] else "ok",
                  f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return [summary, *rows]


# ----------------------------------------------------------------------------- children


class RowWriter:
    """Collects a child's rows and rewrites its JSON after each one (a step stopped at its
    time limit keeps what it finished)."""

    def __init__(self, path: Path | None):
        self.path, self.rows = path, []

    def add(self, row: Row) -> None:
        self.rows.append(row)
        print(f"  {row.item}: {row.metric} {_cell(row.partita)} vs {_cell(row.reference)} {row.status} {row.note}",
              flush=True)
        if self.path is not None:
            self.path.write_text(json.dumps({"rows": [asdict(r) for r in self.rows]}, default=str))


def model_files(repo: Path | None) -> list[Path]:
    """The bundled models, then the exported ones (each with its ``.npz`` of inputs)."""
    if repo is None:
        return []
    return sorted((repo / "examples").glob("*.onnx")) + sorted((repo / "tests" / "models" / "exported").glob("*.onnx"))


_ONNX_DTYPES = {1: np.float32, 10: np.float16, 11: np.float64, 6: np.int32, 7: np.int64, 9: np.bool_}


def model_inputs(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """The inputs recorded beside an exported model, else random ones (batch 2, every
    other dynamic dim 16; integer inputs are small indices, masks ones)."""
    recorded = path.with_suffix(".npz")
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    initializers = {init.name for init in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if recorded.is_file():
        with np.load(recorded) as data:
            if all(i.name in data.files for i in inputs):
                return {i.name: data[i.name] for i in inputs}
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in inputs:
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else (2 if k == 0 else 16) for k, d in enumerate(tensor.shape.dim)]
        dtype = _ONNX_DTYPES.get(tensor.elem_type, np.float32)
        if np.issubdtype(dtype, np.floating):
            feeds[value.name] = rng.standard_normal(shape).astype(dtype)
        elif "mask" in value.name:
            feeds[value.name] = np.ones(shape, dtype)
        else:
            feeds[value.name] = rng.integers(0, 16, shape).astype(dtype)
    return feeds


def relative_error(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> float:
    """The largest ``max|got - want| / max|want|`` over the outputs."""
    worst = 0.0
    for g, w in zip(got, want, strict=True):
        g64, w64 = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g64.shape != w64.shape:
            return float("inf")
        scale = max(float(np.max(np.abs(w64))) if w64.size else 0.0, 1e-6)
        worst = max(worst, float(np.max(np.abs(g64 - w64))) / scale if w64.size else 0.0)
    return worst


def tolerance(feeds: dict[str, np.ndarray], outputs: Sequence[np.ndarray]) -> float:
    """f16 anywhere: 5e-2; else 1e-2 (f32 GEMMs and convolutions run in TF32 by default)."""
    dtypes = [a.dtype for a in (*feeds.values(), *outputs)]
    return 5e-2 if any(d == np.float16 for d in dtypes) else 1e-2


def median_seconds(run: Callable[[], Any], repeat: int, warmup: int = 2, sync: Callable[[], Any] | None = None) -> float:
    for _ in range(warmup):
        run()
    if sync is not None:
        sync()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def check_model(path: Path, writer: RowWriter, *, arch: str, device: Any = "cuda", repeat: int = 20) -> None:
    """One model: Partita against onnxruntime (CPU), then its latency eager, as CUDA graphs,
    and under onnxruntime's CUDA provider."""
    import onnxruntime as ort

    import partita

    name = path.stem
    feeds = model_inputs(path)
    cpu = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = cpu.run(None, feeds)
    exe = partita.compile(str(path), model_targets(arch))
    exe.load(device, graphs=False)
    got = exe.run(feeds)
    error, tol = relative_error(got, want), tolerance(feeds, want)
    writer.add(Row("models", name, "max rel. error vs onnxruntime", error, tol, "ok" if error <= tol else "FAIL",
                   "reference: onnxruntime CPU; column 'reference' is the tolerance"))
    eager = median_seconds(lambda: exe.run(feeds), repeat)
    exe.load(device, graphs=True)
    graphs = median_seconds(lambda: exe.run(feeds), repeat)
    on_graphs = exe.run(feeds)
    error = relative_error(on_graphs, want)
    reference, note = None, "no onnxruntime CUDA provider"
    if "CUDAExecutionProvider" in ort.get_available_providers():
        gpu = ort.InferenceSession(str(path), providers=["CUDAExecutionProvider"])
        reference, note = median_seconds(lambda: gpu.run(None, feeds), repeat) * 1e3, "reference: onnxruntime CUDA"
    writer.add(Row("models", name, "latency eager ms", eager * 1e3, reference, "info", note))
    writer.add(Row("models", name, "latency graphs ms", graphs * 1e3, reference, "ok" if error <= tol else "FAIL",
                   note if error <= tol else f"graph replay differs from onnxruntime: {error:.3g}"))


DECODE_TOKENS = 64
"""Steps of the decode loop ``check_decode`` runs."""


def cache_pairs(path: Path) -> list[tuple[str, str]]:
    """A KV-cache decoder step's (past input, present output) names, paired in order
    (``past_key`` / ``present_key``, ``past_key_values.0.key`` / ``present.0.key``, ...);
    empty for another model."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    past = [i.name for i in graph.input if i.name.startswith("past")]
    present = [o.name for o in graph.output if o.name.startswith("present")]
    return list(zip(past, present)) if past and len(past) == len(present) else []


def check_decode(path: Path, writer: RowWriter, *, arch: str, device: Any = "cuda", tokens: int = DECODE_TOKENS) -> None:
    """A decode loop of ``tokens`` steps from an empty cache (or, for a static cache, one of
    zeros, a ``position`` input counting the steps), each step's presents fed back as the
    next step's pasts (left on the device), every step against onnxruntime (CPU);
    ms per token with shape buckets (one arena and graph per power-of-two past length,
    updated in place) and with exact signatures (a bind and a capture per token). Nothing
    for a model that is no decoder step (``cache_pairs``)."""
    import onnxruntime as ort

    import partita

    name, pairs = path.stem, cache_pairs(path)
    if not pairs:
        return
    cpu = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    first = model_inputs(path)
    shapes = {i.name: i.shape for i in cpu.get_inputs()}
    empty = {past: np.zeros([d if isinstance(d, int) else 0 for d in shapes[past]], first[past].dtype)
             for past, _ in pairs}
    outputs = [o.name for o in cpu.get_outputs()]
    exe = partita.compile(str(path), model_targets(arch))
    rng = np.random.default_rng(1)
    steps = []
    for token in range(tokens):
        feeds = {k: (rng.standard_normal(v.shape).astype(v.dtype) if np.issubdtype(v.dtype, np.floating) else v)
                 for k, v in first.items() if k not in empty}
        if "position" in feeds:  # a static cache's step: the token's row in it
            feeds["position"] = np.full_like(feeds["position"], token)
        steps.append(feeds)
    seconds, worst, tol, bucketed = {}, 0.0, 0.0, Counter()
    for buckets in ("pow2", None):
        exe.load(device, buckets=buckets)
        caches, want_caches, times = dict(empty), dict(empty), []
        for feeds in steps:
            start = time.perf_counter()
            got = exe.run({**feeds, **caches}, outputs="device")
            got = dict(zip(outputs, got))
            times.append(time.perf_counter() - start)  # the outputs stay on the device
            caches = {past: got[present] for past, present in pairs}
            if buckets is not None:  # checked once: the same kernels either way
                want = dict(zip(outputs, cpu.run(None, {**feeds, **want_caches})))
                want_caches = {past: want[present] for past, present in pairs}
                host = [got[o].numpy() for o in outputs]
                worst = max(worst, relative_error(host, [want[o] for o in outputs]))
                tol = max(tol, tolerance(feeds, [want[o] for o in outputs]))
        seconds[buckets] = statistics.median(times[len(times) // 2:])  # the caches past a few buckets
        if buckets is not None:
            bucketed = Counter(exe.runtime.stats)  # missing counts read as 0
    exe.close()
    writer.add(Row("models", name, f"decode {tokens} tokens: max rel. error vs onnxruntime", worst, tol,
                   "ok" if worst <= tol else "FAIL", "each step's caches fed back on the device"))
    static = all(isinstance(d, int) for past, _ in pairs for d in shapes[past])  # a static cache: one shape
    metric = "decode ms/token (static cache)" if static else "decode ms/token (shape buckets)"
    writer.add(Row("models", name, metric, seconds["pow2"] * 1e3, seconds[None] * 1e3,
                   "info", f"reference: exact signatures; {bucketed['graph_updates']} graph updates, "
                           f"{bucketed['captures']} instantiations, {bucketed['allocations']} allocations in "
                           f"{tokens} tokens"))


def model_targets(arch: str, *libraries: str) -> list[str]:
    """Partita's default targets at this GPU's own arch (``sm_90`` on an H100, not the
    ``sm_90a`` that ``-arch=native`` builds: ``--warm-cache`` prepares these cubins here,
    and the Hopper kernels are timed by the benchmarks step)."""
    return [f"cuda -arch={arch}", f"cutlass -sm={arch.removeprefix('sm_').rstrip('af')}", *libraries, "llvm"]


def _compile_only(path: str, arch: str) -> str | None:
    """Compiles ``path`` for its cubins alone (they land in the cache); the error, if any."""
    import partita

    try:
        partita.compile(path, model_targets(arch))
    except Exception as err:  # noqa: BLE001 - reported again, with its row, when the model is checked
        return f"{type(err).__name__}: {err}"
    return None


def precompile(paths: Sequence[Path], arch: str, jobs: int) -> None:
    """Fills the cubin cache for every model in parallel processes (cold NVRTC compiles are
    most of a model's time; the checks then run one at a time, so timings do not contend)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if jobs <= 1 or len(paths) <= 1:
        return
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_compile_only, [str(p) for p in paths], [arch] * len(paths)))


def models_step(repo: Path | None, writer: RowWriter, *, arch: str, device: Any = "cuda",
                models: Iterable[Path] | None = None, jobs: int = 1) -> None:
    paths = list(models if models is not None else model_files(repo))
    if not paths:
        writer.add(Row("models", "(none)", status="FAIL",
                       note="no models found: run from a Partita checkout (examples/, tests/models/exported/) or pass --repo"))
        return
    precompile(paths, arch, jobs)
    for path in paths:
        try:
            check_model(path, writer, arch=arch, device=device)
            check_decode(path, writer, arch=arch, device=device)
        except Exception as err:  # noqa: BLE001 - one model's failure is a row, the others still run
            writer.add(Row("models", path.stem, "compile + run", status="FAIL", note=f"{type(err).__name__}: {err}"[:300]))


def dense_ir(m: int, n: int, k: int, dtype: str = "f16") -> str:
    def t(shape: str) -> str:
        return f"tensor<{shape}x{dtype}>"

    return (f"func.func @main(%x: {t(f'{m}x{k}')}, %w: {t(f'{n}x{k}')}) -> {t(f'{m}x{n}')} {{\n"
            f"  %0 = nn.dense %x, %w : ({t(f'{m}x{k}')}, {t(f'{n}x{k}')}) -> {t(f'{m}x{n}')}\n"
            f"  func.return %0 : {t(f'{m}x{n}')}\n}}\n")


def int8_gemm_ir(m: int, n: int, k: int) -> str:
    """``nn.matmul_integer`` of s8 activations by a ``[N, K]`` s8 weight, s32 out:
    ``torch._int_mm``'s product (timed with zero points of 0, which the native tiles test
    at run time)."""
    x, w, y = f"tensor<{m}x{k}xi8>", f"tensor<{n}x{k}xi8>", f"tensor<{m}x{n}xi32>"
    return (f"func.func @main(%x: {x}, %w: {w}, %z: tensor<i8>) -> {y} {{\n"
            f"  %0 = nn.matmul_integer %x, %w, %z, %z {{transpose_b = true}} : ({x}, {w}, tensor<i8>, tensor<i8>) -> {y}\n"
            f"  func.return %0 : {y}\n}}\n")


def reduce_sum_ir(rows: int, cols: int, dtype: str = "f32") -> str:
    x, y = f"tensor<{rows}x{cols}x{dtype}>", f"tensor<{rows}x1x{dtype}>"
    return (f"func.func @main(%x: {x}) -> {y} {{\n"
            f"  %0 = nn.reduce_sum %x {{axes = array<i64: 1>}} : ({x}) -> {y}\n"
            f"  func.return %0 : {y}\n}}\n")


def attention_model(batch: int, heads: int, seq: int, dim: int):
    """softmax(Q Kᵀ / sqrt(d)) V in ONNX, f16, as exporters write it."""
    from onnx import TensorProto, helper

    shape = [batch, heads, seq, dim]
    f16 = TensorProto.FLOAT16
    scale = helper.make_tensor("scale", f16, [], np.array([1.0 / np.sqrt(dim)], np.float16).tobytes(), raw=True)
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Mul", ["s", "scale"], ["ss"]),
        helper.make_node("Softmax", ["ss"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"]),
    ]
    graph = helper.make_graph(nodes, "attention", [helper.make_tensor_value_info(n, f16, shape) for n in "qkv"],
                              [helper.make_tensor_value_info("o", f16, shape)], [scale])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def nbits_model(n: int, k: int, block: int = 32):
    """``y = x @ dequantize(w)ᵀ`` as onnxruntime's MatMulNBits writes a 4-bit LLM
    projection: f16 activations of ``?`` rows, a random packed weight and scales; returns
    the model and the dequantized f16 weight ``[N, K]`` (what a dense f16 GEMM reads)."""
    from onnx import TensorProto, helper, numpy_helper

    from partita.dialects import nn

    rng = np.random.default_rng(0)
    packed = rng.integers(0, 256, (n, k // block, block // 2)).astype(np.uint8)
    scales = (rng.random((n, k // block)) * 0.02 + 0.001).astype(np.float16)
    codes = nn.unpack_nibbles(packed.reshape(n, k // 2)).astype(np.float32)
    weight = ((codes - 8) * np.repeat(scales.astype(np.float32), block, axis=1)).astype(np.float16)
    node = helper.make_node("MatMulNBits", ["x", "b", "s"], ["y"], domain="com.microsoft", K=k, N=n, bits=4,
                            block_size=block)
    graph = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["rows", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["rows", n])],
                              [numpy_helper.from_array(packed, "b"), numpy_helper.from_array(scales.reshape(-1), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    return model, weight


def nbits_rows(writer: RowWriter, arch: str, n: int = 4096, k: int = 4096, repeat: int = 20) -> None:
    """A 4-bit projection at a decode step's one row (GB/s of the packed weight; reference:
    torch.matmul reading the f16 weight) and at a prefill's 2048 rows (TFLOP/s; reference:
    torch.matmul of the dequantized weight), checked against that product."""
    import torch

    import partita

    model, weight = nbits_model(n, k)
    w = torch.from_numpy(weight).cuda()
    exe = partita.compile(model, model_targets(arch))
    exe.load("cuda")
    for rows in (1, 2048):
        x = torch.randn(rows, k, device="cuda", dtype=torch.float16)
        want = torch.matmul(x, w.T)
        (out,) = exe.run(x, outputs="device")
        error = relative_error([np.asarray(out.numpy(), np.float32)], [want.float().cpu().numpy()])
        ours = median_seconds(lambda: exe.run(x, outputs="device"), repeat, sync=torch.cuda.synchronize)  # noqa: B023
        kernels = device_seconds(exe, x)
        theirs = torch_device_seconds(lambda: torch.matmul(x, w.T), repeat)  # noqa: B023
        if rows == 1:  # bandwidth-bound: the weight's bytes as each reads them
            metric, value, reference = "GB/s", n * k / 2 / kernels / 1e9, n * k * 2 / theirs / 1e9
        else:
            flops = 2.0 * rows * n * k
            metric, value, reference = "TFLOP/s", flops / kernels / 1e12, flops / theirs / 1e12
        writer.add(Row("benchmarks", f"4-bit GEMM f16 {rows}x{n}x{k} (blocks of 32)", metric, value, reference,
                       "ok" if error <= 5e-2 else "FAIL",
                       f"reference: torch.matmul of the f16 weight; device time {kernels * 1e6:.0f} us vs "
                       f"{theirs * 1e6:.0f} us, exe.run {ours * 1e6:.0f} us end to end; max rel. error {error:.2g}"))


def _ops(text: str) -> list:
    from xdsl.dialects.func import FuncOp

    from partita.dialects import make_context
    from partita.ir import parse_module

    func = next(op for op in parse_module(text, make_context()).ops if isinstance(op, FuncOp))
    return [op for op in func.body.block.ops if op.name.startswith("nn.")]


def gemm_rows(writer: RowWriter, timers: dict[str, Any], torch_seconds: Callable[[], float | None],
              m: int, n: int, k: int, dtype: str = "f16") -> None:
    """One row per timed column: ``cutlass``, ``cublas``, ``cuda`` (Partita's native
    tensor-core tiles, what a product no library takes runs on), and on an H100/H200
    ``cutlass sm_90a`` (the CUTLASS 3 TMA + wgmma kernel ``sm_90a`` builds). ``dtype`` f16:
    ``nn.dense`` against torch.matmul (TFLOP/s); f32: the same in TF32 (the cutlass
    target's default math, torch's ``allow_tf32``); i8: ``nn.matmul_integer`` against
    ``torch._int_mm`` (TOP/s)."""
    flops = 2.0 * m * n * k
    reference = torch_seconds()
    ref_rate = flops / reference / 1e12 if reference else None
    ir, metric, torch_name = ((int8_gemm_ir(m, n, k), "TOP/s", "torch._int_mm") if dtype == "i8"
                              else (dense_ir(m, n, k, dtype), "TFLOP/s", "torch.matmul"))
    for column, timer in timers.items():
        seconds = timer.time(_ops(ir), column.split()[0])
        writer.add(Row("benchmarks", f"GEMM {dtype} {m}x{n}x{k} ({column})", metric,
                       flops / seconds / 1e12 if seconds else "n/a", ref_rate,
                       "info" if seconds else "skipped", f"reference: {torch_name}" if seconds else
                       f"not measured: {dict(timer.unmeasured)}"))


def tuning_module(m: int, n: int, k: int) -> Any:
    """``dense_ir``'s product as a ``cutlass`` partition function: what
    ``tune-cutlass-kernels`` tunes."""
    from xdsl.dialects.builtin import StringAttr

    from partita.dialects import byoc
    from partita.transforms.collage.measure import candidate_module

    module = candidate_module(_ops(dense_ir(m, n, k)))
    module.ops.first.attributes[byoc.COMPILER] = StringAttr("cutlass")
    return module


def tuning_labels(m: int, n: int, k: int, sm: int, hopper: bool) -> list[str]:
    """The kernel configurations ``tune-cutlass-kernels`` times for the f16 GEMM."""
    from partita.lowering.cutlass.codegen import kernel_candidates, partition_kernel
    from partita.lowering.cutlass.options import CutlassOptions

    return kernel_candidates(partition_kernel(tuning_module(m, n, k).ops.first), CutlassOptions(sm=sm), hopper)


def tuning_rows(writer: RowWriter, device: Any, sm: str, torch_seconds: Callable[[], float | None],
                m: int, n: int, k: int) -> None:
    """``tune-cutlass-kernels`` on the f16 GEMM: every candidate timed on the device, the
    fastest against torch.matmul, the table's choice and each candidate in the note (the
    measured tuning table the heuristic rows are checked against)."""
    from partita.dialects import make_context
    from partita.transforms.tune_cutlass_kernels import TuneCutlassKernels

    flops = 2.0 * m * n * k
    reference = torch_seconds()
    with tempfile.TemporaryDirectory() as tmp:  # a fresh record: every candidate is timed
        tune = TuneCutlassKernels(sm=sm, record=str(Path(tmp) / "record.json"), measure_device=device)
        tune.apply(make_context(), tuning_module(m, n, k))
    name = f"GEMM f16 {m}x{n}x{k} tuned (cutlass sm_{sm})"
    if not tune.reports[0]:
        writer.add(Row("benchmarks", name, status="skipped", note="no candidate built and ran"))
        return
    (choice,) = tune.reports[0]
    rates = {label: flops / s / 1e12 for label, s in choice.seconds.items() if s}
    table = next(iter(choice.seconds))  # kernel_candidates gives the table's choice first
    writer.add(Row("benchmarks", name, "TFLOP/s", rates[choice.kernel], flops / reference / 1e12 if reference else None,
                   "info", f"reference: torch.matmul; fastest {choice.kernel}, the table's {table}; "
                   + ", ".join(f"{label} {rates[label]:.0f}" if label in rates else f"{label} failed"
                               for label in choice.seconds)))


def reduction_rows(writer: RowWriter, timer: Any, torch_seconds: Callable[[], float | None], rows: int, cols: int) -> None:
    nbytes = 4.0 * rows * cols
    seconds = timer.time(_ops(reduce_sum_ir(rows, cols)), "cuda")
    reference = torch_seconds()
    writer.add(Row("benchmarks", f"reduce_sum f32 {rows}x{cols} (last axis)", "GB/s",
                   nbytes / seconds / 1e9 if seconds else "n/a", nbytes / reference / 1e9 if reference else None,
                   "info" if seconds else "skipped", "reference: torch.sum"))


def attention_rows(writer: RowWriter, arch: str, batch: int = 8, heads: int = 16, seq: int = 1024, dim: int = 64,
                   repeat: int = 20) -> None:
    import torch

    import partita

    flops = 4.0 * batch * heads * seq * seq * dim
    import importlib.util

    q, k, v = (torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.float16) for _ in range(3))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    theirs = torch_device_seconds(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), repeat)
    # Partita's own flash kernel, then (where the cuDNN frontend is installed) what Collage
    # places with cuDNN among the targets
    variants = [[]] + ([["cudnn"]] if importlib.util.find_spec("cudnn") is not None else [])
    for libraries in variants:
        exe = partita.compile(attention_model(batch, heads, seq, dim), model_targets(arch, *libraries))
        exe.load("cuda")  # never the simulated device: that is an error here, not a fallback
        (out,) = exe.run(q, k, v, outputs="device")
        error = relative_error([np.asarray(out.numpy(), np.float32)], [want.float().cpu().numpy()])
        ours = median_seconds(lambda: exe.run(q, k, v, outputs="device"), repeat, sync=torch.cuda.synchronize)  # noqa: B023
        kernels = device_seconds(exe, q, k, v)
        where = ", ".join(sorted({row.target for row in exe.partitions})) if exe.partitions else "?"
        writer.add(Row("benchmarks", f"attention f16 b{batch} h{heads} s{seq} d{dim} ({where})", "TFLOP/s",
                       flops / kernels / 1e12, flops / theirs / 1e12, "ok" if error <= 5e-2 else "FAIL",
                       f"reference: torch sdpa; device time {kernels * 1e6:.0f} us vs {theirs * 1e6:.0f} us, "
                       f"exe.run {ours * 1e6:.0f} us end to end; max rel. error {error:.2g}"))


def device_seconds(exe: Any, *args: Any, repeat: int = 10, burst: int = 8) -> float:
    """Device seconds of one run's steps (``Executable.profile``: events around bursts of
    each step, as ``torch_device_seconds`` times torch), without ``exe.run``'s host work."""
    total = exe.profile(*args, repeat=repeat, warmup=2, burst=burst).total
    if total is None:
        raise PartitaError("the profile has no device clock")
    return total


def torch_device_seconds(call: Callable[[], Any], repeat: int = 10, burst: int = 8) -> float:
    """Median device seconds of ``call`` (torch CUDA work): CUDA events around ``burst``
    calls in a row, divided by ``burst``."""
    import torch

    for _ in range(2):
        call()
    samples = []
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(burst):
            call()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) / 1e3 / burst)
    return statistics.median(samples)


def torch_timer(make: Callable[[], Callable[[], Any]] | None, repeat: int = 20) -> Callable[[], float | None]:
    """Device seconds per call of a torch CUDA computation (``torch_device_seconds``: timed
    as Partita's candidates are), or ``None`` without torch on CUDA."""

    def seconds() -> float | None:
        try:
            import torch

            if not torch.cuda.is_available():
                return None
        except ImportError:
            return None
        assert make is not None
        return torch_device_seconds(make(), repeat)

    return seconds


def benchmarks_step(writer: RowWriter, *, arch: str) -> None:
    from partita.runtime.cuda import CudaDevice
    from partita.transforms.collage.measure import CandidateTimer

    device = CudaDevice()
    timer = CandidateTimer(device, warmup=5, repeat=20)
    gemm_timers = {"cutlass": timer, "cublas": timer, "cuda": timer}
    if device.arch in ("sm_90", "sm_90a"):
        gemm_timers["cutlass sm_90a"] = CandidateTimer(device, arch="sm_90a", warmup=5, repeat=20)

    def matmul(m: int, n: int, k: int, tf32: bool = False) -> Callable[[], Callable[[], Any]]:
        def make():
            import torch

            dtype = torch.float32 if tf32 else torch.float16
            torch.backends.cuda.matmul.allow_tf32 = tf32  # f32 as TF32, as the cutlass target multiplies it
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            b = torch.randn(n, k, device="cuda", dtype=dtype)
            return lambda: torch.matmul(a, b.T)

        return make

    def int_mm(m: int, n: int, k: int) -> Callable[[], Callable[[], Any]]:
        def make():
            import torch

            a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
            b = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8)
            return lambda: torch._int_mm(a, b.T)

        return make

    def row_sum():
        import torch

        x = torch.randn(8192, 8192, device="cuda", dtype=torch.float32)
        return lambda: torch.sum(x, dim=1, keepdim=True)

    gemms = [("gemm", lambda m=m, n=n, k=k: gemm_rows(writer, gemm_timers, torch_timer(matmul(m, n, k)), m, n, k))
             for m, n, k in GEMM_SHAPES]
    # the measured tuning table: every CUTLASS candidate of each shape (the Hopper kernels
    # on an H100 / H200, their cubins built by --warm-cache)
    sm = "90a" if device.arch in ("sm_90", "sm_90a") else device.arch.removeprefix("sm_")
    gemms += [(f"GEMM tuning {shape}", lambda shape=shape: tuning_rows(writer, device, sm, torch_timer(matmul(*shape)),
                                                                      *shape))
              for shape in GEMM_SHAPES]
    # the native IMMA tiles (a candidate shows CUTLASS's int8 kernel no constant zero
    # points, which it needs; cuBLASLt's integer GEMM is not wired)
    int8_shape = GEMM_SHAPES[0]
    # f32 as TF32 (the Hopper TF32 kernel on an H100 / H200, the Sm80 one elsewhere)
    gemms.append(("tf32 GEMM", lambda: gemm_rows(writer, gemm_timers, torch_timer(matmul(*int8_shape, tf32=True)),
                                                 *int8_shape, "f32")))
    gemms.append(("int8 GEMM", lambda: gemm_rows(writer, {"cuda": timer}, torch_timer(int_mm(*int8_shape)), *int8_shape,
                                                 "i8")))
    for name, bench in (*gemms,
                        ("reduction", lambda: reduction_rows(writer, timer, torch_timer(row_sum), 8192, 8192)),
                        *((f"attention {shape}", lambda shape=shape: attention_rows(writer, arch, *shape))
                          for shape in ATTENTION_SHAPES),
                        ("4-bit GEMM", lambda: nbits_rows(writer, arch))):
        try:
            bench()
        except Exception as err:  # noqa: BLE001 - one benchmark's failure is a row
            writer.add(Row("benchmarks", name, status="FAIL", note=f"{type(err).__name__}: {err}"[:300]))


def precompile_benchmarks(arch: str) -> list[str]:
    """Builds every kernel ``benchmarks_step`` compiles on an ``arch`` GPU (the GEMM
    candidates of CUTLASS and the native tiles, the reduction, the ``sm_90a`` CUTLASS 3 GEMM
    of a Hopper, the attention and 4-bit models) into the cubin cache, with no GPU:
    ``--warm-cache`` runs it. Returns what failed to build (each error, one line)."""
    from types import SimpleNamespace

    import partita
    from partita.transforms.collage.measure import CandidateTimer

    device = SimpleNamespace(arch=arch)  # only its arch is read while building
    builds: list[tuple[Callable[[], Any], str]] = [
        *((lambda shape=shape, target=target: CandidateTimer(device).build(_ops(dense_ir(*shape)), target),
           f"GEMM {shape} ({target})") for shape in GEMM_SHAPES for target in ("cutlass", "cuda")),
        *((lambda target=target: CandidateTimer(device).build(_ops(dense_ir(*GEMM_SHAPES[0], "f32")), target),
           f"GEMM f32 {GEMM_SHAPES[0]} ({target})") for target in ("cutlass", "cuda")),
        (lambda: CandidateTimer(device).build(_ops(int8_gemm_ir(*GEMM_SHAPES[0])), "cuda"),
         f"int8 GEMM {GEMM_SHAPES[0]} (cuda)"),
        (lambda: CandidateTimer(device).build(_ops(reduce_sum_ir(8192, 8192)), "cuda"), "reduce_sum (cuda)"),
        *((lambda shape=shape: partita.compile(attention_model(*shape), model_targets(arch)), f"attention {shape}")
          for shape in ATTENTION_SHAPES),
        (lambda: partita.compile(nbits_model(4096, 4096)[0], model_targets(arch)), "4-bit GEMM"),
    ]
    if arch in ("sm_90", "sm_90a"):
        builds += [(lambda shape=shape: CandidateTimer(device, arch="sm_90a").build(_ops(dense_ir(*shape)), "cutlass"),
                    f"GEMM {shape} (cutlass sm_90a)") for shape in GEMM_SHAPES]
        builds.append((lambda: CandidateTimer(device, arch="sm_90a").build(_ops(dense_ir(*GEMM_SHAPES[0], "f32")),
                                                                          "cutlass"),
                       f"GEMM f32 {GEMM_SHAPES[0]} (cutlass sm_90a)"))
        # every Hopper candidate tune-cutlass-kernels times (one kernel per configuration,
        # whatever the shape: the set of the shapes' labels)
        labels = sorted({label for shape in GEMM_SHAPES for label in tuning_labels(*shape, sm=90, hopper=True)})
        builds += [(lambda label=label: CandidateTimer(device, arch="sm_90a").build(
                        _ops(dense_ir(*GEMM_SHAPES[0])), "cutlass", label), f"GEMM candidate {label} (cutlass sm_90a)")
                   for label in labels]
    failed = []
    for build, name in builds:
        try:
            built = build()
        except Exception as err:  # noqa: BLE001 - reported again when the GPU runs it
            failed.append(f"{name}: {type(err).__name__}: {err}"[:300])
            continue
        if isinstance(built, str):
            failed.append(f"{name}: {built}")
    return failed


def child_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m partita.tools.validate")
    parser.add_argument("step", choices=[s for s in STEP_NAMES if s != "gpu-tests"])
    parser.add_argument("--out", required=True)
    parser.add_argument("--repo", default=None)
    args = parser.parse_args(argv)
    from partita.runtime.cuda import CudaDevice

    with CudaDevice() as device:
        arch = device.arch
    writer = RowWriter(Path(args.out))
    if args.step == "models":
        models_step(Path(args.repo) if args.repo else None, writer, arch=arch, jobs=min(8, os.cpu_count() or 1))
    else:
        benchmarks_step(writer, arch=arch)
    return 1 if any(r.status == "FAIL" for r in writer.rows) else 0


if __name__ == "__main__":
    sys.exit(child_main())
