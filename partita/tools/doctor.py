"""``partita-doctor``: what this machine gives Partita, and (``--validate``) proof that it works.

    partita-doctor                 # versions, the GPU, NVRTC, library backends, the cache
    partita-doctor --validate      # on a GPU: gpu tests, models, benchmarks; one table + JSON

Without ``--validate`` it reports the Python and Partita versions, the CUDA driver and the
device (name, arch), NVRTC (and whether it is the pinned version the cubin digests assume),
the header wheels, which library backends import (cuBLASLt, cuDNN, TensorRT, onnxruntime)
with their versions, the cubin cache, and what ``partita.compile`` targets by default and
where that would run. It exits 0 whenever it could report, with a GPU or without one (then
the line ``GPU: none (...)`` says why, and ``runs on:`` that runs use the simulated device).

``--validate`` runs the steps of ``partita.tools.validate`` (see there); without a usable
GPU it validates nothing and exits 1 with ``error: --validate needs a CUDA device: ...``,
so that a script never reads success from a run that proved nothing.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from partita.tools.boundary import run_tool

PINNED_NVRTC = "13.0"
"""The NVRTC ``major.minor`` of ``pyproject.toml``'s pin: the digests in examples/pipeline
(and a cache shared between machines) hold only for it."""

#: The library backends: (target, Python module, what the probe loads, extra).
LIBRARIES: tuple[tuple[str, str, str], ...] = (
    ("cublas", "nvmath.bindings.cublasLt", "libcublasLt"),
    ("cudnn", "cudnn", "cuDNN"),
    ("tensorrt", "tensorrt", "TensorRT"),
)


@dataclass(frozen=True)
class Finding:
    """One line of the report: ``name: value``, with ``ok`` False for what blocks a use."""

    name: str
    value: str
    ok: bool = True


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _probe_library(module: str) -> str:
    """The version a library backend reports once its shared library loaded."""
    import importlib

    loaded = importlib.import_module(module)
    if module == "nvmath.bindings.cublasLt":
        raw = int(loaded.get_version())  # e.g. 131000 -> 13.10.0
        return f"cuBLASLt {raw // 10000}.{raw % 10000 // 100}.{raw % 100} (nvmath-python {_version('nvmath-python')})"
    if module == "cudnn":
        return f"cuDNN {loaded.backend_version()} (frontend {getattr(loaded, '__version__', '?')})"
    return str(getattr(loaded, "__version__", "?"))


def library_findings(probe: Callable[[str], str] = _probe_library) -> list[Finding]:
    """Which library backends load here, with versions, or why not and the extra to install."""
    out = []
    for target, module, what in LIBRARIES:
        try:
            out.append(Finding(f"library {target}", probe(module)))
        except ImportError as err:
            index = " --extra-index-url https://pypi.nvidia.com" if target == "tensorrt" else ""
            out.append(Finding(f"library {target}", f"not installed ({err}); pip install 'partita[{target}]'{index}",
                               ok=False))
        except Exception as err:  # noqa: BLE001 - the bindings import, the library (or driver) does not load
            out.append(Finding(f"library {target}", f"does not load ({what}: {type(err).__name__}: {err})", ok=False))
    try:
        import onnxruntime as ort

        providers = ", ".join(p.removesuffix("ExecutionProvider") for p in ort.get_available_providers())
        out.append(Finding("onnxruntime", f"{ort.__version__} (providers: {providers})"))
    except Exception as err:  # noqa: BLE001
        out.append(Finding("onnxruntime", f"unavailable ({type(err).__name__}: {err})", ok=False))
    return out


def gpu_findings(driver: Any = None) -> tuple[list[Finding], Any]:
    """The driver and the device; returns the findings and the device's arch (``None``
    when no GPU can be used)."""
    from partita.runtime.cuda import CudaDevice, CudaError, cuda_status

    try:
        drv = driver
        if drv is None:
            from cuda.bindings import driver as drv
    except Exception as err:  # noqa: BLE001 - no cuda-bindings at all
        return [Finding("GPU", f"none (cuda-bindings do not import: {err})", ok=False)], None
    out = [Finding("cuda-bindings", _version("cuda-bindings") or "?")]
    why = cuda_status(drv)
    if why is None or "version" in why:
        err, version = drv.cuDriverGetVersion()
        if err == drv.CUresult.CUDA_SUCCESS:
            out.append(Finding("CUDA driver", f"{int(version) // 1000}.{int(version) % 1000 // 10} (API {int(version)})",
                               ok=why is None))
    if why is not None:
        out.append(Finding("GPU", f"none ({why})", ok=False))
        return out, None
    try:
        device = CudaDevice(driver=drv)
    except CudaError as err:
        out.append(Finding("GPU", f"none ({err})", ok=False))
        return out, None
    try:
        name, arch = device.name, device.arch
        err, count = drv.cuDeviceGetCount()
        out.append(Finding("GPU", f"{name} ({arch}), device 0 of {int(count)}"))
        total = getattr(drv, "cuDeviceTotalMem", None)
        if total is not None:
            err, nbytes = total(device.device)
            if err == drv.CUresult.CUDA_SUCCESS:
                out.append(Finding("GPU memory", f"{int(nbytes) / 2**30:.1f} GiB"))
    finally:
        device.close()
    return out, arch


def nvrtc_findings() -> list[Finding]:
    from partita.lowering import nvrtc

    try:
        version = "{}.{}".format(*nvrtc.nvrtc_version())
        archs = nvrtc.supported_archs()
    except Exception as err:  # noqa: BLE001 - no libnvrtc: nothing can be compiled
        return [Finding("NVRTC", f"unavailable ({type(err).__name__}: {err}); pip install "
                                 f"'nvidia-cuda-nvrtc=={PINNED_NVRTC}.*'", ok=False)]
    pinned = version == PINNED_NVRTC
    note = "the pinned version" if pinned else (
        f"not the pinned {PINNED_NVRTC}: cubin digests differ from other machines' "
        f"(pip install 'nvidia-cuda-nvrtc=={PINNED_NVRTC}.*')")
    return [
        Finding("NVRTC", f"{version} (wheel {_version('nvidia-cuda-nvrtc') or '?'}; {note}); "
                         f"compiles sm_{archs[0]} to sm_{archs[-1]}", ok=pinned),
        Finding("CUDA headers", ", ".join(f"{d} {_version(d) or 'missing'}" for d in
                                          ("nvidia-cutlass", "nvidia-cuda-cccl", "nvidia-cuda-crt", "nvidia-cuda-runtime"))),
    ]


def cache_findings() -> list[Finding]:
    from partita.lowering.nvrtc import default_cache_dir

    cache = default_cache_dir().expanduser()
    if not cache.exists():
        return [Finding("cubin cache", f"{cache} (empty: made on the first compile)")]
    try:
        cubins = list(cache.glob("*.cubin"))
        size = sum(p.stat().st_size for p in cubins)
    except OSError as err:
        return [Finding("cubin cache", f"{cache} (unreadable: {err.strerror}); compiles use a private one", ok=False)]
    return [Finding("cubin cache", f"{cache} ({len(cubins)} cubins, {size / 2**20:.1f} MiB)")]


def default_target_findings(arch: str | None, driver: Any = None) -> list[Finding]:
    """What ``partita.compile`` targets when given no targets, and where that runs here."""
    import inspect

    from partita.driver import compile as compile_model
    from partita.driver import resolve_native
    from partita.runtime.cuda import arch_runs_on
    from partita.target import CompilationConfig

    parameters = inspect.signature(compile_model).parameters
    targets = list(parameters["targets"].default)
    device = parameters["device"].default
    # what partita.compile makes of them here
    config, spec = resolve_native(CompilationConfig(targets), device, driver)
    compiled = config.target_for_kind("cuda").get("arch")
    if spec != device:
        device = f"{device} ({spec} here)"
    out = [Finding("partita.compile", f"targets {', '.join(targets)}; partitioner "
                                      f"{parameters['partitioner'].default}; cost model device {device}")]
    if arch is None:
        out.append(Finding("runs on", f"the simulated device (CPU): no usable GPU (compiles still make real "
                                      f"{compiled} cubins)"))
    elif arch_runs_on(compiled, arch):
        out.append(Finding("runs on", f"the GPU ({arch}) with the default targets, built for {compiled}"))
    else:
        out.append(Finding("runs on", f"the simulated device with the default targets ({compiled} cubins do not "
                                      f"run on {arch}): pass targets=['cuda -arch={arch}', 'cutlass', 'llvm']",
                           ok=False))
    return out


def findings(driver: Any = None, probe: Callable[[str], str] = _probe_library) -> tuple[list[Finding], str | None]:
    """Everything the report prints, and the GPU's arch (``None`` without a usable GPU)."""
    import partita

    out = [Finding("partita", f"{partita.__version__} ({Path(partita.__file__).parent})"),
           Finding("python", f"{platform.python_version()} ({sys.executable})")]
    gpu, arch = gpu_findings(driver)
    out += gpu + nvrtc_findings() + library_findings(probe) + cache_findings() + default_target_findings(arch, driver)
    return out, arch


