"""ONNX converters of the recurrent layers RNN, GRU and LSTM, as compositions of nn ops.

nn has no loop, so the recurrence is unrolled over the static sequence length, as TVM's ONNX
frontend does, with the input projection hoisted out of it: per direction ONE ``nn.dense``
computes X·Wᵀ (+ Wb + Rb) for every time step at once (a GEMM over [seq*batch, input] rows,
the part of the work that does not depend on the state), and each step adds only one dense
of the state by Rᵀ, the gate activations and the element-wise update. Each step is then
ordinary nn ops that the partitioners fuse and place like any other.

``sequence_lens`` becomes a mask per step (``t < length`` per batch row, constant when the
lengths are) and ``nn.where`` selects: at or past its length a row keeps its state and its
rows of Y are zero. A reverse direction walks from the last step down, so a short row's
padding comes first and leaves the initial state as it was: the same mask serves both
directions. An absent initial state (or one of constant zeros) is not materialized: the
first step's recurrent terms are known to be zero and are not built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from xdsl.ir import SSAValue

from partita.dialects import nn
from partita.frontends.onnx.elementwise import _text
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.transform import drop_axis, reshape_to, slice_axis
from partita.frontends.onnx.values import Value, fail, is_const, shape_of

if TYPE_CHECKING:  # pragma: no cover
    from partita.frontends.onnx.importer import Importer

MAX_UNROLL_STEPS = 1024
"""The longest sequence unrolled, per direction: each step is a dozen or two ops, and an
import that grows without bound with the input's length is not one to make silently."""

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
"""Gates per op: the row blocks of W and R (GRU z, r, h; LSTM i, o, f, c)."""

_DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"), "LSTM": ("Sigmoid", "Tanh", "Tanh")}

Act = Callable[[SSAValue], SSAValue]


@dataclass(frozen=True)
class _Activation:
    """One activation of the ONNX recurrent ops: whether it reads an alpha and a beta from
    ``activation_alpha`` / ``activation_beta``, their defaults (the ONNX operator's), and
    how it is built."""

    alpha: float | None
    beta: float | None
    build: Callable[[_Builder, SSAValue, float, float], SSAValue]


# Names match case-insensitively, and alphas / betas are consumed in order by the
# activations that take them, as onnxruntime reads the attributes. An alpha or beta not
# given is the ONNX operator's default, as the spec says (onnxruntime takes 0 for
# ThresholdedRelu, ScaledTanh and Affine); ScaledTanh and Affine, experimental operators
# that ONNX has since removed, default to alpha 1 and beta 1 (tanh) and 0 (the identity).
_ACTIVATIONS = {
    "sigmoid": _Activation(None, None, lambda b, x, a, c: b.emit(nn.SigmoidOp(x))),
    "tanh": _Activation(None, None, lambda b, x, a, c: b.emit(nn.TanhOp(x))),
    "relu": _Activation(None, None, lambda b, x, a, c: b.emit(nn.ReluOp(x))),
    "softsign": _Activation(None, None, lambda b, x, a, c: b.emit(nn.SoftsignOp(x))),
    "softplus": _Activation(None, None, lambda b, x, a, c: b.emit(nn.SoftplusOp(x))),
    "leakyrelu": _Activation(0.01, None, lambda b, x, a, c: b.emit(nn.LeakyReluOp(x, alpha=a))),
    "thresholdedrelu": _Activation(1.0, None, lambda b, x, a, c: b.emit(nn.ThresholdedReluOp(x, alpha=a))),
    "elu": _Activation(1.0, None, lambda b, x, a, c: b.emit(nn.EluOp(x, alpha=a))),
    "hardsigmoid": _Activation(0.2, 0.5, lambda b, x, a, c: b.emit(nn.HardSigmoidOp(x, alpha=a, beta=c))),
    # No nn ops of their own: alpha * tanh(beta * x) and alpha * x + beta, composed.
    "scaledtanh": _Activation(1.0, 1.0, lambda b, x, a, c: b.mul(b.emit(nn.TanhOp(b.mul(x, b.scalar(c)))),
                                                                  b.scalar(a))),
    "affine": _Activation(1.0, 0.0, lambda b, x, a, c: b.add(b.mul(x, b.scalar(a)), b.scalar(c))),
}


