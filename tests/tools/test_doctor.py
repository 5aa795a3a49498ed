"""``partita-doctor``: the report (with the recording driver standing in for a GPU), and
``--validate``'s steps, limits, table and JSON, exercised here without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from support.recording_driver import RecordingDriver

import partita.driver
from partita.tools import doctor, validate

REPO = Path(__file__).parents[2]


def _values(rows) -> dict[str, str]:
    return {r.name: r.value for r in rows}


def test_report_names_the_gpu_and_where_default_compiles_run() -> None:
    driver = RecordingDriver(arch=(9, 0), devices=2, version=13020)
    rows, arch = doctor.gpu_findings(driver)
    values = _values(rows)
    assert arch == "sm_90"
    assert values["GPU"] == "Recording GPU (sm_90), device 0 of 2"
    assert values["CUDA driver"].startswith("13.2 ")
    (runs_on,) = [r for r in doctor.default_target_findings(arch, driver) if r.name == "runs on"]
    assert runs_on.ok and runs_on.value == "the GPU (sm_90) with the default targets, built for sm_90a"


def test_report_says_the_default_targets_build_for_the_gpu_present() -> None:
    """The default cuda target is -arch=native: an A100 gets sm_80 cubins, no GPU sm_90 ones."""
    driver = RecordingDriver(arch=(8, 0))
    _, arch = doctor.gpu_findings(driver)
    (runs_on,) = [r for r in doctor.default_target_findings(arch, driver) if r.name == "runs on"]
    assert runs_on.ok and runs_on.value.endswith("built for sm_80")
    (runs_on,) = [r for r in doctor.default_target_findings(None, RecordingDriver(devices=0)) if r.name == "runs on"]
    assert runs_on.value.startswith("the simulated device") and "sm_90 cubins" in runs_on.value


def test_report_without_a_usable_driver() -> None:
    rows, arch = doctor.gpu_findings(RecordingDriver(version=12080))
    values = _values(rows)
    assert arch is None
    assert values["GPU"].startswith("none (the CUDA driver is version 12.8; these CUDA 13 bindings need a driver >= 13.0)")
    rows, arch = doctor.gpu_findings(RecordingDriver(fail={"cuInit": 100}))
    assert arch is None and "did not initialise" in _values(rows)["GPU"]


def test_library_backends_say_what_to_install() -> None:
    def probe(module: str) -> str:
        if module == "cudnn":
            raise ImportError("No module named 'cudnn'")
        if module == "tensorrt":
            raise ImportError("No module named 'tensorrt'")
        raise OSError("libcublasLt.so.13: cannot open shared object file")

    values = _values(doctor.library_findings(probe))
    assert values["library cudnn"] == "not installed (No module named 'cudnn'); pip install 'partita[cudnn]'"
    assert values["library tensorrt"].endswith("pip install 'partita[tensorrt]' --extra-index-url https://pypi.nvidia.com")
    assert values["library cublas"].startswith("does not load (libcublasLt: OSError: libcublasLt.so.13")
    assert values["library cudnn"] and "onnxruntime" in values


def test_doctor_without_a_gpu_exits_0(monkeypatch, capsys) -> None:
    monkeypatch.setattr(doctor, "gpu_findings", lambda driver=None: ([doctor.Finding("GPU", "none (no driver)", False)], None))
    monkeypatch.setattr(partita.driver, "present_device", lambda ordinal, driver: None)  # no GPU for -arch=native either
    assert doctor.main([]) == 0
    out = capsys.readouterr().out
    assert "GPU:" in out and "none (no driver)" in out
    assert "runs on:" in out and "the simulated device (CPU): no usable GPU (compiles still make real sm_90 cubins)" in out
    assert "NVRTC:" in out and "cubin cache:" in out and "partita.compile:" in out


def test_validate_without_a_gpu_exits_1(monkeypatch, capsys, tmp_path: Path) -> None:
    monkeypatch.setattr(doctor, "gpu_findings", lambda driver=None: ([doctor.Finding("GPU", "none (no driver)", False)], None))
    assert doctor.main(["--validate", "--json", str(tmp_path / "v.json")]) == 1
    err = capsys.readouterr().err
    assert "error: --validate needs a CUDA device: none (no driver); nothing was validated" in err
    assert "Traceback" not in err and not (tmp_path / "v.json").exists()


def test_unknown_step_is_an_error(monkeypatch, capsys) -> None:
    monkeypatch.setattr(doctor, "gpu_findings", lambda driver=None: ([doctor.Finding("GPU", "X", True)], "sm_90"))
    assert doctor.main(["--validate", "--steps", "models,bogus"]) == 1
    assert "unknown validation step(s) bogus" in capsys.readouterr().err


def _child(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code), "{out}"]


WRITE_ROW = """
    import json, sys, time
    row = dict(step="s", item="first", metric="m", partita=1.0, reference=2.0, status="ok", note="")
    open(sys.argv[1], "w").write(json.dumps({"rows": [row]}))
