"""ONNX RNN, GRU and LSTM (issue 24): imported as an unrolled composition of nn ops (one
hoisted input GEMM per direction, one recurrent dense per step), checked against onnxruntime
through the references for every attribute of the spec, end to end through
``partita.compile`` for one LSTM and one GRU, and on PyTorch's own exports.

onnxruntime runs only ``layout`` 0: a batchwise (layout 1) model is checked against the same
node in layout 0 on transposed inputs, its outputs transposed back."""

from __future__ import annotations

import io
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import partita
from partita.dialects import nn
from partita.frontends.onnx import import_onnx
from partita.frontends.onnx.recurrent import MAX_UNROLL_STEPS
from partita.ir import PartitaError
from partita.runtime.reference import run

ort = pytest.importorskip("onnxruntime")

ONNX_OPS = ("RNN", "GRU", "LSTM")
"""The op types this file converts (``test_onnx_import`` checks every converter has a test)."""

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
SEQ, BATCH, SIZE, HIDDEN = 4, 3, 5, 4
TOL = {"rtol": 1e-5, "atol": 1e-5}


def _arrays(kind: str, *, directions: int = 1, bias: bool = True, lens=None, initial: bool = False,
            peepholes: bool = False, seq: int = SEQ, seed: int = 0) -> dict[str, np.ndarray]:
    """The node's inputs in layout 0 (X [seq, batch, input], states [directions, batch, hidden])."""
    rng = np.random.default_rng(seed)
    g = GATES[kind] * HIDDEN
    out = {"X": rng.standard_normal((seq, BATCH, SIZE)), "W": rng.standard_normal((directions, g, SIZE)) * 0.5,
           "R": rng.standard_normal((directions, g, HIDDEN)) * 0.5}
    if bias:
        out["B"] = rng.standard_normal((directions, 2 * g)) * 0.5
    if initial:
        out["initial_h"] = rng.standard_normal((directions, BATCH, HIDDEN))
        if kind == "LSTM":
            out["initial_c"] = rng.standard_normal((directions, BATCH, HIDDEN))
    if peepholes:
        out["P"] = rng.standard_normal((directions, 3 * HIDDEN)) * 0.5
    out = {k: v.astype(np.float32) for k, v in out.items()}
    if lens is not None:
        out["sequence_lens"] = np.asarray(lens, np.int32)
    return out


