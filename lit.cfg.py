# lit configuration for Partita's FileCheck tests (tests/filecheck).
import os
import shutil
import sys

import lit.formats

config.name = "Partita"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
# Run as `lit tests/filecheck`; the suite root is this directory.
config.test_source_root = os.path.dirname(__file__)
config.excludes = ["Inputs", "examples", "benchmarks", "build"]

# The tools come from the environment lit runs in (the project's virtual environment),
# found beside the Python running lit even when that environment is not activated.
config.environment["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
for name in ("HOME", "PARTITA_CACHE_DIR", "PYTHONPATH"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
for tool in ("partita-opt", "filecheck"):
    if shutil.which(tool, path=config.environment["PATH"]) is None:
        lit_config.fatal(f"'{tool}' is not on PATH: install Partita with its test extra first")
