"""``partita-opt``: xDSL's opt driver with Partita's dialects and passes.

Differences from ``xdsl-opt``, each because users of MLIR tools expect it:
- errors are printed as ``file:line:col: error: message`` with a non-zero exit, never as
  a Python traceback;
- ``--verify-diagnostics`` checks ``// expected-error`` annotations like ``mlir-opt``;
- verification is linear in the number of symbols (see ``partita.ir.verifier``);
- ``-o`` is written atomically and may not name the input file.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time
from collections.abc import Sequence
from io import StringIO
from pathlib import Path

from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.printer import Printer
from xdsl.utils.exceptions import DiagnosticException, ParseError
from xdsl.xdsl_opt_main import xDSLOptMain

from partita.dialects import get_all_dialects
from partita.files import same_file, write_atomically
from partita.ir.diagnostics import PartitaError
from partita.ir.parsing import LocatingParser, parse_error_diagnostic, parse_located
from partita.ir.verifier import verify_module
from partita.tools.boundary import run_tool
from partita.transforms import get_all_passes
from partita.transforms.pass_options import quote_option_values

_EXPECTED = re.compile(r"//\s*expected-error(?:@(?P<rel>[+-]\d+|above|below))?\s*\{\{(?P<msg>.*?)\}\}")
_LOCATED = re.compile(r"^(?P<file>.*?):(?P<line>\d+):(?P<col>\d+)$")


def _diagnostic(err: BaseException) -> PartitaError:
    """Every failure the user can cause, as a located ``PartitaError``."""
    if isinstance(err, PartitaError):
        return err
    if isinstance(err, ParseError):
        return parse_error_diagnostic(err)
    return PartitaError(str(err).split("\n\n", 1)[0])


def expected_errors(text: str, line_offset: int) -> list[tuple[int, str]]:
    """``(line, message)`` pairs of the ``// expected-error`` annotations in a chunk."""
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
            expected.append((target, match.group("msg")))
    return expected


class PartitaOptMain(xDSLOptMain):
    def register_all_dialects(self) -> None:
        super().register_all_dialects()
        for name, factory in get_all_dialects().items():
            self.ctx.register_dialect(name, factory)

    def register_all_passes(self) -> None:
        super().register_all_passes()
        self.available_passes.update(get_all_passes())

    def register_all_targets(self) -> None:
        super().register_all_targets()

        def get_cutlass_cpp():
            from partita.lowering.cutlass_codegen import CutlassCppTarget

            return CutlassCppTarget

        self.available_targets["cutlass-cpp"] = get_cutlass_cpp

        def get_cuda_c():
            from partita.lowering.cuda_codegen import CudaCTarget

            return CudaCTarget

        self.available_targets["cuda-c"] = get_cuda_c

        def get_library_records():
            from partita.lowering.library import LibraryRecordsTarget

            return LibraryRecordsTarget

        self.available_targets["library-records"] = get_library_records

    def register_all_arguments(self, arg_parser: argparse.ArgumentParser) -> None:
        super().register_all_arguments(arg_parser)
        arg_parser.description = "Partita's modular optimizer driver (xDSL opt with nn, byoc and Partita's passes)."

    def setup_pipeline(self) -> None:
        # Unquoted values such as paths, as mlir-opt takes them (cache-dir=/tmp/x).
        self.args.passes = quote_option_values(self.args.passes)
        try:
            super().setup_pipeline()
        except ValueError as err:
            raise PartitaError(self._pass_option_error(err)) from None
        self.pipeline = dataclasses.replace(self.pipeline, callback=self._between_passes)
        self._pass_start = time.perf_counter()

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
        for index, (chunk, offset) in enumerate(chunks):
            text = chunk.read().decode("utf-8", "replace")
            chunk.close()
            if index > 0:
                output.write("// -----\n")
            expected = expected_errors(text, offset) if self.args.verify_diagnostics else []
            try:
                module = self.parse_text(text, offset)
                self.apply_passes(module)
                output.write(self.output_resulting_program(module))
            except (DiagnosticException, ParseError) as err:
                if isinstance(err, ParseError):
                    err.span = dataclasses.replace(err.span, line_offset=offset)
                diagnostic = _diagnostic(err)
                if self.args.verify_diagnostics:
                    failed |= not self._check_expected(diagnostic, expected)
                else:
                    print(diagnostic, file=sys.stderr)
                    failed = True
            else:
                for line, message in expected:
                    print(f"{self.get_input_name()}:{line}: error: expected error \"{message}\" was not produced", file=sys.stderr)
                    failed = True
        if not failed or self.args.verify_diagnostics:
            self._write_output(output.getvalue())
        return 1 if failed else 0

    def _check_expected(self, diagnostic: PartitaError, expected: list[tuple[int, str]]) -> bool:
        located = _LOCATED.match(diagnostic.location or "")
        line = int(located.group("line")) if located else None
        for index, (want_line, message) in enumerate(expected):
            if want_line == line and message in diagnostic.message:
                del expected[index]
                ok = True
                break
        else:
            print(f"unexpected {diagnostic}", file=sys.stderr)
            ok = False
        for want_line, message in expected:
            print(f"{self.get_input_name()}:{want_line}: error: expected error \"{message}\" was not produced", file=sys.stderr)
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
    if driver.args.input_file and driver.args.output_file and same_file(driver.args.input_file, driver.args.output_file):
        raise PartitaError(f"refusing to overwrite the input file '{driver.args.input_file}' with the output")
    return driver.run()


if __name__ == "__main__":
    sys.exit(main())
