#!/usr/bin/env python3
"""Prepares, on a connected machine, the wheels an offline GPU machine needs to install
Partita and run ``partita-doctor --validate`` there.

    python scripts/prepare_device_wheels.py -o device-wheels [--present device-freeze.txt] [--warm-cache sm_90]

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

``--warm-cache sm_90`` also compiles every model and benchmark ``--validate`` checks for that arch here
(minutes of NVRTC that would otherwise be spent on the GPU machine's clock) and packs the
cubin cache as ``cubins-sm_90.tar.xz`` (cubins compress about 25 to 1). There, before
validating::

    mkdir -p ~/.cache/partita/cubins && tar -xJf device-wheels/cubins-sm_90.tar.xz -C ~/.cache/partita/cubins

The cache's keys include the versions of the header wheels, ``nvidia-cuda-runtime`` among
them: where the machine's differs from this one's, its compiles miss the cache and run
there (correctly, only slower).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
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
    # the image's own scientific and test stack (seen there, 2026-11)
    "onnx", "ml-dtypes", "cuda-core", "pytest", "iniconfig", "pluggy", "pygments", "hypothesis",
    "sortedcontainers", "rich", "markdown-it-py", "mdurl", "click", "six",
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
    "ruff": "the lint tests, which are not `gpu` tests (CI runs them)",
    "import-linter": "as ruff",
    "grimp": "import-linter's",
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


def wheel_requirements(wheel: Path, extras: set[str]) -> list[str]:
    """The wheel's ``Requires-Dist`` lines that apply with ``extras``, markers dropped."""
    with zipfile.ZipFile(wheel) as archive:
        (meta,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        lines = archive.read(meta).decode().splitlines()
    requirements = []
    for line in lines:
        if not line.startswith("Requires-Dist:"):
            continue
        spec, _, marker = line.split(":", 1)[1].partition(";")
        extra = re.search(r"extra\s*==\s*[\"']([^\"']+)[\"']", marker)
        if extra is None or extra.group(1) in extras:
            requirements.append(spec.strip())
    return requirements


def requirement_name(spec: str) -> str:
    return normalize(re.split(r"[\s\[<>=!~;(]", spec, maxsplit=1)[0])


def resolve(wheel: Path, present: dict[str, str | None], scratch: Path) -> list[tuple[str, str]]:
    """``(name, version)`` of every package ``partita[EXTRAS]`` needs on the target, the
    present versions held fixed. Requirements the machine already satisfies by name are not
    resolved at all: the test extra's torch pin, say, would otherwise pull in torch's own
    CUDA pins, which the machine's torch build does not share (and PyPI may no longer serve)."""
    constraints = scratch / "constraints.txt"
    # Torch-only names are not PyPI-resolvable with local versions (2.11.0+cu130): constrain
    # only plain versions.
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in present.items() if v and "+" not in v))
    wanted = [r for r in wheel_requirements(wheel, set(EXTRAS.split(","))) if requirement_name(r) not in present]
    report = scratch / "report.json"
    pip("install", "-q", "--dry-run", "--ignore-installed", "--target", str(scratch / "target"), *TARGET,
        "-c", str(constraints), "--report", str(report), *wanted)
    items = json.loads(report.read_text())["install"]
    return [(normalize(i["metadata"]["name"]), i["metadata"]["version"]) for i in items]


def split(needed: list[tuple[str, str]], present: dict[str, str | None]) -> tuple[list, list]:
    """What to download (neither present nor skipped; Partita's own wheel is built), and
    what is left out on purpose."""
    carried = [(n, v) for n, v in needed if n != "partita" and n not in present and n not in SKIPPED]
    skipped = [(n, v) for n, v in needed if n in SKIPPED and n not in present]
    return carried, skipped


def warm_cache(out: Path, arch: str, jobs: int = 2) -> Path:
    """Compiles the models ``partita-doctor --validate`` checks for ``arch`` into a fresh
    cubin cache and packs it as ``out/cubins-<arch>.tar.xz``."""
    from partita.tools.validate import model_files, precompile, precompile_benchmarks

    with tempfile.TemporaryDirectory() as cache:
        previous = os.environ.get("PARTITA_CACHE_DIR")
        os.environ["PARTITA_CACHE_DIR"] = cache  # the compile processes inherit it
        try:
            precompile(model_files(REPO), arch, max(2, jobs))
            for failure in precompile_benchmarks(arch):
                print(f"warning: not prepared: {failure}", file=sys.stderr)
        finally:
            if previous is None:
                del os.environ["PARTITA_CACHE_DIR"]
            else:
                os.environ["PARTITA_CACHE_DIR"] = previous
        archive = out / f"cubins-{arch}.tar.xz"
        entries = sorted(Path(cache).iterdir())
        with tarfile.open(archive, "w:xz") as tar:
            for entry in entries:
                tar.add(entry, arcname=entry.name)
    print(f"{archive.stat().st_size / 2**20:8.2f} MiB  {archive.name} ({len(entries)} cache entries)")
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-o", "--output", default="device-wheels", help="the directory to fill (default device-wheels)")
    parser.add_argument("--present", type=Path, default=None,
                        help="the offline machine's `python3 -m pip freeze` (default: the list in this script)")
    parser.add_argument("--limit-mib", type=float, default=60.0)
    parser.add_argument("--warm-cache", metavar="ARCH", default=None,
                        help="also compile the validated models for ARCH (sm_90 for an H100/H200) and pack the cache")
    args = parser.parse_args(argv)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("*.whl"), *out.glob("cubins-*.tar.xz")]:
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
    archives = [warm_cache(out, args.warm_cache)] if args.warm_cache else []
    total = sum(p.stat().st_size for p in [*wheels, *archives])
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
