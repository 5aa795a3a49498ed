"""CUDA lowering rules of the element-wise nn ops: each is a C expression of its operands'
values at the (broadcast) output index, in the result's compute type
(``KernelEmitter.ctype``: float for f16 / bf16 / f32, double for f64, C integer types,
bool for i1).

The rules follow the NumPy references bit for bit where C allows: NaN propagates through
``minimum`` / ``maximum`` / ``clip`` / ``relu`` (``fmaxf`` would drop it), integer
division truncates toward zero and a zero divisor gives 0, ``mod`` without ``fmod`` takes
the divisor's sign, ``round`` is ``rint`` (halves to even). Built-in ops (``relu``,
``sigmoid``, ``tanh``, ``gelu``, ``clip``, ``divide``) are registered here too, so that
f64 computes with the double functions and integers with integer arithmetic.
"""

from __future__ import annotations

import functools
import math
import re
from typing import TYPE_CHECKING

import ml_dtypes
from xdsl.ir import Operation, SSAValue

from partita.dialects import nn
from partita.lowering.cuda.cexpr import (
    _C_TYPES,
    FLOAT8_FORMATS,
    NARROW_FLOATS,
    SUB_BYTE_INTEGERS,
    _c_float,
    broadcast_dims,
    ctype,
)
from partita.lowering.cuda.rules import injective

if TYPE_CHECKING:  # pragma: no cover
    from partita.lowering.cuda.kernel import KernelEmitter

_INT_SUFFIX = {"int": "", "long long": "LL", "unsigned int": "U", "unsigned long long": "ULL"}


def _fn(e: KernelEmitter, v: SSAValue, name: str) -> str:
    """The C math function ``name`` for ``v``'s compute type (``expf`` / ``exp``)."""
    return f"{name}f" if e.ctype(v) == "float" else name


def _lit(e: KernelEmitter, v: SSAValue, value: float | int | bool) -> str:
    """``value`` as a C literal of ``v``'s compute type."""
    ctype = e.ctype(v)
    if ctype == "bool":
        return "true" if value else "false"
    if ctype == "float":
        return _c_float(float(value))
    if ctype == "double":
        value = float(value)
        if math.isnan(value) or math.isinf(value):
            return f"(double){_c_float(value)}"
        return repr(value) if any(c in repr(value) for c in ".e") else f"{value!r}.0"
    return f"{int(value)}{_INT_SUFFIX[ctype]}"


def _is_float(v: SSAValue) -> bool:
    return nn.is_float(v.type.element_type)


def _is_unsigned(v: SSAValue) -> bool:
    return ctype(v).startswith("unsigned")


def _integer_range(v: SSAValue) -> tuple[int, int]:
    """(min, max) of ``v``'s integer element type, the sub-byte ones too, from the nn dtype
    table (what the reference saturates and range-checks with)."""
    info = ml_dtypes.iinfo(nn.numpy_dtype(v.type.element_type))  # type: ignore[attr-defined]
    return int(info.min), int(info.max)


def _temp(e: KernelEmitter, v: SSAValue, expr: str) -> str:
    """A fresh variable of ``v``'s compute type holding ``expr``."""
    t = e.var("t")
    e.lines.append(f"    const {e.ctype(v)} {t} = {expr};")
    return t


def _same_dims(e: KernelEmitter, op: Operation) -> list:
    return list(e.dims[op.operands[0]])


def _broadcast_dims(e: KernelEmitter, op: Operation) -> list:
    return functools.reduce(broadcast_dims, [e.dims[v] for v in op.operands])


def unary(*op_types):
    """Register ``fn(emitter, op, x) -> C`` where ``x`` is the operand at the index."""

    def register(fn):
        def emit(e: KernelEmitter, op: Operation, index: list[str]) -> str:
            return fn(e, op, e.value(op.operands[0], index))

        injective(*op_types, dims=_same_dims, elementwise=True)(emit)
        return fn

    return register


def broadcasting(*op_types):
    """Register ``fn(emitter, op, *operands) -> C`` for an op with NumPy broadcasting:
    each operand is read at the output index broadcast to its shape."""

    def register(fn):
        def emit(e: KernelEmitter, op: Operation, index: list[str]) -> str:
            return fn(e, op, *(e.value(v, e.broadcast_index(v, op.results[0], index))
                               for v in op.operands))

        injective(*op_types, dims=_broadcast_dims, elementwise=True)(emit)
        return fn

    return register


