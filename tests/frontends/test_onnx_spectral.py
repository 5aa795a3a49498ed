"""ONNX DFT, STFT and MelWeightMatrix: the transforms imported as one GEMM by a constant cos / sin matrix
(``partita.frontends.onnx.spectral``), compiled with ``partita.compile`` and checked
against onnxruntime for every form of the ops: real and complex input, inverse, onesided
(rfft and irfft), ``dft_length`` padding and truncation, other axes, opset 20's ``axis``
input, STFT with and without a window. The GEMM widths keep to two CUTLASS kernels that
every compile shares (through the suite's cubin cache; cold, each takes seconds); the cases
that would need one of their own (an odd width, a dynamic batch) run the import with the
references instead. A DFT axis or length, an STFT frame step or length given at run time
make an ``nn.dyn`` the plan specializes per run (``nn.dft`` / ``nn.stft``, host steps). The
mel filter bank from constant inputs, and from inputs given at run time (``nn.dyn``),
against onnxruntime and ONNX's reference."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import partita
from partita.dialects import nn
from partita.frontends.onnx import import_onnx
from partita.ir import PartitaError
from partita.runtime.reference import run

ort = pytest.importorskip("onnxruntime")

ONNX_OPS = ("DFT", "STFT", "MelWeightMatrix")
"""The op types this file converts (``test_onnx_import`` checks every converter has a test)."""

TOL = {"rtol": 1e-4, "atol": 1e-4}


def _model(op: str, opset: int, feeds: dict[str, np.ndarray], inputs: list[str], *,
           consts: dict[str, np.ndarray] | None = None, dims: dict[str, list] | None = None,
           **attrs) -> onnx.ModelProto:
    """One ``op`` node reading ``inputs`` ("" for one left out): ``feeds`` are graph inputs
    (``dims`` may rename their dims), ``consts`` initializers."""
    consts = consts or {}
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], **attrs)], op.lower(),
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), (dims or {}).get(n, v.shape))
         for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, n) for n, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path, *,
           compiled: bool = True) -> np.ndarray:
    """The compiled model's result (or the import's, run by the references) matches
    onnxruntime's; returns it."""
    (want,) = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, feeds)
    if compiled:
        path = tmp_path / "model.onnx"
        onnx.save(model, path)
        (got,) = partita.compile(path).run(*feeds.values())
    else:
        (got,) = run(import_onnx(model), *feeds.values())
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, **TOL)
    return got


