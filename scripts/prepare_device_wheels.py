#!/usr/bin/env python3
"""Prepares, on a connected machine, the wheels an offline GPU machine needs to install
Partita and run ``partita-doctor --validate`` there.

    python scripts/prepare_device_wheels.py -o device-wheels [--present device-freeze.txt]

The offline machine (an H100 with Python 3.12, torch, cupy, cuda-bindings, onnxruntime,
nvidia-cublas, nvidia-cudnn-cu13 and what they bring, NVRTC 13.0 and the CUDA 13.0 runtime
among them, as torch's CUDA 13.0 wheels require) lacks the rest. This script builds
Partita's wheel, resolves ``partita[test,cublas,cudnn]`` for CPython 3.12 on manylinux
x86-64 with pip's own resolver, leaves out what that machine has (``--present``: its
``python3 -m pip freeze``, whose versions then also constrain the resolution; default: the
list below) and what it does not need (``SKIPPED``), downloads the rest, and fails when
they come to more than ``--limit-mib`` (60 MiB: one device-tool call carries 64 MiB).

There, with no network::

    python3 -m pip install --no-index --no-deps device-wheels/*.whl
    partita-doctor --validate          # from a Partita checkout (its tests/ are run)

``--no-deps`` installs exactly these wheels: the resolution already happened here, and
the cuDNN frontend's CuTe DSL packages (which it declares but Partita's graph calls never
import) are left out on purpose.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXTRAS = "test,cublas,cudnn"
TARGET = ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
          "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_27_x86_64",
          "--platform", "manylinux_2_24_x86_64", "--platform", "manylinux_2_17_x86_64",
          "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_12_x86_64",
          "--platform", "manylinux2010_x86_64"]

#: What the offline machine has (names only): the brief's list and what those packages
#: require. ``--present`` replaces it with the machine's own ``pip freeze``.
PRESENT = (
    "torch", "cupy-cuda13x", "fastrlock", "cuda-bindings", "cuda-pathfinder", "onnxruntime", "nvidia-cublas",
    "nvidia-cudnn-cu13",
    # torch (CUDA 13.0 wheels)
    "nvidia-cuda-nvrtc", "nvidia-cuda-runtime", "nvidia-cuda-cupti", "nvidia-nvjitlink", "typing-extensions",
    "sympy", "mpmath", "networkx", "jinja2", "markupsafe", "filelock", "fsspec", "setuptools",
    # onnxruntime, cupy
    "numpy", "protobuf", "packaging", "flatbuffers", "coloredlogs", "humanfriendly",
)

#: Resolved but not carried, with why.
SKIPPED = {
    "nvidia-cutlass-dsl": "the cuDNN frontend's CuTe DSL kernels (hundreds of MB); Partita builds cuDNN graphs only",
    "nvidia-cutlass-dsl-libs-base": "as nvidia-cutlass-dsl",
    "nvidia-cutlass-dsl-libs-core": "as nvidia-cutlass-dsl",
    "nvidia-cutlass-dsl-libs-cu12": "as nvidia-cutlass-dsl",
    "nvidia-cutlass-dsl-libs-cu13": "as nvidia-cutlass-dsl",
    "apache-tvm-ffi": "as nvidia-cutlass-dsl",
    "nvidia-cuda-nvdisasm": "the machine's CUDA toolkit puts nvdisasm on PATH, where the tests look first",
    # nvidia-cutlass's own Python front end (cutlass_cppgen) needs these; Partita imports
    # only cutlass_library and the headers.
    "scipy": "nvidia-cutlass's cutlass_cppgen only (Partita uses cutlass_library and the headers)",
    "pydot": "as scipy",
    "treelib": "as scipy",
    "pyparsing": "pydot's",
}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_present(path: Path | None) -> dict[str, str | None]:
    """``{name: version or None}`` of what the offline machine has."""
    if path is None:
        return {normalize(n): None for n in PRESENT}
    present: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "==" in line:
            name, version = line.split("==", 1)
            present[normalize(name)] = version.strip()
        elif " @ " in line:
            present[normalize(line.split(" @ ", 1)[0])] = None
        else:
            present[normalize(line)] = None
    return present


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def build_wheel(out: Path) -> Path:
    pip("wheel", "--no-deps", "-q", "-w", str(out), str(REPO))
    (wheel,) = out.glob("partita-*.whl")
    return wheel


def resolve(wheel: Path, present: dict[str, str | None], scratch: Path) -> list[tuple[str, str]]:
    """``(name, version)`` of every package ``partita[EXTRAS]`` needs on the target, the
    present versions held fixed."""
    constraints = scratch / "constraints.txt"
    # Torch-only names are not PyPI-resolvable with local versions (2.11.0+cu130): constrain
    # only plain versions.
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in present.items() if v and "+" not in v))
    report = scratch / "report.json"
    pip("install", "-q", "--dry-run", "--ignore-installed", "--target", str(scratch / "target"), *TARGET,
        "-c", str(constraints), "--report", str(report), f"{wheel}[{EXTRAS}]")
    items = json.loads(report.read_text())["install"]
    return [(normalize(i["metadata"]["name"]), i["metadata"]["version"]) for i in items]


def split(needed: list[tuple[str, str]], present: dict[str, str | None]) -> tuple[list, list]:
    """What to download (neither present nor skipped; Partita's own wheel is built), and
    what is left out on purpose."""
    carried = [(n, v) for n, v in needed if n != "partita" and n not in present and n not in SKIPPED]
    skipped = [(n, v) for n, v in needed if n in SKIPPED and n not in present]
    return carried, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default="device-wheels", help="the directory to fill (default device-wheels)")
    parser.add_argument("--present", type=Path, default=None,
                        help="the offline machine's `python3 -m pip freeze` (default: the list in this script)")
    parser.add_argument("--limit-mib", type=float, default=60.0)
    args = parser.parse_args(argv)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    present = read_present(args.present)
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        wheel = build_wheel(out)
        needed = resolve(wheel, present, scratch)
    carried, skipped = split(needed, present)
    if carried:
        pip("download", "-q", "--no-deps", *TARGET, "-d", str(out), *(f"{n}=={v}" for n, v in carried))
    for name, version in skipped:
        print(f"left out {name} {version}: {SKIPPED[name]}")
    wheels = sorted(out.glob("*.whl"), key=lambda p: p.stat().st_size)
    total = sum(p.stat().st_size for p in wheels)
    for path in wheels:
        print(f"{path.stat().st_size / 2**20:8.2f} MiB  {path.name}")
    print(f"{total / 2**20:8.2f} MiB  in all, {len(wheels)} wheels in {out}")
    if total > args.limit_mib * 2**20:
        print(f"error: more than {args.limit_mib:g} MiB; pass the machine's pip freeze with --present", file=sys.stderr)
        return 1
    print(f"on the offline machine: python3 -m pip install --no-index --no-deps {out}/*.whl && partita-doctor --validate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
