"""``tensorrt-codegen``: every ``tensorrt`` partition function becomes an ONNX sub-model.

The records sit on one ``byoc.binary`` (``format = "onnx"``), one per function:
``{kind = "tensorrt", digest, model, inputs, input_dtypes, folded, outputs, output_dtypes,
ops, fp16, workspace_limit}``. ``fp16`` and ``workspace_limit`` are the builder options of
the function's target (``tensorrt -use_fp16=true -max_workspace_size=...``). ``folded`` lists the arguments every call passes the same constant (weights):
they are initializers of the sub-model, built into the engine, and not bound at run time.
``model`` is the serialized ``onnx.ModelProto`` in base64 (the module carries it, so a
saved module needs no side file); ``digest`` (SHA-256 of the bytes) keys the engine cache
on disk. The runtime builds the engine with TensorRT's ONNX parser at load.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import ClassVar

from xdsl.dialects.builtin import DictionaryAttr, ModuleOp
from xdsl.dialects.func import FuncOp, ReturnOp

from partita.dialects import byoc
from partita.dialects.byoc import compiler_functions
from partita.lowering.library import (
    LibraryCodegen,
    call_site_constants,
    element_type,
    static_shape,
)
from partita.lowering.records import from_attr, register_record_kind, to_attr
from partita.lowering.tensorrt.export import export_function
from partita.target import Target

KIND = "tensorrt"


def builder_options(function: FuncOp) -> tuple[int, int]:
    """``(fp16, workspace limit)`` from the function's ``tensorrt`` target
    (``tensorrt -use_fp16=true -max_workspace_size=...``), else the kind's defaults."""
    attr = function.attributes.get(byoc.TARGET)
    target = attr.to_target() if isinstance(attr, byoc.TargetAttr) and attr.kind.data == "tensorrt" else Target("tensorrt")
    return int(bool(target.get("use_fp16"))), int(target.get("max_workspace_size"))


def tensorrt_record(function: FuncOp, module: ModuleOp | None = None) -> DictionaryAttr:
    constants = call_site_constants(module, function) if module is not None else {}
    data = export_function(function, constants).SerializeToString()
    block = function.body.block
    ret = block.last_op
    assert isinstance(ret, ReturnOp)
    ops = tuple(op.name for op in block.ops if op.name.startswith("nn.") and op.name != "nn.constant")
    return DictionaryAttr({
        "kind": to_attr(KIND),
        "digest": to_attr(hashlib.sha256(data).hexdigest()),
        "inputs": to_attr([static_shape(a) for a in block.args]),
        "input_dtypes": to_attr([element_type(a) for a in block.args]),
        "folded": to_attr(sorted(constants)),
        "outputs": to_attr([static_shape(v) for v in ret.operands]),
        "output_dtypes": to_attr([element_type(v) for v in ret.operands]),
        "ops": to_attr(ops),
        "fp16": to_attr(builder_options(function)[0]),
        "workspace_limit": to_attr(builder_options(function)[1]),
        "model": to_attr(base64.b64encode(data).decode("ascii")),
    })


_FIELDS = {"digest": str, "model": str, "inputs": tuple, "outputs": tuple, "ops": tuple}


def decode_record(attr: DictionaryAttr) -> dict:
    """The fields of a tensorrt record, with ``model`` as bytes; a ValueError when one is
    missing or the model's bytes do not match their digest."""
    fields = {k: from_attr(v) for k, v in attr.data.items()}
    for name, kind in _FIELDS.items():
        if not isinstance(fields.get(name), kind):
            raise ValueError(f"a tensorrt record needs '{name}' ({kind.__name__})")
    try:
        fields["model"] = base64.b64decode(fields["model"], validate=True)
    except ValueError:
        raise ValueError("the tensorrt record's 'model' is not base64") from None
    if hashlib.sha256(fields["model"]).hexdigest() != fields["digest"]:
        raise ValueError("the tensorrt record's ONNX sub-model does not match its digest")
    external = external_tensors(fields["model"])
    if external:
        # onnxruntime and TensorRT's parser would read it from the working directory.
        raise ValueError(f"the tensorrt record's ONNX sub-model keeps tensor '{external[0]}' in external data; "
                         "an embedded sub-model must hold all its data")
    return fields


def external_tensors(data: bytes) -> list[str]:
    """Names of the tensors of an ONNX model (initializers, node attributes, subgraphs)
    whose data lives in a file outside it; a ValueError when ``data`` is no model."""
    import onnx

    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception as err:  # google.protobuf.message.DecodeError
        raise ValueError(f"the tensorrt record's ONNX sub-model does not parse ({err})") from None
    found: list[str] = []
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        tensors = list(graph.initializer) + [s.values for s in graph.sparse_initializer]
        for node in graph.node:
            for attribute in node.attribute:
                tensors += ([attribute.t] if attribute.HasField("t") else []) + list(attribute.tensors)
                graphs += ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs)
        found += [t.name or "<unnamed>" for t in tensors
                  if t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data)]
    return found


@dataclass(frozen=True)
class TensorRTCodegen(LibraryCodegen):
    """Export every tensorrt partition function as an ONNX sub-model."""

    name = "tensorrt-codegen"
    compiler: ClassVar[str] = "tensorrt"
    format: ClassVar[str] = "onnx"

    def records(self, module: ModuleOp) -> dict[str, DictionaryAttr]:
        return {f.sym_name.data: tensorrt_record(f, module) for f in compiler_functions(module, self.compiler)}


register_record_kind("tensorrt", decode_record, library=True)