class _Builder:
    """Element-wise arithmetic on values that may be absent (``None``: known zeros, such as
    the recurrent terms of a step whose state is the zero initial state) or constants
    (folded here); IR values get nn ops in the element type of ``like``."""

    def __init__(self, cx: Importer, like: SSAValue):
        self.cx, self.like = cx, like
        self._scalars: dict[float, SSAValue] = {}

    def emit(self, op: nn.NNOp) -> SSAValue:
        return self.cx.emit(op)

    def scalar(self, value: float) -> SSAValue:
        """A rank-0 constant in X's element type, made once per node (the steps share it)."""
        if value not in self._scalars:
            self._scalars[value] = self.cx.tensor(np.asarray(value, np.float64), self.like)
        return self._scalars[value]

    def value(self, v: Value) -> Value:
        """``v`` as an IR value once (a weight every step reads); zeros stay ``None``."""
        if v is None or _zero(v):
            return None
        return self.cx.tensor(v, self.like)

    def _binary(self, op_cls, a: Value, b: Value) -> Value:
        if is_const(a) and is_const(b):
            return {nn.AddOp: np.add, nn.MultiplyOp: np.multiply, nn.SubtractOp: np.subtract}[op_cls](a, b)
        if op_cls is not nn.SubtractOp and is_const(a):
            a, b = b, a  # the constant on the right, MLIR's canonical form of a commutative op
        return self.emit(op_cls(*self.cx.operands(a, b)))

    def add(self, a: Value, b: Value) -> Value:
        if a is None or _zero(a):
            return b
        if b is None or _zero(b):
            return a
        return self._binary(nn.AddOp, a, b)

    def sub(self, a: Value, b: Value) -> Value:
        if b is None or _zero(b):
            return a
        if a is None or _zero(a):
            return self._binary(nn.SubtractOp, self.scalar(0.0), b)
        return self._binary(nn.SubtractOp, a, b)

    def mul(self, a: Value, b: Value) -> Value:
        if a is None or b is None or _zero(a) or _zero(b):
            return None
        return self._binary(nn.MultiplyOp, a, b)

    def dense(self, h: Value, weight: Value) -> Value:
        if h is None or weight is None:
            return None
        return self.emit(nn.DenseOp(h, weight))

    def cols(self, v: Value, start: int, stop: int) -> Value:
        """Columns ``start:stop`` of the last axis (one gate's block)."""
        if v is None or is_const(v):
            return None if v is None else np.asarray(v)[..., start:stop]
        return slice_axis(self.cx, v, len(shape_of(v)) - 1, start, stop)

    def clip(self, v: SSAValue, clip: float | None) -> SSAValue:
        # ONNX's clip bounds the input of the activations.
        return v if clip is None else self.emit(nn.ClipOp(v, min=-clip, max=clip))

    def where(self, mask: SSAValue | None, on_true: SSAValue, on_false: Value) -> SSAValue:
        if mask is None:
            return on_true
        on_false = self.scalar(0.0) if on_false is None else on_false
        return self.emit(nn.WhereOp(mask, on_true, on_false))


def _zero(v: Value) -> bool:
    return is_const(v) and not np.asarray(v).any()


def _rows(cx: Importer, v: Value, start: int, stop: int) -> Value:
    """Rows ``start:stop`` of a 2-D weight (R's blocks of gates)."""
    return np.asarray(v)[start:stop] if is_const(v) else slice_axis(cx, v, 0, start, stop)


def _direction(cx: Importer, v: Value, d: int, axis: int) -> Value:
    """Direction ``d`` of an input with a num_directions axis at ``axis``."""
    if v is None:
        return None
    if is_const(v):
        return np.take(np.asarray(v), d, axis=axis)
    if shape_of(v)[axis] != 1:
        v = slice_axis(cx, v, axis, d, d + 1)
    return drop_axis(cx, v, axis)


