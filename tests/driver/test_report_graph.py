"""The placement page: its data (nodes coloured by backend, partitions with kernels and
costs, host round trips) and, in headless Chromium when it is installed, what it shows."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import partita
from partita.tools import run

ROOT = Path(__file__).resolve().parents[2]
MIXED = """func.func @main(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>) -> tensor<4x16xf32> {
  %0 = nn.dense %x, %w : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %1 = nn.relu %0 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %2 = nn.cumsum %1 {axis = 1 : i64} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  func.return %2 : tensor<4x16xf32>
}
"""


@pytest.fixture(scope="module")
def cnn() -> partita.Executable:
    return partita.compile(ROOT / "examples" / "cnn.onnx")


def test_the_graph_has_every_partition_coloured_by_its_backend(cnn: partita.Executable) -> None:
    from partita.report_graph import placement_graph

    data = placement_graph(cnn)
    partitions = [n for n in data["nodes"] if n["kind"] == "partition"]
    assert sorted(n["label"] for n in partitions) == sorted(r.symbol for r in cnn.report().partitions)
    assert {n["backend"] for n in partitions} == {"cutlass", "cuda"}
    assert all(n["kernel"] != "-" and n["cost"].endswith("us") for n in partitions)
    assert data["collage"] is not None and data["eager"] is not None
    # Connected from the input to the output, in program order.
    ids = {n["id"]: n for n in data["nodes"]}
    assert all(a < b for a, b in data["edges"])
    assert {ids[a]["kind"] for a, _ in data["edges"]} >= {"input", "partition"}
    assert any(ids[b]["kind"] == "output" for _, b in data["edges"])


def test_host_steps_are_marked_as_round_trips(tmp_path: Path) -> None:
    from partita.report_graph import placement_graph

    exe = partita.compile(MIXED, partitioner="none", fallback_device="cpu")
    data = placement_graph(exe)
    host = [n for n in data["nodes"] if n["kind"] == "host"]
    assert [n["label"] for n in host] == ["dense", "relu", "cumsum"]
    assert all(n["roundtrip"] for n in host) and data["host_steps"] == 3


def test_the_page_is_self_contained(cnn: partita.Executable, tmp_path: Path) -> None:
    page = cnn.report_graph(tmp_path / "placement.html")
    assert (tmp_path / "placement.html").read_text() == page
    assert not re.search(r"(src|href)=[\"']?(https?:)?//", page)  # nothing fetched
    data = json.loads(re.search(r'id="placement-data">(.*?)</script>', page, re.DOTALL).group(1))
    assert len(data["nodes"]) > 2


def test_partita_run_writes_the_page(tmp_path: Path, capsys) -> None:
    path = tmp_path / "mixed.mlir"
    path.write_text(MIXED)
    page = tmp_path / "placement.html"
    assert run.main([str(path), "-q", "--partitioner", "none", "--fallback-device", "cpu", "--report-graph", str(page)]) == 0
    assert "Placement of @main" in page.read_text()
    assert run.main([str(path), "-q", "--report-graph", str(tmp_path / "no" / "x.html")]) == 1
    assert "does not exist" in capsys.readouterr().err


def _chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-extensions", "--no-first-run", "--disable-dev-shm-usage"]


@pytest.mark.skipif(_chromium() is None, reason="needs Chromium (apt-get install chromium) to render the page")
def test_chromium_draws_the_placement(cnn: partita.Executable, tmp_path: Path) -> None:
    page = tmp_path / "placement.html"
    cnn.report_graph(page)
    proc = subprocess.run([_chromium(), *HEADLESS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                          check=False, capture_output=True, text=True, timeout=120)
    dom = proc.stdout
    assert 'data-rendered="true"' in dom, proc.stderr[-2000:]  # the script ran to its end
    drawn = re.findall(r'<g class="node partition" data-backend="(\w+)" data-label="([\w]+)"', dom)
    assert sorted(label for _, label in drawn) == sorted(r.symbol for r in cnn.report().partitions)
    assert {backend for backend, _ in drawn} == {"cutlass", "cuda"}
    assert dom.count('<line ') >= len(drawn)  # edges drawn between them
    assert re.search(r'<span class="legend-item" data-backend="cutlass"', dom)
    summary = re.search(r'<p id="summary">(.*?)</p>', dom).group(1)
    assert summary.startswith(f"{len(drawn)} partition(s) in {len(drawn)} call(s), 0 host round trip(s)")
    assert "Collage" in summary and "vs eager" in summary
    # Collage's choice, group by group, beside the eager partitioner's total.
    assert re.search(r"<caption>Collage's choice: [\d.]+ us estimated, eager partitioner: [\d.]+ us</caption>", dom)
    chosen = re.findall(r'<tr data-target="(\w+)', dom)
    assert {"cutlass"} <= set(chosen) and len(chosen) == len(cnn.collage.partitions) + len(cnn.collage.native)
