"""ONNX converters of the spectral ops DFT, STFT and MelWeightMatrix, as compositions of nn ops.

A DFT of static length N along one axis is linear in the signal: each output bin is a
weighted sum of the N samples with weights cos(2πkn/N) and sin(2πkn/N). nn has no FFT, so
the transform is one matrix product by a constant built at import, the GEMM form that the
CUTLASS / cuBLAS partitions already run on tensor cores; TVM's and onnxruntime's paths for
small N compute it this way too. It costs O(N²) per signal instead of an FFT's O(N log N),
which is cheap for the window sizes of audio front ends and is refused past
``MAX_DFT_LENGTH``.

Both halves of a complex value are folded into the one matrix: the signal axis is moved
next to the last (real, imaginary) axis, the two are flattened into rows of ``N * parts``
interleaved values (``re0, im0, re1, im1, ...``; ``parts`` is 1 for a real input), and one
``nn.dense`` by a weight of ``[bins * 2, N * parts]`` gives the interleaved (re, im) bins,
which a reshape splits again. Per the ONNX spec (and its reference implementation):

- ``inverse`` uses exp(+2πikn/N) and divides by N (folded into the weight);
- ``dft_length`` zero-pads the signal (the weight has no columns for the padding) or
  truncates it (a slice of the first N samples);
- ``onesided`` forward (real input only) keeps the N//2+1 non-redundant bins, the rfft;
  ``onesided`` inverse (complex input only) is the irfft: the one-sided spectrum is
  extended by conjugate symmetry (each bin but DC and Nyquist counted twice, imaginary
  parts of those two ignored) and the result is real, last dim 1;
- the output's last dim is 2 (re, im), except the irfft's.

STFT gathers its frames with one ``nn.take`` of a constant [frames, frame_length] index
matrix along the signal axis, then takes every frame's DFT with the same single dense; a
constant window is folded into the weight's columns, a run-time one multiplies the frames.

MelWeightMatrix, the filter bank that re-weights such a spectrum into mel bins, is a
constant (``nn.mel_weight_matrix``) when its inputs are, else an ``nn.dyn`` whose result
the launch plan builds from the values it is given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from xdsl.ir import SSAValue
from xdsl.utils.exceptions import VerifyException

from partita.dialects import nn
from partita.frontends.onnx.dyn import dyn
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.transform import reshape_to, slice_axis
from partita.frontends.onnx.values import ONNX_DTYPES, Value, fail, is_const, is_symbolic, shape_of

if TYPE_CHECKING:  # pragma: no cover
    from partita.frontends.onnx.importer import Importer

MAX_DFT_LENGTH = 4096
"""The longest transform built: the weight grows as N² (a complex N = 4096 is 256 MiB of
float32) and so does the work; past this an FFT is the algorithm to use, and nn has none."""


def _show(shape: tuple[int, ...]) -> list[object]:
    return ["?" if d == nn.DYN else d for d in shape]


def _const_int(v: Value, what: str) -> int:
    if not is_const(v) or is_symbolic(v):
        fail(f"{what} must be a constant (an initializer or a value the importer folds); "
             "it is only known at run time, and it sets the shape of the result")
    values = np.asarray(v).reshape(-1)
    if values.size != 1 or values.dtype.kind not in "iu":
        fail(f"{what} must be one integer, got {values.size} values of type {values.dtype}")
    return int(values[0])


def _check_length(n: int, what: str) -> None:
    if n < 1:
        fail(f"{what} must be positive, got {n}")
    if n > MAX_DFT_LENGTH:
        fail(f"a DFT of length {n} ({what}): the import builds it as a matrix product and takes at "
             f"most {MAX_DFT_LENGTH} (partita.frontends.onnx.spectral.MAX_DFT_LENGTH)")


def _trig(n_out: int, n_in: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2π·j·m/length for output index j and input index m, ``[n_out, n_in]``.

    ``j·m`` is reduced modulo ``length`` first so the angle is exact, and the values that
    are zero in exact arithmetic (sin π, cos π/2) are made exactly zero: a bin that is
    zero by symmetry then comes out as zero, not as the rounding error times the signal."""
    angle = 2 * np.pi * (np.outer(np.arange(n_out), np.arange(n_in)) % length) / length
    cos, sin = np.cos(angle), np.sin(angle)
    cos[np.abs(cos) < 1e-12] = 0.0
    sin[np.abs(sin) < 1e-12] = 0.0
    return cos, sin