def _check_shape(v: Value, want: tuple[int, ...], what: str) -> None:
    if v is None:
        return
    shape = shape_of(v)
    if len(shape) != len(want) or any(d not in (w, nn.DYN) for d, w in zip(shape, want) if w != nn.DYN):
        show = ["?" if w == nn.DYN else w for w in want]
        fail(f"{what} must have shape {show}, got {['?' if d == nn.DYN else d for d in shape]}")


def _activations(kind: str, attrs: dict, num_dirs: int) -> list[list[tuple[_Activation, float, float]]]:
    """The activations of each direction with their alphas and betas."""
    per_dir = len(_DEFAULT_ACTIVATIONS[kind])
    names = [_text(n) for n in attrs.get("activations", [])] or list(_DEFAULT_ACTIVATIONS[kind]) * num_dirs
    if kind == "RNN" and num_dirs == 1 and len(names) == 2:
        names = names[:1]  # RNN-7's schema default was [Tanh, Tanh] whatever the direction
    if len(names) != per_dir * num_dirs:
        fail(f"activations must name {per_dir * num_dirs} functions ({per_dir} per direction), "
             f"got {len(names)}")
    alphas, betas = list(attrs.get("activation_alpha", [])), list(attrs.get("activation_beta", []))
    out = []
    for name in names:
        act = _ACTIVATIONS.get(name.lower())
        if act is None:
            fail(f"activation '{name}' is not supported (supported: {', '.join(sorted(_ACTIVATIONS))}, "
                 "any case)")
        alpha = float(alphas.pop(0)) if act.alpha is not None and alphas else act.alpha
        beta = float(betas.pop(0)) if act.beta is not None and betas else act.beta
        out.append((act, alpha, beta))
    return [out[d * per_dir:(d + 1) * per_dir] for d in range(num_dirs)]


@dataclass
class _Direction:
    """What the steps of one direction read, built once before the loop."""

    proj: SSAValue  # X·Wᵀ + bias, [seq, batch, G*H] (layout 0) or [batch, seq, G*H]
    r: Value  # Rᵀ's weight [G*H, H] (GRU without linear_before_reset: its z, r rows)
    r_h: Value  # GRU without linear_before_reset: the h rows of R
    r_bias_h: Value  # GRU with linear_before_reset: Rbh, added inside r * (...)
    peephole: list[Value]  # LSTM: P's i, o, f blocks
    acts: list[Act]
    hidden: int
    linear_before_reset: bool
    input_forget: bool


