"""Running a TensorRT partition: its embedded ONNX sub-model, as an engine or emulated.

At load (``make_plan``, once per shape signature) TensorRT's ONNX parser reads the
sub-model and the builder makes an engine for exactly those shapes (one optimization
profile, min = opt = max), serialized to ``<cache>/tensorrt/<digest>-<shapes>-<trt
version>.engine`` so a second load deserializes instead of building. The execution
context's scratch memory is user-managed: the runtime's workspace. ``launch`` binds the
device pointers by tensor name and enqueues on the runtime's stream.

Without a device, ``emulate`` runs the same ONNX bytes under onnxruntime (CPU), or ONNX's
reference evaluator when onnxruntime lacks a kernel for a type, which checks the export
itself against the partition's reference semantics.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from xdsl.dialects.builtin import DictionaryAttr

from partita.dialects import byoc
from partita.files import cache_root
from partita.ir import PartitaError
from partita.lowering.tensorrt.codegen import decode_record
from partita.runtime.libraries import LibraryHandle, require


def engine_cache_dir() -> Path:
    return cache_root() / "tensorrt"


@dataclass
class TensorRTPlan:
    engine: Any
    context: Any
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    workspace: int
    engine_path: Path


@dataclass(eq=False)
class TensorRTHandle(LibraryHandle):
    """One extern function's TensorRT sub-model (see the module doc)."""

    function: str
    binary: str
    digest: str
    model: bytes
    inputs: tuple[tuple[int, ...], ...]
    outputs: tuple[tuple[int, ...], ...]
    ops: tuple[str, ...]
    folded: tuple[int, ...] = ()
    """Arguments built into the sub-model (constant weights): not bound at run time."""
    fp16: int = 0
    """Let the builder choose f16 tactics for f32 layers (``tensorrt -use_fp16``)."""
    workspace_limit: int = 1 << 30
    """The builder's workspace pool limit (``tensorrt -max_workspace_size``)."""
    _session: Any = field(default=None, repr=False)
    kind: ClassVar[str] = "tensorrt"
    library: ClassVar[str] = "tensorrt"

    @property
    def kernel_name(self) -> str:
        return f"TensorRT engine of ONNX sub-model {self.digest[:12]} ({len(self.ops)} ops)"

    @classmethod
    def from_record(cls, function: str, binary: byoc.BinaryOp, record: DictionaryAttr) -> TensorRTHandle:
        r = decode_record(record)
        return cls(function, binary.sym_name.data, r["digest"], r["model"],
                   tuple(map(tuple, r["inputs"])), tuple(map(tuple, r["outputs"])), tuple(r["ops"]),
                   tuple(r.get("folded", ())), r.get("fp16", 0), r.get("workspace_limit", 1 << 30))

    def _bound(self, values: Sequence[Any]) -> list[tuple[int, Any]]:
        """``(argument index, value)`` of the arguments the engine takes at run time."""
        return [(i, v) for i, v in enumerate(values) if i not in self.folded]

    def onnx_model(self) -> Any:
        import onnx

        return onnx.load_from_string(self.model)

    def describe(self) -> str:
        import onnx.printer

        folded = f", arguments {list(self.folded)} built in" if self.folded else ""
        head = (f"tensorrt engine from ONNX sub-model (sha256 {self.digest}), inputs "
                f"{[list(s) for s in self.inputs]}, outputs {[list(s) for s in self.outputs]}{folded}")
        return head + "\n" + onnx.printer.to_text(self.onnx_model().graph)

    # -- device path ------------------------------------------------------------------
    def load_library(self) -> Any:
        return require("tensorrt", "tensorrt", "NVIDIA TensorRT")

    def make_plan(self, trt: Any, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[str]) -> TensorRTPlan:
        logger = trt.Logger(trt.Logger.WARNING)
        signature = hashlib.sha256(repr(tuple(shapes)).encode()).hexdigest()[:12]
        path = engine_cache_dir() / f"{self.digest[:32]}-{signature}-{trt.__version__}.engine"
        runtime = trt.Runtime(logger)
        engine = None
        if path.exists():
            engine = runtime.deserialize_cuda_engine(path.read_bytes())
        if engine is None:
            serialized = self._build(trt, logger, shapes)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(serialized)
            tmp.replace(path)
            engine = runtime.deserialize_cuda_engine(serialized)
        if engine is None:
            raise PartitaError(f"@{self.function}: TensorRT could not deserialize its engine ({path})")
        context = engine.create_execution_context(trt.ExecutionContextAllocationStrategy.USER_MANAGED)
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        inputs = tuple(n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT)
        outputs = tuple(n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT)
        for name, (_, shape) in zip(sorted(inputs, key=_arg_index), self._bound(shapes), strict=True):
            context.set_input_shape(name, tuple(shape))
        return TensorRTPlan(engine, context, tuple(sorted(inputs, key=_arg_index)), tuple(sorted(outputs, key=_arg_index)),
                            int(engine.device_memory_size_v2), path)

    def _build(self, trt: Any, logger: Any, shapes: Sequence[tuple[int, ...]]) -> bytes:
        builder = trt.Builder(logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse(self.model):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise PartitaError(f"@{self.function}: TensorRT's ONNX parser rejected the sub-model: {errors}")
        config = builder.create_builder_config()
        # Precision follows the sub-model's types (TensorRT 11 networks are strongly typed):
        # f16 layers stay f16, f32 ones may use TF32.
        config.set_flag(trt.BuilderFlag.TF32)
        if self.fp16:
            # f16 tactics for f32 layers need weak typing, which TensorRT 11 removed: said
            # at load, never dropped silently.
            weak_fp16 = getattr(trt.BuilderFlag, "FP16", None)
            if weak_fp16 is None:
                raise PartitaError(
                    f"@{self.function}: tensorrt -use_fp16 needs weakly typed networks, which TensorRT "
                    f"{trt.__version__} no longer has (networks are strongly typed): give the partition f16 "
                    "tensors instead, or compile without -use_fp16")
            config.set_flag(weak_fp16)
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, self.workspace_limit)
        profile = builder.create_optimization_profile()
        for i, shape in self._bound(shapes):
            profile.set_shape(f"arg{i}", tuple(shape), tuple(shape), tuple(shape))
        config.add_optimization_profile(profile)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise PartitaError(f"@{self.function}: TensorRT failed to build an engine for shapes {list(shapes)}")
        return bytes(serialized)

    def release_plan(self, trt: Any, plan: TensorRTPlan) -> None:
        # TensorRT's Python objects free themselves when the last reference goes: the
        # context before the engine it runs.
        plan.context = None
        plan.engine = None

    def workspace_bytes(self, plan: TensorRTPlan) -> int:
        return plan.workspace

    def launch(self, trt: Any, plan: TensorRTPlan, stream: int, inputs: Sequence[int], outputs: Sequence[int],
               workspace: int) -> None:
        ctx = plan.context
        if plan.workspace:
            ctx.set_device_memory(workspace, plan.workspace)
        bound = [ptr for _, ptr in self._bound(inputs)]
        for name, ptr in zip((*plan.input_names, *plan.output_names), (*bound, *outputs), strict=True):
            ctx.set_tensor_address(name, ptr)
        if not ctx.execute_async_v3(stream):
            raise PartitaError(f"@{self.function}: TensorRT failed to enqueue its engine")

    # -- emulation --------------------------------------------------------------------
    def emulate(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        feeds = {f"arg{i}": np.ascontiguousarray(x) for i, x in self._bound(inputs)}
        if self._session is None:
            self._session = _session(self.model)
        return [np.asarray(r) for r in self._session(feeds)]


def _arg_index(name: str) -> int:
    digits = "".join(c for c in name if c.isdigit())
    return int(digits) if digits else 0


def _session(model: bytes) -> Any:
    """``feeds -> outputs`` for the sub-model: onnxruntime when it has kernels for all of
    it, else ``onnx.reference`` (which covers every op and type of the export). A model
    onnxruntime rejects at load or at its first run goes to the reference evaluator."""

    def reference() -> Any:
        import onnx
        from onnx.reference import ReferenceEvaluator

        evaluator = ReferenceEvaluator(onnx.load_from_string(model))
        return lambda feeds: evaluator.run(None, feeds)

    try:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001 - not installed, or NOT_IMPLEMENTED for a type
        return reference()
    state: dict[str, Any] = {}

    def run(feeds: dict[str, np.ndarray]) -> Any:
        if "reference" not in state:
            try:
                return session.run(None, feeds)
            except Exception:  # noqa: BLE001 - a type onnxruntime's CPU kernels lack
                state["reference"] = reference()
        return state["reference"](feeds)

    return run