# -- arithmetic ----------------------------------------------------------------------------


@broadcasting(nn.DivideOp)
def _divide(e, op, a, b):
    if _is_float(op.result):
        return f"{a} / {b}"
    return f"{b} == 0 ? {_lit(e, op.result, 0)} : {a} / {b}"


@broadcasting(nn.MinimumOp, nn.MaximumOp)
def _min_max(e, op, a, b):
    cmp = "<" if isinstance(op, nn.MinimumOp) else ">"
    if _is_float(op.result):  # a NaN operand wins, as in np.minimum / np.maximum
        return f"({a} != {a} || {a} {cmp} {b}) ? {a} : {b}"
    return f"{a} {cmp} {b} ? {a} : {b}"


def _python_sign(e, op, r: str, b: str) -> str:
    """``r`` (a C remainder) moved to the sign of the divisor ``b``."""
    zero = _lit(e, op.result, 0)
    return f"({r} != {zero} && (({r} < {zero}) != ({b} < {zero}))) ? {r} + {b} : {r}"


@broadcasting(nn.ModOp)
def _mod(e, op, a, b):
    if _is_float(op.result):
        r = f"{_fn(e, op.result, 'fmod')}({a}, {b})"
    else:
        r = f"{b} == 0 ? {_lit(e, op.result, 0)} : {a} % {b}"
    if op.fmod or _is_unsigned(op.result):
        return r
    return _python_sign(e, op, _temp(e, op.result, r), b)


@broadcasting(nn.PowOp)
def _pow(e, op, a, b):
    ctype = e.ctype(op.result)
    if _is_float(op.result):
        return f"{_fn(e, op.result, 'pow')}({a}, ({ctype}){b})"
    if _is_float(op.rhs):
        return f"({ctype})pow((double){a}, (double){b})"
    # Integer power by squaring, wrapping like NumPy; a negative exponent truncates the
    # real power toward zero (only 1 and -1 have non-zero results).
    p, base, n = e.var("p"), e.var("base"), e.var("n")
    e.lines += [
        f"    unsigned long long {p} = 1ULL, {base} = (unsigned long long){a};",
        f"    long long {n} = (long long){b};",
        f"    if ({n} < 0) {p} = {a} == 1 ? 1ULL : ({a} == -1 ? (({n} & 1) ? ~0ULL : 1ULL) : 0ULL);",
        f"    for (; {n} > 0; {n} >>= 1) {{ if ({n} & 1) {p} *= {base}; {base} *= {base}; }}",
    ]
    return f"({ctype}){p}"


@broadcasting(nn.BitShiftOp)
def _bit_shift(e, op, a, b):
    bits = op.result.type.element_type.width.data
    ctype, zero = e.ctype(op.result), _lit(e, op.result, 0)
    outside = f"{b} >= {bits}" if _is_unsigned(op.rhs) else f"({b} < 0 || {b} >= {bits})"
    if op.direction == "left":  # on the unsigned bits: no signed overflow
        unsigned = ctype if ctype.startswith("unsigned") else f"unsigned {ctype}"
        return f"{outside} ? {zero} : ({ctype})(({unsigned}){a} << {b})"
    if _is_unsigned(op.result):
        return f"{outside} ? {zero} : {a} >> {b}"
    return f"{outside} ? ({a} < 0 ? {_lit(e, op.result, -1)} : {zero}) : {a} >> {b}"


@broadcasting(nn.PReluOp)
def _prelu(e, op, x, slope):
    if _is_unsigned(op.result):
        return x
    return f"{x} < {_lit(e, op.result, 0)} ? {slope} * {x} : {x}"


# -- comparisons, logic, select, conversion --------------------------------------------------


@broadcasting(nn.EqualOp, nn.LessOp, nn.LessEqualOp, nn.GreaterOp, nn.GreaterEqualOp)
def _compare(e, op, a, b):
    return f"{a} {op.PREDICATE} {b}"


