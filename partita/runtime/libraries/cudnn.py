"""Running a cudnn partition through the cuDNN frontend's Python graph API.

``make_plan`` (at load, once per shape signature) declares the graph (tensors by logical
dims and strides, ``conv_fprop`` + ``bias`` + ``relu`` or ``sdpa``), builds it with
heuristics A then FALLBACK, and keeps the plan and its workspace size; ``launch`` binds
the device pointers and executes on the runtime's stream with the runtime's workspace.
Without a device the reference body runs (``emulate`` returns None). Only names of the
``cudnn`` module are used, so ``tests/support/recording_libs.py`` stands in for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from xdsl.dialects.builtin import DictionaryAttr

from partita.dialects import byoc
from partita.ir import PartitaError
from partita.lowering.cudnn.codegen import ConvRecord, SdpaRecord, describe, packed_strides, record_from_attr
from partita.runtime.libraries import LibraryHandle, require


@dataclass
class CudnnPlan:
    handle: Any
    graph: Any
    tensors: dict[str, Any]  # role -> graph tensor (and "y")
    workspace: int


@dataclass(frozen=True)
class CudnnGraphHandle(LibraryHandle):
    function: str
    binary: str
    record: ConvRecord | SdpaRecord
    kind: ClassVar[str] = "cudnn"
    library: ClassVar[str] = "cudnn"

    @property
    def kernel_name(self) -> str:
        return f"cuDNN {self.record.graph} graph ({self.record.dtype})"

    def describe(self) -> str:
        return describe(self.record)

    @classmethod
    def from_record(cls, function: str, binary: byoc.BinaryOp, record: DictionaryAttr) -> CudnnGraphHandle:
        return cls(function, binary.sym_name.data, record_from_attr(record))

    def load_library(self) -> Any:
        return require("cudnn", "cudnn", "NVIDIA's cuDNN frontend (nvidia-cudnn-frontend) and cuDNN",
                       probe=lambda cudnn: cudnn.backend_version())

    def make_plan(self, cudnn: Any, shapes: Sequence[tuple[int, ...]], dtypes: Sequence[str]) -> CudnnPlan:
        r = self.record
        io = getattr(cudnn.data_type, r.io_type)
        handle = cudnn.create_handle()
        graph = cudnn.pygraph(io_data_type=io, intermediate_data_type=cudnn.data_type.FLOAT,
                              compute_data_type=getattr(cudnn.data_type, r.compute_type), handle=handle)
        shape_of = dict(zip(r.roles, shapes, strict=True))
        tensors: dict[str, Any] = {}
        if isinstance(r, ConvRecord):
            n = shape_of["x"][0]
            x, y = (n, *r.x[1:]), (n, *r.y[1:])
            tensors["x"] = graph.tensor(name="x", dim=list(x), stride=list(r.strides(x)), data_type=io)
            w_order = "KRSC" if r.layout == "NHWC" else "KCRS"
            tensors["w"] = graph.tensor(name="w", dim=list(r.w), stride=list(packed_strides(r.w, w_order, "KCRS")),
                                        data_type=io)
            out = graph.conv_fprop(image=tensors["x"], weight=tensors["w"], pre_padding=list(r.pre_padding),
                                   post_padding=list(r.post_padding), stride=list(r.stride), dilation=list(r.dilation),
                                   compute_data_type=cudnn.data_type.FLOAT, name="conv")
            if "bias" in r.epilogue:
                b = (1, r.w[0], 1, 1)
                tensors["bias"] = graph.tensor(name="bias", dim=list(b), stride=list(r.strides(b)), data_type=io)
                out = graph.bias(input=out, bias=tensors["bias"], name="bias_add")
            if "relu" in r.epilogue:
                out = graph.relu(input=out, name="relu")
            y_strides = r.strides(y)
        else:
            if r.k_storage != "BHSD":  # a record of an older Partita: the frontend would reject it
                raise PartitaError(f"@{self.function}: cuDNN attention needs K with a unit-stride head dim, this "
                                   f"record stores it {r.k_storage}; compile the model again")
            b = shape_of["q"][0]  # B (4-D) or B*H (3-D, read as H = 1)
            q, k, v = ((b, *d[1:]) for d in (r.q, r.k, r.v))
            tensors["q"] = graph.tensor(name="q", dim=list(q), stride=list(packed_strides(q, "BHSD", "BHSD")), data_type=io)
            tensors["k"] = graph.tensor(name="k", dim=list(k), stride=list(packed_strides(k, r.k_storage, "BHSD")),
                                        data_type=io)
            tensors["v"] = graph.tensor(name="v", dim=list(v), stride=list(packed_strides(v, "BHSD", "BHSD")), data_type=io)
            extra = {}
            if r.mask:
                mask = tuple(b if i == 0 and d != 1 else d for i, d in enumerate(r.mask))
                tensors["mask"] = graph.tensor(name="mask", dim=list(mask), stride=list(packed_strides(mask, "BHSD", "BHSD")),
                                               data_type=io)
                extra["bias"] = tensors["mask"]
            out, _ = graph.sdpa(q=tensors["q"], k=tensors["k"], v=tensors["v"], attn_scale=r.attn_scale,
                                generate_stats=False, name="sdpa", **extra)
            y = (b, q[1], q[2], v[3])
            y_strides = packed_strides(y, "BHSD", "BHSD")
        out.set_output(True).set_dim(list(y)).set_stride(list(y_strides)).set_data_type(io)
        tensors["y"] = out
        graph.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        return CudnnPlan(handle, graph, tensors, int(graph.get_workspace_size()))

    def release_plan(self, cudnn: Any, plan: CudnnPlan) -> None:
        plan.graph = None  # the graph's plans before the handle they were built on
        plan.tensors.clear()
        cudnn.destroy_handle(plan.handle)

    def workspace_bytes(self, plan: CudnnPlan) -> int:
        return plan.workspace

    def launch(self, cudnn: Any, plan: CudnnPlan, stream: int, inputs: Sequence[int], outputs: Sequence[int],
               workspace: int) -> None:
        cudnn.set_stream(handle=plan.handle, stream=stream)
        pack = {plan.tensors[role]: ptr for role, ptr in zip(self.record.roles, inputs, strict=True) if role in plan.tensors}
        pack[plan.tensors["y"]] = outputs[0]
        plan.graph.execute(pack, workspace, handle=plan.handle)