def render(rows: Sequence[Finding]) -> str:
    width = max(len(r.name) for r in rows)
    return "\n".join(f"{r.name + ':':{width + 1}} {r.value}" for r in rows)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="partita-doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--validate", action="store_true",
                        help="on a GPU: run the gpu tests, the models against onnxruntime and the benchmarks "
                             "(exit 1 without a GPU)")
    parser.add_argument("--json", default="partita-validation.json", help="where --validate writes its results")
    parser.add_argument("--steps", default=None,
                        help="comma-separated subset of the validation steps (gpu-tests, benchmarks, models)")
    parser.add_argument("--repo", default=None, help="the Partita checkout whose tests/ to run (default: found "
                                                    "from the current directory or the installed package)")
    parser.add_argument("--step-timeout", type=float, default=600.0, help="seconds per step (default 600)")
    parser.add_argument("--total-timeout", type=float, default=1200.0, help="seconds in all (default 1200)")
    return parser.parse_args(argv)


def _main(args: argparse.Namespace) -> int:
    from partita.ir import PartitaError
    from partita.tools import validate

    steps = validate.select_steps(args.steps) if args.validate else []
    rows, arch = findings()
    print(render(rows))
    if not args.validate:
        return 0
    if arch is None:
        why = next((r.value for r in rows if r.name == "GPU"), "no GPU")
        raise PartitaError(f"--validate needs a CUDA device: {why}; nothing was validated")
    return validate.run_validation(steps, validate.find_repo(args.repo), Path(args.json),
                                   environment={r.name: r.value for r in rows},
                                   step_timeout=args.step_timeout, total_timeout=args.total_timeout)


def main(argv: Sequence[str] | None = None) -> int:
    return run_tool("partita-doctor", lambda: _main(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
