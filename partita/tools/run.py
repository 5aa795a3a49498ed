"""``partita-run``: compile a model (ONNX or textual IR) for a list of targets and run it.

    partita-run examples/encoder.onnx --targets "cuda -arch=sm_90,cutlass,llvm" \\
        --partitioner collage --report

Inputs come from ``--inputs in.npz`` (keys are argument names, e.g. ``x`` for ``%x``, or
``arg0``, ``arg1``...) or are random of the declared shapes (``?`` dims take
``--dynamic-size``). A ``.partita`` file from ``partita-compile`` runs as compiled, with
no cache, NVRTC or ONNX file needed (the compile options are then ignored). ``--profile``
times every step of the launch plan with device events (``Executable.profile``; "n/a" on the
simulated device); ``--report-graph`` shows those times, profiling on its own on a GPU.
Exit codes: 0 ok, 1 user error (with a message, never a traceback).
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
import zipfile
from collections.abc import Sequence
from math import prod
from pathlib import Path

import numpy as np

from partita.files import same_file, write_atomically
from partita.frontends.file_kind import FileKind, require_kind
from partita.ir import PartitaError
from partita.tools.boundary import run_tool


def _count(minimum: int):
    """An argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum of {minimum}")
        return value

    return parse


COMPILE_DEFAULTS = {"targets": "cuda -arch=native,cutlass,llvm", "partitioner": "collage", "cost": "roofline", "device": "native"}


def add_compile_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``partita.compile``, shared with ``partita-compile``. Their
    defaults are filled in by :func:`compile_options`, so that a compiled model, which
    takes none of them, can tell which ones the user gave."""
    parser.add_argument("--targets", help=f"comma-separated targets (default: {COMPILE_DEFAULTS['targets']}; "
                        "-arch=native builds for the GPU present: sm_90a on an H100, sm_90 without a GPU)")
    parser.add_argument("--fallback-device", choices=("cpu", "cuda"),
                        help="device type of ops no target claims (default: the only device besides the host; "
                             "'cpu' is TVM's default)")
    parser.add_argument("--partitioner", choices=("collage", "eager", "none"), help="(default: collage)")
    parser.add_argument("--cost", help="collage cost estimator (default: roofline)")
    parser.add_argument("--device", help="device spec for the roofline estimator: a100, h100, h200, or native "
                        "(default: the GPU present's, h100 without one)")
    parser.add_argument("--entry", help="entry function (default: main)")
    parser.add_argument("--cache-dir", help="cubin cache (default: $PARTITA_CACHE_DIR or ~/.cache/partita/cubins)")
    parser.add_argument("--precision", choices=("fp32", "fp16", "bf16"),
                        help="compute an f32 model in f16 / bf16 storage (softmax and normalizations in f32; "
                             "partita-run also prints the deviation from an f32 run; default: fp32)")
    parser.add_argument("--memory-budget", metavar="SIZE",
                        help="host memory import, compile and run may take together, e.g. 4G "
                             "(default: $PARTITA_MEMORY_BUDGET, else half the RAM)")
    parser.add_argument("--sequence-length", dest="sequence_lengths", metavar="NAME=N", action="append",
                        type=_sequence_length,
                        help="the length of an ONNX sequence input (a list of tensors; the model gives none), "
                             "repeated per sequence input")


def _sequence_length(text: str) -> tuple[str, int]:
    name, _, count = text.rpartition("=")
    if not name or not count.isdigit():
        raise argparse.ArgumentTypeError(f"'{text}' is not NAME=N (a sequence input's name and its length)")
    return name, int(count)


_COMPILE_OPTIONS = ("targets", "fallback_device", "partitioner", "cost", "device", "cache_dir", "precision",
                    "sequence_lengths")


def compile_options(args: argparse.Namespace) -> dict[str, object]:
    """The keyword arguments of ``partita.compile`` from the command line."""
    options = {name: getattr(args, name) for name in _COMPILE_OPTIONS}
    for name, default in COMPILE_DEFAULTS.items():
        if options[name] is None:
            options[name] = default
    options["entry"] = args.entry or "main"
    options["memory_budget"] = args.memory_budget
    options["sequence_lengths"] = dict(args.sequence_lengths) if args.sequence_lengths else None
    return options


def refuse_compile_options(args: argparse.Namespace) -> None:
    """A compiled model runs as it was compiled: options that would change that are an
    error rather than silently ignored."""
    given = [f"--{name.replace('_', '-')}" for name in _COMPILE_OPTIONS if getattr(args, name) is not None]
    if given:
        raise PartitaError(f"'{args.model}' is already compiled, so {', '.join(given)} cannot apply to it: "
                           "compile the source model again with them (partita-compile)")


def check_output_path(path: str | Path) -> None:
    """The directory of an output must exist: a typo in it should not create a tree."""
    parent = Path(path).parent
    if not parent.is_dir():
        raise PartitaError(f"cannot write '{path}': the directory '{parent}' does not exist")


def flat_outputs(names: Sequence[str], outputs: Sequence[np.ndarray | list[np.ndarray]]) -> tuple[list[str], list]:
    """Names and arrays with each sequence output's elements apart, as ``seq[k]``."""
    from partita.ir.abi import element_name

    flat_names, arrays = [], []
    for name, out in zip(names, outputs):
        elements = out if isinstance(out, list) else [out]
        flat_names += [element_name(name, k) for k in range(len(out))] if isinstance(out, list) else [name]
        arrays += elements
    return flat_names, arrays