def _signal(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _int(value: int) -> np.ndarray:
    return np.asarray(value, np.int64)


# name: (opset, input shape, dft_length or None, opset 20's axis input or None, attributes)
# Their GEMMs take two CUTLASS kernels (K and N multiples of 4; multiples of 2 only).
DFT_CASES = {
    "forward_real": (17, (2, 8, 3, 1), None, None, {"axis": 1}),
    "forward_complex": (17, (2, 4, 3, 2), None, None, {"axis": 1}),
    "inverse": (17, (2, 3, 4, 2), None, None, {"axis": 2, "inverse": 1}),
    "inverse_real_input": (17, (2, 8, 3, 1), None, None, {"axis": 1, "inverse": 1}),
    "onesided": (17, (2, 8, 3, 1), None, None, {"axis": 1, "onesided": 1}),
    # the irfft: 4 bins of a one-sided spectrum are a real signal of 6 (the default) or 7
    "irfft": (17, (2, 4, 3, 2), None, None, {"axis": 1, "onesided": 1, "inverse": 1}),
    "pad": (17, (2, 4, 3, 1), 6, None, {"axis": 1}),
    "truncate": (17, (2, 12, 3, 1), 8, None, {"axis": 1}),
    "truncate_onesided": (17, (2, 12, 3, 1), 8, None, {"axis": 1, "onesided": 1}),
    "axis_0": (17, (4, 3, 2), None, None, {"axis": 0}),
    "negative_axis": (17, (2, 4, 3, 2), None, None, {"axis": -3}),
    "opset20_default_axis": (20, (2, 3, 4, 1), None, None, {}),
    "opset20_axis_input": (20, (2, 4, 3, 2), None, 1, {}),
    "opset20_negative_axis_input": (20, (2, 4, 3, 2), 6, -3, {"inverse": 1}),
}


REFERENCE_CASES = {
    "irfft_odd_length": (17, (2, 4, 3, 2), 7, None, {"axis": 1, "onesided": 1, "inverse": 1}),
    "onesided_odd_length": (20, (2, 3, 7, 1), None, -2, {"onesided": 1}),
}


@pytest.mark.parametrize("case", [*DFT_CASES, *REFERENCE_CASES])
def test_dft_matches_onnxruntime(case: str, tmp_path) -> None:
    opset, shape, length, axis, attrs = DFT_CASES.get(case) or REFERENCE_CASES[case]
    consts = {}
    inputs = ["x", "", ""]
    if length is not None:
        consts["dft_length"], inputs[1] = _int(length), "dft_length"
    if axis is not None:
        consts["axis"], inputs[2] = _int(axis), "axis"
    while not inputs[-1]:
        inputs.pop()
    feeds = {"x": _signal(*shape)}
    _check(_model("DFT", opset, feeds, inputs, consts=consts, **attrs), feeds, tmp_path,
           compiled=case in DFT_CASES)


def test_dft_dynamic_batch(tmp_path) -> None:
    feeds = {"x": _signal(2, 4, 3, 2)}
    model = _model("DFT", 17, feeds, ["x"], dims={"x": ["N", 4, 3, 2]}, axis=1)
    (main,) = import_onnx(model).ops
    assert main.function_type.outputs.data[0].get_shape() == (nn.DYN, 4, 3, 2)
    _check(model, feeds, tmp_path, compiled=False)


def test_opset20_axis_from_a_folded_constant(tmp_path) -> None:
    feeds = {"x": _signal(2, 4, 3, 2)}
    model = _model("DFT", 20, feeds, ["x", "", "axis"])
    model.graph.node.insert(0, helper.make_node("Constant", [], ["axis"], value=numpy_helper.from_array(_int(1))))
    _check(model, feeds, tmp_path)


def test_default_axis_is_one_gemm_without_transposes() -> None:
    """The signal axis beside the (re, im) axis flattens into the GEMM's rows as it lies."""
    feeds = {"x": _signal(2, 4, 3, 2)}
    module = import_onnx(_model("DFT", 20, feeds, ["x"]))
    ops = [op.name for op in module.walk() if isinstance(op, nn.NNOp)]
    assert ops == ["nn.reshape", "nn.constant", "nn.dense", "nn.reshape"]


STFT_CASES = {
    # name: (signal shape, frame_step, frame_length or None, window: None, "constant", "input", onesided)
    "frame_length": ((2, 20, 1), 3, 8, None, None),
    "constant_window": ((2, 20, 1), 4, None, "constant", None),
    "run_time_window_and_length": ((2, 21, 1), 4, 8, "input", None),
    "complex_two_sided": ((1, 16, 2), 2, 4, "constant", 0),
    "complex_onesided": ((1, 16, 2), 3, 4, None, 1),
}


@pytest.mark.parametrize("case", list(STFT_CASES))
def test_stft_matches_onnxruntime(case: str, tmp_path) -> None:
    shape, step, length, window, onesided = STFT_CASES[case]
    feeds = {"signal": _signal(*shape)}
    consts = {"frame_step": _int(step)}
    inputs = ["signal", "frame_step", "", ""]
    if window is not None:
        hann = np.hanning(length or 8).astype(np.float32)
        (feeds if window == "input" else consts)["window"], inputs[2] = hann, "window"
    if length is not None:
        consts["frame_length"], inputs[3] = _int(length), "frame_length"
    while not inputs[-1]:
        inputs.pop()
    attrs = {} if onesided is None else {"onesided": onesided}
    got = _check(_model("STFT", 17, feeds, inputs, consts=consts, **attrs), feeds, tmp_path)
    frames = (shape[1] - (length or 8)) // step + 1
    assert got.shape[:2] == (shape[0], frames)


# -- located errors ----------------------------------------------------------------------


def test_dynamic_signal_length_is_a_located_error() -> None:
    feeds = {"x": _signal(2, 4, 3, 1)}
    model = _model("DFT", 17, feeds, ["x"], dims={"x": [2, "L", 3, 1]}, axis=1)
    with pytest.raises(PartitaError, match=r"node 0 'y' \(DFT\): DFT is built as a matrix product and needs a "
                                           r"static signal length; the input has shape \[2, '\?', 3, 1\]"):
        import_onnx(model)


def test_invalid_forms_are_located_errors() -> None:
    complex_input = {"x": _signal(2, 4, 3, 2)}
    with pytest.raises(PartitaError, match=r"\(DFT\): a onesided forward DFT \(rfft\) takes a real input"):
        import_onnx(_model("DFT", 17, complex_input, ["x"], axis=1, onesided=1))
    with pytest.raises(PartitaError, match=r"\(DFT\): axis 3 is out of range for an input of rank 4"):
        import_onnx(_model("DFT", 17, complex_input, ["x"], axis=3))
    signal = {"signal": _signal(1, 16, 1)}
    with pytest.raises(PartitaError, match=r"\(STFT\): frame_step must be positive, got 0"):
        import_onnx(_model("STFT", 17, signal, ["signal", "frame_step"], consts={"frame_step": _int(0)}))


# -- parameters given at run time -------------------------------------------------------------


def _host_run(model: onnx.ModelProto, runs: list[dict[str, np.ndarray]], kind: str) -> None:
    """``model``'s transform is an ``nn.dyn`` the plan specializes per run (a host step):
    every run, each with its own parameter values and result shape, matches onnxruntime."""
    module = import_onnx(model)
    assert [op.kind for op in module.walk() if isinstance(op, nn.DynOp)] == [kind]
    exe = partita.compile(module, ["llvm"])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feeds in runs:
        (want,) = session.run(None, feeds)
        (got,) = exe.run(**feeds)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, **TOL)


