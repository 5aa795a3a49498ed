"""Binding a launch plan to one input-shape signature (``BoundPlan``): index values and
host-op result shapes evaluated, every dynamically sized tensor placed in one arena by
liveness, every launch packed with its final pointers (and patched in place per run for a
device input only kernels read); host steps for what no kernel computes. Also the values
the steps work on (``Tensor``: an operand at its planned address).

A signature is bound from the one bound before it (its ``basis``), as a decode loop's steps
differ in one length: only the ops reading a value that changed are evaluated again, and,
with shape buckets, a call whose tensors did not change copies the launches of the plan
bound last into the same arena (same buffers, same pointers, already checked and packed).

A plan whose sizes depend on values it computes (a ``DATA_DEPENDENT`` op such as
``nn.nonzero``, or an op ``SIZED_BY`` an operand computed in the plan) is cut into stages
there (``plan_stages``), as TVM's VM and IREE do with a device-to-host read of a size: a
stage is bound once its inputs' sizes are known, and runs; the host then reads back what
sizes the next stage (the data-dependent op's results, computed on the host, or the sizing
values) and binds that stage to them, once per distinct size (``BoundPlan.next_stage``)."""

from __future__ import annotations

import heapq
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from xdsl.dialects import func, tensor
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    TensorType,
)
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from partita.analysis.bound_shapes import bound_result_shape
from partita.analysis.liveness import (
    assign_offsets,
)
from partita.dialects import byoc, nn
from partita.ir import PartitaError, op_error
from partita.ir.budget import active_budget
from partita.runtime.arenas import Arena, ArenaPool, lies_in, reserved_size

if TYPE_CHECKING:  # pragma: no cover
    from partita.runtime.plan_load import LaunchPlan

__all__ = ["ALIGNMENT", "RECORD_ERRORS", "BoundPlan", "HostStep", "StageSchedule", "Tensor", "is_data_dependent",
           "plan_stages"]

ALIGNMENT = 256
RECORD_ERRORS = (KeyError, ValueError, TypeError, IndexError, ZeroDivisionError, AttributeError, OverflowError)
"""What decoding a kernel record that a file (untrusted) carries can raise: a located
error, never an internal one."""


SELECTED, LAUNCH, EMULATED, HOST = "selected", "launch", "emulated", "host"
"""What a bind builds of an op: the upload of a data-dependent op's results (computed at the
stage boundary), a call's launches, a call the host emulates, an nn op run on the host."""


@dataclass(frozen=True)
class StageSchedule:
    """A stage's ops that become steps, each with what a bind builds of it, and the
    arguments of the plan read otherwise than through a kernel argument (never patched to
    be read in place)."""

    steps: tuple[tuple[Operation, str], ...]
    readers: frozenset[int]
    consumers: Mapping[SSAValue, tuple[int, ...]]
    """The stage's ops (their indices in it, ascending) reading each value, their regions'
    reads included: where a changed shape propagates when a signature binds from another."""


class Tensor(NamedTuple):
    """An operand at its planned device address (a tuple: binding makes one per operand of
    every call it binds, and keys its launch memo with them)."""

    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.dtype.itemsize


def _dtype(typ: TensorType) -> np.dtype:
    return np.dtype(nn.numpy_dtype(typ.element_type))


