"""ONNX converters of the control-flow ops If, Loop and Scan, by import-time evaluation of
their control where it folds: the bodies are imported in line (``Importer.run_subgraph``),
so what they compute is ordinary ``nn`` ops that partition, fuse and launch like the rest
of the graph.

- ``If`` with a condition known at import (a constant, or folded from shapes, as exporters
  emit it) imports the branch taken. With a condition computed at run time both branches are
  imported and their results selected, the if-conversion compilers apply to pure branches
  (ONNX ops have no side effects): element-wise on the device (``nn.where``) where the
  branches give one shape, else whole by ``nn.choose``, whose result size the launch plan
  learns from the condition at a stage boundary (a detector's "no boxes" branch).
- ``Loop`` and ``Scan`` unroll: a Loop whose trip count and condition are known at import
  (each iteration's condition folds, or the trip count bounds it), a Scan over a static
  sequence axis. Scan elements are slices of the scanned tensors read in place (views); the
  per-iteration outputs are concatenated. ``UNROLL_NODE_LIMIT`` bounds the nodes an unroll
  imports: a longer Scan is a located error instead of an import that never ends.
- Sequences (``SequenceValue``, ``sequences``) pass through unrolled bodies as their
  other values do; a loop the host runs cannot carry one (its length would change at run time).
- A ``Loop`` whose trip count or initial condition is a run-time value, one iteration of
  which computes its condition at run time (the unroll so far is rewound), or whose unroll
  would pass ``UNROLL_NODE_LIMIT`` runs on the host instead, as TVM's VM and IREE run
  data-dependent control flow: its body is imported once into a private function
  (``<caller>_loop_body_<n>``, marked ``byoc.host_body`` so that no pass partitions, lowers,
  inlines or deletes it), the outer-scope values it reads become arguments, and one
  ``nn.loop`` calls it per iteration at a stage boundary of the launch plan. A carried value
  whose shape the body changes (a growing concatenation) is ``?`` in those dims.

A Scan over an axis whose length is known only at run time runs on the host the same way:
one ``nn.loop`` iteration per element, each scanned input read at the iteration
(``_host_scan``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import onnx
from xdsl.dialects import func
from xdsl.dialects.builtin import TensorType, UnitAttr
from xdsl.ir import Block, Region, SSAValue

from partita.dialects import nn
from partita.dialects.byoc import HOST_BODY
from partita.dialects.nn.elementwise import BOOL
from partita.dialects.nn.reduction import INDEX_TYPE
from partita.frontends.onnx.importer import erase_ops_after
from partita.frontends.onnx.registry import converter
from partita.frontends.onnx.transform import drop_axis, reshape_to, slice_axis
from partita.frontends.onnx.values import SequenceValue, Value, fail, is_const, is_symbolic, shape_of

if TYPE_CHECKING:  # pragma: no cover
    from partita.frontends.onnx.importer import Importer

UNROLL_NODE_LIMIT = 100_000
"""The most body nodes one Loop or Scan may import when unrolled (iterations x nodes); a
longer Loop runs on the host (``nn.loop``)."""


def _known(v: Value | None) -> bool:
    return v is not None and is_const(v) and not is_symbolic(v)


def _scalar(v: np.ndarray, what: str) -> np.generic:
    if v.size != 1:
        fail(f"{what} must have one element, got shape {list(v.shape)}")
    return v.reshape(-1)[0]


def _count(graph: onnx.GraphProto) -> int:
    """Nodes of ``graph``, its nested bodies included (what one unrolled iteration imports)."""
    total = 0
    for node in graph.node:
        total += 1
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                total += _count(attr.g)
    return total


def _over_limit(body: onnx.GraphProto, iterations: int) -> bool:
    """Whether unrolling ``iterations`` of ``body`` imports more than ``UNROLL_NODE_LIMIT`` nodes."""
    return iterations * max(_count(body), 1) > UNROLL_NODE_LIMIT


def _check_unroll(body: onnx.GraphProto, iterations: int, op: str) -> None:
    """Refuses an unroll of more than ``UNROLL_NODE_LIMIT`` nodes (before importing any)."""
    if _over_limit(body, iterations):
        fail(f"unrolling this {op} imports more than {UNROLL_NODE_LIMIT} nodes ({iterations} "
             f"iterations of a {_count(body)}-node body)")


@converter("If")
def _if(cx, ins, attrs):
    condition = ins[0]
    if _known(condition):
        taken = "then_branch" if bool(_scalar(condition, "the condition")) else "else_branch"
        return cx.run_subgraph(attrs[taken], [], taken.replace("_", " "))
    condition = cx.tensor(condition)
    if len(shape_of(condition)) and (nn.DYN in shape_of(condition) or np.prod(shape_of(condition)) != 1):
        fail(f"the condition must have one element, got shape {list(shape_of(condition))}")
    on_true = cx.run_subgraph(attrs["then_branch"], [], "then branch")
    on_false = cx.run_subgraph(attrs["else_branch"], [], "else branch")
    if len(on_true) != len(on_false):
        fail(f"the then branch gives {len(on_true)} outputs, the else branch {len(on_false)}")
    predicate = reshape_to(cx, condition, [])
    outs = []
    for k, (a, b) in enumerate(zip(on_true, on_false)):
        if isinstance(a, SequenceValue) or isinstance(b, SequenceValue):
            # Sequences of one length (known at import): selected element by element.
            if not (isinstance(a, SequenceValue) and isinstance(b, SequenceValue)) or len(a) != len(b):
                what = lambda v: v.describe() if isinstance(v, SequenceValue) else "a tensor"  # noqa: E731
                fail(f"output {k}: the branches give {what(a)} and {what(b)}; a condition computed at run time "
                     "selects between sequences of one length only (their lengths are known at import)")
            elements = tuple(select(cx, predicate, x, y, f"output {k} element {j}")
                             for j, (x, y) in enumerate(zip(a.elements, b.elements)))
            outs.append(SequenceValue(elements, a.element_type))
            continue
        outs.append(select(cx, predicate, a, b, f"output {k}"))
    return outs


def select(cx: Importer, predicate: SSAValue, a: Value, b: Value, what: str) -> Value:
    """``a`` where the run-time ``predicate`` holds, else ``b``: element-wise (``nn.where``)
    between values of one shape, else whole (``nn.choose``, whose result's shape is known once
    the predicate is)."""
    if a is b:
        return a
    a, b = cx.operands(a, b)
    if a.type.element_type != b.type.element_type or len(shape_of(a)) != len(shape_of(b)):
        fail(f"{what}: the choices are {a.type} and {b.type}; a condition computed at "
             "run time selects between values of one element type and rank only")
    if cx.labels(a) == cx.labels(b):
        return cx.emit(nn.WhereOp(predicate, a, b))
    # the result's shape is the condition's: a stage boundary of the launch plan
    return cx.emit(nn.ChooseOp(predicate, a, b))


@converter("Loop")
def _loop(cx, ins, attrs):
    body = attrs["body"]
    trip_count, condition = (ins + [None, None])[:2]
    carried = list(ins[2:])
    scanned = len(body.output) - 1 - len(carried)
    if len(body.input) != 2 + len(carried) or scanned < 0:
        fail(f"the body takes {len(body.input)} inputs and gives {len(body.output)} outputs for "
             f"{len(carried)} loop-carried values")
    if not all(v is None or _known(v) for v in (trip_count, condition)):
        return _host_loop(cx, body, trip_count, condition, carried, scanned)
    limit = None if trip_count is None else int(_scalar(trip_count, "the trip count"))
    running = True if condition is None else bool(_scalar(condition, "the condition"))
    if limit is not None and _over_limit(body, limit):
        return _host_loop(cx, body, trip_count, condition, carried, scanned)
    unrolled = _unroll(cx, body, limit, running, carried, scanned)
    return _host_loop(cx, body, trip_count, condition, carried, scanned) if unrolled is None else unrolled


def _unroll(cx: Importer, body: onnx.GraphProto, limit: int | None, running: bool, carried: list[Value],
            scanned: int) -> list[Value] | None:
    """The Loop's iterations imported in line, each iteration's condition folded; ``None``
    (and nothing imported) when one is computed at run time or the iterations a condition
    runs pass ``UNROLL_NODE_LIMIT``: the host runs that loop."""
    mark = cx.mark()
    per_iteration: list[list[Value]] = [[] for _ in range(scanned)]
    iteration = 0
    while running and (limit is None or iteration < limit):
        outs = None if _over_limit(body, iteration + 1) else cx.run_subgraph(
            body, [np.array(iteration, np.int64), np.array(running), *carried], f"body (iteration {iteration})")
        if outs is None or not _known(outs[0]):
            cx.rewind(mark)
            return None
        running = bool(_scalar(outs[0], "the body's condition"))
        carried = outs[1:1 + len(carried)]
        for values, v in zip(per_iteration, outs[1 + len(carried):]):
            values.append(v)
        iteration += 1
    if scanned and not iteration:
        fail("a Loop that runs no iteration has scan outputs of unknown shape")
    return carried + [stack(cx, values, 0) for values in per_iteration]


def _host_loop(cx: Importer, body: onnx.GraphProto, trip_count: Value | None, condition: Value | None,
               carried: list[Value], scanned: int) -> list[Value]:
    """The Loop as one ``nn.loop`` the host runs (``_run_on_host``), the ONNX body called
    with the iteration, the condition and the carried values."""
    if not carried and not scanned:
        return []  # ONNX ops have no side effects: a loop with no output computes nothing
    if any(isinstance(v, SequenceValue) for v in carried):
        fail("this Loop runs on the host (its trip count or condition is known only at run time), so it "
             "cannot carry a sequence: Partita resolves sequences at import, their lengths must be known there")
    count = _control(cx, trip_count, np.array(nn.NO_TRIP_COUNT, np.int64), INDEX_TYPE, "trip count")
    running = _control(cx, condition, np.array(True), BOOL[0], "condition")
    return _run_on_host(cx, count, running, carried, lambda args: cx.run_subgraph(body, args, "body"))


BodyBuilder = Callable[[list[SSAValue]], list[Value]]
"""Imports one iteration: ``(iteration, condition, carried...)`` block arguments to
``[condition, carried..., scan elements...]``."""


def _run_on_host(cx: Importer, count: SSAValue, running: SSAValue, carried: list[Value],
                 build: BodyBuilder) -> list[SSAValue]:
    """One ``nn.loop`` the host runs, the iteration ``build`` imports once into a private
    function (``<caller>_loop_body_<n>``, marked ``byoc.host_body``). A carried value whose
    shape the body changes enters it with those dims ``?``: the body is imported again
    until its carried types are stable (each round only adds ``?``s)."""
    initial = [cx.tensor(v) for v in carried]
    types = [v.type for v in initial]
    while True:
        mark = len(cx.functions)
        block, outs = _import_body(cx, build, types)
        stable = [_join(t, o.type, k) for k, (t, o) in enumerate(zip(types, outs[1:1 + len(carried)]))]
        if stable == types:
            break
        erase_ops_after(block, None)
        del cx.functions[mark:]
        types = stable
    captured = _capture(block)
    name = f"{cx.function_name}_loop_body_{len(cx.functions)}"
    fn = func.FuncOp(name, (list(block.arg_types), [v.type for v in block.last_op.operands]), Region(block),
                     visibility="private")
    fn.attributes[HOST_BODY] = UnitAttr()
    if cx.location is not None:
        fn.location = cx.location
    cx.functions.append(fn)
    scans = [TensorType(v.type.element_type, [nn.DYN, *shape_of(v)]) for v in outs[1 + len(carried):]]
    loop = nn.LoopOp(name, count, running, initial, captured, [*types, *scans])
    cx.emit_op(loop)
    return list(loop.outputs)


def _control(cx: Importer, v: Value | None, absent: np.ndarray, element, what: str) -> SSAValue:
    """The trip count or condition operand: the value given, or what its absence means."""
    value = cx.tensor(absent if v is None else v)
    if value.type.element_type != element:
        fail(f"the {what} must be {element}, got {value.type}")
    if nn.DYN not in shape_of(value) and np.prod(shape_of(value)) != 1:
        fail(f"the {what} must have one element, got shape {list(shape_of(value))}")
    return value


def _import_body(cx: Importer, build: BodyBuilder, carried: list[TensorType]) -> tuple[Block, list[SSAValue]]:
    """One iteration (``build``) imported into a block of its own whose arguments are the
    iteration, the condition and the carried values (of types ``carried``), ending in a
    return of the condition (rank 0), the carried values and the scan elements. Values of
    the enclosing scopes are read where they are (``_capture`` makes them arguments)."""
    block = Block(arg_types=[TensorType(INDEX_TYPE, []), TensorType(BOOL[0], []), *carried])
    with cx.emitting_into(block):
        outs = [cx.tensor(v) for v in build(list(block.args))]
        if outs[0].type.element_type != BOOL[0] or nn.DYN in shape_of(outs[0]) or np.prod(shape_of(outs[0])) != 1:
            fail(f"the body's condition must be one bool, got {outs[0].type}")
        outs[0] = reshape_to(cx, outs[0], [])
        block.add_op(func.ReturnOp(*outs))
    for k, (t, v) in enumerate(zip(carried, outs[1:])):
        if v.type.element_type != t.element_type:
            fail(f"loop-carried value {k} enters the body as {t.element_type} and leaves it as "
                 f"{v.type.element_type}")
    return block, outs


def _join(a: TensorType, b: TensorType, k: int) -> TensorType:
    """A carried value's type that holds both its type entering the body and leaving it."""
    if a.get_num_dims() != b.get_num_dims():
        fail(f"loop-carried value {k} enters the body as {a} and leaves it as {b}: its rank changes")
    return TensorType(a.element_type, [x if x == y else nn.DYN for x, y in zip(a.get_shape(), b.get_shape())])


