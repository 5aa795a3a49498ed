"""``partita-import``: ONNX model -> textual IR (``func.func @main`` of nn ops).

``partita-import model.onnx -o model.mlir`` writes atomically (temp file + rename in the
output's directory) and refuses to overwrite the input; without ``-o`` the IR goes to
stdout. Bad input is reported as ``error: ...`` with exit code 1, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from io import StringIO

from xdsl.printer import Printer

from partita.ir import PartitaError
from partita.tools.boundary import run_tool


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="partita-import",
                                     description="Import an ONNX model as Partita nn IR.")
    parser.add_argument("model", help="the .onnx file")
    parser.add_argument("-o", "--output", help="output .mlir file (default: stdout)")
    parser.add_argument("--entry", default="main", help="name of the function (default: main)")
    parser.add_argument("--memory-budget", metavar="SIZE",
                        help="host memory the import may take, e.g. 4G (default: $PARTITA_MEMORY_BUDGET, "
                             "else half the RAM)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("partita-import", lambda: _main(_parser().parse_args(argv)))


def _main(args: argparse.Namespace) -> int:
    from partita.files import same_file, write_atomically
    from partita.frontends.file_kind import FileKind, require_kind
    from partita.frontends.onnx import import_onnx
    from partita.ir.budget import MemoryBudget

    if args.output and same_file(args.model, args.output):
        raise PartitaError(f"refusing to overwrite the input file '{args.model}'")
    require_kind(args.model, (FileKind.ONNX,), "partita-import")
    with MemoryBudget.create(args.memory_budget).active():  # import folding charges it
        module = import_onnx(args.model, name=args.entry)
    out = StringIO()
    Printer(stream=out).print_op(module)
    out.write("\n")
    if args.output:
        write_atomically(args.output, out.getvalue())
    else:
        sys.stdout.write(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
