"""The one error boundary every Partita command line runs inside.

Expected failures (bad input, I/O, option values, memory) become ``error: ...`` on stderr
and exit code 1, as MLIR tools do. Anything else is a bug in Partita: it is reported as an
internal error with how to report it (and the traceback only when ``PARTITA_TRACEBACK`` is
set), and exits with ``EXIT_INTERNAL``. Nothing reaches the user as a bare traceback.
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings
from collections.abc import Callable

from partita.ir.diagnostics import PartitaError

EXIT_ERROR = 1
EXIT_INTERNAL = 70  # EX_SOFTWARE (sysexits.h)
EXIT_INTERRUPTED = 130
REPORT_HINT = "please report this with the command line and its input (set PARTITA_TRACEBACK=1 to see the traceback)"


def describe_os_error(err: OSError) -> str:
    """``cannot write 'x': Is a directory``: the strerror and the path, never errno noise."""
    reason = err.strerror or str(err)
    if err.filename is not None:
        return f"'{err.filename}': {reason}"
    return reason


def expected_error(err: BaseException) -> str | None:
    """The ``error: ...`` line for a failure the user can cause, or None for a bug."""
    from xdsl.utils.arg_spec import ArgSpecParseError

    if isinstance(err, PartitaError):
        return str(err)
    if isinstance(err, ArgSpecParseError):  # a BaseException in xDSL: a bad -p pipeline
        return f"error: invalid pass pipeline: {err}"
    if isinstance(err, UnicodeError):
        return f"error: the input is not UTF-8 text ({err.reason} at byte {getattr(err, 'start', '?')})"
    if isinstance(err, OSError):
        return f"error: {describe_os_error(err)}"
    if isinstance(err, MemoryError):
        return "error: out of memory (a declared tensor or constant is too large for this machine)"
    if isinstance(err, RecursionError):
        return "error: nesting too deep (regions, attributes or calls nest beyond what Partita handles)"
    return None


def run_tool(prog: str, body: Callable[[], int]) -> int:
    """Runs ``body`` (a tool's work, returning its exit code) inside the boundary;
    warnings (a damaged cache entry) are printed as ``prog: warning: ...``."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        print(f"{prog}: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        return _run(prog, body)


def _run(prog: str, body: Callable[[], int]) -> int:
    try:
        return body()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (`| head`): not an error of ours
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except OSError:
            pass
        return 0
    except SystemExit as exit_:
        # argparse exits 2 after printing its "error:" line; MLIR tools exit 1 on bad options.
        return EXIT_ERROR if exit_.code == 2 else exit_.code  # type: ignore[return-value]
    except BaseException as err:  # noqa: BLE001 - this is the boundary
        message = expected_error(err)
        if message is not None:
            print(message, file=sys.stderr)
            return EXIT_ERROR
        print(f"{prog}: error: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        print(f"{prog}: {REPORT_HINT}", file=sys.stderr)
        if os.environ.get("PARTITA_TRACEBACK"):
            traceback.print_exc()
        return EXIT_INTERNAL
