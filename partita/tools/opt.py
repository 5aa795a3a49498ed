"""``partita-opt``: xDSL's opt driver with Partita's dialects and passes.

Differences from ``xdsl-opt``, each because users of MLIR tools expect it:
- errors are printed as ``file:line:col: error: message`` with a non-zero exit, never as
  a Python traceback;
- ``--verify-diagnostics`` checks ``// expected-error``, ``expected-warning`` and
  ``expected-remark`` annotations like ``mlir-opt`` (warnings and remarks are what passes
  raise with ``warnings.warn``, located by a ``file:line:col:`` prefix);
- ``--list-passes`` lists Partita's passes with their options; ``--pass-pipeline`` takes
  MLIR's ``builtin.module(...)`` form; ``-`` is standard input; ``--version`` is Partita's;
- option errors name the option as the user wrote it; the input's kind is decided by its
  content (an ONNX or compiled model is refused with what to do instead);
- verification is linear in the number of symbols (see ``partita.ir.verifier``);
- ``-o`` is written atomically and may not name the input file.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys
import time
import warnings
from collections.abc import Sequence
from io import StringIO

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.printer import Printer
from xdsl.utils.exceptions import DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from partita import __version__
from partita.dialects import get_all_dialects
from partita.files import same_file, write_atomically
from partita.frontends.file_kind import FileKind, require_kind
from partita.ir.diagnostics import PartitaError, RemarkWarning
from partita.ir.parsing import LocatingParser, parse_error_diagnostic, parse_located
from partita.ir.verifier import verify_module
from partita.lowering import records as _records  # noqa: F401  (byoc.binary record checks)
from partita.tools.boundary import run_tool
from partita.tools.pass_help import check_spec, list_passes
from partita.tools.universe import get_all_targets
from partita.transforms import get_all_passes
from partita.transforms.pass_options import quote_option_values

_EXPECTED = re.compile(
    r"//\s*expected-(?P<severity>error|warning|remark)(?:@(?P<rel>[+-]\d+|above|below))?\s*\{\{(?P<msg>.*?)\}\}")
# A warning or remark a pass raises through ``warnings.warn`` is located when its text
# starts like MLIR's (``file:line:col: message``).
_LOCATED_TEXT = re.compile(r"^(?P<file>[^\s:]+):(?P<line>\d+):(?P<col>\d+): (?:(?:warning|remark): )?(?P<msg>.*)$", re.DOTALL)
_NESTED = re.compile(r"[A-Za-z_][\w.]*\(")


def mlir_pass_pipeline(text: str) -> str:
    """``builtin.module(a, b{x=1})`` (MLIR's ``--pass-pipeline``) as xDSL's ``a,b{x=1}``.
    Partita's passes all run on the module, so a nested pipeline (``func.func(...)``) is
    refused rather than run at the wrong level."""
    body = text.strip()
    match = re.fullmatch(r"(?:builtin\.module|any)\s*\((.*)\)", body, re.DOTALL)
    if match is not None:
        body = match.group(1)
    unquoted = re.sub(r'"(?:[^"\\]|\\.)*"', '""', body)
    nested = _NESTED.search(unquoted)
    if nested is not None:
        raise PartitaError(f"--pass-pipeline: nested pass managers ('{nested.group(0)}...') are not supported; "
                           "Partita's passes run on the whole module: 'builtin.module(pass1,pass2)'")
    return ",".join(part.strip() for part in _split_top_level(body))


def _split_top_level(text: str) -> list[str]:
    """Splits at commas outside ``{...}`` and quotes (option values hold commas too)."""
    parts, depth, quoted, start = [], 0, False, 0
    for index, char in enumerate(text):
        if char == '"' and (index == 0 or text[index - 1] != "\\"):
            quoted = not quoted
        elif not quoted and char == "{":
            depth += 1
        elif not quoted and char == "}":
            depth -= 1
        elif not quoted and depth == 0 and char == ",":
            parts.append(text[start:index])
            start = index + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


_LOCATED = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<col>\d+)$")


def _diagnostic(err: BaseException) -> PartitaError:
    """Every failure the user can cause, as a located ``PartitaError``."""
    if isinstance(err, PartitaError):
        return err
    if isinstance(err, ParseError):
        return parse_error_diagnostic(err)
    return PartitaError(str(err).split("\n\n", 1)[0])


@dataclasses.dataclass
class Expected:
    severity: str  # error, warning or remark
    line: int
    message: str


def expected_diagnostics(text: str, line_offset: int) -> list[Expected]:
    """The ``// expected-error/-warning/-remark {{...}}`` annotations of a chunk, with
    the line each one is about (``@+1``, ``@-2``, ``@above``, ``@below`` as in MLIR)."""
    expected = []
    for index, line in enumerate(text.splitlines()):
        for match in _EXPECTED.finditer(line):
            rel = match.group("rel")
            target = index + 1 + line_offset
            if rel == "above":
                target -= 1
            elif rel == "below":
                target += 1
            elif rel is not None:
                target += int(rel)
            expected.append(Expected(match.group("severity"), target, match.group("msg")))
    return expected


def expected_errors(text: str, line_offset: int) -> list[tuple[int, str]]:
    """``(line, message)`` pairs of the ``// expected-error`` annotations in a chunk."""
    return [(e.line, e.message) for e in expected_diagnostics(text, line_offset) if e.severity == "error"]


class PartitaOptMain(xDSLOptMain):
    version_format = f"partita-opt {__version__} (xDSL {{xdsl_version}})"

    # With Partita's ``xdsl.universe`` plugin installed, xDSL's own registration already
    # brings in Partita's dialects: register only what is still missing.
    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        registered = set(self.ctx.registered_dialect_names)
        for name, factory in get_all_dialects().items():
            if name not in registered:
                self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        self.available_passes.update(get_all_passes())

    def register_all_targets(self) -> None:
        super().register_all_targets()
        self.available_targets.update(get_all_targets())

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.prog = "partita-opt"
        arg_parser.description = "Partita's modular optimizer driver (xDSL opt with nn, byoc and Partita's passes)."
        for action in arg_parser._actions:  # xDSL's help lists ~170 pass names on one line
            if action.dest == "passes":
                action.help = "comma-separated pass pipeline, e.g. 'partition-eager{backends=cutlass},outline-compiler-functions' (see --list-passes)"
            elif action.dest == "target":
                action.help = f"output target: mlir (default), {', '.join(get_all_targets())} or one of xDSL's"
            elif action.dest == "input_file":
                action.help = "textual IR to read ('-' or nothing: standard input)"
        arg_parser.add_argument("--pass-pipeline", default=None,
                                help="pass pipeline in MLIR's form, e.g. 'builtin.module(plan-memory{alignment=128})'")
        arg_parser.add_argument("--list-passes", action="store_true",
                                help="list Partita's passes with a description and their options, and exit")

    def get_input_stream(self):
        name = self.args.input_file
        if name is None or name == "-":
            return sys.stdin.buffer, "mlir"
        # The content decides (mlir-opt reads any file as IR); binaries get a clear word.
        require_kind(name, (FileKind.MLIR,), "partita-opt")
        return open(name, "rb"), "mlir"

    def get_input_name(self) -> str:
        name = self.args.input_file
        return "<stdin>" if name is None or name == "-" else name

    def setup_pipeline(self) -> None:
        if self.args.pass_pipeline is not None:
            if self.args.passes:
                raise PartitaError("give the passes with -p or with --pass-pipeline, not both")
            self.args.passes = mlir_pass_pipeline(self.args.pass_pipeline)
        # Unquoted values such as paths, as mlir-opt takes them (cache-dir=/tmp/x).
        self.args.passes = quote_option_values(self.args.passes)
        self._check_options()
        try:
            super().setup_pipeline()
        except ValueError as err:
            raise PartitaError(self._pass_option_error(err)) from None
        self.pipeline = dataclasses.replace(self.pipeline, callback=self._between_passes)
        self._pass_start = time.perf_counter()

    def _check_options(self) -> None:
        """Option errors in the options' own spelling, before anything is built."""
        from xdsl.utils.arg_spec import parse_pipeline, parse_spec

        for spec in parse_pipeline(self.args.passes):
            factory = self.available_passes.get(spec.name)
            if factory is None:
                raise PartitaError(f"unknown pass '{spec.name}' (see partita-opt --list-passes)")
            check_spec("pass", factory(), spec)
        spec = parse_spec(self.args.target)
        factory = self.available_targets.get(spec.name)
        if factory is not None and not inspect.signature(factory).parameters:
            target = factory()
            check_spec("target", target, spec)
            try:
                target.from_spec(spec)
            except ValueError as err:
                raise PartitaError(f"invalid options for target '{spec.name}': {err}") from None

    def _pass_option_error(self, err: ValueError) -> str:
        """xDSL's message for a bad option value does not say which pass: find it."""
        from xdsl.utils.arg_spec import parse_pipeline

        for spec in parse_pipeline(self.args.passes):
            factory = self.available_passes.get(spec.name)
            if factory is None:
                return str(err)
            try:
                factory().from_pass_spec(spec)
            except ValueError as inner:
                return f"invalid options for pass '{spec.name}': {inner}"
        return str(err)

    def _between_passes(self, previous: ModulePass | None, module: ModuleOp, following: ModulePass | None) -> None:
        now = time.perf_counter()
        if self.args.time_passes and previous is not None:
            print(f"Pass {previous.name} took {now - self._pass_start:.6f} seconds", file=sys.stderr)
        if not self.args.disable_verify:
            verify_module(module)
        if previous is not None and following is not None and self.args.print_between_passes:
            print(f"// -----// IR after {previous.name} //----- //", file=sys.stderr)
            Printer(stream=sys.stderr).print_op(module)
            print("\n", file=sys.stderr)
        self._pass_start = time.perf_counter()

    def parse_text(self, text: str, line_offset: int) -> ModuleOp:
        # Verification happens before the first pass, in ``_between_passes``.
        return parse_located(LocatingParser(self.ctx, text, self.get_input_name(), line_offset))

    def run(self) -> int:  # type: ignore[override]
        """Runs every chunk; returns 1 after printing located errors when any chunk failed."""
        chunks, _ = self.prepare_input()
        output = StringIO()
        failed = False
        verify = self.args.verify_diagnostics
        for index, (chunk, offset) in enumerate(chunks):
            text = chunk.read().decode("utf-8", "replace")
            chunk.close()
            if index > 0:
                output.write("// -----\n")
            expected = expected_diagnostics(text, offset) if verify else []
            produced: list[tuple[str, int | None, str]] = []
            with warnings.catch_warnings(record=verify) as caught:
                if verify:
                    warnings.simplefilter("always")
                try:
                    module = self.parse_text(text, offset)
                    self.apply_passes(module)
                    output.write(self.output_resulting_program(module))
                except (DiagnosticException, ParseError) as err:
                    if isinstance(err, ParseError):
                        err.span = dataclasses.replace(err.span, line_offset=offset)
                    diagnostic = _diagnostic(err)
                    if not verify:
                        print(diagnostic, file=sys.stderr)
                        failed = True
                    located = _LOCATED.match(diagnostic.location or "")
                    produced.append(("error", int(located.group("line")) if located else None, diagnostic.message))
            for warning in caught or ():
                produced.append(self._warning_diagnostic(warning))
            if verify:
                failed |= not self._check_expected(produced, expected)
        if not failed or verify:
            self._write_output(output.getvalue())
        return 1 if failed else 0

    @staticmethod
    def _warning_diagnostic(warning: warnings.WarningMessage) -> tuple[str, int | None, str]:
        text = str(warning.message)
        severity = "remark" if isinstance(warning.message, RemarkWarning) else "warning"
        located = _LOCATED_TEXT.match(text)
        if located is None:
            return severity, None, text
        return severity, int(located.group("line")), located.group("msg")

    def _check_expected(self, produced: list[tuple[str, int | None, str]], expected: list[Expected]) -> bool:
        """mlir-opt's rule: every diagnostic was expected, every expectation was met.
        Warnings without a location (a damaged cache entry) are about the machine, not
        the input: they are printed but expected by nobody."""
        ok = True
        name = self.get_input_name()
        for severity, line, message in produced:
            match = next((e for e in expected if e.severity == severity and e.line == line and e.message in message), None)
            if match is not None:
                expected.remove(match)
            elif severity == "error" or line is not None:
                where = f"{name}:{line}: " if line is not None else ""
                print(f"{where}unexpected {severity}: {message}", file=sys.stderr)
                ok = False
            else:
                print(f"partita-opt: {severity}: {message}", file=sys.stderr)
        for want in expected:
            print(f"{name}:{want.line}: error: expected {want.severity} \"{want.message}\" was not produced", file=sys.stderr)
            ok = False
        return ok

    def _write_output(self, text: str) -> None:
        path = self.args.output_file
        if path is None:
            sys.stdout.write(text)
            sys.stdout.flush()
            return
        write_atomically(path, text)  # the string: Path("out/") would drop the slash


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    return run_tool("partita-opt", lambda: _main(args))


def _main(args: list[str]) -> int:
    try:
        driver = PartitaOptMain(args=args)
    except ValueError as err:  # unknown passes or targets, malformed option values
        raise PartitaError(str(err)) from None
    if driver.args.list_passes:
        sys.stdout.write(list_passes(get_all_passes()))
        return 0
    if driver.args.input_file and driver.args.output_file and same_file(driver.args.input_file, driver.args.output_file):
        raise PartitaError(f"refusing to overwrite the input file '{driver.args.input_file}' with the output")
    return driver.run()


if __name__ == "__main__":
    sys.exit(main())