@pytest.mark.parametrize("attrs", [{}, {"inverse": 1}, {"onesided": 1}])
def test_dft_axis_given_at_run_time(attrs) -> None:
    """Opset 20's axis as a graph input: each value a run gives (negative ones too) is a
    transform of its own, sized when the plan binds it."""
    parts = 1 if attrs.get("onesided") else 2
    x = _signal(2, 4, 6, parts)
    model = _model("DFT", 20, {"x": x, "axis": _int(1)}, ["x", "", "axis"], **attrs)
    _host_run(model, [{"x": x, "axis": _int(a)} for a in (1, 2, -2, -3)], "dft")


def test_dft_length_given_at_run_time() -> None:
    x = _signal(2, 6, 3, 1)
    model = _model("DFT", 17, {"x": x, "n": _int(6)}, ["x", "n"], axis=1, onesided=1)
    _host_run(model, [{"x": x, "n": _int(n)} for n in (6, 4, 9)], "dft")


@pytest.mark.parametrize("window", [False, True])
def test_stft_frames_given_at_run_time(window) -> None:
    """frame_step and frame_length as graph inputs, with and without a window (of the
    frame's length): the frames of each run."""
    signal = _signal(2, 32, 1)
    feeds = {"signal": signal, "step": _int(4), "length": _int(8)}
    if window:
        feeds["window"] = np.hanning(8).astype(np.float32)
    model = _model("STFT", 17, feeds, ["signal", "step", "window" if window else "", "length"])
    runs = [{**feeds, "step": _int(step)} for step in (4, 3, 8)]
    if not window:
        runs.append({**feeds, "length": _int(16)})
    _host_run(model, runs, "stft")


