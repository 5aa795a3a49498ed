"""The launch plan: a lowered entry function made into data once, run by a tight loop.

IREE's HAL and TVM's VM shape this module: nothing on the hot path interprets IR.
Each phase has its module: load in ``plan_load``, bind in ``plan_bind``, run (``Runtime``) here.

* **Load** (``LaunchPlan``): the entry function (after ``lower-extern-calls`` and
  ``plan-memory``) is read once into steps: each ``byoc.call_extern`` becomes a kernel
  step (its handle's ``prepare``: cubins loaded, kernels looked up; see
  ``partita.runtime.extern`` for step kinds) or, without a compiled kernel, an explicit
  host step; each ``nn`` op left in the function is a host step too, but an
  ``nn.reshape``, a view of its input's buffer (``buffer_of``), is no step; ``nn.constant``
  weights are uploaded to the device once, into one parameter buffer; the static arena
  ``plan-memory`` sized (``byoc.arena_size``) is allocated once.
* **Bind** (``BoundPlan``, once per input-shape signature, cached): index values
  (``tensor.dim``, shape functions, ``arith``) and host-op result shapes are evaluated,
  every dynamically sized tensor (inputs, dynamic ``byoc.alloc_tensor``s, host-op
  results, split-k workspaces) is placed in a per-signature arena by the same
  liveness-based planner as ``plan-memory`` (``assign_offsets``), and every launch is
  packed with its final pointers. Static shapes can then be captured as a CUDA graph.
* **Run**: inputs uploaded once each (a device input only kernels read is passed to
  them in place, its pointer patched into their packed arguments; under a CUDA graph, or
  when the host or the output reads it, or a kernel writes it in place, it is copied
  device-to-device once, unless it is already in its slot), the
  bound launches enqueued on the runtime's one stream (or one graph launch), outputs
  downloaded once each, one synchronization. A host step is the only exception, and it
  is explicit: its downloads, synchronization and uploads are counted per run and listed
  by ``describe()`` and ``partita-run --report``.

The signature cache is the pool for dynamic sizes: a shape seen before reuses its arena
(no allocation), a new one allocates one arena, and the least recently used signature's
arena is freed beyond ``max_signatures``. With shape buckets (``partita.runtime.arenas``) arenas and
graphs belong to buckets of signatures instead, so a loop over growing shapes (KV-cache
decoding) allocates and instantiates once per bucket.
"""

from __future__ import annotations

import os
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ModuleOp,
    TensorType,
)

from partita.dialects import byoc
from partita.ir import PartitaError
from partita.ir.abi import argument_names
from partita.runtime.arenas import Arena, ArenaPool, ShapeBuckets
from partita.runtime.cuda import CudaDevice, CudaError, arch_runs_on, cuda_status
from partita.runtime.device import SimulatedDevice
from partita.runtime.interop import DeviceArray, DeviceTensor, as_input
from partita.runtime.plan_bind import BoundPlan, HostStep, Tensor, _dtype
from partita.runtime.plan_load import LaunchPlan
from partita.runtime.profile import Profile, StepClock

# The plan's parts are defined beside it (plan_load, plan_bind); they are named here too,
# as the launch plan's public face.
__all__ = ["BoundPlan", "HostStep", "LaunchPlan", "Runtime", "Tensor"]

INPUT_ALIGNMENT = 16
"""A user's device pointer is read in place only at this alignment: the widest access any
kernel is compiled for (128-bit ``cp.async`` / vector loads, TMA). A misaligned one would
fault (a sticky ``MISALIGNED_ADDRESS`` that loses the context), so it is copied into its
slot of the arena (256-byte aligned) instead."""