def _batchwise(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Layout 1's inputs: X [batch, seq, input], states [batch, directions, hidden]."""
    return {k: v.transpose(1, 0, 2) if k in ("X", "initial_h", "initial_c") else v for k, v in arrays.items()}


def _model(kind: str, arrays: dict[str, np.ndarray], *, layout: int = 0, direction: str = "forward",
           fed: tuple[str, ...] = ("X", "sequence_lens", "initial_h", "initial_c"), outputs=None,
           dims: dict[str, list] | None = None, **attrs) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One ``kind`` node; the ``fed`` inputs are graph inputs, the others initializers."""
    names = [n if n in arrays else "" for n in INPUTS[:8 if kind == "LSTM" else 6]]
    while not names[-1]:
        names.pop()
    feeds = {n: arrays[n] for n in names if n in fed}
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), (dims or {}).get(n, v.shape))
              for n, v in feeds.items()]
    inits = [numpy_helper.from_array(arrays[n], n) for n in names if n and n not in fed]
    outputs = outputs or ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else [])
    node = helper.make_node(kind, names, outputs, hidden_size=HIDDEN, direction=direction, layout=layout, **attrs)
    graph = helper.make_graph([node], kind.lower(), inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), feeds


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _expected(kind: str, arrays: dict[str, np.ndarray], layout: int, **options) -> list[np.ndarray]:
    """onnxruntime's outputs of the node, in ``layout``'s order."""
    want = _onnxruntime(*_model(kind, arrays, layout=0, **options))
    if layout == 1:  # Y [seq, dirs, batch, hidden] -> [batch, seq, dirs, hidden]; states swap axes 0, 1
        want = [want[0].transpose(2, 0, 1, 3), *(w.transpose(1, 0, 2) for w in want[1:])]
    return want


def _check(kind: str, arrays: dict[str, np.ndarray], *, layout: int = 0, tol=TOL, **options) -> onnx.ModelProto:
    """The import run by the references matches onnxruntime; returns the model."""
    want = _expected(kind, arrays, layout, **options)
    model, feeds = _model(kind, _batchwise(arrays) if layout else arrays, layout=layout, **options)
    got = run(import_onnx(model), *feeds.values())
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, **tol)
    return model


def _ops(module) -> list[str]:
    return [op.name for op in module.walk() if isinstance(op, nn.NNOp)]


# -- every attribute, through the references ---------------------------------------------

CASES = {
    "defaults": ({}, {}),
    "no_bias": ({"bias": False}, {}),
    "reverse_initial_states": ({"initial": True}, {"direction": "reverse"}),
    "bidirectional_batchwise": ({"directions": 2, "initial": True}, {"direction": "bidirectional", "layout": 1}),
    # At or past its length a row holds its state and its Y rows are zero; an empty row's
    # final state is zero (onnxruntime's reading).
    "sequence_lens": ({"directions": 2, "initial": True, "lens": [4, 2, 0]}, {"direction": "bidirectional"}),
    "sequence_lens_reverse_batchwise": ({"initial": True, "lens": [1, 4, 3]}, {"direction": "reverse", "layout": 1}),
    "constant_sequence_lens": ({"initial": True, "lens": [3, 4, 1]}, {"fed": ("X",)}),
    "clip": ({"initial": True}, {"clip": 0.4}),
    "weights_at_run_time": ({"directions": 2, "initial": True, "lens": [2, 4, 3]},
                            {"direction": "bidirectional", "fed": INPUTS}),
}


@pytest.mark.parametrize("kind", ONNX_OPS)
@pytest.mark.parametrize("case", list(CASES))
def test_matches_onnxruntime(kind: str, case: str) -> None:
    data, options = CASES[case]
    options = dict(options)
    _check(kind, _arrays(kind, **data), layout=options.pop("layout", 0), **options)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("fed", [("X", "sequence_lens", "initial_h"), INPUTS], ids=["constant_weights", "run_time_weights"])
def test_gru_linear_before_reset(linear_before_reset: int, fed: tuple[str, ...]) -> None:
    arrays = _arrays("GRU", directions=2, initial=True, lens=[4, 1, 3])
    _check("GRU", arrays, direction="bidirectional", linear_before_reset=linear_before_reset, fed=fed)
    # Without an initial state the first step has no recurrent terms (Rbh stays: r * Rbh).
    _check("GRU", _arrays("GRU"), linear_before_reset=linear_before_reset, fed=fed)


@pytest.mark.parametrize("fed", [("X", "initial_h", "initial_c"), INPUTS], ids=["constant_weights", "run_time_weights"])
def test_lstm_peepholes_and_clip(fed: tuple[str, ...]) -> None:
    arrays = _arrays("LSTM", directions=2, initial=True, peepholes=True, lens=[4, 3, 2])
    _check("LSTM", arrays, direction="bidirectional", fed=fed)
    _check("LSTM", arrays, direction="bidirectional", fed=fed, clip=0.5)


def test_lstm_input_forget() -> None:
    _check("LSTM", _arrays("LSTM", initial=True, peepholes=True), input_forget=1)


ACTIVATIONS = {
    # alphas and betas are consumed in order by the activations that take them
    "RNN": (["LeakyRelu", "ScaledTanh"], [0.3, 0.8], [0.6]),
    "GRU": (["HardSigmoid", "Softsign", "sigmoid", "Elu"], [0.3, 0.9], [0.6]),
    "LSTM": (["HardSigmoid", "Softplus", "ThresholdedRelu", "Sigmoid", "Relu", "Affine"], [0.25, 0.1, 0.5], [0.4, 0.2]),
}


@pytest.mark.parametrize("kind", ONNX_OPS)
def test_activations(kind: str) -> None:
    names, alphas, betas = ACTIVATIONS[kind]
    arrays = _arrays(kind, directions=2, initial=True)
    _check(kind, arrays, direction="bidirectional", activations=names, activation_alpha=alphas, activation_beta=betas)


def test_unused_outputs_are_not_built() -> None:
    """Only Y_h is read: no Y is assembled (no concatenation, no selects of Y rows)."""
    arrays = _arrays("LSTM", lens=[4, 2, 3])
    model = _check("LSTM", arrays, outputs=["", "Y_h"], fed=("X",))
    ops = _ops(import_onnx(model))
    assert "nn.concatenate" not in ops
    # one dense for the hoisted projection, then one per step after the first (zero state)
    assert ops.count("nn.dense") == 1 + SEQ - 1
    # constant lengths: selects of H and C only at the steps where a row has ended (2 and 3)
    assert ops.count("nn.where") == 2 * 2 and "nn.greater" not in ops


@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("kind", ONNX_OPS)
def test_dynamic_batch(kind: str, layout: int) -> None:
    arrays = _arrays(kind, directions=2, lens=[4, 2, 3])
    dims = {"X": [SEQ, "N", SIZE] if layout == 0 else ["N", SEQ, SIZE], "sequence_lens": ["N"]}
    want = _expected(kind, arrays, layout, direction="bidirectional")
    model, feeds = _model(kind, _batchwise(arrays) if layout else arrays, layout=layout,
                          direction="bidirectional", dims=dims)
    module = import_onnx(model)
    (main,) = module.ops
    for result, rank in zip(main.function_type.outputs, (4, 3, 3)):
        # Y [seq, dirs, N, hidden] / [N, seq, dirs, hidden]; Y_h, Y_c [dirs, N, hidden] / [N, dirs, hidden]
        assert result.get_shape()[(2 if rank == 4 else 1) if layout == 0 else 0] == nn.DYN
    got = run(module, *feeds.values())
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, **TOL)


def test_constant_inputs_fold() -> None:
    """X an initializer too: the node folds to constants at import."""
    arrays = _arrays("GRU", initial=True)
    model = _check("GRU", arrays, fed=())
    assert set(_ops(import_onnx(model))) == {"nn.constant"}


# -- errors ------------------------------------------------------------------------------


def test_dynamic_sequence_length_is_refused() -> None:
    model, _ = _model("LSTM", _arrays("LSTM"), dims={"X": ["T", BATCH, SIZE]})
    with pytest.raises(PartitaError, match=r"LSTM is unrolled over its time steps and needs a static sequence "
                                           r"length; X has shape \['\?', 3, 5\]"):
        import_onnx(model)


def test_too_many_steps_are_refused() -> None:
    model, _ = _model("GRU", _arrays("GRU", seq=MAX_UNROLL_STEPS + 1))
    with pytest.raises(PartitaError, match=f"GRU over {MAX_UNROLL_STEPS + 1} time steps: an import unrolls "
                                           f"at most {MAX_UNROLL_STEPS}"):
        import_onnx(model)


def test_unsupported_activation_is_refused() -> None:
    model, _ = _model("RNN", _arrays("RNN"), activations=["Gelu"])
    with pytest.raises(PartitaError, match=r"node 0 'Y' \(RNN\): activation 'Gelu' is not supported \(supported: "
                                           r"affine, elu, hardsigmoid"):
        import_onnx(model)


def test_wrong_number_of_activations_is_refused() -> None:
    model, _ = _model("GRU", _arrays("GRU", directions=2), direction="bidirectional", activations=["Sigmoid", "Tanh"])
    with pytest.raises(PartitaError, match=r"activations must name 4 functions \(2 per direction\), got 2"):
        import_onnx(model)


# -- compiled end to end -----------------------------------------------------------------


@pytest.mark.parametrize("kind, options", [
    ("LSTM", {"direction": "bidirectional", "clip": 3.0}),
    ("GRU", {"direction": "bidirectional", "linear_before_reset": 1, "layout": 1}),
], ids=["lstm", "gru"])
def test_compiled_matches_onnxruntime(kind: str, options: dict) -> None:
    options = dict(options)
    layout = options.pop("layout", 0)
    arrays = _arrays(kind, directions=2, initial=True, lens=[4, 2, 3], peepholes=kind == "LSTM")
    want = _expected(kind, arrays, layout, **options)
    model, feeds = _model(kind, _batchwise(arrays) if layout else arrays, layout=layout, **options)
    exe = partita.compile(model)
    got = exe.run(*feeds.values())
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, **TOL)
    assert not exe.runtime.plan.host_ops


# -- PyTorch exports ---------------------------------------------------------------------


@pytest.mark.parametrize("layer", ["LSTM", "GRU"])
def test_torch_export(layer: str) -> None:
    """``torch.onnx.export`` of a 2-layer, batch-first, bidirectional layer (the TorchScript
    exporter): transposes around layout-0 nodes, initial states from Expand of zeros."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = getattr(torch.nn, layer)(SIZE, HIDDEN, num_layers=2, batch_first=True, bidirectional=True).eval()
    x = torch.randn(BATCH, SEQ + 2, SIZE)
    buffer = io.BytesIO()
    outputs = ["y", "h"] + (["c"] if layer == "LSTM" else [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's deprecation and batch-size warnings
        torch.onnx.export(net, (x,), buffer, dynamo=False, input_names=["x"], output_names=outputs)
    model = onnx.load_from_string(buffer.getvalue())
    assert sum(n.op_type == layer for n in model.graph.node) == 2
    want = _onnxruntime(model, {"x": x.numpy()})
    got = run(import_onnx(model), x.numpy())
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, **TOL)