@converter("RNN", "GRU", "LSTM")
def _recurrent(cx, ins, attrs):
    kind = cx.node.op_type
    ins = list(ins) + [None] * (8 - len(ins))
    x, w, r, bias, lens, init_h, init_c, peep = ins[:8]
    x = cx.tensor(x)
    if x.type.element_type not in nn.FLOATS:
        fail(f"X must be a float tensor, got {x.type.element_type}")
    direction = _text(attrs.get("direction", "forward"))
    if direction not in ("forward", "reverse", "bidirectional"):
        fail(f"direction must be forward, reverse or bidirectional, got '{direction}'")
    num_dirs = 2 if direction == "bidirectional" else 1
    layout = attrs.get("layout", 0)
    if layout not in (0, 1):
        fail(f"layout must be 0 or 1, got {layout}")
    xs = shape_of(x)
    if len(xs) != 3:
        fail(f"X must have rank 3, got shape {list(xs)}")
    seq_axis, batch_axis = (0, 1) if layout == 0 else (1, 0)
    seq, batch, size = xs[seq_axis], xs[batch_axis], xs[2]
    if seq == nn.DYN:
        fail(f"{kind} is unrolled over its time steps and needs a static sequence length; X has shape "
             f"{['?' if d == nn.DYN else d for d in xs]} with a dynamic one (axis {seq_axis})")
    if seq > MAX_UNROLL_STEPS:
        fail(f"{kind} over {seq} time steps: an import unrolls at most {MAX_UNROLL_STEPS} "
             "(partita.frontends.onnx.recurrent.MAX_UNROLL_STEPS)")
    if 0 in (seq, batch, size):
        fail(f"X of shape {list(xs)} is empty")
    if size == nn.DYN:
        fail("X must have a static input size")
    if w is None or r is None:
        fail("W and R are required")
    r_shape = shape_of(r)
    hidden = attrs.get("hidden_size", r_shape[-1] if len(r_shape) == 3 else None)
    if hidden is None or hidden == nn.DYN or hidden <= 0:
        fail("the hidden size must be static and positive (R must have shape [num_directions, gates * hidden, hidden])")
    gates = _GATES[kind]
    _check_shape(w, (num_dirs, gates * hidden, size), "W")
    _check_shape(r, (num_dirs, gates * hidden, hidden), "R")
    _check_shape(bias, (num_dirs, 2 * gates * hidden), "B")
    _check_shape(lens, (batch,), "sequence_lens")
    state = (num_dirs, batch, hidden) if layout == 0 else (batch, num_dirs, hidden)
    _check_shape(init_h, state, "initial_h")
    _check_shape(init_c, state, "initial_c")
    _check_shape(peep, (num_dirs, 3 * hidden), "P")
    clip = attrs.get("clip")
    if clip is not None and not clip > 0:
        fail(f"clip must be positive, got {clip}")
    linear_before_reset = bool(attrs.get("linear_before_reset", 0))
    input_forget = bool(attrs.get("input_forget", 0))

    acts = _activations(kind, attrs, num_dirs)
    used = [cx._used_output(k) for k in range(3 if kind == "LSTM" else 2)]
    if not any(used):
        return [None] * len(used)
    b = _Builder(cx, x)
    masks = _masks(cx, b, lens, seq)
    state_axis = 0 if layout == 0 else 1  # the num_directions axis of initial_h / Y_h
    batch_label = cx.labels(x)[batch_axis]
    # The hoisted projection's rows: every (step, batch) pair of X, in X's order.
    rows = reshape_to(cx, x, [-1, size])
    step = {"RNN": _rnn_step, "GRU": _gru_step, "LSTM": _lstm_step}[kind]
    ys, hs, cs = [], [], []
    for d in range(num_dirs):
        weights = _direction_weights(cx, b, kind, d, rows, w, r, bias, peep, acts[d], seq, batch_label,
                                     layout, hidden, linear_before_reset, input_forget, clip)
        h, c = (b.value(_direction(cx, v, d, state_axis)) for v in (init_h, init_c))
        reverse = direction == "reverse" or d == 1
        out: list[SSAValue] = [None] * seq  # type: ignore[list-item]
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            x_t = drop_axis(cx, slice_axis(cx, weights.proj, seq_axis, t, t + 1), seq_axis)
            h_new, c_new = step(b, x_t, h, c, weights)
            mask = masks(t)
            if used[0]:
                out[t] = b.where(mask, h_new, None)
            h = b.where(mask, h_new, h)
            c = b.where(mask, c_new, c) if kind == "LSTM" else None
        # onnxruntime's reading of an empty sequence: its final states are zeros, not the
        # initial ones.
        ys.append(out)
        hs.append(b.where(masks(None), h, None) if used[1] else None)
        cs.append(b.where(masks(None), c, None) if used[2:] == [True] else None)
    return [_sequence(cx, ys, layout, seq, batch_label, hidden) if used[0] else None,
            *(_final(cx, states, layout, batch_label, hidden) if want else None
              for states, want in zip((hs, cs), used[1:]))]


