"""Spectral ops whose parameters are known only at run time: ``nn.dft`` and ``nn.stft``.

The ONNX importer builds a DFT or STFT of constant parameters as a matrix product by a
constant cos / sin matrix (``partita.frontends.onnx.spectral``): the GEMM runs on the
device. An ONNX model may also give the transform's axis, its length or the frame step as
inputs; then the result's shape depends on their values, the transform is an ``nn.dyn``
(``dft`` / ``stft``) and the launch plan specializes it into these ops for the values of a
run. They have no kernel: the host runs them (the references' NumPy FFT), as it runs the
other ops a launch plan sizes from values.

The filter bank of audio front ends, ``mel_weight_matrix`` (ONNX MelWeightMatrix), is a
function of its parameters alone: a constant, built where they are known.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    result_def,
)
from xdsl.utils.exceptions import VerifyException

from partita.dialects.nn.base import (
    DYN,
    FLOATS,
    NNOp,
    OpKind,
    Shape,
    _bool_prop,
    _init,
    _int_prop,
    _shape,
    _tensor,
    _value,
    kind_trait,
)

__all__ = ["DFTOp", "STFTOp", "dft_axis", "dft_shape", "mel_weight_matrix"]


def dft_axis(axis: int, rank: int) -> int:
    """ONNX DFT's ``axis`` of an input of ``rank``, negative ones counted from the end, as
    an index in ``[0, rank - 2]``: the last dim holds (re, im) and is no signal axis."""
    if not -rank <= axis <= rank - 2:
        raise VerifyException(f"axis {axis} is out of range for an input of rank {rank} (accepted: [{-rank}, -2] "
                              f"and [0, {rank - 2}])")
    return axis % rank


def dft_shape(shape: Shape, axis: int, length: int, inverse: bool, onesided: bool) -> Shape:
    """The result shape of a DFT of ``shape`` (last dim 1: real, 2: complex) along ``axis``
    (in ``[0, rank - 2]``) with ``length`` points (0: the axis's size, or for an irfft the
    even length its ``n // 2 + 1`` bins come from), as ONNX's DFT gives it."""
    rank = len(shape)
    if rank < 2 or shape[-1] not in (1, 2, DYN):
        raise VerifyException(f"the input must have a last dim of 1 (real) or 2 (complex), got {list(shape)}")
    if not 0 <= axis <= rank - 2:
        raise VerifyException(f"axis {axis} is out of range for an input of rank {rank} (accepted: 0 to {rank - 2})")
    size = shape[axis]
    if length < 0:
        raise VerifyException(f"the length must be positive, got {length}")
    if onesided and inverse and shape[-1] == 1:
        raise VerifyException("a onesided inverse DFT (irfft) takes a complex input (last dim 2), got a real one")
    if onesided and not inverse and shape[-1] == 2:
        raise VerifyException("a onesided forward DFT (rfft) takes a real input (last dim 1), got a complex one")
    if not length:
        length = size if size == DYN or not (inverse and onesided) else 2 * (size - 1)
    out = list(shape)
    if inverse and onesided:
        out[axis], out[-1] = length, 1
    else:
        out[axis] = length if not onesided or length == DYN else length // 2 + 1
        out[-1] = 2
    return tuple(out)


@irdl_op_definition
class DFTOp(NNOp):
    """ONNX DFT of ``input`` (last dim: 1 real, 2 complex as (re, im)) along ``axis``:
    ``length`` points (0: the axis's), the signal zero-padded or truncated to them;
    ``inverse`` (exp(+2πi kn/N) / N); ``onesided``: the rfft's ``N // 2 + 1`` bins of a real
    input, or the irfft of a complex one-sided spectrum (real result, last dim 1)."""

    traits = kind_trait(OpKind.OPAQUE)

    name = "nn.dft"
    ALLOWED_TYPES: ClassVar = FLOATS
    input = operand_def(TensorType)
    result = result_def(TensorType)
    axis_attr = _int_prop("axis", 1)
    length_attr = _int_prop("length", 0)
    inverse_attr = _bool_prop("inverse", False)
    onesided_attr = _bool_prop("onesided", False)
    axis = _value("axis")
    length = _value("length")
    inverse = _value("inverse")
    onesided = _value("onesided")
    assembly_format = "$input attr-dict `:` functional-type(operands, results)"

    def __init__(self, input: SSAValue, *, axis: int, length: int = 0, inverse: bool = False,
                 onesided: bool = False, result_type: Attribute | None = None):
        _init(self, [input], result_type, axis=axis, length=length, inverse=inverse, onesided=onesided)

    def verify_element_types(self) -> None:
        t = _tensor(self.input).element_type
        self.check_element_type(t, "element type")
        self.check_element_type(_tensor(self.result).element_type, "result element type", (t,))

    def infer_shape(self) -> Shape:
        return dft_shape(_shape(self.input), self.axis, self.length, self.inverse, self.onesided)


@irdl_op_definition
class STFTOp(NNOp):
    """ONNX STFT of ``signal`` ``[batch, samples, 1 or 2]``: frames of ``frame_length``
    samples ``frame_step`` apart, each times ``window`` (if given) and transformed;
    ``onesided`` keeps the first ``frame_length // 2 + 1`` bins. Result ``[batch, frames,
    bins, 2]``."""

    traits = kind_trait(OpKind.OPAQUE)

    name = "nn.stft"
    ALLOWED_TYPES: ClassVar = FLOATS
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    signal = operand_def(TensorType)
    window = opt_operand_def(TensorType)
    result = result_def(TensorType)
    frame_step_attr = _int_prop("frame_step", 1)
    frame_length_attr = _int_prop("frame_length", 1)
    onesided_attr = _bool_prop("onesided", True)
    frame_step = _value("frame_step")
    frame_length = _value("frame_length")
    onesided = _value("onesided")
    assembly_format = "$signal (`window` $window^ `:` type($window))? attr-dict `:` type($signal) `->` type($result)"

    def __init__(self, signal: SSAValue, window: SSAValue | None, *, frame_step: int, frame_length: int,
                 onesided: bool = True, result_type: Attribute | None = None):
        _init(self, [signal, [] if window is None else [window]], result_type, frame_step=frame_step,
              frame_length=frame_length, onesided=onesided)

    def verify_element_types(self) -> None:
        t = _tensor(self.signal).element_type
        self.check_element_type(t, "element type")
        for v, what in ((self.window, "window"), (self.result, "result")):
            if v is not None:
                self.check_element_type(_tensor(v).element_type, f"{what} element type", (t,))

    def infer_shape(self) -> Shape:
        signal = _shape(self.signal)
        if len(signal) != 3 or signal[-1] not in (1, 2, DYN):
            raise VerifyException(f"the signal must have shape [batch, samples, 1 or 2], got {list(signal)}")
        step, frame = self.frame_step, self.frame_length
        if step < 1 or frame < 1:
            raise VerifyException(f"frame_step and frame_length must be positive, got {step} and {frame}")
        if self.window is not None and _shape(self.window) not in ((frame,), (DYN,)):
            raise VerifyException(f"the window must hold frame_length = {frame} values, got shape "
                                  f"{list(_shape(self.window))}")
        if signal[1] != DYN and frame > signal[1]:
            raise VerifyException(f"frame_length {frame} is longer than the signal ({signal[1]})")
        frames = DYN if signal[1] == DYN else (signal[1] - frame) // step + 1
        return (signal[0], frames, frame // 2 + 1 if self.onesided else frame, 2)


def mel_weight_matrix(num_mel_bins: int, dft_length: int, sample_rate: int, lower_hz: float, upper_hz: float,
                      dtype: np.dtype) -> np.ndarray:
    """ONNX MelWeightMatrix: ``[dft_length // 2 + 1, num_mel_bins]`` triangular filters of peak
    1 re-weighting a linear spectrum into mel bins, ``mel(f) = 2595 log10(1 + f / 700)``.

    As ONNX's reference and onnxruntime compute it: ``num_mel_bins + 2`` edges from the lower
    edge's mel in steps of the mel range over ``num_mel_bins + 2``, each mapped back to hertz
    and to the spectrum bin ``floor((dft_length + 1) * hz / sample_rate)``; filter ``i`` rises
    from edge ``i`` to 1 at edge ``i + 1`` and falls to edge ``i + 2`` (a filter whose first
    two edges share a bin is 1 there). Values in float64, then ``dtype``."""
    if num_mel_bins < 1 or dft_length < 1 or sample_rate < 1:
        raise VerifyException(f"num_mel_bins, dft_length and sample_rate must be positive, got {num_mel_bins}, "
                              f"{dft_length} and {sample_rate}")
    if not 0 <= lower_hz < upper_hz:
        raise VerifyException(f"the edges must satisfy 0 <= lower_edge_hertz < upper_edge_hertz, got {lower_hz} "
                              f"and {upper_hz}")
    spectrum = dft_length // 2 + 1
    mel_lo, mel_hi = (2595.0 * np.log10(1.0 + f / 700.0) for f in (lower_hz, upper_hz))
    mels = mel_lo + np.arange(num_mel_bins + 2) * ((mel_hi - mel_lo) / (num_mel_bins + 2))
    hertz = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    edges = np.floor((dft_length + 1) * hertz / sample_rate).astype(np.int64)
    if edges.max() >= spectrum:
        raise VerifyException(f"upper_edge_hertz {upper_hz} maps past the last of the {spectrum} bins of a "
                              f"{dft_length}-point spectrum at sample rate {sample_rate}")
    j = np.arange(spectrum)[:, None].astype(np.float64)
    left, center, right = (edges[k:k + num_mel_bins][None, :].astype(np.float64) for k in range(3))
    with np.errstate(divide="ignore", invalid="ignore"):
        rising = np.where(center > left, (j - left) / (center - left), 1.0)
        falling = (right - j) / (right - center)
    out = np.where((j >= left) & (j <= center), rising, 0.0)
    out = np.where((j >= center) & (j < right), falling, out)
    return out.astype(dtype)
