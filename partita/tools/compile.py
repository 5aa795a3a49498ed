"""``partita-compile``: compile a model (ONNX or textual IR) into one ``.partita`` file.

    partita-compile examples/encoder.onnx -o encoder.partita
    partita-run encoder.partita --inputs in.npz

The file holds the lowered module, its weights and every cubin, each with a digest
checked on load; running it needs no cubin cache, no NVRTC and no ONNX file. The output
is written atomically and never over the input. Exit codes: 0 ok, 1 user error.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from partita.tools.boundary import run_tool


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from partita.tools.run import add_compile_options

    parser = argparse.ArgumentParser(prog="partita-compile", description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="an .onnx model or a .mlir module")
    parser.add_argument("-o", "--output", required=True, help="the compiled model to write (e.g. model.partita)")
    add_compile_options(parser)
    parser.add_argument("--report", action="store_true", help="print the partition report")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress messages")
    return parser.parse_args(argv)


def _main(args: argparse.Namespace) -> int:
    import partita
    from partita.files import same_file
    from partita.frontends.file_kind import FileKind, require_kind
    from partita.ir import PartitaError
    from partita.tools.run import check_output_path, compile_options, progress_printer

    if same_file(args.model, args.output):
        raise PartitaError(f"refusing to overwrite the input file '{args.model}'")
    check_output_path(args.output)
    require_kind(args.model, (FileKind.MLIR, FileKind.ONNX), "partita-compile")
    start = time.perf_counter()
    exe = partita.compile(Path(args.model), progress=progress_printer(args.quiet), **compile_options(args))
    exe.save(args.output)
    if args.report:
        print(exe.report())
    if not args.quiet:
        print(f"wrote {args.output} in {time.perf_counter() - start:.1f}s", file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("partita-compile", lambda: _main(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
