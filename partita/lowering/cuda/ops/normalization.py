"""CUDA lowering rules of the ``nn.normalization`` family beyond the built-in row-wise
kernels (softmax on the last axis, layer_norm and rms_norm in f16 / bf16 / f32 stay there): ``window``
rules in which one thread computes one output element, looping over its normalization
group for the statistics (simple and correct; each thread recomputes its group's)."""

from __future__ import annotations

from partita.dialects import nn
from partita.lowering.cuda.ops.reduction import at, fmath, group_loop, same_dims, y_decl
from partita.lowering.cuda.rules import injective, window

_ROWWISE_DTYPES = ("f16", "bf16", "f32")


def _rank(v) -> int:
    return len(v.type.get_shape())


def _rowwise_softmax(op) -> bool:
    """Whether the built-in row-wise kernel takes this softmax (last axis, f32 family)."""
    rank = _rank(op.result)
    return op.axis % rank == rank - 1 and str(op.result.type.element_type) in _ROWWISE_DTYPES


def _stats(emitter, x, axes: list[int], body: list[str]) -> list[str]:
    """A loop over the ``axes`` of ``x`` at the output element's other coordinates."""
    return group_loop(emitter, emitter.dims[x], axes, list(emitter.out_index), body)


@window(nn.SoftmaxOp, nn.LogSoftmaxOp, nn.HardmaxOp,
        supports=lambda op: not (isinstance(op, nn.SoftmaxOp) and _rowwise_softmax(op)),
        dims=same_dims)
def _softmax(emitter, op: nn.AxisNormOp) -> list[str]:
    x = op.input
    rank = _rank(x)
    axis = op.axis % rank
    A = emitter.ctype(x)
    v = at(emitter, x, rank)
    here = emitter.load(x, emitter.out_index)
    exp, log = fmath(A, "exp"), fmath(A, "log")
    lines = [f"    {A} mx = __int_as_float(0xff800000);"]
    if isinstance(op, nn.HardmaxOp):
        # 1 at the first maximum: no earlier element reaches the value, none later exceeds it.
        o = emitter.out_index[axis]
        lines = [
            "    bool first = true;",
            f"    const {A} mine = {here};",
            *_stats(emitter, x, [axis], [
                f"{{ const {A} u = {v}; if (u > mine || (u == mine && @{axis}@ < {o})) first = false; }}",
            ]),
        ]
        return [*lines, y_decl(emitter, op, f"first ? ({A})1 : ({A})0")]
    lines += [
        *_stats(emitter, x, [axis], [f"{{ const {A} u = {v}; if (u > mx) mx = u; }}"]),
        f"    {A} sum = 0;",
        *_stats(emitter, x, [axis], [f"sum += {exp}({v} - mx);"]),
    ]
    y = (f"{exp}({here} - mx) / sum" if isinstance(op, nn.SoftmaxOp)
         else f"{here} - mx - {log}(sum)")
    return [*lines, y_decl(emitter, op, y)]


def _mean_var(emitter, x, axes: list[int], A: str, count: str, centered: bool = True) -> list[str]:
    v = at(emitter, x, _rank(x))
    lines = [f"    {A} mean = 0;", *_stats(emitter, x, axes, [f"mean += {v};"]),
             f"    mean /= ({A})({count});", f"    {A} var = 0;"]
    if centered:
        lines += _stats(emitter, x, axes, [f"{{ const {A} t = {v} - mean; var += t * t; }}"])
        lines.append(f"    var /= ({A})({count});")
    else:  # E[x^2] - E[x]^2, as ONNX's MeanVarianceNormalization defines it
        lines += _stats(emitter, x, axes, [f"{{ const {A} t = {v}; var += t * t; }}"])
        lines.append(f"    var = var / ({A})({count}) - mean * mean;")
    return lines


def _count(emitter, x, axes) -> str:
    return " * ".join(f"({emitter.dims[x][a]})" for a in axes) or "1"


@window(nn.LayerNormOp, supports=lambda op: str(op.result.type.element_type) not in _ROWWISE_DTYPES,
        dims=same_dims)
def _layer_norm(emitter, op: nn.LayerNormOp) -> list[str]:
    x = op.input
    rank = _rank(x)
    axes = list(range(op.axis % rank, rank))
    A = emitter.ctype(x)
    tail = emitter.out_index[op.axis % rank:]
    return [
        *_mean_var(emitter, x, axes, A, _count(emitter, x, axes)),
        y_decl(emitter, op, f"({emitter.load(x, emitter.out_index)} - mean) / "
                            f"{fmath(A, 'sqrt')}(var + ({A}){op.epsilon!r}) * "
                            f"{emitter.load(op.gamma, tail)} + {emitter.load(op.beta, tail)}"),
    ]


