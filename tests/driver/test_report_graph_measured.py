"""The placement page's measured times: each partition and host step with its time per run
from ``Executable.profile`` (device events on the recording driver's stand-in clock), "n/a"
on the simulated device, and ``partita-run --profile`` / ``--report-graph`` (profiled on
its own when the plan runs on a GPU)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from support.recording_driver import RecordingDriver  # tests/support/recording_driver.py

import partita
from partita.report_graph import placement_graph
from partita.runtime import plan
from partita.runtime.cuda import CudaDevice
from partita.tools import run

HOST_SOFTMAX = """func.func @main(%x: tensor<3x64xf32>, %w: tensor<32x64xf32>) -> tensor<3x32xf32> {
  %0 = nn.dense %x, %w : (tensor<3x64xf32>, tensor<32x64xf32>) -> tensor<3x32xf32>
  %1 = nn.softmax %0 : (tensor<3x32xf32>) -> tensor<3x32xf32>
  func.return %1 : tensor<3x32xf32>
}
"""
TARGETS = "cutlass,llvm"


@pytest.fixture(scope="module")
def exe() -> partita.Executable:
    return partita.compile(HOST_SOFTMAX, TARGETS.split(","), partitioner="eager")


def _inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((3, 64)).astype(np.float32), rng.standard_normal((32, 64)).astype(np.float32)]


def _driver(exe: partita.Executable) -> RecordingDriver:
    (handle,) = [h for h in exe.load("simulated").handles.values()]
    exe.close()
    return RecordingDriver(arch=(8, 0), kernel_us={handle.entry.name: 40.0}, copy_bytes_per_us=100.0)


def test_each_partition_shows_its_measured_time(exe: partita.Executable) -> None:
    exe.load(CudaDevice(driver=_driver(exe)))
    profile = exe.profile(*_inputs(), repeat=2)
    data = placement_graph(exe, profile)
    (partition,) = [n for n in data["nodes"] if n["kind"] == "partition"]
    (host,) = [n for n in data["nodes"] if n["kind"] == "host"]
    assert partition["backend"] == "cutlass" and partition["measured"] == "40.00 us"
    assert host["label"] == "softmax" and host["measured"] == "7.68 us"  # 768 bytes down and up
    assert data["measured"] == "47.68 us" and data["measured_note"] is None
    exe.close()


def test_the_simulated_device_says_n_a(exe: partita.Executable) -> None:
    exe.load("simulated")
    data = placement_graph(exe, exe.profile(*_inputs(), repeat=1))
    steps = [n for n in data["nodes"] if n["kind"] in ("partition", "host")]
    assert [n["measured"] for n in steps] == ["n/a", "n/a"]
    assert data["measured"] is None and "has no device clock" in data["measured_note"]
    # Without a profile nothing claims a measurement.
    plain = placement_graph(exe)
    assert all(n.get("measured") is None for n in plain["nodes"]) and "not profiled" in plain["measured_note"]
    exe.close()


def _page_data(path: Path) -> dict:
    return json.loads(re.search(r'id="placement-data">(.*?)</script>', path.read_text(), re.DOTALL).group(1))


def test_partita_run_profile_on_the_simulated_device(tmp_path: Path, capsys) -> None:
    model = tmp_path / "m.mlir"
    model.write_text(HOST_SOFTMAX)
    page = tmp_path / "placement.html"
    args = [str(model), "-q", "--targets", TARGETS, "--partitioner", "eager"]
    assert run.main([*args, "--report-graph", str(page)]) == 0
    assert "profile on" not in capsys.readouterr().out  # no GPU: not profiled unless asked
    assert run.main([*args, "--profile", "--profile-runs", "2", "--report-graph", str(page)]) == 0
    out = capsys.readouterr().out
    assert "profile on simulated device (CPU): 2 timed run(s)" in out and "has no device clock" in out
    assert re.search(r"kernel\s+tvmgen_default_cutlass_main_0\s+\S+\s+n/a", out)
    assert [n["measured"] for n in _page_data(page)["nodes"] if n["kind"] in ("partition", "host")] == ["n/a", "n/a"]


def test_on_a_gpu_the_page_is_profiled_without_asking(tmp_path: Path, monkeypatch, capsys) -> None:
    model = tmp_path / "m.mlir"
    model.write_text(HOST_SOFTMAX)
    drv = _driver(partita.compile(HOST_SOFTMAX, TARGETS.split(","), partitioner="eager"))
    monkeypatch.setattr(plan, "_choose_device", lambda module, device: (CudaDevice(driver=drv), None))
    page = tmp_path / "placement.html"
    assert run.main([str(model), "-q", "--targets", TARGETS, "--partitioner", "eager", "--report-graph", str(page)]) == 0
    data = _page_data(page)
    assert [n["measured"] for n in data["nodes"] if n["kind"] in ("partition", "host")] == ["40.00 us", "7.68 us"]
    assert data["measured"] == "47.68 us"
    assert "measured: " in page.read_text()  # the script draws it on each node
    # One plain run, then the profile's warm-up and 10 timed runs, each launching the kernel once.
    assert len(drv.launches) == 1 + 1 + 10


def _chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.mark.skipif(_chromium() is None, reason="needs Chromium (apt-get install chromium) to render the page")
def test_chromium_shows_the_measured_times(exe: partita.Executable, tmp_path: Path) -> None:
    exe.load(CudaDevice(driver=_driver(exe)))
    page = tmp_path / "placement.html"
    exe.report_graph(page, exe.profile(*_inputs(), repeat=2))
    exe.close()
    proc = subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--disable-dev-shm-usage",
                           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                          check=False, capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert 'data-rendered="true"' in dom, proc.stderr[-2000:]
    node = re.search(r'<g class="node partition" data-backend="cutlass".*?</g>', dom, re.DOTALL).group(0)
    assert ">measured: 40.00 us per run</text>" in node
    host = re.search(r'<g class="node host".*?</g>', dom, re.DOTALL).group(0)
    assert ">measured: 7.68 us per run</text>" in host
    assert re.search(r'<p id="summary">[^<]*; measured: 47.68 us</p>', dom)