@dataclass
class HostStep:
    """An op the host runs inside the plan: its tensor operands are downloaded (after a
    synchronization), computed on with NumPy, and the results uploaded. Counted.

    Its host buffers (the operands' copies and the planned results) are charged to the
    active memory budget, located at ``op``: the operands' copies until NumPy has read them,
    the results until ``release`` at the end of the run (the stream reads them until then)."""

    label: str
    compute: Callable[[list[np.ndarray]], Sequence[np.ndarray]]
    inputs: list[Tensor]
    outputs: list[Tensor]
    stats: Counter[str]
    device: Any = None
    keep: list = field(default_factory=list)
    op: Operation | None = None
    charged: list = field(default_factory=list)
    """(budget, bytes) this run's results hold until ``release``."""

    def __call__(self, stream) -> None:
        budget = active_budget()
        in_bytes = sum(t.nbytes for t in self.inputs)
        out_bytes = sum(t.nbytes for t in self.outputs)
        if budget is not None:
            budget.charge(in_bytes + out_bytes, "its host step (NumPy copies of its operands and results)", self.op)
            self.charged.append((budget, out_bytes))
        try:
            self._compute(stream)
        finally:
            if budget is not None:
                budget.release(in_bytes)  # the operands' copies are garbage once computed on

    def release(self, synchronized: bool = True) -> None:
        """At the end of the run: the charges given back; the results dropped once the
        stream is synchronized (before, an upload may still read them)."""
        if synchronized:
            self.keep = []
        while self.charged:
            budget, nbytes = self.charged.pop()
            budget.release(nbytes)

    def _compute(self, stream) -> None:
        device = self.device
        results = self.compute(on_host(device, self.inputs, stream))
        self.keep = []
        for t, value in zip(self.outputs, results, strict=True):
            value = np.asarray(value, dtype=t.dtype, order="C")  # ascontiguousarray would make a 0-d result 1-d
            if value.shape != t.shape:
                raise PartitaError(f"host step {self.label}: result of shape {value.shape}, but {t.shape} was planned")
            if value.nbytes:
                device.upload(t.ptr, value, stream)
            self.keep.append(value)  # alive until the stream has read it
        stats = self.stats
        stats["host_steps"] += 1
        stats["host_downloads"] += len(self.inputs)
        stats["host_download_bytes"] += sum(t.nbytes for t in self.inputs)
        stats["host_uploads"] += len(self.outputs)
        stats["host_upload_bytes"] += sum(t.nbytes for t in self.outputs)


def on_host(device: Any, tensors: Sequence[Tensor], stream: Any) -> list[np.ndarray]:
    """``tensors`` on the host once the stream has computed them. A device whose memory is
    the host's (the simulated one) lends them as read-only views: a weight read by a host
    step is not copied. Elsewhere they are downloaded, after the kernels before them on
    the stream, then the stream is synchronized once."""
    host = []
    for t in tensors:
        view = device.host_view(t.ptr, t.shape, t.dtype)
        if view is not None:
            host.append(view)
            continue
        array = np.empty(t.shape, t.dtype)
        if array.nbytes:
            device.download(array, t.ptr, stream)
        host.append(array)
    device.synchronize(stream)
    return host