def _direction_weights(cx: Importer, b: _Builder, kind: str, d: int, rows: SSAValue, w: Value, r: Value,
                       bias: Value, peep: Value, acts: list, seq: int, batch_label: object, layout: int,
                       hidden: int, linear_before_reset: bool, input_forget: bool,
                       clip: float | None) -> _Direction:
    gh = _GATES[kind] * hidden
    w_d, r_d, bias_d, peep_d = (_direction(cx, v, d, 0) for v in (w, r, bias, peep))
    # Both biases are constant terms of every gate's pre-activation: the projection adds
    # them once for all steps. GRU's linear_before_reset keeps Rbh inside r * (H·Rhᵀ + Rbh).
    w_bias = b.cols(bias_d, 0, gh)
    r_bias = b.cols(bias_d, gh, 2 * gh)
    r_bias_h = None
    if kind == "GRU" and linear_before_reset and r_bias is not None:
        r_bias_h = b.cols(r_bias, 2 * hidden, 3 * hidden)
        r_bias = b.cols(r_bias, 0, 2 * hidden)
        w_bias = b.add(w_bias, _pad_cols(cx, b, r_bias, hidden))
    else:
        w_bias = b.add(w_bias, r_bias)
    proj = b.emit(nn.DenseOp(rows, cx.tensor(w_d, rows)))
    proj = b.add(proj, b.value(w_bias))
    steps = [seq, batch_label, gh] if layout == 0 else [batch_label, seq, gh]
    proj = reshape_to(cx, proj, steps)
    r_h = None
    if kind == "GRU" and not linear_before_reset:
        r_d, r_h = _rows(cx, r_d, 0, 2 * hidden), _rows(cx, r_d, 2 * hidden, 3 * hidden)
    peephole = [b.value(b.cols(peep_d, k * hidden, (k + 1) * hidden)) for k in range(3)] if peep_d is not None \
        else [None] * 3
    return _Direction(proj, b.value(r_d), b.value(r_h), b.value(r_bias_h), peephole,
                      # clip bounds the gates' inputs; LSTM's h reads the cell state as it is
                      [_bind(b, act, alpha, beta, None if (kind, k) == ("LSTM", 2) else clip)
                       for k, (act, alpha, beta) in enumerate(acts)],
                      hidden, linear_before_reset, input_forget)


def _pad_cols(cx: Importer, b: _Builder, v: Value, hidden: int) -> Value:
    """A [2H] bias (GRU's Rbz, Rbr) widened to [3H] with zeros for the h gate."""
    if is_const(v):
        return np.concatenate([np.asarray(v), np.zeros(hidden, np.asarray(v).dtype)])
    return b.emit(nn.ConcatenateOp([v, cx.tensor(np.zeros(hidden), v)], 0))


def _bind(b: _Builder, act: _Activation, alpha: float, beta: float, clip: float | None) -> Act:
    return lambda v: act.build(b, b.clip(v, clip), alpha, beta)


def _masks(cx: Importer, b: _Builder, lens: Value, seq: int) -> Callable[[int | None], SSAValue | None]:
    """Per step, the batch rows still inside their sequence as a [batch, 1] ``i1`` mask, or
    ``None`` when every row is; for ``None``, the rows whose sequence is not empty."""
    if lens is None:
        return lambda t: None
    made: dict[int, SSAValue | None] = {}  # both directions read the same masks

    def once(mask: Callable[[int], SSAValue | None]) -> Callable[[int | None], SSAValue | None]:
        def cached(t: int | None) -> SSAValue | None:
            # Non-empty is the mask of step 0.
            if (t or 0) not in made:
                made[t or 0] = mask(t or 0)
            return made[t or 0]
        return cached

    if is_const(lens):
        lengths = np.asarray(lens).reshape(-1).astype(np.int64)
        if lengths.size and (lengths.min() < 0 or lengths.max() > seq):
            fail(f"sequence_lens must lie in [0, {seq}], got {lengths.tolist()}")

        def constant(t: int) -> SSAValue | None:
            active = t < lengths
            return None if active.all() else cx.tensor(active.reshape(-1, 1))

        return once(constant)
    column = reshape_to(cx, lens, [cx.labels(lens)[0], 1])
    return once(lambda t: b.emit(nn.GreaterOp(column, cx.tensor(np.asarray(t), column))))


def _rnn_step(b: _Builder, x_t: SSAValue, h: Value, c: Value, w: _Direction) -> tuple[SSAValue, Value]:
    # Ht = f(Xt·Wᵀ + Ht-1·Rᵀ + Wb + Rb)
    return w.acts[0](b.add(x_t, b.dense(h, w.r))), None