class Runtime:
    """Runs a lowered module's entry function through its launch plan on ``device``.

    ``device``: ``"auto"`` (a CUDA device when one is usable and every cubin runs on it,
    else the simulated device, with the reason in ``describe()``), ``"cuda"``,
    ``"simulated"``, or a device object. ``graphs``: capture static launch sequences as
    CUDA graphs, one per shape signature: the first run of a signature is eager (the
    warm-up libraries need: TensorRT's first enqueue after its shapes, the cuDNN engines'
    first execute), the graph is captured after it; a signature whose capture fails keeps
    running eagerly, the reason in ``describe()``. ``debug``: run eagerly and synchronize
    after every step so a fault names its step (also ``PARTITA_CUDA_DEBUG=1``).
    ``buckets`` (``"pow2"``, a ``ShapeBuckets`` or a function of a dim; see
    ``partita.runtime.arenas``): signatures whose dynamic dims round up to the same bucket
    share one arena and one graph, updated in place for each signature's dims and
    device-input pointers (only the kernel launches that changed when nothing else did:
    ``cuGraphExecKernelNodeSetParams``; else a capture applied with
    ``cuGraphExecUpdate``). In either mode a run never writes the arena a device input lies
    in (an output fed back): the signature is bound a second time, its twin, and the two
    alternate; an input already at its own slot (a result written in place there:
    ``byoc.tied_operand``) stays where it is, copied nowhere.

    The CUDA context is made current in whatever thread loads, runs, reads a device output
    or closes (it is per thread in the driver). ``close()`` releases everything the plan
    made, and the device's primary context when the runtime chose the device itself.
    """

    def __init__(
        self,
        module: ModuleOp,
        device: Any = "auto",
        *,
        entry: str = "main",
        graphs: bool = True,
        debug: bool | None = None,
        max_signatures: int = 8,
        embedded: Mapping[str, bytes] | None = None,
        libraries: Mapping[str, Any] | None = None,
        buckets: str | Callable[[int], int] | ShapeBuckets | None = None,
    ):
        self.buckets = ShapeBuckets.of(buckets)  # refused before anything is made
        self.device, self.device_note = _choose_device(module, device)
        self._owns_device = device in ("auto", "cuda")
        self.device.make_current()
        self.graphs = graphs
        self.debug = bool(int(os.environ.get("PARTITA_CUDA_DEBUG", "0") or 0)) if debug is None else debug
        self.max_signatures = max_signatures
        self.stats: Counter[str] = Counter()
        try:
            self.plan = LaunchPlan(module, self.device, entry=entry, embedded=embedded, libraries=libraries)
        except BaseException:
            if self._owns_device and hasattr(self.device, "close"):
                self.device.close()
            raise
        self.pool: ArenaPool | None = None
        if self.buckets is not None and len(self.plan.stages) == 1:  # stages bind per read-back size
            self.pool = ArenaPool(self.device, self.buckets, 2 * max_signatures, self.stats)
            self.pool.on_evict = self._forget
        self.stream = self.device.create_stream()
        self._bound: OrderedDict[tuple, BoundPlan] = OrderedDict()
        self._stages: list[BoundPlan] = []  # the stages the last run went through
        # One stream, one arena per signature, packed launches patched per run and an
        # interpreter with one environment: a run owns them all until its synchronization,
        # so concurrent callers (a server's thread pool) take turns.
        self._lock = threading.Lock()

    # -- the hot path ------------------------------------------------------------------
    def run(self, *args: Any, outputs: str = "host", **named: Any) -> tuple:
        """Runs the entry function. Arguments are NumPy arrays, CUDA arrays
        (``__cuda_array_interface__``) or DLPack tensors, positional or by name.
        ``outputs="device"`` returns ``DeviceArray``s (valid until the next run)."""
        if outputs not in ("host", "device"):
            raise PartitaError(f"outputs must be 'host' or 'device', not {outputs!r}")
        self.device.make_current()  # before binding: allocation and library plans need it too
        values = self._arguments(args, named)
        with self._lock:
            return self._run(values, outputs)

    __call__ = run

    def _run(self, values: list[Any], outputs: str, clock: StepClock | None = None) -> tuple:
        device, stream = self.device, self.stream
        sizing = {i: self._host_values(values[i]) for i in self.plan.sizing_args}
        bound = self._bound_for(values, sizing)
        staged = []  # host arrays the stream reads from, alive until the synchronization
        for index, (value, slot) in enumerate(zip(values, bound.inputs)):
            if slot.nbytes == 0:
                continue
            if isinstance(value, DeviceTensor):
                if value.stream is not None and hasattr(device, "wait_for"):
                    device.wait_for(value.stream, stream)  # written on the producer's stream
                if value.ptr == slot.ptr and bound.bound_inputs[index] == slot.ptr:
                    continue  # already in its slot: a result written in place there, fed back
                # Read in place unless the run writes where it lies: a previous run's output
                # in the static arena (fed back) is copied into its slot first.
                if value.ptr % INPUT_ALIGNMENT == 0 and not self.plan.holds(value.ptr) and \
                        bound.point_input(index, value.ptr):
                    continue
                if bound.bound_inputs[index] != slot.ptr:
                    bound.point_input(index, slot.ptr)
                device.copy(slot.ptr, value.ptr, slot.nbytes, stream)
            else:
                if bound.bound_inputs[index] != slot.ptr:
                    bound.point_input(index, slot.ptr)
                array = np.ascontiguousarray(value)
                staged.append(array)
                device.upload(slot.ptr, array, stream)
        synchronized = False
        stages = [bound]  # a plan with data-dependent sizes: the stages this run binds
        graph = bound.graph if self.pool is None else self._shared_graph(bound)
        try:
            first = 0
            while True:
                stage = stages[-1]
                if clock is not None:  # profiled: eager, events around each step
                    clock(stage.steps, stream, first)
                    first += len(stage.steps)
                elif self.debug:
                    self._run_debug(stage)
                elif stage is bound and graph is not None:
                    graph.launch(stream)
                else:
                    for step in stage.steps:
                        step(stream)
                if stage.boundary is None:
                    break
                stages.append(stage.next_stage(stream, self.max_signatures))
            self._stages = stages
            final = stages[-1]
            if outputs == "device":
                results: tuple = tuple(DeviceArray(device, t.ptr, t.shape, t.dtype) for t in final.outputs)
            else:
                results = tuple(np.empty(t.shape, t.dtype) for t in final.outputs)
                for array, t in zip(results, final.outputs):
                    if array.nbytes:
                        device.download(array, t.ptr, stream)
            try:
                device.synchronize(stream)
            except Exception as err:
                raise PartitaError(f"{err}: a kernel of this run failed; run with debug=True (or "
                                   "PARTITA_CUDA_DEBUG=1) to name it") from None
            synchronized = True
        finally:  # the host steps' NumPy buffers go back to the memory budget
            for stage in stages:
                stage.release_host_buffers(synchronized)
        del staged
        self.stats["runs"] += 1
        bound.runs += 1
        if self.graphs and not self.debug and bound.capturable and bound.eager_reason is None:
            if self.pool is not None:
                if bound.shared is not None and bound.shared.graph is None:
                    self._capture_shared(bound)  # the arena's first signature warmed it up
            elif bound.graph is None:
                self._capture(bound)  # after the first (warm-up) run of the signature
        return results

    def profile(self, *args: Any, repeat: int = 10, warmup: int = 1, burst: int = 1, **named: Any) -> Profile:
        """Runs the plan ``warmup`` times, then ``repeat`` times with device events around
        each step (see ``partita.runtime.profile``): per-step and per-partition times, the
        median over the timed runs; ``None`` for every step on a device without a clock.
        ``burst`` above 1 enqueues each timed step that many times in a row (``StepClock``):
        for plans whose steps may run again on their own outputs, as a candidate's do."""
        if repeat < 1 or warmup < 0:
            raise PartitaError(f"profile needs repeat >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
        self.device.make_current()
        values = self._arguments(args, named)
        with self._lock:
            # At least one untimed run when the plan has stages: it binds the stages these
            # inputs reach, whose steps the clock then times.
            for _ in range(max(warmup, len(self.plan.stages) > 1)):
                self._run(values, "host")
            if len(self.plan.stages) > 1:
                stages = self._stages
            else:
                sizing = {i: self._host_values(values[i]) for i in self.plan.sizing_args}
                stages = [self._bound_for(values, sizing)]
            steps = [step for stage in stages for step in stage.steps]
            step_ops = [op for stage in stages for op in stage.step_ops]
            clock = StepClock(self.device, len(steps), burst)
            try:
                for _ in range(repeat):
                    self._run(values, "host", clock)
                    clock.collect()
            finally:
                clock.close()
        return clock.profile(self.device.name, repeat, list(self.plan.block.ops), self.plan.calls, steps, step_ops)

    def _run_debug(self, bound: BoundPlan) -> None:
        for step, op in zip(bound.steps, bound.step_ops):
            try:
                step(self.stream)
                self.device.synchronize(self.stream)
            except Exception as err:
                # The partition it implements, then the kernel (an entry that partitions of
                # one configuration share).
                callee = getattr(op, "callee", None)
                kernel = getattr(getattr(step, "function", None), "name", None)
                name = " ".join(filter(None, (f"@{callee.string_value()}" if callee is not None else None,
                                              f"(kernel {kernel})" if kernel else None))) or \
                    getattr(step, "label", "a step")
                raise PartitaError(f"{name} failed: {err}") from None

    def _capture(self, bound: BoundPlan) -> bool:
        """Captures ``bound``'s steps as a graph, or leaves it eager with the reason (a
        library that cannot be captured, a driver that refuses); whether it was captured.
        Without shape buckets the graph reads the inputs' slots; with them, the arena's
        graph reads device inputs where they are (a later run at other pointers updates it)."""
        if self.pool is None:
            bound.read_inputs_from_slots()
        try:
            bound.capture(self.stream)
        except Exception as err:  # noqa: BLE001 - any refusal: the eager steps still run
            bound.graph = None
            bound.eager_reason = str(err) or type(err).__name__
            self.stats["capture_fallbacks"] += 1
            return False
        self.stats["captures"] += 1
        return True

    def _shared_graph(self, bound: BoundPlan) -> Any:
        """With shape buckets: the graph of ``bound``'s arena, updated in place to its
        launches and input pointers when it last ran another signature or read other
        inputs; None to run eagerly (no graph yet, a capture that failed, or a library
        call's first run at these shapes: TensorRT and cuDNN warm up on one)."""
        arena = bound.shared
        if (arena is None or arena.graph is None or not self.graphs or self.debug or not bound.capturable
                or bound.eager_reason is not None):
            return None
        key = (bound, tuple(bound.bound_inputs))
        if arena.graph_key == key:
            return arena.graph
        if bound.runs == 0 and bound.warms_up:
            return None
        try:
            how = self.device.update_graph(arena.graph, self.stream, bound.steps)
        except Exception as err:  # noqa: BLE001 - any refusal: the eager steps still run
            bound.eager_reason = str(err) or type(err).__name__
            self.stats["capture_fallbacks"] += 1
            return None
        self.stats["captures" if how == "instantiated" else "graph_updates"] += 1
        self.stats["graph_node_updates"] += how == "nodes"
        arena.graph_key = key
        return arena.graph

    def _capture_shared(self, bound: BoundPlan) -> None:
        """The graph of ``bound``'s arena, captured from its launches as they are."""
        arena = bound.shared
        assert arena is not None
        if self._capture(bound):
            arena.graph, bound.graph = bound.graph, None  # the arena's, shared by its signatures
            arena.graph_key = (bound, tuple(bound.bound_inputs))

    # -- binding -----------------------------------------------------------------------
    def _bound_for(self, values: list[Any], sizing: Mapping[int, np.ndarray]) -> BoundPlan:
        """The plan bound to these inputs' signature (bound now if new), in an arena that
        holds none of the device inputs but at their own slots: a run never reads a buffer
        it may write (an output fed back: the previous decode step's cache, a recurrent
        state), so a signature fed its own outputs alternates between two bound plans."""
        signature = self._signature(values, sizing)
        device = [(i, int(v.ptr)) for i, v in enumerate(values) if isinstance(v, DeviceTensor)]
        for twin in (0, 1):
            bound = self._bound.get((signature, twin))
            # An input already in its own slot is safe where it is (a result written in place).
            if bound is not None and not any(bound.holds(p) and bound.inputs[i].ptr != p for i, p in device):
                self._bound.move_to_end((signature, twin))
                return bound
        twin = 1 if (signature, 0) in self._bound and (signature, 1) not in self._bound else 0
        old = self._bound.pop((signature, twin), None)
        if old is not None:
            old.close()
        return self._bind((signature, twin), values, sizing, [p for _, p in device])

    def _forget(self, arena: Arena) -> None:
        """The pool frees ``arena``: the plans bound into it go first."""
        for key in [k for k, b in self._bound.items() if b.shared is arena]:
            self._bound.pop(key).close()

    def _arguments(self, args: Sequence[Any], named: dict[str, Any]) -> list[Any]:
        try:
            return _bind(self.plan.function, list(args), dict(named), _handle(self.stream))
        except ValueError as err:
            raise PartitaError(str(err)) from None

    @staticmethod
    def _signature(values: Sequence[Any], sizing: Mapping[int, np.ndarray]) -> tuple:
        return tuple(v.shape for v in values) + tuple((i, a.tobytes()) for i, a in sizing.items())

    def _host_values(self, value: Any) -> np.ndarray:
        """An input's values on the host (a device input is read back: a shape input is small)."""
        if not isinstance(value, DeviceTensor):
            return np.array(value)
        array = np.empty(value.shape, value.dtype)
        if array.nbytes:
            self.device.download(array, value.ptr, self.stream)
            self.device.synchronize(self.stream)
        self.stats["sizing_reads"] += 1
        return array

    def _bind(self, signature: tuple, values: list[Any], sizing: Mapping[int, np.ndarray] | None = None,
              avoid: Sequence[int] = ()) -> BoundPlan:
        # The signature bound last is the basis: a decode step changes the past length only.
        basis = next(reversed(self._bound.values()), None)
        bound = self.plan.bind([(v.shape, v.dtype) for v in values], self.stats, sizing, pool=self.pool, avoid=avoid,
                               basis=basis)
        self.stats["binds"] += 1
        self._bound[signature] = bound
        while len(self._bound) > self.max_signatures:
            _, old = self._bound.popitem(last=False)
            old.close()
        return bound

    # -- what a user sees ------------------------------------------------------------
    @property
    def handles(self) -> dict:
        return self.plan.handles

    def describe(self) -> str:
        """Where the plan runs, and every host step with its per-run copies."""
        handles = self.plan.handles
        archs = sorted({h.arch for h in handles.values() if h.arch is not None})
        libraries = sorted({h.library for h in handles.values() if h.arch is None})
        kernels = len(handles) - sum(h.arch is None for h in handles.values())
        parts = [f"{kernels} kernel(s) compiled for {', '.join(archs)}"] if kernels else []
        if libraries:
            parts.append(f"{len(handles) - kernels} library call(s) ({', '.join(libraries)})")
        kernels = " and ".join(parts) if parts else "no compiled kernels"
        where = f"running on {self.device.name}"
        host = self.plan.host_ops
        if not self.graphs:
            mode = "eager launches"
        elif host:
            mode = "eager launches: host steps keep CUDA graphs off"
        elif self.pool is not None:
            mode = f"a CUDA graph per shape bucket ({self.buckets.name}), updated in place per signature"
        else:
            mode = "a CUDA graph per shape signature"
        lines = [f"{kernels}, {where} ({mode}, one stream)"]
        if self.device_note:
            lines.append(self.device_note)
        boundaries = [stage[0] for stage in self.plan.stages[1:]]
        if boundaries:
            lines.append(f"{len(self.plan.stages)} stages: sizes known only at run time are read back before "
                         + ", ".join(op.name for op in boundaries)
                         + " (each distinct size binds the rest once)")
        if self.pool is not None and self.pool.arenas:
            lines.append(f"{len(self.pool.arenas)} arena(s) of shape buckets ({self.pool.reserved_bytes()} B) shared by "
                         f"{len(self._bound)} bound signature(s); {self.stats['graph_updates']} graph update(s) so far")
        arguments = len(self.plan.block.args)
        for (signature, _), bound in self._bound.items():  # keyed (signature, twin)
            if bound.eager_reason is not None:  # the signature's shapes (its sizing values follow them)
                shapes = ", ".join("x".join(map(str, s)) or "scalar" for s in signature[:arguments])
                lines.append(f"inputs ({shapes}) run eagerly: their capture failed: {bound.eager_reason}")
        if host:
            lines.append(f"{len(host)} host step(s), each: synchronize, download its inputs, run on NumPy, upload its results:")
            lines.extend(f"  {label}" for label in host)
        if self.stats["host_steps"]:
            s = self.stats
            lines.append(
                f"host copies so far: {s['host_downloads']} downloads ({s['host_download_bytes']} B), "
                f"{s['host_uploads']} uploads ({s['host_upload_bytes']} B) over {s['runs']} run(s)"
            )
        return "\n".join(lines)

    def close(self) -> None:
        with self._lock:  # never under a run in flight
            if self.stream is None:
                return
            self.device.make_current()  # the closing thread may not be the one that ran
            for bound in self._bound.values():
                bound.close()
            self._bound.clear()
            if self.pool is not None:
                self.pool.close()
            self.plan.close()
            self.device.destroy_stream(self.stream)
            self.stream = None
            if self._owns_device and hasattr(self.device, "close"):
                self.device.close()  # the primary context the runtime retained


def _handle(stream: Any) -> int | None:
    """A stream's handle as an integer (what DLPack producers take), None when it has none."""
    try:
        return int(stream)
    except (TypeError, ValueError):
        return None


def _bind(function: func.FuncOp, args: list[Any], named: dict[str, Any], stream: int | None = None) -> list[Any]:
    """Arguments in order, each a host array or a device tensor of the declared shape
    and dtype (a DLPack producer ordered before ``stream``)."""
    inputs = function.function_type.inputs.data
    names = argument_names(function)  # the model's own names (onnx.name), else SSA hints
    hints = [a.name_hint for a in function.body.block.args]
    if len(args) == 1 and isinstance(args[0], dict):
        named, args = {**args[0], **named}, []
    for i in range(len(args), len(inputs)):
        key = names[i] if names[i] in named else hints[i]
        if key not in named:
            raise ValueError(f"@{function.sym_name.data}: missing argument #{i}" + (f" ({names[i]})" if names[i] else ""))
        args.append(named.pop(key))
    if named:
        raise ValueError(f"@{function.sym_name.data}: unknown arguments {sorted(named)}")
    if len(args) != len(inputs):
        raise ValueError(f"@{function.sym_name.data} takes {len(inputs)} arguments, got {len(args)}")
    out = []
    for i, (value, typ) in enumerate(zip(args, inputs)):
        label = f"#{i} (%{hints[i]})" if hints[i] else (f"#{i} ({names[i]})" if names[i] else f"#{i}")
        try:
            value = as_input(value, stream)
        except TypeError as err:
            raise ValueError(f"@{function.sym_name.data} argument {label}: {err}") from None
        assert isinstance(typ, TensorType)
        shape = typ.get_shape()
        if len(value.shape) != len(shape) or any(d != DYNAMIC_INDEX and d != s for d, s in zip(shape, value.shape)):
            raise ValueError(f"@{function.sym_name.data} argument {label}: shape {tuple(value.shape)} does not match {typ}")
        if np.dtype(value.dtype) != _dtype(typ):
            raise ValueError(f"@{function.sym_name.data} argument {label}: dtype {value.dtype} does not match {typ} "
                             f"(expected {_dtype(typ)})")
        out.append(value)
    return out


def _choose_device(module: ModuleOp, device: Any) -> tuple[Any, str | None]:
    if device == "simulated":
        return SimulatedDevice(), None
    if device not in ("auto", "cuda"):
        return device, None
    why = cuda_status()
    if why is None:
        try:
            cuda = CudaDevice()
        except CudaError as err:
            why = str(err)
        else:
            archs = sorted({op.attributes["arch"].data for op in module.ops
                            if isinstance(op, byoc.BinaryOp) and "arch" in op.attributes})
            wrong = [a for a in archs if not arch_runs_on(a, cuda.arch)]
            if not wrong:
                return cuda, None
            why = f"kernels compiled for {', '.join(wrong)} do not run on {cuda.name} ({cuda.arch}); compile for {cuda.arch}"
            cuda.close()
    if device == "cuda":
        raise PartitaError(f"no CUDA device to run on: {why}")
    return SimulatedDevice(), f"the plan runs on the simulated device: {why}"