class BoundPlan:
    """A ``LaunchPlan`` for one input-shape signature: memory placed, launches packed.

    For a plan cut into stages, one stage of it: ``before`` is the bound stage it follows
    (whose shapes, sizing values and buffers it sees), ``boundary`` the op that starts the
    next stage (``None`` for the last), ``after`` the next stage bound per distinct size."""

    def __init__(self, plan: LaunchPlan, inputs: Sequence[tuple[tuple[int, ...], np.dtype]], stats: Counter[str],
                 sizing: Mapping[int, np.ndarray] | None = None, *, before: BoundPlan | None = None,
                 contents: Mapping[SSAValue, np.ndarray] | None = None,
                 selected: Sequence[tuple[int, ...]] | None = None,
                 pool: ArenaPool | None = None, avoid: Sequence[int] = (), basis: BoundPlan | None = None):
        self.plan, self.device, self.stats = plan, plan.device, stats
        self.signature = [(tuple(shape), np.dtype(dtype)) for shape, dtype in inputs]
        self.pool, self.avoid = pool, tuple(avoid)
        self.shared: Arena | None = None
        """With shape buckets: the pool's arena this signature's buffers are in (shared with
        every signature whose reserved sizes agree; its graph is the one this plan runs)."""
        self.runs = 0
        self.sizing = dict(sizing or {})  # argument index -> its values, where they size a result
        self.before = before
        self.stage = 0 if before is None else before.stage + 1
        self.ops: list[Operation] = plan.stages[self.stage]
        self.boundary: Operation | None = plan.stages[self.stage + 1][0] if self.stage + 1 < len(plan.stages) else None
        self.after: OrderedDict[tuple, BoundPlan] = OrderedDict()
        self.contents: dict[SSAValue, np.ndarray] = dict(before.contents) if before is not None else {
            plan.block.args[i]: array for i, array in self.sizing.items()}
        self.contents.update(contents or {})
        self.selects = before is not None and is_data_dependent(self.ops[0])
        """Whether a data-dependent op starts this stage: it ran on the host at the boundary,
        its step here uploads this run's results (``selected``)."""
        self.selected: list[np.ndarray] = []
        self.arena = None
        self.graph = None
        self.eager_reason: str | None = None
        """Why this signature runs eagerly although graphs are on (its capture failed)."""
        self.steps: list[Callable[[Any], None]] = []
        self.step_ops: list[Operation] = []
        """The op of the entry block each step comes from (a profile's partition)."""
        self.host_steps: list[HostStep] = []
        self.workspaces: dict[Operation, int] = {}
        self.reuse_from: BoundPlan | None = None
        """With shape buckets: the plan bound into this arena before this one (until built)."""
        self.bound_launches: dict[Operation, list] = {}
        """Each call's launches as bound, before any input pointer is patched in: what the
        next plan in the same arena copies for a call whose shapes did not change."""
        try:
            self._bind(selected, basis)
        except BaseException:
            self.close()
            raise

    def _bind(self, selected: Sequence[tuple[int, ...]] | None, basis: BoundPlan | None) -> None:
        """Every value's shape (and every index value) of this signature, then the buffers
        placed and the steps built. From a ``basis`` (a plan of the same stage bound to
        another signature: a decode loop's previous step), only the ops that follow an
        argument whose shape or sizing values changed are evaluated again; the rest keep
        the basis's shapes, checks and workspace sizes (they are functions of the same
        operands)."""
        plan = self.plan
        values: dict[SSAValue, Any]  # index values -> int, tensors -> shape
        workspaces: dict[Operation, int] = {}
        changed = self.changed_since(basis)
        dirty: set[SSAValue] | None = None  # with a basis: the values that differ from its
        previous: Mapping[SSAValue, Any] = {}
        if changed is not None:
            assert basis is not None
            previous = basis.shapes
            values = dict(previous)
            values.update((arg, shape) for arg, (shape, _) in zip(plan.block.args, self.signature))
            workspaces.update(basis.workspaces)
            dirty = {plan.block.args[i] for i in changed}
        elif self.before is None:
            values = {arg: shape for arg, (shape, _) in zip(plan.block.args, self.signature)}
        else:
            values = dict(self.before.shapes)
        if dirty is None:
            for op in self.ops:
                self._bind_op(op, values, workspaces, selected)
        else:
            # Only the ops a changed value reaches, in block order: a worklist of their
            # indices (a result changes only what follows it); the rest keep the basis's.
            ops, consumers = self.ops, plan.schedules[self.stage].consumers
            pending = sorted({k for v in dirty for k in consumers.get(v, ())})
            queued = set(pending)
            while pending:
                op = ops[heapq.heappop(pending)]
                self._bind_op(op, values, workspaces, selected)
                for r in op.results:
                    if values.get(r) != previous.get(r):
                        for k in consumers.get(r, ()):
                            if k not in queued:
                                queued.add(k)
                                heapq.heappush(pending, k)
        self.shapes = values
        self.workspaces = workspaces
        self._place(workspaces)
        self._build(workspaces)

    def _bind_op(self, op: Operation, values: dict[SSAValue, Any], workspaces: dict[Operation, int],
                 selected: Sequence[tuple[int, ...]] | None) -> None:
        """``op``'s result shapes (or index values) from its operands', checked; a call's
        workspace size."""
        self.stats["ops_bound"] += 1
        plan = self.plan
        facts = plan.facts
        contents = self.contents
        if self.selects and op is self.ops[0]:  # sized by what it computed
            assert selected is not None
            values.update(zip(op.results, (tuple(s) for s in selected)))
        elif (call := facts.calls.get(op)) is not None:
            for out, res in zip(call.outs, call.res):
                values[res] = values[out]
            plan.check_call_shapes(op, values)
            prepared = plan.calls[op].prepared
            workspaces.pop(op, None)
            if prepared is not None and call.outs:
                size = prepared.workspace_bytes([values[v] for v in call.inputs], [values[v] for v in call.outs])
                if size:
                    workspaces[op] = size
        elif isinstance(op, byoc.AllocTensorOp):
            sizes = iter([values[v] for v in op.operands])
            values[op.result] = tuple(int(next(sizes)) if d == DYNAMIC_INDEX else d for d in facts.shapes[op.result])
            if any(d < 0 or d > nn.MAX_DIM for d in values[op.result]):
                raise op_error(op, f"dimension out of the int64 range in {values[op.result]}")
        elif op.results and op.results[0] in facts.constants:  # an arith.constant, read at load
            values[op.results[0]] = facts.constants[op.results[0]]
        elif isinstance(op, nn.ConstantOp):
            values[op.result] = facts.shapes[op.result]
        elif isinstance(op, nn.NNOp) and getattr(op, "SIZED_BY", ()):
            values[op.result] = _sized_result_shape(op, values, contents)
        elif isinstance(op, nn.NNOp):
            values[op.result] = bound_result_shape(op, values.__getitem__)
            if isinstance(op, nn.ReshapeOp) and prod(values[op.input]) != prod(values[op.result]):
                raise op_error(op, f"cannot view {prod(values[op.input])} elements of shape "
                                   f"{values[op.input]} as {values[op.result]}")
        elif isinstance(op, tensor.DimOp):
            values[op.result] = int(values[op.source][values[op.index]])
        elif isinstance(op, func.CallOp):  # a shape function, run once per argument values
            args = tuple(values[v] for v in op.operands)
            key = (op.callee.string_value(), args)
            results = facts.shape_calls.get(key)
            if results is None:
                try:
                    results = tuple(int(v) for v in plan.interpreter.call_op(plan.symbols[key[0]], args))
                except (AssertionError, ZeroDivisionError):  # xDSL's arith divisions assert a non-zero divisor
                    raise op_error(op, f"@{key[0]} cannot size its results from the dims {list(args)} of these "
                                       "inputs: a dimension would be divided by zero (a reshape's -1 inferred "
                                       "from an empty tensor)") from None
                facts.remember(facts.shape_calls, key, results)
            values.update(zip(op.results, results))
        else:  # arith on index values
            args = tuple(values.get(v) for v in op.operands)
            for res, value in zip(op.results, plan.interpreter.run_op(op, args)):
                values[res] = value

    def changed_since(self, basis: BoundPlan | None) -> frozenset[int] | None:
        """The arguments whose shapes, dtypes or sizing values differ from ``basis``'s;
        ``None`` when there is no basis to bind from (none given, or a later stage:
        those bind from the stage before them)."""
        if basis is None or basis.plan is not self.plan or self.before is not None or basis.before is not None:
            return None
        changed = {i for i, (mine, theirs) in enumerate(zip(self.signature, basis.signature)) if mine != theirs}
        for i in self.sizing.keys() | basis.sizing.keys():
            mine, theirs = self.sizing.get(i), basis.sizing.get(i)
            if mine is None or theirs is None or mine.dtype != theirs.dtype or not np.array_equal(mine, theirs):
                changed.add(i)
        return frozenset(changed)

    def _place(self, workspaces: dict[Operation, int]) -> None:
        """Dynamic buffers of this signature into one arena, by liveness."""
        plan = self.plan
        index = plan.op_index
        shapes = self.shapes
        buffers = plan.dynamic_buffers[self.stage]  # placed by the stage that defines them
        roots: list[Any] = [value for value, _, _ in buffers]
        sizes = [prod(shapes[value]) * itemsize for value, _, itemsize in buffers]
        ranges = [span for _, span, _ in buffers]
        # A workspace is live at its call, but one its kernel counts on finding zeroed (a
        # serial split-K semaphore, zeroed once) shares its bytes with nothing: a buffer
        # placed there at another time would leave its values in it for the next run.
        zeroed = self._zeroed(workspaces)
        whole = (0, len(index))
        for op, size in workspaces.items():
            roots.append(op)
            sizes.append(size)
            ranges.append(whole if op in zeroed else (index[op], index[op]))
        if self.pool is not None:
            self._share(roots, sizes, ranges)
            return
        offsets, total = assign_offsets(sizes, ranges, ALIGNMENT)
        self.arena_bytes = total
        self.pointers: dict[Any, int] = {}
        if total:
            try:
                self.arena = self.device.alloc(total)
            except PartitaError as err:  # over the memory budget: name the largest buffer's op
                root = roots[max(range(len(sizes)), key=sizes.__getitem__)]
                owner = root if isinstance(root, Operation) else root.owner
                if isinstance(owner, Operation):
                    raise op_error(owner, f"{err.message}, for the buffers of these input shapes (the largest "
                                          "is this op's)") from None
                raise op_error(plan.function, f"{err.message}, for the buffers of these input shapes (the "
                                              "largest is an argument's)") from None
            self.stats["allocations"] += 1
            base = int(self.arena)
            self.pointers = {root: base + offset for root, offset in zip(roots, offsets)}
        else:
            self.pointers = dict.fromkeys(roots, 0)
        if self.before is not None:  # an earlier stage's buffers stay where it placed them
            self.pointers = {**self.before.pointers, **self.pointers}
        # Zeroed once; the kernels leave their workspace zeroed again.
        self._zero([(self.pointers[op], size) for op, size in workspaces.items() if op in zeroed])

    def _zeroed(self, workspaces: Mapping[Operation, int]) -> set[Operation]:
        """The calls among ``workspaces`` whose kernels count on a zeroed workspace
        (``prepared.zeroes_workspace``); the others' is scratch."""
        calls = self.plan.calls
        return {op for op in workspaces if getattr(calls[op].prepared, "zeroes_workspace", False)}

    def _zero(self, regions: Sequence[tuple[int, int]]) -> None:
        """``(address, bytes)`` regions set to zero (workspaces, once), on a stream of their own."""
        if not regions:
            return
        stream = self.device.create_stream()
        try:
            for ptr, nbytes in regions:
                self.device.memset(ptr, nbytes, stream)
            self.device.synchronize(stream)
        finally:
            self.device.destroy_stream(stream)

    def _share(self, roots: list[Any], sizes: list[int], ranges: list[tuple[int, int]]) -> None:
        """Places the buffers in the pool's arena for their reserved sizes (dynamic dims
        rounded up to their buckets): one this signature shares with others, none of whose
        memory an input of this run is in."""
        pool = self.pool
        assert pool is not None and self.before is None  # a pool only for plans of one stage (Runtime)
        buckets = pool.buckets
        reserved = []
        for root, size in zip(roots, sizes):
            if isinstance(root, Operation):  # a workspace: its bytes follow the dims
                reserved.append(buckets.reserve_bytes(size))
                continue
            typ = root.type
            assert isinstance(typ, TensorType)
            reserved.append(reserved_size(buckets, typ.get_shape(), self.shapes[root], _dtype(typ).itemsize))
        try:
            arena = pool.take(roots, reserved, ranges, self.avoid, ALIGNMENT)
        except PartitaError as err:  # over the memory budget
            raise op_error(self.plan.function, f"{err.message}, for the buffers of this shape bucket") from None
        arena.users.add(self)
        self.reuse_from, arena.latest = arena.latest, self
        if not arena.zeroed:  # a new arena: its zeroed workspaces zeroed once, at their reserved sizes
            zeroed = self._zeroed({r: n for r, n in zip(roots, reserved) if isinstance(r, Operation)})
            self._zero([(arena.pointers[r], n) for r, n in zip(roots, reserved) if r in zeroed and n])
            arena.zeroed = True
        self.shared = arena
        self.arena_bytes = arena.size
        self.pointers = dict(arena.pointers)

    def tensor(self, value: SSAValue) -> Tensor:
        plan = self.plan
        root = plan.alias.get(value, value)
        if root in plan.param_ptr:
            ptr = plan.param_ptr[root]
        elif root in plan.static_ptr:
            ptr = plan.static_ptr[root]
        else:
            ptr = self.pointers[root]
        return Tensor(ptr, tuple(self.shapes[value]), plan.facts.dtypes[value])

    def _build(self, workspaces: dict[Operation, int]) -> None:
        plan = self.plan
        schedule = plan.schedules[self.stage]
        # A call whose operands' shapes are those of the plan bound last into the same
        # arena (same buffers at the same pointers) takes that plan's launches.
        reuse, self.reuse_from = self.reuse_from, None  # no chain of every plan ever bound
        arguments = plan.arguments
        patches: list[list[tuple[Any, int]]] = [[] for _ in plan.block.args]
        readers: set[int] = set(schedule.readers)  # arguments something other than a kernel argument reads
        shapes = self.shapes
        for op, kind in schedule.steps:
            if kind == LAUNCH:
                facts = plan.facts.calls[op]
                bound = reuse.bound_launches.get(op) if reuse is not None else None
                if bound is not None and all(shapes[v] == reuse.shapes[v] for v in (*facts.inputs, *facts.outs)):
                    self.stats["launches_reused"] += len(bound)
                    self.bound_launches[op] = bound
                    launches = _own(bound, facts.reads_arguments)
                else:
                    ins = [self.tensor(v) for v in facts.inputs]
                    outs = [self.tensor(v) for v in facts.outs]
                    launches = self._launches(op, plan.calls[op].prepared, ins, outs)
                self.steps.extend(launches)
                self.step_ops.extend([op] * len(launches))
                if facts.reads_arguments:
                    self._patches(facts.inputs, launches, arguments, patches, readers)
            elif kind == EMULATED:
                facts = plan.facts.calls[op]
                emulate = plan.emulation(op)
                outs = [self.tensor(v) for v in facts.outs]

                def compute(arrays, emulate=emulate, outs=outs):
                    results = [np.empty(t.shape, t.dtype) for t in outs]
                    emulate(arrays, results)
                    return results

                self._host(op, f"@{op.callee.string_value()}", compute, [self.tensor(v) for v in facts.inputs], outs)
            elif kind == HOST:
                tensors = [v for v in op.operands if isinstance(v.type, TensorType)]
                self._host(op, op.name, lambda arrays, op=op: plan.interpreter.run_op(op, tuple(arrays)),
                           [self.tensor(v) for v in tensors], [self.tensor(r) for r in op.results])
            else:  # SELECTED: computed at the boundary, uploaded here
                self._host(op, op.name, lambda arrays: self.selected, [], [self.tensor(r) for r in op.results])
        self.inputs = [self.tensor(arg) for arg in plan.block.args]
        self.outputs = [self.tensor(v) for v in plan.outputs] if self.boundary is None else []
        # A device input only kernels read is passed to them in place (its pointer patched
        # into their packed arguments); any other is copied device-to-device into its slot.
        self.patches = [uses if i not in readers else None for i, uses in enumerate(patches)]
        self.bound_inputs = [t.ptr for t in self.inputs]

    @staticmethod
    def _patches(inputs: Sequence[SSAValue], launches: list, arguments: dict[SSAValue, int],
                 patches: list[list[tuple[Any, int]]], readers: set[int]) -> None:
        """Where each argument among a call's ``inputs`` lies in its launches' packed
        arguments (patched to read a device input in place), or that it has another reader."""
        for j, value in enumerate(inputs):
            if value in arguments:
                uses = patches[arguments[value]]
                for launch in launches:
                    operands = getattr(launch, "operands", ())
                    if j < len(operands) and operands[j].arg is not None and hasattr(launch, "set_pointer"):
                        uses.append((launch, operands[j].arg))
                    else:
                        readers.add(arguments[value])

    def _launches(self, op: Operation, prepared: Any, ins: list[Tensor], outs: list[Tensor]) -> list:
        """The call's launches at these tensors. A call bound before at the same pointers,
        shapes and types (across signatures: a decode step's kernels that do not read the
        growing cache, most of them) takes those launches, already checked and packed (its
        own copies when it reads an argument: each bound plan patches only its own)."""
        plan = self.plan
        facts = plan.facts
        patched = facts.calls[op].reads_arguments
        workspace = self.pointers.get(op)
        key = (op, tuple(ins), tuple(outs), workspace)
        bound = facts.launches.get(key)
        if bound is not None:
            self.stats["launches_reused"] += len(bound)
            self.bound_launches[op] = bound
            return _own(bound, patched)
        # Another call of the same function at the same shapes (the next layer's): its
        # launches with this call's pointers patched in, instead of a bind.
        shapes = None if workspace is not None else (
            op.callee.string_value(), tuple((t.shape, t.dtype) for t in ins), tuple((t.shape, t.dtype) for t in outs))
        template = facts.templates.get(shapes) if shapes is not None else None
        if template is not None:
            launches, slots = template
            tensors = [*ins, *outs]
            launches = [launch.clone() for launch in launches]
            for launch, own in zip(launches, slots, strict=True):
                for arg, k in own:
                    launch.set_pointer(arg, tensors[k].ptr)
            self.stats["launches_patched"] += len(launches)
        else:
            try:
                launches = prepared.bind(plan.checked_device, ins, outs, workspace)
            except RECORD_ERRORS as err:
                raise op_error(op, f"the kernel record of @{op.callee.string_value()} does not fit this call "
                                   f"({type(err).__name__}: {err})") from None
        if all(hasattr(launch, "clone") for launch in launches):  # library calls bind their own state
            bound = _own(launches, patched)  # as bound: what later plans take
            facts.remember(facts.launches, key, bound)
            self.bound_launches[op] = bound
            if shapes is not None and template is None and (slots := _pointer_slots(bound, ins, outs)) is not None:
                facts.remember(facts.templates, shapes, (bound, slots))
        return launches

    def _host(self, op: Operation, label: str, compute, ins: list[Tensor], outs: list[Tensor]) -> None:
        step = HostStep(label, compute, ins, outs, self.stats, device=self.device, op=op)
        self.steps.append(step)
        self.step_ops.append(op)
        self.host_steps.append(step)

    @property
    def warms_up(self) -> bool:
        """Whether a step is a library call that wants one eager run at new shapes before
        a graph records it (``warm_up_first``: TensorRT's enqueue, cuDNN's execute)."""
        return any(getattr(step, "warm_up_first", False) for step in self.steps)

    @property
    def capturable(self) -> bool:
        """A graph can replay this signature: no step needs the host in between."""
        return not self.host_steps and len(self.plan.stages) == 1

    def next_stage(self, stream: Any, keep: int) -> BoundPlan:
        """After this stage's steps were issued on ``stream``: the next stage, bound to
        what the host reads back at the boundary: the data-dependent op's results (it runs
        here, on the host, after a synchronization) or the values of its sizing operands.
        Each distinct size is bound once; the ``keep`` most recent stay bound."""
        op = self.boundary
        assert op is not None
        plan = self.plan
        read = list(op.operands) if is_data_dependent(op) else [
            v for v in sizing_operands(op) if v not in self.contents and not isinstance(v.owner, nn.ConstantOp)]
        tensors = [self.tensor(v) for v in read]
        arrays = on_host(self.device, tensors, stream)
        self.stats["sizing_reads"] += 1
        self.stats["host_downloads"] += len(tensors)
        self.stats["host_download_bytes"] += sum(t.nbytes for t in tensors)
        contents: dict[SSAValue, np.ndarray] = {}
        if is_data_dependent(op):
            results = plan.interpreter.run_op(op, tuple(arrays))
            selected = [np.asarray(r, dtype=_dtype(res.type), order="C") for r, res in zip(results, op.results, strict=True)]
            key: tuple = tuple(a.shape for a in selected)
        else:
            selected = None
            contents = {v: np.array(a) for v, a in zip(read, arrays)}  # kept: not a view of the arena
            key = tuple((a.shape, a.tobytes()) for a in contents.values())
        following = self.after.get(key)
        if following is None:
            following = BoundPlan(plan, (), self.stats, before=self, contents=contents,
                                  selected=None if selected is None else [a.shape for a in selected])
            self.stats["binds"] += 1
            self.after[key] = following
            while len(self.after) > keep:
                _, old = self.after.popitem(last=False)
                old.close()
        else:
            self.after.move_to_end(key)
        following.selected = selected
        return following

    def holds(self, ptr: int) -> bool:
        """Whether ``ptr`` lies in the memory a run of this plan writes besides the static
        arena: its arena (the pool's shared one, with shape buckets)."""
        return self.shared.holds(ptr) if self.shared is not None else lies_in(ptr, self.arena, self.arena_bytes)

    def point_input(self, index: int, ptr: int) -> bool:
        """Makes the kernels read input ``index`` at ``ptr``; False when they cannot
        (a captured graph, or a reader other than kernel arguments)."""
        uses = self.patches[index]
        if uses is None or self.graph is not None:
            return False
        if self.bound_inputs[index] != ptr:
            for launch, arg in uses:
                launch.set_pointer(arg, ptr)
            self.bound_inputs[index] = ptr
        return True

    def read_inputs_from_slots(self) -> None:
        """Points every kernel back at the inputs' arena slots (before a capture: a graph
        keeps the pointers it was captured with)."""
        for index, slot in enumerate(self.inputs):
            if self.patches[index] is not None and self.bound_inputs[index] != slot.ptr:
                self.point_input(index, slot.ptr)

    def capture(self, stream) -> None:
        self.graph = self.device.capture(stream, self.steps)

    def release_host_buffers(self, synchronized: bool = True) -> None:
        """Gives back what this run's host steps charged."""
        for step in self.host_steps:
            step.release(synchronized)

    def close(self) -> None:
        for following in self.after.values():
            following.close()
        self.after.clear()
        self.release_host_buffers(synchronized=False)
        if self.graph is not None:
            self.graph.destroy()
            self.graph = None
        if self.arena is not None:
            self.device.free(self.arena)
            self.arena = None
        if self.shared is not None:  # the pool owns the arena; its graph forgets these launches
            self.shared.users.discard(self)
            if self.shared.latest is self:
                self.shared.latest = None
            if self.shared.graph_key is not None and self.shared.graph_key[0] is self:
                self.shared.graph_key = None
            self.shared = None