"""


def test_steps_are_bounded_and_keep_partial_rows(capsys, tmp_path: Path) -> None:
    steps = [
        validate.Step("fine", _child(WRITE_ROW)),
        validate.Step("hangs", _child(WRITE_ROW + "\n    time.sleep(60)\n")),
        validate.Step("crashes", _child("import sys; print('boom'); sys.exit(3)")),
        validate.Step("no-checkout", []),
    ]
    code = validate.run_validation([], None, tmp_path / "v.json", environment={"GPU": "test"},
                                   step_timeout=5, total_timeout=60, steps=steps)
    assert code == 1
    data = json.loads((tmp_path / "v.json").read_text())
    status = {s["name"]: s["status"] for s in data["steps"]}
    assert status == {"fine": "ok", "hangs": "timeout", "crashes": "failed", "no-checkout": "not run"}
    assert next(s for s in data["steps"] if s["name"] == "hangs")["seconds"] < 30
    hangs = [r for r in data["rows"] if r["step"] == "s"]
    assert len(hangs) == 2  # the hung step's row survived its kill
    (crash,) = [r for r in data["rows"] if r["step"] == "crashes"]
    assert crash["status"] == "FAIL" and "exit 3: boom" in crash["note"]
    assert data["environment"] == {"GPU": "test"} and data["passed"] is False
    table = capsys.readouterr().out
    assert table.count("\n") > 6 and "hangs: timeout in" in table and "stopped after 5s" in table


def test_the_total_budget_stops_starting_steps(tmp_path: Path) -> None:
    ticks = iter([0.0, 0.0, 1150.0])
    results = validate.run_steps([validate.Step("a", _child(WRITE_ROW)), validate.Step("b", _child(WRITE_ROW))],
                                 step_timeout=600, total_timeout=1200, clock=lambda: next(ticks))
    assert [r.status for r in results] == ["ok", "not run"]
    assert "1200s budget is spent" in results[1].rows[0].note


def test_every_step_passing_exits_0(tmp_path: Path) -> None:
    code = validate.run_validation([], None, tmp_path / "v.json", environment={},
                                   steps=[validate.Step("fine", _child(WRITE_ROW))])
    assert code == 0 and json.loads((tmp_path / "v.json").read_text())["passed"] is True


GPU_TESTS = """
import pytest

@pytest.mark.gpu
def test_on_the_gpu():
    assert True

@pytest.mark.gpu
def test_wrong():
    assert 1 == 2, "kernel differs"

@pytest.mark.gpu
def test_needs_an_extra():
    pytest.skip("no tensorrt")

@pytest.mark.gpu
def test_falls_back():
    from partita.runtime.device import SimulatedDevice
    SimulatedDevice()

def test_not_gpu_may_simulate():
    from partita.runtime.device import SimulatedDevice
    SimulatedDevice()