@broadcasting(nn.AndOp, nn.OrOp, nn.XorOp)
def _logic(e, op, a, b):
    return f"{a} {({nn.AndOp: '&&', nn.OrOp: '||', nn.XorOp: '!='})[type(op)]} {b}"


@broadcasting(nn.WhereOp)
def _where(e, op, c, a, b):
    return f"{c} ? {a} : {b}"


@broadcasting(nn.BitwiseAndOp, nn.BitwiseOrOp, nn.BitwiseXorOp)
def _bitwise(e, op, a, b):
    symbol = {nn.BitwiseAndOp: "&", nn.BitwiseOrOp: "|", nn.BitwiseXorOp: "^"}[type(op)]
    return f"{a} {symbol} {b}"


@unary(nn.BitwiseNotOp)
def _bitwise_not(e, op, x):
    return f"~{x}"


@unary(nn.NotOp)
def _not(e, op, x):
    return f"!{x}"


@unary(nn.IsNaNOp)
def _is_nan(e, op, x):
    return f"{x} != {x}"


@unary(nn.IsInfOp)
def _is_inf(e, op, x):
    inf = _lit(e, op.input, math.inf)
    tests = ([f"{x} == {inf}"] if op.detect_positive else []) + (
        [f"{x} == -{inf}"] if op.detect_negative else [])
    return " || ".join(tests) or "false"


_E8M0_ROUNDING = {"up": 0, "down": 1, "nearest": 2}
"""``round_mode`` of a cast into f8E8M0FNU as ``partita_e8m0_encode`` numbers it."""


@unary(nn.CastOp)
def _cast(e, op, x):
    if e.ctype(op.result) == "bool":
        return f"{x} != 0"
    to = str(op.result.type.element_type)
    if to in FLOAT8_FORMATS and op.saturate:  # past the largest value: that value (else inf / NaN, rn_)
        return f"sat_{to}((float){x})"
    if to == "f8E8M0FNU":  # from f32, as ONNX's reference reads an f64 (rn_ then keeps it)
        return f"ld_{to}(partita_e8m0_encode((float){x}, {_E8M0_ROUNDING[op.round_mode]}, {str(op.saturate).lower()}))"
    if to in SUB_BYTE_INTEGERS and e.ctype(op.input) in ("float", "double"):
        lo, hi = _integer_range(op.result)
        return f"({e.ctype(op.result)})partita_trunc_in({x}, {lo}, {hi})"
    return f"({e.ctype(op.result)}){x}"


_STORED = (*FLOAT8_FORMATS, *SUB_BYTE_INTEGERS, *NARROW_FLOATS)
_TO_STORAGE = {"f16": "__float2half_rn", "bf16": "__float2bfloat16_rn", **{t: f"st_{t}" for t in _STORED}}
_FROM_STORAGE = {"f16": "__half2float", "bf16": "__bfloat162float", **{t: f"ld_{t}" for t in _STORED}}


@unary(nn.BitcastOp)
def _bitcast(e, op, x):
    source, target = str(op.input.type.element_type), str(op.result.type.element_type)
    s, d = e.var("bits"), e.var("bits")
    e.lines += [
        f"    const {_C_TYPES[source]} {s} = {_TO_STORAGE.get(source, f'({_C_TYPES[source]})')}({x});",
        f"    {_C_TYPES[target]} {d};",
        f"    memcpy(&{d}, &{s}, sizeof {d});",
    ]
    return f"{_FROM_STORAGE[target]}({d})" if target in _FROM_STORAGE else f"({e.ctype(op.result)}){d}"


# -- unary arithmetic and math ----------------------------------------------------------------


@unary(nn.NegOp)
def _neg(e, op, x):
    return f"-{x}"


@unary(nn.AbsOp)
def _abs(e, op, x):
    if _is_float(op.result):
        return f"{_fn(e, op.result, 'fabs')}({x})"
    return x if _is_unsigned(op.result) else f"{x} < 0 ? -{x} : {x}"


@unary(nn.SignOp)
def _sign(e, op, x):
    one, zero = _lit(e, op.result, 1), _lit(e, op.result, 0)
    if _is_unsigned(op.result):
        return f"{x} > {zero} ? {one} : {zero}"
    # Zero and NaN map to themselves (np.sign).
    return f"{x} > {zero} ? {one} : ({x} < {zero} ? -{one} : {x})"