def _own(launches: list, patched: bool) -> list:
    """``launches`` for one more bound plan: copies when a run patches pointers into them
    (a call reading an argument), else the same launches, which nothing writes once bound."""
    return [launch.clone() for launch in launches] if patched else list(launches)


_PLAIN_KINDS = frozenset({"ptr", "int", "i32", "u32", "i64", "f32", "f64"})
"""Argument kinds of a launch whose pointers are all plain ``ptr`` arguments (no struct
pieces or descriptors holding one, no ``u64`` that may be one)."""


def _pointer_slots(launches: Sequence[Any], ins: Sequence[Tensor], outs: Sequence[Tensor]
                   ) -> list[list[tuple[int, int]]] | None:
    """For launches bound at ``ins`` and ``outs``: per launch, ``(argument, tensor index)``
    of every pointer argument, when each is exactly one tensor's pointer and an operand of
    the launch, so that the same launches serve another call of the function at the same
    shapes with its own pointers patched in; None when that cannot be said (an aliased
    tensor, an argument kind that may hide a pointer, a pointer that is no operand's)."""
    where: dict[int, int] = {}
    for k, t in enumerate((*ins, *outs)):
        if t.ptr in where:
            return None  # two operands in one buffer: which is which is unknown
        where[t.ptr] = k
    slots = []
    for launch in launches:
        args = getattr(launch, "args", None)
        if not args or any(kind not in _PLAIN_KINDS for kind, _ in args):
            return None
        # a null pointer (a split-K GEMM's workspace, not taken at this call) holds no tensor
        pointers = {i for i, (kind, value) in enumerate(args) if kind == "ptr" and value}
        if pointers != {o.arg for o in getattr(launch, "operands", ()) if o.arg is not None}:
            return None
        own = [(i, where.get(int(args[i][1]), -1)) for i in sorted(pointers)]
        if any(k < 0 for _, k in own):
            return None
        slots.append(own)
    return slots