def _gru_step(b: _Builder, x_t: SSAValue, h: Value, c: Value, w: _Direction) -> tuple[SSAValue, Value]:
    f, g = w.acts
    hidden = w.hidden
    x_h = b.cols(x_t, 2 * hidden, 3 * hidden)
    if w.linear_before_reset:
        # ht = g(Xt·Whᵀ + rt * (Ht-1·Rhᵀ + Rbh) + Wbh): one dense of H by all of R.
        rec = b.dense(h, w.r)
        zr = b.add(x_t, rec)
        r_t = f(b.cols(zr, hidden, 2 * hidden))
        pre_h = b.add(x_h, b.mul(r_t, b.add(b.cols(rec, 2 * hidden, 3 * hidden), w.r_bias_h)))
    else:
        # ht = g(Xt·Whᵀ + (rt * Ht-1)·Rhᵀ + Rbh + Wbh): the h rows wait for rt.
        zr = b.add(b.cols(x_t, 0, 2 * hidden), b.dense(h, w.r))
        r_t = f(b.cols(zr, hidden, 2 * hidden))
        pre_h = b.add(x_h, b.dense(b.mul(r_t, h), w.r_h))
    z_t = f(b.cols(zr, 0, hidden))
    h_t = g(pre_h)
    # Ht = (1 - zt) * ht + zt * Ht-1 = ht + zt * (Ht-1 - ht)
    if h is None:
        return b.sub(h_t, b.mul(z_t, h_t)), None
    return b.add(h_t, b.mul(z_t, b.sub(h, h_t))), None


def _lstm_step(b: _Builder, x_t: SSAValue, h: Value, c: Value, w: _Direction) -> tuple[SSAValue, Value]:
    f, g, h_act = w.acts
    hidden = w.hidden
    pre = b.add(x_t, b.dense(h, w.r))
    p_i, p_o, p_f = w.peephole
    i_t = f(b.add(b.cols(pre, 0, hidden), b.mul(c, p_i)))
    if w.input_forget:  # the forget gate coupled to the input gate (onnxruntime's reading)
        f_t = b.sub(b.scalar(1.0), i_t)
    else:
        f_t = f(b.add(b.cols(pre, 2 * hidden, 3 * hidden), b.mul(c, p_f)))
    c_t = b.add(b.mul(f_t, c), b.mul(i_t, g(b.cols(pre, 3 * hidden, 4 * hidden))))
    o_t = f(b.add(b.cols(pre, hidden, 2 * hidden), b.mul(c_t, p_o)))
    return b.mul(o_t, h_act(c_t)), c_t


def _sequence(cx: Importer, ys: list[list[SSAValue]], layout: int, seq: int, batch: object,
              hidden: int) -> SSAValue:
    """Y: [seq, num_directions, batch, hidden] (layout 0) or [batch, seq, num_directions,
    hidden] (layout 1), from each direction's steps in time order."""
    parts = []
    for out in ys:
        # Layout 0 stacks the steps' [batch, H] rows, layout 1 their columns: the concatenation
        # is then Y's memory order and one reshape adds the axes.
        joined = out[0] if seq == 1 else cx.emit(nn.ConcatenateOp(out, layout))
        parts.append(reshape_to(cx, joined, [seq, 1, batch, hidden] if layout == 0 else [batch, seq, 1, hidden]))
    return parts[0] if len(parts) == 1 else cx.emit(nn.ConcatenateOp(parts, 1 if layout == 0 else 2))


def _final(cx: Importer, states: list[SSAValue], layout: int, batch: object, hidden: int) -> SSAValue:
    """Y_h / Y_c: [num_directions, batch, hidden] (layout 0) or [batch, num_directions, hidden]."""
    joined = states[0] if len(states) == 1 else cx.emit(nn.ConcatenateOp(states, layout))
    return reshape_to(cx, joined, [len(states), batch, hidden] if layout == 0 else [batch, len(states), hidden])
