"""``partita.compile``: Partita as a lowering stage, from a model to a runnable program.

The compile is nothing but Partita's passes in order; ``Executable.pipeline`` is that
pipeline as one string, which ``partita-opt -p`` reproduces step by step.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.dialects.func import CallOp, FuncOp
from xdsl.passes import ModulePass, PassPipeline
from xdsl.printer import Printer

from partita import artifact
from partita.collage.cost import RooflineEstimator, load_devices
from partita.collage.ir_graph import function_candidate
from partita.dialects import byoc, make_context
from partita.dialects.nn import (
    AttentionOp,
    BatchNormOp,
    ReduceMeanOp,
    RotaryEmbeddingOp,
    SoftmaxOp,
)
from partita.frontends.file_kind import FileKind, file_kind
from partita.frontends.torch import export_module, is_torch_model, run_on_torch_tensors, torch_device_of
from partita.ir import PartitaError, parse_module, verify_module
from partita.ir.abi import flatten, regroup, sequence_spans
from partita.ir.budget import MemoryBudget
from partita.lowering import nvrtc
from partita.lowering.library import LIBRARY_CODEGENS
from partita.report import PartitionRow, Report
from partita.runtime.cuda import build_arch, present_device
from partita.runtime.plan import Runtime
from partita.runtime.profile import Profile
from partita.target import CompilationConfig, Target, TargetError
from partita.transforms import get_all_passes
from partita.transforms.collage.families import cutlass_sm, kernel_families
from partita.transforms.collage.partitioner import device_sm
from partita.transforms.collage_partition import CollagePartition
from partita.transforms.combine_parallel_dense import has_parallel_dense
from partita.transforms.convert_layout import is_nchw_conv
from partita.transforms.legalize_to_nn import needs_legalization
from partita.transforms.simplify_transposes import simplifies_a_transpose
from partita.transforms.sink_reshapes import sinks_a_reshape
from partita.transforms.tie_in_place_updates import has_in_place_updates
from partita.validation import check_calls, check_compile_arguments, check_entry, check_ranks, check_target_archs

PARTITIONERS = ("collage", "eager", "none")


def _names_a_file(text: str) -> bool:
    """Whether a one-line string is the path of an existing file (not IR text)."""
    try:
        return Path(text).is_file()
    except (OSError, ValueError):  # too long for a file name, or a NUL in it
        return False


def load_module(model: ModuleOp | str | Path | Any, example_inputs: Any = None, dynamic_shapes: Any = None,
                sequence_lengths: Mapping[str, Any] | None = None) -> ModuleOp:
    """A fresh module from an xDSL module (cloned: the caller's is never changed),
    textual IR, a model file (ONNX or IR, told apart by content), an ``onnx.ModelProto``
    (its sequence inputs' ``sequence_lengths``, see ``import_onnx``), or a PyTorch module /
    ``ExportedProgram`` (exported on ``example_inputs``)."""
    if sequence_lengths is not None and not _is_onnx(model):
        raise PartitaError("sequence_lengths apply to ONNX models only")
    if isinstance(model, ModuleOp):
        return model.clone()
    if isinstance(model, Path) or (isinstance(model, str) and "\n" not in model
                                   and (model.endswith((".mlir", ".onnx")) or _names_a_file(model))):
        path = Path(model)
        # The content decides (an ONNX model named without .onnx is still one).
        kind = file_kind(path) if path.is_file() else None
        if kind is FileKind.ONNX or (kind is None and path.suffix == ".onnx"):
            from partita.frontends.onnx import import_onnx

            return import_onnx(path, sequence_lengths=sequence_lengths)
        try:
            text = path.read_text()
        except OSError as err:
            raise PartitaError(f"cannot read '{path}': {err.strerror}") from None
        except UnicodeDecodeError as err:
            line = err.object[: err.start].count(b"\n") + 1
            raise PartitaError(f"the file is not UTF-8 text (byte {err.start})", f"{path}:{line}:1") from None
        return parse_module(text, make_context(), str(path))
    if isinstance(model, str):
        if "\n" not in model and os.path.isdir(model):  # a path, not IR text: say so
            raise PartitaError(f"cannot read '{model}': Is a directory")
        return parse_module(model, make_context(), "<string>")
    if is_torch_model(model):
        return export_module(model, example_inputs, dynamic_shapes)
    if example_inputs is not None or dynamic_shapes is not None:
        raise PartitaError("example_inputs and dynamic_shapes apply to PyTorch models only")
    if type(model).__name__ == "ModelProto":
        from partita.frontends.onnx import import_onnx

        return import_onnx(model, sequence_lengths=sequence_lengths)
    raise PartitaError(f"cannot compile a {type(model).__name__}: pass a module, IR text, a path or an ONNX model")


def _quote(value: str) -> str:
    return '"' + value.replace('"', '\\"') + '"'


NATIVE_FALLBACK_ARCH = "sm_90"
"""What ``cuda -arch=native`` builds for where no GPU is present (H100 SASS with the
Sm80-design CUTLASS kernels: the arch-specific sm_90a ones run on nothing but Hopper)."""

NATIVE_FALLBACK_DEVICE = "h100"
"""The roofline spec ``device="native"`` estimates with where no GPU is present, or where
``devices.json`` has no spec of the one present."""


def resolve_native(config: CompilationConfig, device: str, driver=None) -> tuple[CompilationConfig, str]:
    """``cuda -arch=native`` (nvcc's spelling) and ``device="native"`` as the GPU present,
    the way TVM's ``cuda`` target takes the local device's; the driver is asked once, and
    only when one of them is native (``driver``: the CUDA driver API; tests pass a stand-in).

    - the arch: ``sm_90a`` on an H100 / H200, so the cutlass target builds the CUTLASS 3
      TMA + wgmma kernels; the device's own elsewhere; ``NATIVE_FALLBACK_ARCH`` without a GPU;
    - the device: the ``devices.json`` spec Collage estimates with, named in the GPU's own
      name (an H200 is not an H100: its bandwidth is 1.4 times); else ``NATIVE_FALLBACK_DEVICE``.
    """
    cuda = config.find_target_for_kind("cuda")
    native_arch = cuda is not None and str(cuda.options.get("arch")) == "native"
    if not native_arch and device != "native":
        return config, device
    present = present_device(0, driver)
    if native_arch:
        arch = build_arch(present[0]) if present is not None else NATIVE_FALLBACK_ARCH
        config = CompilationConfig([t.with_options(arch=arch) if t is cuda else t for t in config],
                                   config.default_device)
    if device == "native":
        name = present[1].lower() if present is not None else ""
        device = next((spec for spec in sorted(load_devices()["devices"]) if spec in name), NATIVE_FALLBACK_DEVICE)
    return config, device


def has_nchw_conv(module: ModuleOp) -> bool:
    return any(is_nchw_conv(op) for op in module.walk())


PRECISIONS = {None: "", "fp32": "", "fp16": "f16", "bf16": "bf16"}
"""``compile``'s ``precision``: the storage type ``to-mixed-precision`` lowers f32 to."""


def _pipeline_stages(
    module: ModuleOp,
    config: CompilationConfig,
    *,
    partitioner: str,
    cost: str,
    device: str,
    max_depth: int,
    cache_dir: str | None,
    layout: str,
) -> tuple[list[str], list[str]]:
    """The passes that place and outline the model, then those that generate code."""
    if partitioner not in PARTITIONERS:
        raise PartitaError(f"unknown partitioner '{partitioner}' (choose from {', '.join(PARTITIONERS)})")
    external = [t.kind_name for t in config.external_targets]
    targets = ",".join(str(t) for t in config)
    # Only a default device other than the one the list implies needs saying.
    implied = CompilationConfig(list(config)).default_device
    fallback = f" fallback-device={config.default_device.value}" if config.default_device is not implied else ""
    steps: list[str] = []
    if needs_legalization(module):
        # linalg / tensor / arith / tosa from other MLIR pipelines become nn first.
        steps.append("legalize-to-nn")
    if any(isinstance(op, BatchNormOp) for op in module.walk()):
        # Fold inference batch norms into convolutions (or plain arithmetic) first, so
        # conv + bias + relu reaches CUTLASS whole.
        steps.append("simplify-inference")
    if "tensorrt" not in external and any(isinstance(op, ReduceMeanOp) for op in module.walk()):
        # Decomposed LayerNorm (mean, difference, variance, scale, shift; before opset
        # 17) and RMSNorm (pow, mean, sqrt, scale) as one nn.layer_norm / nn.rms_norm each:
        # one row kernel. LayerNorm first: its variance and division are an RMSNorm of the
        # difference. Before to-mixed-precision, whose casts around the means would hide
        # the chains.
        steps += ["fuse-layer-norm", "fuse-rms-norm"]
    if not {"cudnn", "tensorrt"} & set(external) and any(isinstance(op, SoftmaxOp) for op in module.walk()):
        # Scaled dot-product attention as one nn.attention (one kernel, no score matrix).
        # cuDNN's SDPA pattern and TensorRT's export read the decomposed chain: with either
        # target the chain stays, for them (and Collage) to take.
        steps.append("fuse-attention")
    if has_parallel_dense(module):
        # Q, K and V (gate and up) projections of one input as one GEMM and its slices.
        cache = f"{{cache-dir={_quote(cache_dir)}}}" if cache_dir else ""
        steps.append(f"combine-parallel-dense{cache}")
        if any(isinstance(op, RotaryEmbeddingOp) for op in module.walk()) or "fuse-attention" in steps:
            # Q's and K's rotations, now of adjacent slices of one GEMM, as one kernel.
            steps.append("merge-rotary-embeddings")
    if any(sinks_a_reshape(op) for op in module.walk()):
        # An activation or a residual add behind the reshape of a GEMM's result (GPT-2's
        # GELU and residual sums) moves before it, so the GEMM's epilogue takes it.
        steps.append("sink-reshapes")
    wants_nhwc = layout == "NHWC" or (layout == "auto" and {"cutlass", "cudnn"} & set(external))
    if wants_nhwc and has_nchw_conv(module):
        steps.append("convert-layout{conv2d=NHWC}")
    if "convert-layout{conv2d=NHWC}" in steps or any(simplifies_a_transpose(op) for op in module.walk()):
        # Transposes that move only unit dims (a decode step's head split of its one
        # token, NHWC around a 1x1 feature map) are views; transposes of transposes compose.
        steps.append("simplify-transposes")
    if partitioner == "eager" and external:
        sm = device_sm(config)
        steps.append(f"partition-eager{{backends={','.join(external)}{f' sm={sm}' if sm else ''}}}")
        steps.append("outline-compiler-functions")
    elif partitioner == "collage":
        measure_cache = f" cache-dir={_quote(cache_dir)}" if cache_dir and cost == "measure" else ""
        steps.append(
            f"collage-partition{{targets={_quote(targets)} cost={cost} device={device} max-depth={max_depth}"
            f" baseline=true{measure_cache}{fallback}}}"
        )
    steps.append(f"bind-target{{targets={_quote(targets)}{fallback}}}")
    # Delegated regions become kernels of their own; callees of targets that cannot call
    # subroutines are inlined (both no-ops for models without them).
    steps.append("split-host-device")
    steps.append("inline-private-functions")
    steps.append("verify-targets")
    cuda = config.find_target_for_kind("cuda")
    if cuda is not None and ("fuse-attention" in steps or any(isinstance(op, AttentionOp) for op in module.walk())):
        # Decode attention (one query row, a long KV) placed on the cuda target: split-KV,
        # two kernels that spread the keys over the GPU (after placement, so cuDNN,
        # TensorRT and the host keep their nn.attention whole); a static cache's mask the
        # position first, so its kernels read the keys up to it only.
        steps.append("last-key-mask{target=cuda}")
        steps.append("split-kv-attention{target=cuda}")
    if cuda is not None:
        # What no backend took and runs on the cuda target: fused injective kernels.
        steps.append("fuse-native-kernels{target=cuda}")
        if has_in_place_updates(module):
            # A KV cache's update written into the cache's own buffer: its new rows only.
            steps.append("tie-in-place-updates{target=cuda}")
    placement, steps = steps, []
    cache = f" cache-dir={_quote(cache_dir)}" if cache_dir else ""
    if "cutlass" in external:
        if cost == "measure":
            # Measuring on the GPU: each CUTLASS problem's kernel is timed among the tiles,
            # clusters and pipelines the codegen builds (TVM's tune_cutlass_kernels), the
            # winners kept in the cache directory's tuning record.
            steps.append(f"tune-cutlass-kernels{{sm={cutlass_sm(config)}{cache}}}")
        steps.append(f"cutlass-codegen{{sm={cutlass_sm(config)}{cache}}}")
    # Library partitions: records of library calls (cuBLASLt, cuDNN) and ONNX sub-models
    # (TensorRT), built into plans at load.
    steps.extend(f"{lib}-codegen" for lib in LIBRARY_CODEGENS if lib in external)
    if cuda is not None:
        steps.append(f"cuda-codegen{{arch={cuda.get('arch')}{cache}}}")
    steps.append("mark-compiler-functions-as-extern")
    steps.append("lower-extern-calls")
    steps.append("plan-memory")
    return placement, steps


def build_pipeline(
    module: ModuleOp,
    config: CompilationConfig,
    *,
    partitioner: str,
    cost: str,
    device: str,
    max_depth: int,
    cache_dir: str | None,
    layout: str,
) -> list[str]:
    """The passes ``compile`` runs, each as a ``partita-opt -p`` element."""
    placement, codegen = _pipeline_stages(module, config, partitioner=partitioner, cost=cost, device=device,
                                          max_depth=max_depth, cache_dir=cache_dir, layout=layout)
    return placement + codegen


def _is_onnx(model: Any) -> bool:
    """Whether ``model`` is an ONNX model (a proto, or a file holding one)."""
    if type(model).__name__ == "ModelProto":
        return True
    if isinstance(model, Path) or (isinstance(model, str) and "\n" not in model and _names_a_file(model)):
        path = Path(model)
        return file_kind(path) is FileKind.ONNX if path.is_file() else path.suffix == ".onnx"
    return False


@dataclass
class Executable:
    """A partitioned, lowered module and the way to run it."""

    module: ModuleOp
    pipeline: str
    config: CompilationConfig
    partitions: list[PartitionRow]
    pass_times: list[tuple[str, float]]
    collage: Any = None
    """The ``CollageReport`` when the collage partitioner ran."""
    cache_hits: int = 0
    compiles: int = 0
    entry: str = "main"
    binaries: dict[str, bytes] = field(default_factory=dict, repr=False)
    """Embedded cubins by ``byoc.binary`` symbol (a loaded compiled model); else each
    binary's ``sha256`` is looked up in the cubin cache (its digest checked either way)."""
    budget: MemoryBudget | None = field(default=None, repr=False, compare=False)
    """The host-memory budget import and compile charged, charged again by loads and
    runs (``partita.ir.budget``); a fresh default one when None."""
    _runtime: Any = field(default=None, repr=False)
    _loading: Any = field(default_factory=threading.Lock, repr=False, compare=False)

    def load(self, device: Any = "auto", *, graphs: bool = True, debug: bool | None = None,
             libraries: Mapping[str, Any] | None = None, buckets: Any = None):
        """Makes the launch plan on ``device`` (``"auto"``, ``"cuda"``, ``"simulated"`` or a
        device object): cubins loaded, library plans made, weights uploaded once. ``run``
        loads on first use. ``libraries``: bindings by library name (``cublas``, ``cudnn``,
        ``tensorrt``) instead of the installed ones. ``buckets``: ``"pow2"`` (or a
        ``partita.runtime.arenas.ShapeBuckets``) shares one arena and one CUDA graph among
        the input signatures whose dynamic dims round up alike (a decode loop's growing
        past length), the graph updated in place; None binds each signature apart."""
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None
        with self.memory_budget.active():  # the simulated device's memory is the host's
            self._runtime = Runtime(self.module, device, entry=self.entry, graphs=graphs, debug=debug,
                                    embedded=self.binaries, libraries=libraries, buckets=buckets)
        return self._runtime

    @property
    def memory_budget(self) -> MemoryBudget:
        if self.budget is None:
            self.budget = MemoryBudget.create()
        return self.budget

    @property
    def runtime(self):
        """The ``partita.runtime.plan.Runtime`` running this executable."""
        runtime = self._runtime
        if runtime is None:
            with self._loading:  # first runs from many threads load one runtime
                if self._runtime is None:
                    self.load()
                runtime = self._runtime
        return runtime

    def close(self) -> None:
        """Releases the loaded runtime: its device memory, graphs, library objects and the
        CUDA context it retained (a later ``run`` loads again)."""
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def entry_function(self) -> FuncOp:
        for op in self.module.ops:
            if isinstance(op, FuncOp) and op.sym_name.data == self.entry:
                return op
        raise PartitaError(f"no func.func @{self.entry} in the module")

    def run(self, *args: Any, outputs: str = "host", **named: Any) -> tuple[Any, ...]:
        """Runs the entry function on NumPy arrays, CUDA arrays or DLPack tensors
        (positional, a dict, or by name); ``outputs="device"`` leaves the results on the
        device (see ``partita.runtime.interop.DeviceArray``). Torch tensors in give torch
        tensors out, on the inputs' device (the GPU's stay there). An ONNX sequence input
        is a list of arrays (of the length it was compiled for), a sequence output a list."""
        function = self.entry_function()
        args, named = self._flat_inputs(function, args, named)
        try:
            runtime = self.runtime
            with self.memory_budget.active():  # a new shape signature's buffers charge it
                torch_device = torch_device_of((*args, *named.values())) if outputs == "host" else None
                if torch_device is not None:
                    results = run_on_torch_tensors(runtime.run, torch_device, args, named)
                else:
                    results = runtime.run(*args, outputs=outputs, **named)
        except MemoryError as err:  # a model whose tensors the device cannot hold: the user's to fix
            raise PartitaError(f"@{self.entry}: {err or 'out of memory'}") from None
        spans = sequence_spans(function, "outputs")
        return tuple(regroup(results, spans)) if spans else results

    def _flat_inputs(self, function: FuncOp, args: Sequence[Any], named: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """The inputs as the entry function takes them: each sequence's elements apart."""
        try:
            return flatten(args, named, sequence_spans(function, "inputs"), len(function.function_type.inputs.data),
                           f"@{self.entry}")
        except ValueError as err:
            raise PartitaError(str(err)) from None

    def profile(self, *args: Any, repeat: int = 10, warmup: int = 1, burst: int = 1, **named: Any) -> Profile:
        """Per-step and per-partition device times of runs on these inputs: the launch
        plan run ``warmup`` times, then ``repeat`` times with device events around each
        step (kernel launch, library call, host step); medians per run. ``burst`` above 1
        enqueues each timed step that many times in a row, for a model whose steps may run
        again on their own outputs (no state carried between runs). On the simulated device
        every time is ``None`` (it has no clock). See ``partita.runtime.profile``."""
        args, named = self._flat_inputs(self.entry_function(), args, named)
        return self.runtime.profile(*args, repeat=repeat, warmup=warmup, burst=burst, **named)

    def save(self, path: str | Path) -> None:
        """Writes the compiled model as one file (``partita.load`` reads it back): the
        lowered module, its weights and every cubin, each with its digest."""
        artifact.save(artifact.CompiledModel(self.module, self.pipeline, self.config, self.partitions,
                                             entry=self.entry, binaries=self.binaries), path)

    def report(self) -> Report:
        runtime = self.runtime
        rows = []
        for row in self.partitions:
            kernel = runtime.handles.get(row.symbol)
            rows.append(row.with_kernel(kernel.kernel_name if kernel else None))
        return Report(
            rows,
            collage_total=self.collage.total if self.collage is not None else None,
            eager_total=self.collage.eager_total if self.collage is not None else None,
            pipeline=self.pipeline,
            execution=runtime.describe(),
            cache_hits=self.cache_hits,
            compiles=self.compiles,
            pass_times=self.pass_times,
        )

    def report_graph(self, path: str | Path | None = None, profile: Profile | None = None) -> str:
        """The placement as one self-contained HTML page (see ``partita.report_graph``);
        written to ``path`` when given. With a ``profile`` (``Executable.profile``) each
        partition shows its measured time."""
        from partita.files import write_atomically
        from partita.report_graph import placement_graph, render_html

        page = render_html(placement_graph(self, profile))
        if path is not None:
            write_atomically(path, page)
        return page

    def __str__(self) -> str:
        out = StringIO()
        Printer(stream=out).print_op(self.module)
        return out.getvalue()


def load(path: str | Path, *, memory_budget: int | str | MemoryBudget | None = None) -> Executable:
    """The ``Executable`` saved in ``path`` by ``Executable.save`` (no cache, NVRTC or ONNX
    file needed); any damage is a ``PartitaError``. ``memory_budget`` as for ``compile``."""
    budget = MemoryBudget.create(memory_budget)
    model = artifact.load(path)
    return Executable(model.module, model.pipeline, model.targets, model.partitions, [],
                      entry=model.entry, binaries=model.binaries, budget=budget)


def call_counts(module: ModuleOp, entry: str) -> Counter[str]:
    """How many times one run of ``entry`` calls each function, through every caller: a
    kernel called once by a layer function that ``entry`` calls twelve times runs twelve
    times."""
    callees: dict[str, Counter[str]] = {}
    for op in module.ops:
        if isinstance(op, FuncOp) and op.body.blocks:
            callees[op.sym_name.data] = Counter(
                o.callee.string_value() for o in op.body.walk() if isinstance(o, CallOp)
            )
    total: Counter[str] = Counter()

    def visit(name: str, times: int, path: frozenset[str]) -> None:
        for callee, n in callees.get(name, Counter()).items():
            if callee in path:  # recursion: count the call once, do not unroll
                continue
            total[callee] += times * n
            visit(callee, times * n, path | {callee})

    visit(entry, 1, frozenset({entry}))
    return total


def _partition_rows(module: ModuleOp, entry: str, estimate: Callable[[FuncOp, str], dict[str, Any]]) -> list[PartitionRow]:
    """Where every op went: partition functions (by compiler), fused native kernels, and
    what is left in the entry function, which runs in the host program."""
    rows = []
    calls = call_counts(module, entry)
    for op in module.ops:
        if not isinstance(op, FuncOp) or not op.body.blocks:
            continue
        n_calls = max(calls[op.sym_name.data], 1)
        compiler = op.attributes.get(byoc.COMPILER)
        target = op.attributes.get(byoc.TARGET)
        ops = tuple(o.name for o in op.body.walk() if o.name.startswith("nn.") and o.name != "nn.constant")
        if isinstance(compiler, StringAttr):
            composite = op.attributes.get(byoc.COMPOSITE)
            rows.append(
                PartitionRow(
                    symbol=op.sym_name.data,
                    target=compiler.data,
                    ops=ops,
                    composite=composite.data if isinstance(composite, StringAttr) else None,
                    calls=n_calls,
                    **estimate(op, compiler.data),
                )
            )
        elif byoc.PRIMITIVE in op.attributes and isinstance(target, byoc.TargetAttr):
            rows.append(PartitionRow(op.sym_name.data, target.kind.data, ops, calls=n_calls,
                                     **estimate(op, target.kind.data)))
        elif op.sym_name.data == entry and ops:
            host = target.host_target if isinstance(target, byoc.TargetAttr) else None
            where = host.kind.data if host is not None else "host"
            # Reshapes left in the entry are views of their input's buffer (no step).
            views = tuple(o for o in ops if o == "nn.reshape")
            ops = tuple(o for o in ops if o != "nn.reshape")
            if ops:
                rows.append(PartitionRow(f"(in @{entry})", f"{where} (NumPy)", ops))
            if views:
                rows.append(PartitionRow(f"(views in @{entry})", "buffer alias", views))
    return rows


def compile(  # noqa: A001 - the public name, as in tvm.relay.build / torch.compile
    model: ModuleOp | str | Path | Any,
    targets: Sequence[Target | str] | str = ("cuda -arch=native", "cutlass", "llvm"),
    *,
    partitioner: str = "collage",
    fallback_device: str | None = None,
    cost: str = "roofline",
    device: str = "native",
    max_depth: int = 3,
    cache_dir: str | Path | None = None,
    layout: str = "auto",
    entry: str = "main",
    progress: Callable[[str, int, int], None] | None = None,
    example_inputs: Any = None,
    dynamic_shapes: Any = None,
    precision: str | None = None,
    memory_budget: int | str | MemoryBudget | None = None,
    verify_each: bool | None = None,
    sequence_lengths: Mapping[str, Any] | None = None,
) -> Executable:
    """Partitions and lowers ``model`` for ``targets``; see the module docstring.

    A PyTorch ``nn.Module`` is exported with ``torch.export`` on ``example_inputs``
    (``dynamic_shapes`` as ``torch.export`` takes them: a ``Dim`` becomes a ``?``
    dimension); an ``ExportedProgram`` is taken as it is.

    An ONNX model's sequence inputs (lists of tensors) have no length in the model:
    ``sequence_lengths={"name": n}`` gives each one's (or ``{"name": [shape, ...]}`` each
    element's shape where the model gives none, ``None`` for a run-time dim); ``run`` then
    takes a list of that length there, and returns a list for a sequence output.

    ``progress(pass_name, index, count)`` is called before each pass (the CLI shows it,
    since a cold CUTLASS compile takes a while), and by ``cutlass-codegen`` as each of its
    NVRTC programs is done (``pass_name`` then says which, compiled or from the cache).
    ``fallback_device`` is the device type
    of ops no target claims (default: the only device type besides the host; ``"cpu"``
    is TVM's rule, see ``CompilationConfig``). ``precision="fp16"`` / ``"bf16"`` computes
    an f32 model in that storage type (``to-mixed-precision``: softmax and normalizations
    stay f32, inputs and outputs keep the model's types); ``None`` / ``"fp32"`` as written.
    ``memory_budget``: the host memory import, compile and runs of this model may take
    together (bytes or ``"4G"``; default ``$PARTITA_MEMORY_BUDGET``, else half the RAM),
    see ``partita.ir.budget``.

    The module is verified when imported and after each of the two pass pipelines
    (placement, codegen); ``verify_each`` (default ``$PARTITA_VERIFY_EACH``), as
    ``mlir-opt --verify-each``, verifies it after every pass, so an invalid module is
    caught at the pass that made it (``partita-opt`` always does).
    """
    budget = MemoryBudget.create(memory_budget)
    if verify_each is None:
        verify_each = os.environ.get("PARTITA_VERIFY_EACH", "0") not in ("", "0")
    check_compile_arguments(targets=targets, partitioner=partitioner, partitioners=PARTITIONERS, cost=cost,
                            device=device, max_depth=max_depth, cache_dir=cache_dir, layout=layout,
                            entry=entry, progress=progress)
    with budget.active():  # import folding charges it
        module = load_module(model, example_inputs, dynamic_shapes, sequence_lengths)
    check_entry(module, entry)
    check_calls(module)
    check_ranks(module)
    try:
        if isinstance(targets, CompilationConfig):
            config = targets if fallback_device is None else CompilationConfig(list(targets), fallback_device)
        else:
            config = CompilationConfig(targets, fallback_device)
    except TargetError as err:
        raise PartitaError(str(err)) from None
    config, device = resolve_native(config, device)
    check_target_archs(config)
    stages = _pipeline_stages(
        module,
        config,
        partitioner=partitioner,
        cost=cost,
        device=device,
        max_depth=max_depth,
        cache_dir=str(cache_dir) if cache_dir is not None else None,
        layout=layout,
    )
    if precision not in PRECISIONS:
        raise PartitaError(f"unknown precision '{precision}' (choose from fp32, fp16, bf16)")
    if PRECISIONS[precision]:
        # after the norm fusions (the norms keep f32 statistics as ops of their own), before
        # everything else
        norms = [i for i, step in enumerate(stages[0]) if step in ("fuse-rms-norm", "fuse-layer-norm")]
        stages[0].insert(norms[-1] + 1 if norms else 0, f"to-mixed-precision{{dtype={PRECISIONS[precision]}}}")
    pipeline = ",".join(stages[0] + stages[1])
    placement, codegen = (PassPipeline.parse_spec(get_all_passes(), ",".join(steps)).passes for steps in stages)
    ctx = make_context()
    times: list[tuple[str, float]] = []
    started = [0.0]
    count = len(placement) + len(codegen)

    def between(done: ModulePass | None, module: ModuleOp, next_: ModulePass | None) -> None:
        """Times each pass (xDSL's pipeline callback), verifies after the pipeline's last
        (or after each, with ``verify_each``), and reports progress."""
        if done is not None:
            times.append((done.name, time.perf_counter() - started[0]))
            if verify_each or next_ is None:
                verify_module(module)
        if next_ is not None:
            if progress is not None:
                progress(next_.name, len(times), count)
            started[0] = time.perf_counter()

    if progress is not None:  # codegens that compile several programs say when each is done
        for step in codegen:
            if hasattr(step, "progress"):
                object.__setattr__(step, "progress",
                                   lambda line, name=step.name: progress(f"{name}: {line}", len(times), count))
    with budget.active():  # constant materialization charges it
        PassPipeline(placement, between).apply(ctx, module)
        # Everything is placed and outlined: capture it before codegen drops bodies.
        rows = _partition_rows(module, entry, _cost_estimator(device, config))
        PassPipeline(codegen, between).apply(ctx, module)
    report = next((p.last_report for p in placement if isinstance(p, CollagePartition)), None)
    # The codegens' pass statistics (MLIR's way: on the pass instances, not in the IR).
    statistics = [p.statistics for p in codegen if isinstance(getattr(p, "statistics", None), nvrtc.CompileStatistics)]
    compiles, hits = sum(s.compiled for s in statistics), sum(s.cached for s in statistics)
    return Executable(
        module,
        pipeline,
        config,
        rows,
        times,
        collage=report,
        cache_hits=hits,
        compiles=compiles,
        entry=entry,
        budget=budget,
    )


def _cost_estimator(device: str, config: CompilationConfig) -> Callable[[FuncOp, str], dict[str, Any]]:
    """Roofline cost of a partition function on its target and what bounds it, as
    ``PartitionRow`` fields (none where it cannot say), with the kernel families Collage
    placed it with."""
    estimator = RooflineEstimator(device, families=kernel_families(config))

    def estimate(function: FuncOp, target: str) -> dict[str, Any]:
        if len(function.body.blocks) != 1 or not any(op.results for op in function.body.block.ops):
            return {}  # nothing to cost: a pass after this one names what is wrong with it
        graph, candidate = function_candidate(function, target)
        parts = estimator.breakdown(graph, candidate)
        work = max(parts["compute_time"], parts["memory_time"])
        bound = "launch" if parts["launch_overhead"] > work else (
            "compute" if parts["compute_time"] >= parts["memory_time"] else "memory")
        return {"cost": parts["time"], "bound": bound}

    return estimate


__all__ = ["Executable", "build_pipeline", "compile", "load", "load_module"]