def is_data_dependent(op: Operation) -> bool:
    """Whether ``op``'s result sizes are known only once it has run (``nn.nonzero``)."""
    return bool(getattr(op, "DATA_DEPENDENT", False))


def starts_stage(op: Operation) -> bool:
    """Whether the plan must stop before ``op`` to size it: its results are data-dependent,
    or an operand computed in the plan sizes them (graph inputs and constants are known
    when the plan binds)."""
    return is_data_dependent(op) or any(
        not isinstance(v, BlockArgument) and not isinstance(v.owner, nn.ConstantOp) for v in sizing_operands(op))


def plan_stages(block: Block) -> list[list[Operation]]:
    """The ops of ``block`` before its return, cut before every op that ``starts_stage``
    (the first stage may be empty)."""
    stages: list[list[Operation]] = [[]]
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            break
        if starts_stage(op):
            stages.append([])
        stages[-1].append(op)
    return stages


def sizing_arguments(block: Block) -> list[int]:
    """The arguments of ``block`` that an op reads as a ``SIZED_BY`` operand."""
    args = {arg: i for i, arg in enumerate(block.args)}
    return sorted({args[v] for op in block.ops for v in sizing_operands(op) if v in args})


def sizing_operands(op: Operation) -> list[SSAValue]:
    """The operands whose values size ``op``'s result (its ``SIZED_BY`` operands)."""
    out: list[SSAValue] = []
    for name in getattr(op, "SIZED_BY", ()):
        v = getattr(op, name)
        out += [v] if isinstance(v, SSAValue) else list(v)
    return out


def _sized_result_shape(op: nn.NNOp, shapes: dict[SSAValue, Any], contents: dict[SSAValue, np.ndarray]) -> tuple[int, ...]:
    """The result shape of an op sized by the values of some operands: graph inputs (the
    run's signature holds them) or constants."""

    def value(v: SSAValue) -> np.ndarray:
        if v in contents:
            return contents[v]
        if isinstance(v.owner, nn.ConstantOp):
            return v.owner.to_numpy()
        raise op_error(op, "its result shape depends on the values of an operand not yet computed")

    try:
        return tuple(int(d) for d in op.result_shape_from_values(lambda v: tuple(shapes[v]), value))
    except VerifyException as err:
        raise op_error(op, str(err)) from None