def _capture(block: Block) -> list[SSAValue]:
    """The values of enclosing blocks that ``block``'s ops read (ONNX's outer-scope
    references), each replaced there by a new argument of ``block``, in order of first use."""
    inside = set(block.args) | {r for op in block.walk() for r in op.results}
    captured: dict[SSAValue, SSAValue] = {}
    for op in block.walk():
        if any(v not in inside for v in op.operands):
            for v in op.operands:
                if v not in inside and v not in captured:
                    captured[v] = block.insert_arg(v.type, len(block.args))
            op.operands = [captured.get(v, v) for v in op.operands]
    return list(captured)


@converter("Scan")
def _scan(cx, ins, attrs):
    return _scan8(cx, ins, attrs) if cx.opset < 9 else _scan9(cx, ins, attrs)


def _scan9(cx: Importer, ins: list[Value], attrs: dict) -> list[Value]:
    """Scan from opset 9: each scanned input's axis and direction, each scan output's."""
    body, count = attrs["body"], attrs["num_scan_inputs"]
    states, sequences = list(ins[:len(ins) - count]), ins[len(ins) - count:]
    outputs = len(body.output) - len(states)
    in_axes = list(attrs.get("scan_input_axes", [0] * count))
    in_reverse = list(attrs.get("scan_input_directions", [0] * count))
    out_axes = list(attrs.get("scan_output_axes", [0] * outputs))
    out_reverse = list(attrs.get("scan_output_directions", [0] * outputs))
    if not 1 <= count <= len(ins):
        fail(f"num_scan_inputs = {count} must be between 1 and the {len(ins)} inputs")
    if outputs < 0 or len(body.input) != len(ins):
        fail(f"the body takes {len(body.input)} inputs and gives {len(body.output)} outputs for "
             f"{len(states)} states and {count} scanned inputs")
    lengths = set()
    for k, (x, axis) in enumerate(zip(sequences, in_axes)):
        rank = len(shape_of(x))
        if not -rank <= axis < rank:
            fail(f"scan_input_axes[{k}] = {axis} is out of range for rank {rank}")
        in_axes[k] = axis % rank
        lengths.add(shape_of(x)[in_axes[k]])
    if nn.DYN in lengths:
        return _host_scan(cx, body, states, sequences, in_axes, in_reverse, out_axes, out_reverse)
    if len(lengths) != 1:
        fail(f"the scanned axes have different lengths {sorted(lengths)}")
    steps = lengths.pop()
    _check_unroll(body, steps, "Scan")
    per_iteration: list[list[Value]] = [[] for _ in range(outputs)]
    for t in range(steps):
        elements = [_element(cx, x, axis, steps - 1 - t if reverse else t)
                    for x, axis, reverse in zip(sequences, in_axes, in_reverse)]
        outs = cx.run_subgraph(body, states + elements, f"body (iteration {t})")
        states = outs[:len(states)]
        for values, v in zip(per_iteration, outs[len(states):]):
            values.append(v)
    if outputs and not steps:
        fail("a Scan over an empty axis has scan outputs of unknown shape")
    stacked = []
    for values, axis, reverse in zip(per_iteration, out_axes, out_reverse):
        stacked.append(stack(cx, values[::-1] if reverse else values, axis))
    return states + stacked