"""


def test_gpu_test_results_and_the_simulated_fallback_guard(tmp_path: Path) -> None:
    """The gpu-tests step's reading of pytest, on a real pytest run with the suite's guard."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_fake_gpu.py").write_text(GPU_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers = gpu: needs a GPU\n")
    step = validate.gpu_test_step(tmp_path)
    at = step.argv.index("gpu")
    step.argv[at - 1:at + 1] = ["-p", "support.gpu_guard"]  # load the guard plugin, run every test (not only -m gpu)
    step.env = {"PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])}
    result = validate.run_step(step, timeout=120)
    assert result.status == "failed", result.log
    summary, *rows = result.rows
    assert summary.note == "2 passed, 2 failed, 1 skipped", result.log
    by_name = {r.item.split("::")[-1]: r for r in rows}
    assert by_name["test_wrong"].status == "FAIL" and "kernel differs" in by_name["test_wrong"].note
    assert by_name["test_falls_back"].status == "FAIL"
    assert "fell back to the simulated device" in by_name["test_falls_back"].note
    assert by_name["test_needs_an_extra"].status == "skipped" and "no tensorrt" in by_name["test_needs_an_extra"].note
    assert "test_not_gpu_may_simulate" not in by_name


def _tiny_model(path: Path) -> Path:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "y"], ["out"])]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8]),
                                              helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", 8])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_models_step_compares_with_onnxruntime(tmp_path: Path) -> None:
    """The models step end to end on the simulated device (its timings mean nothing here),
    the cache filled first by parallel compiles."""
    good = _tiny_model(tmp_path / "tiny.onnx")
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"not onnx")
    writer = validate.RowWriter(tmp_path / "rows.json")
    validate.models_step(None, writer, arch="sm_90", device="simulated", models=[broken, good], jobs=2)
    rows = [validate.Row(**r) for r in json.loads((tmp_path / "rows.json").read_text())["rows"]]
    assert [(r.item, r.status) for r in rows] == [("broken", "FAIL"), ("tiny", "ok"), ("tiny", "info"), ("tiny", "ok")]
    error = rows[1]
    assert error.metric == "max rel. error vs onnxruntime" and error.partita < 1e-6 and error.reference == 1e-2
    assert rows[2].metric == "latency eager ms" and rows[2].partita > 0


def test_a_kv_cache_decoder_is_decoded_step_by_step(tmp_path: Path) -> None:
    """The bundled decoder step (examples/decoder_step.onnx): its presents fed back as its
    pasts for a few tokens, each step against onnxruntime, with shape buckets and without."""
    decoder = Path(__file__).resolve().parents[2] / "examples" / "decoder_step.onnx"
    assert validate.cache_pairs(decoder) == [("past_key", "present_key"), ("past_value", "present_value")]
    assert validate.cache_pairs(_tiny_model(tmp_path / "tiny.onnx")) == []
    writer = validate.RowWriter(None)
    validate.check_decode(decoder, writer, arch="sm_90", device="simulated", tokens=20)
    error, latency = writer.rows
    assert error.status == "ok" and error.partita < 1e-5, error
    # Past lengths 0..19: the (16, 16), (16, 32) and (32, 32) buckets of past and present.
    assert latency.metric == "decode ms/token (shape buckets)" and "3 instantiations, 3 allocations" in latency.note


def test_a_static_cache_decoder_is_decoded_in_place(tmp_path: Path) -> None:
    """The bundled static-cache step (examples/static_decoder_step.onnx): a ``position``
    input counting the steps, the caches written in place by their scatter kernels and fed
    back, each step against onnxruntime."""
    decoder = Path(__file__).resolve().parents[2] / "examples" / "static_decoder_step.onnx"
    assert validate.cache_pairs(decoder) == [("past_key", "present_key"), ("past_value", "present_value")]
    writer = validate.RowWriter(None)
    validate.check_decode(decoder, writer, arch="sm_90", device="simulated", tokens=12)
    error, latency = writer.rows
    assert error.status == "ok" and error.partita < 1e-5, error
    assert latency.metric == "decode ms/token (static cache)"
    assert "1 instantiations, 1 allocations" in latency.note  # one shape: one arena, one graph