def precision_deviation(precision: str, names, outputs, reference) -> list[str]:
    """Per output: the largest absolute deviation of a ``precision`` run from the f32 run
    on the same inputs, and that relative to the f32 output's largest magnitude."""
    lines = []
    for name, got, want in zip(names, outputs, reference):
        if not np.issubdtype(np.asarray(want).dtype, np.floating):
            lines.append(f"{name}: {precision} vs fp32: {int(np.sum(np.asarray(got) != np.asarray(want)))} elements differ")
            continue
        g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
        dev = float(np.max(np.abs(g - w))) if w.size else 0.0
        scale = float(np.max(np.abs(w))) if w.size else 0.0
        lines.append(f"{name}: {precision} vs fp32: max abs deviation {dev:.3g} ({dev / scale if scale else 0.0:.2%} of max |fp32|)")
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="partita-run", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="an .onnx model, a .mlir module or a compiled .partita model")
    add_compile_options(parser)
    parser.add_argument("--inputs", type=Path, help=".npz file with the inputs")
    parser.add_argument("--output", help=".npz file to write the outputs to (written atomically)")
    parser.add_argument("--dynamic-size", type=_count(1), default=1, help="size of each '?' dimension of random inputs")
    parser.add_argument("--seed", type=_count(0), default=0, help="seed of the random inputs")
    parser.add_argument("--report", action="store_true", help="print the partition report")
    parser.add_argument("--report-graph", metavar="HTML", help="write the placement as a self-contained HTML page "
                        "(with measured times when profiled; on a GPU it is profiled)")
    parser.add_argument("--profile", action="store_true",
                        help="time every step of the launch plan with device events and print the times "
                             "(n/a on the simulated device, which has no clock)")
    parser.add_argument("--profile-runs", type=_count(1), default=10, help="timed runs of --profile (default: 10)")
    parser.add_argument("--emit", choices=("ir", "cpp"), help="print the lowered IR or the CUTLASS C++")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    return parser.parse_args(argv)


def progress_printer(quiet: bool):
    start = time.perf_counter()

    def show(name: str, index: int, count: int) -> None:
        if quiet:
            return
        note = " (cold CUTLASS compiles can take minutes; the cache makes the next run fast)" if name == "cutlass-codegen" else ""
        print(f"[{index + 1}/{count}] {name}{note}  +{time.perf_counter() - start:.1f}s", file=sys.stderr, flush=True)

    return show


def input_arrays(exe, args: argparse.Namespace) -> list[np.ndarray | list[np.ndarray]]:
    """The entry's inputs: from the .npz file, else random of the declared types; a
    sequence input is a list of its elements (``seq[0]``, ``seq[1]``... in the file)."""
    from partita.ir.abi import regroup, sequence_spans

    return regroup(_argument_arrays(exe, args), sequence_spans(exe.entry_function(), "inputs"))