_MATH = {nn.SqrtOp: "sqrt", nn.ExpOp: "exp", nn.LogOp: "log", nn.ErfOp: "erf",
         nn.FloorOp: "floor", nn.CeilOp: "ceil", nn.RoundOp: "rint", nn.TanhOp: "tanh",
         nn.SinOp: "sin", nn.CosOp: "cos", nn.TanOp: "tan", nn.AsinOp: "asin",
         nn.AcosOp: "acos", nn.AtanOp: "atan", nn.SinhOp: "sinh", nn.CoshOp: "cosh",
         nn.AsinhOp: "asinh", nn.AcoshOp: "acosh", nn.AtanhOp: "atanh"}


@unary(*_MATH)
def _math_fn(e, op, x):
    return f"{_fn(e, op.result, _MATH[type(op)])}({x})"


@unary(nn.ReciprocalOp)
def _reciprocal(e, op, x):
    return f"{_lit(e, op.result, 1)} / {x}"


@unary(nn.ClipOp)
def _clip(e, op, x):
    # min(max(x, lo), hi) keeping NaN; with lo > hi every element is hi (ONNX).
    if op.min is not None:
        lo = _lit(e, op.result, op.min)
        x = _temp(e, op.result, f"{x} < {lo} ? {lo} : {x}")
    if op.max is not None:
        hi = _lit(e, op.result, op.max)
        x = f"{x} > {hi} ? {hi} : {x}"
    return x


# -- activations -------------------------------------------------------------------------------


@unary(nn.ShrinkOp)
def _shrink(e, op, x):
    r = op.result
    lambd, bias, zero = _lit(e, r, op.lambd), _lit(e, r, op.bias), _lit(e, r, 0)
    return f"{x} < -{lambd} ? {x} + {bias} : ({x} > {lambd} ? {x} - {bias} : {zero})"


@unary(nn.ReluOp)
def _relu(e, op, x):
    zero = _lit(e, op.result, 0)
    return f"{x} < {zero} ? {zero} : {x}"


def _sigmoid(e, v, x: str) -> str:
    one = _lit(e, v, 1)
    neg = f"-{x}" if re.fullmatch(r"\w+", x) else f"-({x})"
    return f"{one} / ({one} + {_fn(e, v, 'exp')}({neg}))"


def _softplus(e, v, x: str) -> str:
    """``log(1 + exp(x))`` without overflow: ``max(x, 0) + log1p(exp(-|x|))``."""
    zero = _lit(e, v, 0)
    return (f"({x} > {zero} ? {x} : {zero}) + "
            f"{_fn(e, v, 'log1p')}({_fn(e, v, 'exp')}(-{_fn(e, v, 'fabs')}({x})))")


def _unit_clamp(e, v, t: str) -> str:
    zero, one = _lit(e, v, 0), _lit(e, v, 1)
    return f"({t} < {zero} ? {zero} : ({t} > {one} ? {one} : {t}))"


@unary(nn.SigmoidOp)
def _sigmoid_rule(e, op, x):
    return _sigmoid(e, op.result, x)


@unary(nn.GeluOp)
def _gelu(e, op, x):
    r = op.result
    half, one = _lit(e, r, 0.5), _lit(e, r, 1)
    if op.approximate == "tanh":
        inner = f"{_lit(e, r, math.sqrt(2 / math.pi))} * ({x} + {_lit(e, r, 0.044715)} * {x} * {x} * {x})"
        return f"{half} * {x} * ({one} + {_fn(e, r, 'tanh')}({inner}))"
    return f"{half} * {x} * ({one} + {_fn(e, r, 'erf')}({x} * {_lit(e, r, math.sqrt(0.5))}))"


@unary(nn.LeakyReluOp)
def _leaky_relu(e, op, x):
    return f"{x} < {_lit(e, op.result, 0)} ? {_lit(e, op.result, op.alpha)} * {x} : {x}"


@unary(nn.EluOp)
def _elu(e, op, x):
    r = op.result
    return f"{x} < {_lit(e, r, 0)} ? {_lit(e, r, op.alpha)} * {_fn(e, r, 'expm1')}({x}) : {x}"