def test_no_models_is_a_failure_not_a_pass() -> None:
    writer = validate.RowWriter(None)
    validate.models_step(None, writer, arch="sm_90")
    (row,) = writer.rows
    assert row.status == "FAIL" and "no models found" in row.note


def test_model_files_are_the_bundled_then_the_exported() -> None:
    names = [p.relative_to(REPO).as_posix() for p in validate.model_files(REPO)]
    assert names[:3] == ["examples/cnn.onnx", "examples/decoder_step.onnx", "examples/encoder.onnx"]
    assert "tests/models/exported/bert.onnx" in names and all(n.endswith(".onnx") for n in names)


def test_model_inputs_come_from_the_recorded_npz() -> None:
    path = REPO / "tests" / "models" / "exported" / "bert.onnx"
    feeds = validate.model_inputs(path)
    with np.load(path.with_suffix(".npz")) as recorded:
        assert set(feeds) <= set(recorded.files) and feeds
        for name, value in feeds.items():
            np.testing.assert_array_equal(value, recorded[name])


def test_model_inputs_otherwise_follow_the_signature(tmp_path: Path) -> None:
    feeds = validate.model_inputs(_tiny_model(tmp_path / "tiny.onnx"))
    assert feeds["x"].shape == (2, 8) and feeds["y"].shape == (8,) and feeds["x"].dtype == np.float32


class _Timer:
    def __init__(self, seconds):
        self.seconds, self.unmeasured = seconds, {"no cublas library": 1}

    def time(self, ops, backend):
        assert [op.name for op in ops] in (["nn.dense"], ["nn.reduce_sum"], ["nn.matmul_integer"])
        return self.seconds.get(backend)


def test_benchmark_rows_compute_rates_against_the_reference(tmp_path: Path) -> None:
    writer = validate.RowWriter(None)
    timer = _Timer({"cutlass": 2e-3})
    hopper = _Timer({"cutlass": 1e-3})  # the sm_90a timer: its own column on an H100/H200
    validate.gemm_rows(writer, {"cutlass": timer, "cublas": timer, "cutlass sm_90a": hopper}, lambda: 1e-3,
                       1000, 1000, 1000)
    validate.reduction_rows(writer, _Timer({"cuda": 4e-3}), lambda: None, 1000, 1000)
    cutlass, cublas, sm90a, reduction = writer.rows
    assert (cutlass.partita, cutlass.reference, cutlass.metric) == (pytest.approx(1.0), pytest.approx(2.0), "TFLOP/s")
    assert cublas.status == "skipped" and "no cublas library" in cublas.note
    assert sm90a.item == "GEMM f16 1000x1000x1000 (cutlass sm_90a)" and sm90a.partita == pytest.approx(2.0)
    assert (reduction.partita, reduction.reference) == (pytest.approx(1.0), None)
    validate.gemm_rows(writer, {"cuda": _Timer({"cuda": 4e-3})}, lambda: 1e-3, 1000, 1000, 1000, "i8")
    int8 = writer.rows[-1]
    assert int8.item == "GEMM i8 1000x1000x1000 (cuda)" and int8.metric == "TOP/s"
    assert (int8.partita, int8.reference) == (pytest.approx(0.5), pytest.approx(2.0))
    assert int8.note == "reference: torch._int_mm"