def _argument_arrays(exe, args: argparse.Namespace) -> list[np.ndarray]:
    """One array per argument of the entry."""
    from xdsl.dialects.builtin import TensorType

    from partita.dialects.nn import numpy_dtype
    from partita.ir.abi import argument_names

    function = exe.entry_function()
    hints = [arg.name_hint for arg in function.body.block.args]
    names = [n or f"arg{k}" for k, n in enumerate(argument_names(function))]
    types = function.function_type.inputs.data
    if args.inputs is not None:
        stored = _read_npz(args.inputs, exe.memory_budget)
        arrays = []
        for index, name in enumerate(names):
            # The model's own input name, else the SSA name, else the position.
            key = next((k for k in (name, hints[index], f"arg{index}") if k in stored), None)
            if key is None:
                raise PartitaError(f"'{args.inputs}' has no array '{name}' (or 'arg{index}'); it has {', '.join(sorted(stored)) or 'none'}")
            arrays.append(stored[key])
        return arrays
    rng = np.random.default_rng(args.seed)
    if not args.quiet and names:
        dynamic = any(d < 0 for t in types if isinstance(t, TensorType) for d in t.get_shape())
        sizes = f", '?' dims of size {args.dynamic_size}" if dynamic else ""
        print(f"no --inputs: running on random inputs (seed {args.seed}{sizes})", file=sys.stderr)
    arrays = []
    for name, typ in zip(names, types):
        if not isinstance(typ, TensorType):
            raise PartitaError(f"cannot make a random input of type {typ}")
        shape = tuple(args.dynamic_size if d < 0 else d for d in typ.get_shape())
        dtype = numpy_dtype(typ.element_type)
        nbytes = prod(shape) * dtype.itemsize
        if nbytes > MAX_RANDOM_INPUT_BYTES:
            raise PartitaError(
                f"input '{name}' of type {typ} would take {nbytes / 2**30:.1f} GiB; pass it with --inputs"
            )
        arrays.append(random_array(rng, shape, dtype))
    return arrays


MAX_RANDOM_INPUT_BYTES = 4 << 30


