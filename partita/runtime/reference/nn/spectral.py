"""NumPy references of ``nn.dft`` and ``nn.stft`` (NumPy's FFT in single precision, double
for a float64 signal, as ONNX's own test data computes it; rounded to the result's type):
the launch plan runs these on the host, where an ONNX model gives a transform's axis,
length or frame step at run time."""

from __future__ import annotations

from typing import Any

import numpy as np
from xdsl.interpreter import Interpreter, InterpreterFunctions, impl, register_impls

from partita.dialects import nn
from partita.runtime.reference.nn.base import store


def _complex(x: np.ndarray) -> np.ndarray:
    """``[..., 1 or 2]`` real or (re, im) values as complex ``[...]``: complex128 for a
    float64 signal, else complex64 (NumPy's FFT keeps the precision it is given)."""
    real, complex_ = (np.float64, np.complex128) if x.dtype == np.float64 else (np.float32, np.complex64)
    wide = x.astype(real)
    out = np.empty(x.shape[:-1], complex_)
    out.real = wide[..., 0]
    out.imag = wide[..., 1] if x.shape[-1] == 2 else 0
    return out


def _parts(c: np.ndarray) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1)


def dft(x: np.ndarray, axis: int, length: int, inverse: bool, onesided: bool) -> np.ndarray:
    """ONNX DFT (see ``nn.DFTOp``)."""
    c = _complex(x)
    size = x.shape[axis]
    if inverse and onesided:  # irfft: bins past n // 2 ignored, missing ones zero
        n = length or 2 * (size - 1)
        return np.fft.irfft(c, n=n, axis=axis)[..., None]
    n = length or size
    y = np.fft.ifft(c, n=n, axis=axis) if inverse else np.fft.fft(c, n=n, axis=axis)
    if onesided:
        y = np.take(y, np.arange(n // 2 + 1), axis=axis)
    return _parts(y)


def stft(signal: np.ndarray, window: np.ndarray | None, step: int, frame: int, onesided: bool) -> np.ndarray:
    """ONNX STFT (see ``nn.STFTOp``): ``[batch, frames, bins, 2]``."""
    c = _complex(signal)  # [batch, samples]
    frames = (c.shape[1] - frame) // step + 1
    starts = np.arange(frames)[:, None] * step + np.arange(frame)
    framed = c[:, starts]  # [batch, frames, frame]
    if window is not None:
        framed = framed * window.astype(framed.real.dtype)
    y = np.fft.fft(framed, axis=-1)
    return _parts(y[..., :frame // 2 + 1] if onesided else y)


@register_impls
class SpectralFunctions(InterpreterFunctions):
    @impl(nn.DFTOp)
    def run_dft(self, interpreter: Interpreter, op: nn.DFTOp, args: tuple[Any, ...]):
        (x,) = args
        return store(op, dft(x, op.axis, op.length, op.inverse, op.onesided))

    @impl(nn.STFTOp)
    def run_stft(self, interpreter: Interpreter, op: nn.STFTOp, args: tuple[Any, ...]):
        signal, *window = args
        return store(op, stft(signal, window[0] if window else None, op.frame_step, op.frame_length, op.onesided))