def test_the_tuning_rows_time_every_cutlass_candidate() -> None:
    """The measured tuning table: tune-cutlass-kernels on the GEMM, every candidate timed
    (the recording driver's clock: 20 us each, 10 us for the 256x128 tile), the fastest
    against torch, the table's choice and every candidate's rate in the note."""
    from partita.lowering.cutlass import KernelSpec, choose_config
    from partita.lowering.cutlass.emitter import entry_name
    from partita.runtime.cuda import CudaDevice

    m, n, k = 256, 1024, 512
    labels = validate.tuning_labels(m, n, k, 90, hopper=False)
    spec = KernelSpec.dense(m, n, k, "float16")
    times = {entry_name(spec, choose_config(spec, 90, kernel=label)): 20.0 for label in labels}
    times[entry_name(spec, choose_config(spec, 90, kernel="256x128x32_4x2x1_3"))] = 10.0
    writer = validate.RowWriter(None)
    validate.tuning_rows(writer, CudaDevice(driver=RecordingDriver(kernel_us=times)), "90", lambda: 1e-3, m, n, k)
    (row,) = writer.rows
    flops = 2.0 * m * n * k
    assert row.item == f"GEMM f16 {m}x{n}x{k} tuned (cutlass sm_90)" and row.metric == "TFLOP/s"
    assert (row.partita, row.reference) == (pytest.approx(flops / 10e-6 / 1e12), pytest.approx(flops / 1e-3 / 1e12))
    assert row.note.startswith("reference: torch.matmul; fastest 256x128x32_4x2x1_3, the table's 128x128x32_2x2x1_3; ")
    rates = row.note.split("; ")[2].split(", ")  # each candidate's TFLOP/s: 26.8 at 10 us, 13.4 at 20
    assert sorted(rates) == sorted(f"{label} {27 if label == '256x128x32_4x2x1_3' else 13}" for label in labels)


def test_device_seconds_are_a_runs_kernels_without_its_host_work() -> None:
    """The attention and 4-bit rows time Partita as torch is timed: device events around
    a burst of each step (the recording driver's stand-in clock: 7.5 us a kernel)."""
    from partita.runtime.cuda import CudaDevice

    exe = partita.compile(validate.attention_model(1, 2, 32, 64), validate.model_targets("sm_90"))
    drv = RecordingDriver(arch=(9, 0), launch_us=7.5)
    exe.load(CudaDevice(driver=drv))
    q = np.zeros((1, 2, 32, 64), np.float16)
    launches = len(drv.launches)
    assert validate.device_seconds(exe, q, q, q, repeat=3, burst=4) == pytest.approx(7.5e-6)
    assert len(drv.launches) - launches == 2 + 3 * 4  # warm-up runs, then the timed bursts
    exe.close()


def test_models_are_compiled_for_the_gpus_arch() -> None:
    assert validate.model_targets("sm_90a") == ["cuda -arch=sm_90a", "cutlass -sm=90", "llvm"]
    assert validate.model_targets("sm_89", "cudnn") == ["cuda -arch=sm_89", "cutlass -sm=89", "cudnn", "llvm"]


def test_the_4_bit_benchmark_model_and_its_f16_weight_are_onnxruntimes() -> None:
    """The 4-bit GEMM benchmark compares Partita with torch.matmul of the dequantized f16
    weight: that weight is what onnxruntime's MatMulNBits computes with, and Partita's
    compile of the model is its two-schedule kernel."""
    import onnxruntime as ort

    import partita

    model, weight = validate.nbits_model(64, 128)
    x = np.random.default_rng(1).standard_normal((70, 128)).astype(np.float16)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(x.astype(np.float32) @ weight.astype(np.float32).T, want.astype(np.float32),
                               rtol=2e-3, atol=2e-3 * np.abs(want.astype(np.float32)).max())
    exe = partita.compile(model, validate.model_targets("sm_90"))
    assert [str(row.kernel).split(" ", 1)[1] for row in exe.report().rows] == ["(gemm, 256 threads/block)"]


def test_attention_model_is_what_exporters_write() -> None:
    model = validate.attention_model(1, 2, 8, 4)
    onnx.checker.check_model(model)
    assert [n.op_type for n in model.graph.node] == ["Transpose", "MatMul", "Mul", "Softmax", "MatMul"]


def test_doctor_runs_as_a_module() -> None:
    proc = subprocess.run([sys.executable, "-m", "partita.tools.doctor", "--help"], check=False, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert proc.returncode == 0 and "--validate" in proc.stdout and "exit 1 without a GPU" in proc.stdout