def describe_array(out: np.ndarray) -> str:
    """``f32[2, 3] mean 0.5``: an empty result has no mean (NumPy would warn and print nan)."""
    summary = f"mean {float(np.mean(out.astype(np.float64))):.6g}" if out.size else "(empty)"
    return f"{out.dtype}{list(out.shape)} {summary}"


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Random values that suit ``dtype``: normal floats, small integers, random booleans."""
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 8, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


MAX_INPUTS_BYTES = 16 << 30
"""What the arrays of an ``--inputs`` file may take once read (a zip bomb is refused)."""


def _check_npz(path: Path, limit: int) -> None:
    """Refuses, before reading any array, an ``.npz`` whose members would expand past
    ``limit`` bytes, or whose ``.npy`` headers claim more elements than the member holds
    (NumPy allocates what the header says before reading)."""
    with open(path, "rb") as handle:
        if handle.read(6) == b"\x93NUMPY":  # one .npy: refused below, before NumPy allocates it
            raise PartitaError(f"'{path}' holds one array, not named inputs: write them with numpy.savez")
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            total = sum(m.file_size for m in members)
            if total > limit:
                raise PartitaError(f"'{path}' would expand to {total} bytes, over the limit of {limit}")
            for member in members:
                with archive.open(member) as handle:
                    version = np.lib.format.read_magic(handle)
                    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                        np.lib.format.read_array_header_2_0
                    shape, _, dtype = read(handle)
                if prod(shape) * dtype.itemsize > member.file_size:
                    raise PartitaError(f"'{path}': array '{member.filename}' claims shape {shape} of {dtype}, "
                                       f"more than its {member.file_size} bytes")
    except (ValueError, EOFError, zipfile.BadZipFile, OverflowError) as err:
        raise PartitaError(f"cannot read inputs from '{path}': {err}") from None


def _read_npz(path: Path, budget=None) -> dict[str, np.ndarray]:
    """The arrays of ``path``, refused before reading past ``MAX_INPUTS_BYTES`` or what the
    model's memory budget has left, and charged to that budget once read."""
    regular_file(path, "--inputs")
    limit = MAX_INPUTS_BYTES if budget is None else min(MAX_INPUTS_BYTES, budget.limit - budget.spent)
    try:
        _check_npz(path, limit)
    except OSError as err:
        raise PartitaError(f"cannot read inputs from '{path}': {err.strerror or err}") from None
    try:
        data = np.load(path, allow_pickle=False)
    except OSError as err:
        raise PartitaError(f"cannot read inputs from '{path}': {err.strerror or err}") from None
    except (ValueError, EOFError, zipfile.BadZipFile) as err:
        raise PartitaError(f"cannot read inputs from '{path}': {err}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise PartitaError(f"'{path}' holds one array, not named inputs: write them with numpy.savez")
    with data:
        try:
            arrays = dict(data)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
            raise PartitaError(f"cannot read inputs from '{path}': {err}") from None
    if budget is not None:
        budget.charge(sum(a.nbytes for a in arrays.values()), f"the --inputs arrays of '{path}'")
    return arrays


def write_outputs(path: Path | str, outputs: Sequence[np.ndarray | list[np.ndarray]], names: Sequence[str],
                  protected: Sequence[Path]) -> None:
    """The outputs as an ``.npz`` keyed by the model's output names (a sequence output's
    elements as ``seq[0]``, ``seq[1]``...)."""
    if any(same_file(path, p) for p in protected if p is not None):
        raise PartitaError(f"refusing to write the outputs over an input file '{path}'")
    buffer = io.BytesIO()
    np.savez(buffer, **dict(zip(*flat_outputs(names, outputs))))
    write_atomically(path, buffer.getvalue())


def regular_file(path: Path | str, what: str) -> None:
    """A ``PartitaError`` unless ``path`` is a regular file (stat only: nothing opened)."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise PartitaError(f"cannot read {what} '{path}': {err.strerror}") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO or device)"
        raise PartitaError(f"{what} '{path}' is {kind}")


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("partita-run", lambda: _main(parse_args(argv)))


def _main(args: argparse.Namespace) -> int:
    import partita
    from partita.artifact import is_compiled_model
    from partita.lowering.cuda.codegen import cuda_from_binaries
    from partita.lowering.cutlass.codegen import cpp_from_binaries

    regular_file(args.model, "the model")  # a FIFO or device would hang the reader
    for path in (args.output, args.report_graph):
        if path is not None:
            check_output_path(path)
    if is_compiled_model(args.model):  # compiled by partita-compile: nothing to compile
        refuse_compile_options(args)
        exe = partita.load(args.model, memory_budget=args.memory_budget)
        if args.entry is not None and args.entry != exe.entry:
            raise PartitaError(f"'{args.model}' was compiled for entry @{exe.entry}, not @{args.entry}")
    else:
        require_kind(args.model, (FileKind.MLIR, FileKind.ONNX), "partita-run")
        exe = partita.compile(Path(args.model), progress=progress_printer(args.quiet), **compile_options(args))
    if args.emit == "ir":
        print(exe)
    elif args.emit == "cpp":
        print(cpp_from_binaries(exe.module))
        print(cuda_from_binaries(exe.module))
    arrays = input_arrays(exe, args)
    start = time.perf_counter()
    outputs = exe.run(*arrays)
    elapsed = time.perf_counter() - start
    from partita.ir.abi import grouped_names, result_names, sequence_spans

    function = exe.entry_function()
    output_names = grouped_names(result_names(function), sequence_spans(function, "outputs"))
    if args.output is not None:
        write_outputs(args.output, outputs, output_names, [Path(args.model), args.inputs])
    report = exe.report()
    profile = None
    if args.profile or (args.report_graph is not None and not exe.runtime.device.simulated):
        profile = exe.profile(*arrays, repeat=args.profile_runs)
    if args.report_graph is not None:
        exe.report_graph(args.report_graph, profile)
    if args.report:
        print(report)
    for name, out in zip(output_names, outputs):
        if isinstance(out, list):  # a sequence: its length, then each element
            print(f"{name}: sequence of {len(out)}")
            for k, element in enumerate(out):
                print(f"  [{k}] {describe_array(element)}")
        else:
            print(f"{name}: {describe_array(out)}")
    if args.profile:
        print(profile.format())
    if args.precision not in (None, "fp32") and not is_compiled_model(args.model):
        reference = partita.compile(Path(args.model), **{**compile_options(args), "precision": "fp32"}).run(*arrays)
        names, flat = flat_outputs(output_names, outputs)
        for line in precision_deviation(args.precision, names, flat, flat_outputs(output_names, reference)[1]):
            print(line)
    if not args.quiet:
        # The report already says where the plan ran; say it once.
        print(f"ran in {elapsed:.3f}s" + ("" if args.report else f"; {report.execution}"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