def _host_scan(cx: Importer, body: onnx.GraphProto, states: list[Value], sequences: list[Value],
               in_axes: list[int], in_reverse: list[int], out_axes: list[int], out_reverse: list[int]) -> list[Value]:
    """A Scan over an axis of run-time length as an ``nn.loop`` the host runs: one iteration
    per element of the first scanned axis, each scanned input read at the iteration (from
    the end where reversed; the others must be as long: the body's gather fails on a
    shorter one), the elements stacked along a new leading axis, then reversed and moved
    to their ``scan_output_axes``."""
    if any(isinstance(v, SequenceValue) for v in (*states, *sequences)):
        fail("a Scan over a run-time length runs on the host and cannot take sequences")
    sequences = [cx.tensor(v) for v in sequences]
    count = _dim(cx, sequences[0], in_axes[0])
    running = cx.tensor(np.array(True))

    def iteration(args: list[SSAValue]) -> list[Value]:
        i, _, *carried = args
        elements = []
        for x, axis, reverse in zip(sequences, in_axes, in_reverse):
            at = cx.emit(nn.SubtractOp(cx.emit(nn.SubtractOp(_dim(cx, x, axis), i)), cx.tensor(np.array(1, np.int64)))) \
                if reverse else i
            elements.append(cx.emit(nn.TakeOp(x, at, axis)))
        return [np.array(True), *cx.run_subgraph(body, [*carried, *elements], "body")]

    outs = _run_on_host(cx, count, running, states, iteration)
    finals, scans = outs[:len(states)], outs[len(states):]
    placed = []
    for y, axis, reverse in zip(scans, out_axes, out_reverse):
        rank = len(shape_of(y))
        if not -rank <= axis < rank:
            fail(f"scan output axis {axis} is out of range for rank {rank}")
        if reverse:  # the iterations' elements last to first: a gather at -1, -2, ... (Gather wraps them)
            backwards = cx.emit(nn.ArangeOp(-1, -1, nn.DYN, INDEX_TYPE, refs=[(y, 0, 0)]))
            y = cx.emit(nn.TakeOp(y, backwards, 0))
        axis %= rank
        if axis:
            perm = [*range(1, axis + 1), 0, *range(axis + 1, rank)]
            y = cx.emit(nn.TransposeOp(y, perm))
        placed.append(y)
    return [*finals, *placed]