def test_run_time_parameters_out_of_range_are_located_errors() -> None:
    x = _signal(2, 4, 3, 2)
    exe = partita.compile(import_onnx(_model("DFT", 20, {"x": x, "axis": _int(1)}, ["x", "", "axis"])), ["llvm"])
    with pytest.raises(PartitaError, match=r"DFT.*axis 3 is out of range for an input of rank 4"):
        exe.run(x=x, axis=_int(3))
    signal = _signal(1, 16, 1)
    feeds = {"signal": signal, "step": _int(4)}
    exe = partita.compile(import_onnx(_model("STFT", 17, feeds, ["signal", "step", "", ""])), ["llvm"])
    with pytest.raises(PartitaError, match=r"STFT.*frame_step and frame_length must be positive, got 0"):
        exe.run(signal=signal, step=_int(0))


# -- MelWeightMatrix -------------------------------------------------------------------------

MEL_NAMES = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")


def _mel(values: tuple, *, run_time: bool, dtype: int | None = None) -> tuple[onnx.ModelProto, dict]:
    """A MelWeightMatrix of ``values`` (three int32 counts, two float edges): graph inputs, or
    initializers."""
    arrays = {n: np.array(v, np.int32 if k < 3 else np.float32) for k, (n, v) in enumerate(zip(MEL_NAMES, values))}
    attrs = {} if dtype is None else {"output_datatype": dtype}
    feeds = arrays if run_time else {}
    graph = helper.make_graph(
        [helper.make_node("MelWeightMatrix", list(MEL_NAMES), ["y"], **attrs)], "mel",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), []) for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", dtype or TensorProto.FLOAT, None)],
        [] if run_time else [numpy_helper.from_array(v, n) for n, v in arrays.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


@pytest.mark.parametrize("values", [(8, 16, 8192, 0.0, 4096.0), (10, 64, 16000, 20.0, 7600.0),
                                    (4, 400, 16000, 300.0, 3000.0), (40, 512, 16000, 0.0, 8000.0)])
@pytest.mark.parametrize("run_time", [False, True])
def test_mel_weight_matrix_matches_onnxruntime(values, run_time) -> None:
    """Whisper-like and narrow filter banks (some filters' first edges share a bin): a
    constant at import, or an ``nn.dyn`` the plan builds for the values of a run."""
    model, feeds = _mel(values, run_time=run_time)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    module = import_onnx(model)
    ops = {op.name for op in module.walk()}
    assert ("nn.dyn" in ops) == run_time and ("nn.constant" in ops) == (not run_time)
    exe = partita.compile(module, ["llvm"])
    (got,) = exe.run(**feeds)
    assert got.shape == want.shape == (values[1] // 2 + 1, values[0]) and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    from onnx.reference import ReferenceEvaluator

    (reference,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(got, reference, rtol=1e-6, atol=1e-7)
    if run_time:  # another run, other values: bound again, another shape
        other = (6, 32, 8000, 0.0, 4000.0)
        _, feeds = _mel(other, run_time=True)
        (got,) = exe.run(**feeds)
        (want,) = ReferenceEvaluator(_mel(other, run_time=True)[0]).run(None, feeds)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_mel_weight_matrix_output_datatype() -> None:
    model, _ = _mel((8, 16, 8192, 0.0, 4096.0), run_time=False, dtype=TensorProto.DOUBLE)
    (got,) = run(import_onnx(model))
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {})
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want)


def test_mel_weight_matrix_errors_are_located() -> None:
    """An upper edge past the Nyquist bin, an integer output type: at import for constants,
    at the run for values given then."""
    model, _ = _mel((8, 16, 8000, 0.0, 7000.0), run_time=False)
    with pytest.raises(PartitaError, match=r"\(MelWeightMatrix\): upper_edge_hertz 7000.0 maps past the last of "
                                           r"the 9 bins"):
        import_onnx(model)
    with pytest.raises(PartitaError, match=r"\(MelWeightMatrix\): output_datatype 6 is not a float type"):
        import_onnx(_mel((8, 16, 8192, 0.0, 4096.0), run_time=False, dtype=TensorProto.INT32)[0])
    model, feeds = _mel((8, 16, 8000, 0.0, 7000.0), run_time=True)
    exe = partita.compile(import_onnx(model), ["llvm"])
    with pytest.raises(PartitaError, match=r"MelWeightMatrix.*upper_edge_hertz 7000.0 maps past"):
        exe.run(**feeds)