def _complex_weight(bins: int, samples: int, length: int, parts: int, inverse: bool,
                    dtype: np.dtype) -> np.ndarray:
    """The dense weight ``[bins * 2, samples * parts]`` of a DFT of ``length`` whose rows
    are the interleaved (re, im) outputs and columns the interleaved input values."""
    cos, sin = _trig(bins, samples, length)
    # (xr + i·xi)(cos + i·s) with s = ±sin: re = xr·cos - xi·s, im = xr·s + xi·cos
    s = sin if inverse else 0.0 - sin  # 0.0 - x: no -0.0 entries in the constant
    weight = np.zeros((bins, 2, samples, parts), dtype)
    weight[:, 0, :, 0], weight[:, 1, :, 0] = cos, s
    if parts == 2:
        weight[:, 0, :, 1], weight[:, 1, :, 1] = 0.0 - s, cos
    if inverse:
        weight /= length
    return weight.reshape(bins * 2, samples * parts)


def _irfft_weight(length: int, bins: int, dtype: np.dtype) -> np.ndarray:
    """The dense weight ``[length, bins * 2]`` of an inverse real DFT from the first
    ``bins`` bins of a one-sided spectrum (interleaved re, im) to ``length`` real values."""
    cos, sin = _trig(length, bins, length)
    # The bins of the other half are the conjugates of 1 .. (length-1)//2: those count
    # twice; DC and (for an even length) Nyquist once, and their sin terms vanish.
    twice = np.full(bins, 2.0)
    twice[0] = 1.0
    if length % 2 == 0 and bins > length // 2:
        twice[length // 2] = 1.0
    weight = np.zeros((length, bins, 2), dtype)
    weight[:, :, 0], weight[:, :, 1] = cos * twice, 0.0 - sin * twice
    weight /= length
    return weight.reshape(length, bins * 2)


def _dtype(x: SSAValue) -> np.dtype:
    """The weight's build type: float64 for a float64 signal, else float32 (f16 / bf16
    weights are rounded from it once, as the constant is made)."""
    return np.dtype(np.float64 if nn.numpy_dtype(x.type.element_type) == np.float64 else np.float32)


def _permute(cx: Importer, x: SSAValue, perm: list[int]) -> SSAValue:
    """``x`` transposed by ``perm``; a reshape when only size-1 dims move."""
    if perm == sorted(perm):
        return x
    labels = cx.labels(x)
    kept = [p for p in perm if labels[p] != 1]
    if kept == sorted(kept):  # the same memory order
        return reshape_to(cx, x, [labels[p] for p in perm])
    return cx.emit(nn.TransposeOp(x, perm))


def _transform(cx: Importer, x: SSAValue, axis: int, samples: int, weight: np.ndarray,
               parts_out: int) -> SSAValue:
    """``x`` (last dim real / complex) with its ``axis`` replaced by ``weight``'s rows: the
    first ``samples`` values along ``axis`` times the weight, with parts_out values each."""
    rank = len(shape_of(x))
    if shape_of(x)[axis] > samples:
        x = slice_axis(cx, x, axis, 0, samples)
    # The signal axis next to the (re, im) axis: their flattening is one row of the GEMM.
    perm = [d for d in range(rank) if d not in (axis, rank - 1)] + [axis, rank - 1]
    x = _permute(cx, x, perm)
    batch = cx.labels(x)[:-2] or [1]
    rows = reshape_to(cx, x, [*batch, weight.shape[1]])
    y = cx.emit(nn.DenseOp(rows, cx.tensor(weight, rows)))
    y = reshape_to(cx, y, [*cx.labels(x)[:-2], weight.shape[0] // parts_out, parts_out])
    return _permute(cx, y, [perm.index(d) for d in range(rank)])


def _signal(cx: Importer, v: Value, what: str) -> tuple[SSAValue, int]:
    """The input as an IR value of float type and its number of parts (1 real, 2 complex)."""
    x = cx.tensor(v)
    if x.type.element_type not in nn.FLOATS:
        fail(f"{what} must be a float tensor, got {x.type.element_type}")
    shape = shape_of(x)
    if len(shape) < 2 or shape[-1] not in (1, 2):
        fail(f"{what} must have a last dim of 1 (real) or 2 (complex), got shape {_show(shape)}")
    return x, shape[-1]


def _given_at_run_time(v: Value | None) -> bool:
    return v is not None and not is_const(v)


@converter("DFT")
def _dft(cx, ins, attrs):
    if cx.opset < 17:
        fail(f"DFT is an operator of opset 17 and later; the model imports opset {cx.opset}")
    x, parts = _signal(cx, ins[0], "the input")
    shape = shape_of(x)
    ins = list(ins) + [None] * (3 - len(ins))
    if cx.opset >= 20 and "axis" in attrs:
        fail("axis is an input since opset 20, not an attribute")
    # Opset 20 gives the axis as an input (default -2), the opsets before as an attribute.
    axis_input, default_axis = (ins[2], -2) if cx.opset >= 20 else (None, attrs.get("axis", 1))
    if _given_at_run_time(ins[1]) or _given_at_run_time(axis_input):
        # The transform's shape is the values': the plan specializes it per run (nn.dft).
        params: dict[str, Value] = {} if ins[1] is None else {"dft_length": ins[1]}
        options: dict[str, object] = {"inverse": bool(attrs.get("inverse", 0)), "onesided": bool(attrs.get("onesided", 0))}
        if axis_input is not None:
            params["axis"] = axis_input  # a run-time value, or a constant the plan reads the same way
        else:
            options["axis"] = default_axis
        return dyn(cx, "dft", [x], params, len(shape), x.type.element_type, "DFT", **options)
    try:
        axis = nn.dft_axis(default_axis if axis_input is None else _const_int(axis_input, "axis"), len(shape))
    except VerifyException as err:
        fail(str(err))
    size = shape[axis]
    if size == nn.DYN:
        fail(f"DFT is built as a matrix product and needs a static signal length; the input has shape "
             f"{_show(shape)} with a dynamic one (axis {axis})")
    inverse, onesided = bool(attrs.get("inverse", 0)), bool(attrs.get("onesided", 0))
    if len(ins) > 1 and ins[1] is not None:
        length = _const_int(ins[1], "dft_length")
    else:  # the irfft's input holds length//2+1 bins of an even-length signal
        length = 2 * (size - 1) if inverse and onesided else size
    _check_length(length, "dft_length")
    if onesided and inverse:
        if parts != 2:
            fail("a onesided inverse DFT (irfft) takes a complex input (last dim 2), got a real one")
        # Bins past length//2 are redundant (and ignored); missing ones are zeros.
        bins = min(size, length // 2 + 1)
        return _transform(cx, x, axis, bins, _irfft_weight(length, bins, _dtype(x)), 1)
    if onesided and parts != 1:
        fail("a onesided forward DFT (rfft) takes a real input (last dim 1), got a complex one")
    bins = length // 2 + 1 if onesided else length
    samples = min(size, length)
    return _transform(cx, x, axis, samples, _complex_weight(bins, samples, length, parts, inverse, _dtype(x)), 2)


@converter("STFT")
def _stft(cx, ins, attrs):
    ins = list(ins) + [None] * (4 - len(ins))
    x, parts = _signal(cx, ins[0], "the signal")
    shape = shape_of(x)
    if len(shape) != 3:
        fail(f"the signal must have shape [batch, length, 1 or 2], got {_show(shape)}")
    size = shape[1]
    if _given_at_run_time(ins[1]) or _given_at_run_time(ins[3]):
        # The frames are the values': the plan specializes the transform per run (nn.stft).
        window = [] if ins[2] is None else [cx.tensor(ins[2], x)]
        params = {"frame_step": ins[1], "frame_length": ins[3]}
        return dyn(cx, "stft", [x, *window], {k: v for k, v in params.items() if v is not None}, 4,
                   x.type.element_type, "STFT", onesided=bool(attrs.get("onesided", 1)))
    if size == nn.DYN:
        fail(f"STFT is built as a gather and a matrix product and needs a static signal length; the signal "
             f"has shape {_show(shape)} with a dynamic one")
    step = _const_int(ins[1], "frame_step")
    if step < 1:
        fail(f"frame_step must be positive, got {step}")
    window = ins[2]
    if window is not None and (len(shape_of(window)) != 1 or shape_of(window)[0] == nn.DYN):
        fail(f"the window must be 1-D of a static length, got shape {_show(shape_of(window))}")
    frame = _const_int(ins[3], "frame_length") if ins[3] is not None else \
        shape_of(window)[0] if window is not None else size
    if window is not None and shape_of(window)[0] != frame:
        fail(f"the window has {shape_of(window)[0]} values, frame_length is {frame}")
    _check_length(frame, "frame_length")
    if frame > size:
        fail(f"frame_length {frame} is longer than the signal ({size})")
    frames = (size - frame) // step + 1
    # onesided is the default; for a complex signal it keeps the same first bins, as
    # onnxruntime and the reference do.
    bins = frame // 2 + 1 if attrs.get("onesided", 1) else frame
    weight = _complex_weight(bins, frame, frame, parts, False, _dtype(x))
    starts = np.arange(frames, dtype=np.int64)[:, None] * step
    framed = cx.emit(nn.TakeOp(x, cx.tensor(starts + np.arange(frame, dtype=np.int64)), 1))
    if is_const(window):  # w[n]·x[n]: a scale of the weight's columns of sample n
        weight = (weight.reshape(-1, frame, parts) * np.asarray(window, weight.dtype)[:, None]).reshape(weight.shape)
    elif window is not None:
        framed = cx.emit(nn.MultiplyOp(framed, reshape_to(cx, cx.tensor(window), [frame, 1])))
    batch = cx.labels(x)[0]
    rows = reshape_to(cx, framed, [batch, frames, frame * parts])
    y = cx.emit(nn.DenseOp(rows, cx.tensor(weight, rows)))
    return reshape_to(cx, y, [batch, frames, bins, 2])


_MEL_INPUTS = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")


@converter("MelWeightMatrix")
def _mel_weight_matrix(cx, ins, attrs):
    """The filter bank of an audio front end (``nn.mel_weight_matrix``): a constant built at
    import from constant inputs; from inputs given at run time, an ``nn.dyn`` the launch plan
    builds once per distinct value (its shape is theirs)."""
    if len(ins) != 5 or any(v is None for v in ins):
        fail("MelWeightMatrix takes five inputs: num_mel_bins, dft_length, sample_rate, lower_edge_hertz, "
             "upper_edge_hertz")
    for v, name in zip(ins, _MEL_INPUTS):
        if is_symbolic(v) or (is_const(v) and np.asarray(v).size != 1) or \
                (not is_const(v) and nn.DYN not in shape_of(v) and int(np.prod(shape_of(v))) != 1):
            fail(f"{name} must hold one value")
    code = attrs.get("output_datatype", onnx.TensorProto.FLOAT)
    if code not in ONNX_DTYPES or np.dtype(ONNX_DTYPES[code]).kind != "f":
        # Invalid, not unsupported: a VerifyException is no cue to fold with ONNX's reference.
        raise VerifyException(f"output_datatype {code} is not a float type")
    dtype = np.dtype(ONNX_DTYPES[code])
    if all(is_const(v) for v in ins):  # values out of range raise the same VerifyException
        counts = [int(np.asarray(v).reshape(-1)[0]) for v in ins[:3]]
        edges = [float(np.asarray(v).reshape(-1)[0]) for v in ins[3:]]
        return nn.mel_weight_matrix(*counts, *edges, dtype)
    return dyn(cx, "mel_weight_matrix", [], dict(zip(_MEL_INPUTS, ins)), 2, nn.element_type_of(dtype),
               "MelWeightMatrix")