def _dim(cx: Importer, x: SSAValue, axis: int) -> SSAValue:
    """Dim ``axis`` of ``x`` at run time, an ``i64`` scalar."""
    return cx.emit(nn.TakeOp(cx.emit(nn.ShapeOfOp(x)), cx.tensor(np.array(axis, np.int64)), 0))


def _scan8(cx: Importer, ins: list[Value], attrs: dict) -> list[Value]:
    """Scan-8: a leading batch axis on every state and scanned input (the sequence is axis
    1), an optional ``sequence_lens`` first, ``directions`` per scanned input. Each batch
    entry is Scan-9 over its slice, the results stacked along the batch again; lengths
    shorter than the sequence (padding) are refused."""
    lengths, rest = ins[0], list(ins[1:])
    count = attrs["num_scan_inputs"]
    if not 1 <= count <= len(rest):
        fail(f"num_scan_inputs = {count} must be between 1 and the {len(rest)} inputs after sequence_lens")
    sequences = rest[len(rest) - count:]
    batch = shape_of(rest[0])[0] if shape_of(rest[0]) else nn.DYN
    steps = shape_of(sequences[0])[1] if len(shape_of(sequences[0])) > 1 else nn.DYN
    if nn.DYN in (batch, steps):
        fail("Scan-8 needs a static batch and sequence length (it unrolls at import)")
    if lengths is not None and (not _known(lengths) or np.any(np.asarray(lengths) != steps)):
        fail(f"Scan-8 sequence_lens must be constants equal to the sequence length {steps} (padded "
             "sequences are not supported)")
    _check_unroll(attrs["body"], batch * steps, "Scan")
    nine = {"body": attrs["body"], "num_scan_inputs": count,
            "scan_input_directions": list(attrs.get("directions", [0] * count))}
    per_entry: list[list[Value]] = []
    for b in range(batch):
        per_entry.append(_scan9(cx, [_element(cx, v, 0, b) for v in rest], nine))
    return [stack(cx, [outs[k] for outs in per_entry], 0) for k in range(len(per_entry[0]))]


def _element(cx: Importer, x: Value, axis: int, index: int) -> Value:
    """``x[..., index, ...]`` along ``axis``, the axis dropped: views consumers read in place."""
    if is_const(x):
        return np.take(x, index, axis=axis)
    return drop_axis(cx, slice_axis(cx, x, axis, index, index + 1), axis)


def stack(cx: Importer, values: list[Value], axis: int) -> Value:
    """The iterations' values stacked along a new ``axis`` (ONNX's scan outputs)."""
    rank = len(shape_of(values[0]))
    if not -(rank + 1) <= axis <= rank:
        fail(f"scan output axis {axis} is out of range for rank {rank + 1}")
    axis %= rank + 1
    if all(_known(v) for v in values):
        return np.stack(values, axis=axis)
    rows = []
    for v in cx.operands(*values):
        labels = cx.labels(v)
        rows.append(reshape_to(cx, v, labels[:axis] + [1] + labels[axis:]))
    return rows[0] if len(rows) == 1 else cx.emit(nn.ConcatenateOp(rows, axis=axis))