@unary(nn.SeluOp)
def _selu(e, op, x):
    r = op.result
    neg = f"{_lit(e, r, op.alpha)} * {_fn(e, r, 'expm1')}({x})"
    return f"{_lit(e, r, op.gamma)} * ({x} <= {_lit(e, r, 0)} ? {neg} : {x})"


@unary(nn.CeluOp)
def _celu(e, op, x):
    r = op.result
    alpha = _lit(e, r, op.alpha)
    return f"{x} > {_lit(e, r, 0)} ? {x} : {alpha} * {_fn(e, r, 'expm1')}({x} / {alpha})"


@unary(nn.ThresholdedReluOp)
def _thresholded_relu(e, op, x):
    return f"{x} > {_lit(e, op.result, op.alpha)} ? {x} : {_lit(e, op.result, 0)}"


@unary(nn.HardSigmoidOp)
def _hard_sigmoid(e, op, x):
    r = op.result
    t = _temp(e, r, f"{_lit(e, r, op.alpha)} * {x} + {_lit(e, r, op.beta)}")
    return _unit_clamp(e, r, t)


@unary(nn.HardSwishOp)
def _hard_swish(e, op, x):
    r = op.result
    t = _temp(e, r, f"{x} / {_lit(e, r, 6)} + {_lit(e, r, 0.5)}")
    return f"{x} * {_unit_clamp(e, r, t)}"


@unary(nn.SoftplusOp)
def _softplus_rule(e, op, x):
    return _softplus(e, op.result, x)


@unary(nn.SoftsignOp)
def _softsign(e, op, x):
    return f"{x} / ({_lit(e, op.result, 1)} + {_fn(e, op.result, 'fabs')}({x}))"


@unary(nn.MishOp)
def _mish(e, op, x):
    return f"{x} * {_fn(e, op.result, 'tanh')}({_softplus(e, op.result, x)})"


@unary(nn.SwishOp)
def _swish(e, op, x):
    return f"{x} * ({_sigmoid(e, op.result, f'{_lit(e, op.result, op.alpha)} * {x}')})"


# -- linear quantization ------------------------------------------------------------------------


def _channel(e: KernelEmitter, op: nn.QuantizationOp, v: SSAValue, index: list[str]) -> str:
    """The scale or zero point for the element at ``index`` (per tensor or per channel)."""
    axis = op.channel_axis()
    if axis is None:
        return e.value(v, ["0"] * v.type.get_num_dims())
    if not op.block_size:
        return e.value(v, [index[axis]])
    blocked = list(e.broadcast_index(v, op.input, index))
    blocked[axis] = f"{index[axis]} / {op.block_size}"
    return e.value(v, blocked)


def _quantize(e: KernelEmitter, op: nn.QuantizeOp, index: list[str]) -> str:
    x = e.value(op.input, index)
    scale, zp = _channel(e, op, op.scale, index), _channel(e, op, op.zero_point, index)
    to = str(op.result.type.element_type)
    if to in (*FLOAT8_FORMATS, "f4E2M1FN"):  # saturated into the format, rounded to nearest even
        return f"sat_{to}((float){x} / {scale} + (float){zp})"
    q = _temp_typed(e, "float", f"rintf((float){x} / {scale}) + (float){zp}")
    lo, hi = (_c_float(float(b)) for b in _integer_range(op.result))
    return f"({e.ctype(op.result)})({q} < {lo} ? {lo} : ({q} > {hi} ? {hi} : {q}))"


def _dequantize(e: KernelEmitter, op: nn.DequantizeOp, index: list[str]) -> str:
    x = e.value(op.input, index)
    scale, zp = _channel(e, op, op.scale, index), _channel(e, op, op.zero_point, index)
    return f"((float){x} - (float){zp}) * {scale}"


def _temp_typed(e: KernelEmitter, ctype: str, expr: str) -> str:
    t = e.var("t")
    e.lines.append(f"    const {ctype} {t} = {expr};")
    return t


injective(nn.QuantizeOp, dims=_same_dims, elementwise=True)(_quantize)
injective(nn.DequantizeOp, dims=_same_dims, elementwise=True)(_dequantize)
