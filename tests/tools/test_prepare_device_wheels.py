"""scripts/prepare_device_wheels.py: which wheels an offline GPU machine is given (the
download itself needs the network and is run by hand; its measured size is in the README)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "scripts" / "prepare_device_wheels.py"
spec = importlib.util.spec_from_file_location("prepare_device_wheels", SCRIPT)
prepare = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prepare)


def test_pip_freeze_of_the_machine_is_read(tmp_path: Path) -> None:
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("# comment\nTorch==2.11.0+cu130\ncuda_bindings==13.0.3\nml-dtypes @ file:///wheels/ml.whl\n\nonnx\n")
    assert prepare.read_present(freeze) == {"torch": "2.11.0+cu130", "cuda-bindings": "13.0.3", "ml-dtypes": None,
                                            "onnx": None}


def test_default_machine_has_torch_and_its_cuda_wheels() -> None:
    present = prepare.read_present(None)
    assert {"torch", "cuda-bindings", "nvidia-cuda-nvrtc", "onnxruntime", "nvidia-cudnn-cu13"} <= set(present)
    assert "xdsl" not in present and "nvidia-cutlass" not in present


def test_requirements_read_from_the_wheel_for_the_extras(tmp_path: Path) -> None:
    """Only the base requirements and those of the asked extras; markers dropped. The
    resolver is then given those the machine does not already have, so the test extra's
    torch pin never pulls torch's own CUDA pins into the resolution."""
    import zipfile

    wheel = tmp_path / "partita-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("partita-0.1.0.dist-info/METADATA", "\n".join([
            "Metadata-Version: 2.1", "Name: partita", "Requires-Dist: xdsl==0.74.*",
            "Requires-Dist: numpy>=1.26", 'Requires-Dist: torch==2.13.0; extra == "test"',
            'Requires-Dist: lit>=18; extra == "test"', 'Requires-Dist: tensorrt<12,>=11; extra == "tensorrt"',
            'Requires-Dist: nvmath-python>=0.5; extra == "cublas"']))
    wanted = prepare.wheel_requirements(wheel, {"test", "cublas"})
    assert wanted == ["xdsl==0.74.*", "numpy>=1.26", "torch==2.13.0", "lit>=18", "nvmath-python>=0.5"]
    present = prepare.read_present(None)
    assert [r for r in wanted if prepare.requirement_name(r) not in present] == ["xdsl==0.74.*", "lit>=18",
                                                                                  "nvmath-python>=0.5"]


def test_carried_are_the_missing_needed_wheels() -> None:
    needed = [("partita", "0.1.0"), ("xdsl", "0.74.0"), ("torch", "2.11.0"), ("nvidia-cutlass-dsl", "4.8.1"),
              ("scipy", "1.17.1"), ("nvidia-cuda-cccl", "13.0.85")]
    carried, skipped = prepare.split(needed, prepare.read_present(None))
    assert carried == [("xdsl", "0.74.0"), ("nvidia-cuda-cccl", "13.0.85")]
    assert [n for n, _ in skipped] == ["nvidia-cutlass-dsl", "scipy"]
    # A machine that has scipy: it is neither carried nor reported as left out.
    carried, skipped = prepare.split(needed, {**prepare.read_present(None), "scipy": "1.16.0"})
    assert [n for n, _ in skipped] == ["nvidia-cutlass-dsl"]