@window(nn.RMSNormOp, supports=lambda op: str(op.result.type.element_type) not in _ROWWISE_DTYPES,
        dims=same_dims)
def _rms_norm(emitter, op: nn.RMSNormOp) -> list[str]:
    x = op.input
    rank = _rank(x)
    axes = list(range(op.axis % rank, rank))
    A = emitter.ctype(x)
    v = at(emitter, x, rank)
    scale = emitter.load(op.scale, emitter.broadcast_index(op.scale, op.result, emitter.out_index))
    return [
        f"    {A} ms = 0;",
        *_stats(emitter, x, axes, [f"{{ const {A} t = {v}; ms += t * t; }}"]),
        f"    ms /= ({A})({_count(emitter, x, axes)});",
        y_decl(emitter, op, f"{emitter.load(x, emitter.out_index)} / "
                            f"{fmath(A, 'sqrt')}(ms + ({A}){op.epsilon!r}) * {scale}"),
    ]


@window(nn.GroupNormOp, supports=lambda op: isinstance(op.input.type.get_shape()[1], int)
        and op.input.type.get_shape()[1] >= 0, dims=same_dims)
def _group_norm(emitter, op: nn.GroupNormOp) -> list[str]:
    x = op.input
    rank = _rank(x)
    A = emitter.ctype(x)
    T = emitter.index_type
    channels = x.type.get_shape()[1]
    per_group = channels // op.num_groups
    o = emitter.out_index
    c = o[1]
    # Loop over the channels of this element's group (axis 1 offset by the group's first
    # channel) and every spatial position.
    g0 = emitter.var("g")
    v = at(emitter, x, rank).replace("@1@", f"({g0} + @1@)")
    dims = list(emitter.dims[x])
    dims[1] = per_group
    fixed = list(o)
    sp = list(range(2, rank))
    count = " * ".join([str(per_group), *(f"({dims[a]})" for a in sp)])

    def loop(body):
        return group_loop(emitter, dims, [1, *sp], fixed, body)

    lines = [
        f"    const {T} {g0} = ({c}) / {per_group} * {per_group};",
        f"    {A} mean = 0;", *loop([f"mean += {v};"]), f"    mean /= ({A})({count});",
        f"    {A} var = 0;", *loop([f"{{ const {A} t = {v} - mean; var += t * t; }}"]),
        f"    var /= ({A})({count});",
    ]
    return [*lines, y_decl(
        emitter, op, f"({emitter.load(x, o)} - mean) / {fmath(A, 'sqrt')}(var + ({A}){op.epsilon!r})"
                     f" * {emitter.load(op.scale, [c])} + {emitter.load(op.bias, [c])}")]


@window(nn.LpNormOp, dims=same_dims)
def _lp_norm(emitter, op: nn.LpNormOp) -> list[str]:
    x = op.input
    rank = _rank(x)
    A = emitter.ctype(x)
    v = at(emitter, x, rank)
    term = "(t < 0 ? -t : t)" if op.p == 1 else "t * t"
    norm = "acc" if op.p == 1 else f"{fmath(A, 'sqrt')}(acc)"
    return [
        f"    {A} acc = 0;",
        *_stats(emitter, x, [op.axis % rank], [f"{{ const {A} t = {v}; acc += {term}; }}"]),
        f"    const {A} norm = {norm};",
        y_decl(emitter, op, f"norm == 0 ? ({A})0 : {emitter.load(x, emitter.out_index)} / norm"),
    ]


@window(nn.MeanVarianceNormOp, dims=same_dims)
def _mean_variance_norm(emitter, op: nn.MeanVarianceNormOp) -> list[str]:
    x = op.input
    A = emitter.ctype(x)
    axes = list(op.axes)
    return [
        *_mean_var(emitter, x, axes, A, _count(emitter, x, axes), centered=False),
        f"    const {A} sd = {fmath(A, 'sqrt')}(var > 0 ? var : ({A})0);",
        y_decl(emitter, op, f"({emitter.load(x, emitter.out_index)} - mean) / (sd + ({A})1e-9)"),
    ]


@injective(nn.BatchNormOp, dims=lambda emitter, op: list(emitter.dims[op.input]))
def _batch_norm(emitter, op: nn.BatchNormOp, index: list[str]) -> str:
    """Inference batch norm (one not folded into a convolution): injective, each channel
    vector read at the output's channel index, so it chains with its neighbours."""
    channel = [index[op.axis % len(index)]]
    x = emitter.value(op.input, index)
    gamma, beta, mean, var = (emitter.value(v, channel) for v in (op.gamma, op.beta, op.mean, op.variance))
    A = emitter.ctype(op.result)
    return f"({x} - {mean}) * ({gamma} / {fmath(A, 'sqrt')}({var} + ({A}){float(op.epsilon)!r})) + {beta}"
