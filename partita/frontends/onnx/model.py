"""The ONNX model itself, before conversion: its opset, its graph's inputs and their types,
symbolic dim names from shape inference, the schema checks every node passes (attributes,
inputs, single assignment), when each initializer is last read, and tensors read from
their protos or external data files (from the model's folder only)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper
from xdsl.dialects.builtin import TensorType

from partita.dialects import nn
from partita.frontends.onnx.values import ONNX_DTYPES, fail
from partita.ir import PartitaError
from partita.ir.parameters import PARAMETER_THRESHOLD_BYTES

MIN_OPSET = 9
MAX_OPSET = onnx.defs.onnx_opset_version()
OLDEST_OPSET = 1
"""Models of opsets ``OLDEST_OPSET`` to ``MIN_OPSET - 1`` import when each of their ops is
the version it is at ``MIN_OPSET`` (``And``-7, ``Not``-1): the converters then see the
semantics they were written for (``legacy_version_check``)."""


def _default_opset(model: onnx.ModelProto) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            version = entry.version
            if not OLDEST_OPSET <= version <= MAX_OPSET:
                raise PartitaError(f"unsupported ONNX opset {version} (supported: "
                                   f"{OLDEST_OPSET} to {MAX_OPSET})")
            return version
    domains = sorted({entry.domain for entry in model.opset_import})
    why = [OTHER_DOMAINS[d] for d in domains if d in OTHER_DOMAINS]
    raise PartitaError("the model imports no default-domain (ai.onnx) opset"
                       + (f", only {', '.join(domains)}" if domains else "") + (f": {'; '.join(why)}" if why else ""))


OTHER_DOMAINS = {
    "ai.onnx.ml": "classical machine-learning operators (tree ensembles, label encoders, scalers), which Partita "
                  "does not compile (onnxruntime or Hummingbird run them)",
    "ai.onnx.preview.training": "training operators (optimizer steps), and Partita compiles inference",
}
"""Why a model of another domain's ops alone is not compiled, by domain."""


LEGACY_CONVERTED = {"Scan"}
"""Ops whose converter also builds the version older than ``MIN_OPSET`` (it reads the
model's opset): Scan-8's batch axis."""


def legacy_version_check(node: onnx.NodeProto, opset: int) -> None:
    """An op of an opset older than ``MIN_OPSET`` is accepted only when its schema did not
    change between the model's opset and ``MIN_OPSET`` (the registry's ``since_version``),
    or its converter builds the older version too (``LEGACY_CONVERTED``)."""
    if node.op_type in LEGACY_CONVERTED and node.domain in ("", "ai.onnx"):
        return
    try:
        old = onnx.defs.get_schema(node.op_type, opset, node.domain or "").since_version
        new = onnx.defs.get_schema(node.op_type, MIN_OPSET, node.domain or "").since_version
    except onnx.defs.SchemaError:
        return  # unknown ops are reported by the converter look-up
    if old != new:
        fail(f"unsupported ONNX opset {opset} for {node.op_type}: its version {old} changed in "
             f"opset {new} (models older than opset {MIN_OPSET} import when their ops are the "
             f"versions of opset {MIN_OPSET})")


def _describe(index: int, node: onnx.NodeProto) -> str:
    label = node.name or (node.output[0] if node.output else "")
    return f"node {index} '{label}' ({node.op_type})"


def _value_type(info: onnx.ValueInfoProto, what: str) -> TensorType:
    t = info.type
    if not t.HasField("tensor_type"):
        raise PartitaError(f"{what} '{info.name}' is not a tensor")
    elem = t.tensor_type.elem_type
    if elem not in ONNX_DTYPES:
        supported = ", ".join(onnx.TensorProto.DataType.Name(t) for t in ONNX_DTYPES)
        known = elem in onnx.TensorProto.DataType.values()
        raise PartitaError(f"{what} '{info.name}' has unsupported element type "
                           f"{onnx.TensorProto.DataType.Name(elem) if known else elem} (supported: {supported})")
    if not t.tensor_type.HasField("shape"):
        raise PartitaError(f"{what} '{info.name}' has no shape (rank must be known)")
    dims = [d.dim_value if d.HasField("dim_value") else nn.DYN
            for d in t.tensor_type.shape.dim]
    negative = [d.dim_value for d in t.tensor_type.shape.dim if d.HasField("dim_value") and d.dim_value < 0]
    if negative:
        raise PartitaError(f"{what} '{info.name}' has a negative dimension {negative[0]} (dims must be >= 0, "
                           "or symbolic for a dynamic size)")
    return TensorType(nn.element_type_of(ONNX_DTYPES[elem]), dims)


def _inferred_values(model: onnx.ModelProto) -> tuple[dict[str, list[object]], dict[str, int]]:
    """Per value, from ONNX shape inference (best effort): its symbolic dimension names,
    and its element type (``TensorProto`` code): what a shape computation folded at import
    (kept as dims, typeless) was in the model."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:
        inferred = model
    labels: dict[str, list[object]] = {}
    elements: dict[str, int] = {}
    g = inferred.graph
    for info in [*g.input, *g.value_info, *g.output]:
        tt = info.type.tensor_type
        if tt.elem_type:
            elements[info.name] = tt.elem_type
        if tt.HasField("shape"):
            labels[info.name] = [
                d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                for d in tt.shape.dim
            ]
    return labels, elements


def _node_inputs(node: onnx.NodeProto) -> Iterator[str]:
    """The names ``node`` reads, those of its subgraphs (If, Loop, Scan) included."""
    yield from node.input
    for attr in node.attribute:
        for graph in [attr.g] if attr.HasField("g") else attr.graphs:
            for inner in graph.node:
                yield from _node_inputs(inner)


def _initializer_last_uses(graph: onnx.GraphProto) -> dict[int, list[str]]:
    """For each node index, the initializers no later node (nor a graph output) reads."""
    last: dict[str, int] = {}
    initializers = {init.name for init in graph.initializer}
    for index, node in enumerate(graph.node):
        for name in _node_inputs(node):
            if name in initializers:
                last[name] = index
    outputs = {out.name for out in graph.output}
    release: dict[int, list[str]] = {}
    for name, index in last.items():
        if name not in outputs:
            release.setdefault(index, []).append(name)
    return release


def _external_array(tensor: onnx.TensorProto, what: str, folder: Path) -> np.ndarray | None:
    """The external data of ``tensor`` read once, straight into the bytes a dense
    attribute keeps (a read-only view over them: no copy on the way into the IR), from
    ``folder`` (the model's, never the working directory). None for element types whose
    file layout is not NumPy's (those take ``numpy_helper``'s path)."""
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    if dtype.kind not in "fiub" or tensor.data_type == onnx.TensorProto.BFLOAT16:
        return None
    info = {entry.key: entry.value for entry in tensor.external_data}
    location = Path(info.get("location", ""))
    if not info.get("location") or location.is_absolute() or ".." in location.parts:
        raise PartitaError(f"{what} '{tensor.name}' has external data at '{location}', which is not a file "
                           "beside the model")
    expected = math.prod(tensor.dims) * dtype.itemsize
    offset, length = int(info.get("offset", 0)), int(info.get("length", expected))
    if length != expected:
        raise PartitaError(f"{what} '{tensor.name}' has {length} bytes of external data for its declared "
                           f"{list(tensor.dims)} {dtype} tensor ({expected} bytes)")
    try:
        with open(folder / location, "rb") as handle:
            if os.fstat(handle.fileno()).st_size < offset + length:
                raise PartitaError(f"{what} '{tensor.name}': its external data '{folder / location}' ends before "
                                   f"byte {offset + length}")
            if length >= PARAMETER_THRESHOLD_BYTES and dtype != np.bool_:
                # Mapped, not read: the constant becomes a named parameter of this file
                # region (partita.ir.parameters), so the bytes never enter the process.
                mapped = np.memmap(handle, dtype.newbyteorder("<"), "r", offset, tuple(tensor.dims))
                mapped.parameter_name = tensor.name  # type: ignore[attr-defined]
                return mapped
            handle.seek(offset)
            data = handle.read(length)
    except OSError as err:
        raise PartitaError(f"{what} '{tensor.name}': cannot read its external data "
                           f"'{folder / location}': {err.strerror or err}") from None
    return np.frombuffer(data, dtype.newbyteorder("<")).reshape(tuple(tensor.dims))


def _check_attributes(node: onnx.NodeProto, opset: int) -> None:
    """The node's attributes against its ONNX schema: every required one present, every
    one given of the schema's type (a LeakyRelu ``alpha`` given as a list is an invalid
    model, not a crash inside a converter)."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except onnx.defs.SchemaError:
        return  # unknown ops are reported by the converter look-up
    given = {a.name: a for a in node.attribute}
    for name, spec in schema.attributes.items():
        if spec.required and name not in given:
            fail(f"missing required attribute '{name}'")
        attr = given.get(name)
        if attr is not None and attr.type != int(spec.type.value):
            want = onnx.AttributeProto.AttributeType.Name(int(spec.type.value))
            have = onnx.AttributeProto.AttributeType.Name(attr.type) \
                if attr.type in onnx.AttributeProto.AttributeType.values() else str(attr.type)
            fail(f"attribute '{name}' must be {want}, not {have}")


def _check_inputs(node: onnx.NodeProto, opset: int) -> None:
    """The node's inputs against its ONNX schema: every required one given (not dropped
    as ``""``), no more than the schema takes; converters may then index them freely."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except onnx.defs.SchemaError:
        return
    single = onnx.defs.OpSchema.FormalParameterOption.Single
    for i, formal in enumerate(schema.inputs):
        if formal.option == single and (i >= len(node.input) or not node.input[i]):
            fail(f"missing required input #{i} ('{formal.name}')")
    if len(node.input) > schema.max_input:
        fail(f"takes at most {schema.max_input} inputs, got {len(node.input)}")


def _takes(schema: onnx.defs.OpSchema, formal: onnx.defs.OpSchema.FormalParameter) -> tuple[bool, bool]:
    """Whether a formal input of ``schema`` takes a tensor, and whether a sequence."""
    allowed = next((c.allowed_type_strs for c in schema.type_constraints if c.type_param_str == formal.type_str),
                   [formal.type_str])
    kinds = {t.removeprefix("optional(").split("(", 1)[0] for t in allowed}
    return "tensor" in kinds, "seq" in kinds


def _check_sequence_inputs(node: onnx.NodeProto, opset: int, is_sequence: list[bool | None]) -> None:
    """A sequence given where the node's schema takes a tensor, or a tensor where it takes a
    sequence, is refused here (converters then read each input as what it is); ``None``
    marks an input not given."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain or "")
    except onnx.defs.SchemaError:
        schema = None
    for i, sequence in enumerate(is_sequence):
        if sequence is None:
            continue
        if schema is None or not schema.inputs:
            if sequence:
                fail(f"input #{i} is a sequence; this op takes tensors")
            continue
        formal = schema.inputs[min(i, len(schema.inputs) - 1)]  # a variadic last input repeats
        tensor, seq = _takes(schema, formal)
        if sequence and not seq:
            fail(f"input #{i} ('{formal.name}') must be a tensor, got a sequence")
        if not sequence and not tensor:
            fail(f"input #{i} ('{formal.name}') must be a sequence, got a tensor")


def _check_single_assignment(graph: onnx.GraphProto) -> None:
    """ONNX graphs are in SSA form: every name is defined once (an input listed again as
    an initializer excepted, as pre-IR-v4 models do). Two graph inputs with one name, or
    two nodes writing one output, are invalid models, refused rather than resolved by
    whichever comes last."""
    defined: dict[str, str] = {}
    for inp in graph.input:
        if inp.name in defined:
            raise PartitaError(f"invalid ONNX model: two graph inputs are named '{inp.name}'")
        defined[inp.name] = "a graph input"
    for init in graph.initializer:
        if init.name in defined and defined[init.name] != "a graph input":
            raise PartitaError(f"invalid ONNX model: two initializers are named '{init.name}'")
        defined[init.name] = "an initializer"
    for index, node in enumerate(graph.node):
        for out in node.output:
            if not out:
                continue
            if out in defined:
                raise PartitaError(f"invalid ONNX model: {_describe(index, node)} writes '{out}', which "
                                   f"{defined[out]} already defines")
            defined[out] = f"{_describe(index, node)}"


def tensor_array(tensor: onnx.TensorProto, what: str, external_dir: Path | None = None) -> np.ndarray:
    """The NumPy value of a TensorProto; a payload that does not fit its dims and dtype
    (or external data that cannot be read) is a ``PartitaError`` naming the tensor.
    External data not loaded yet is read from ``external_dir``."""
    if any(d < 0 for d in tensor.dims):
        raise PartitaError(f"{what} '{tensor.name}' has a negative dimension in {list(tensor.dims)}")
    if tensor.data_type not in ONNX_DTYPES:
        known = tensor.data_type in onnx.TensorProto.DataType.values()
        raise PartitaError(f"{what} '{tensor.name}' has unsupported element type "
                           f"{onnx.TensorProto.DataType.Name(tensor.data_type) if known else tensor.data_type}")
    external = tensor.data_location == onnx.TensorProto.EXTERNAL or len(tensor.external_data)
    if external and not tensor.HasField("raw_data") and external_dir is not None:
        array = _external_array(tensor, what, external_dir)
        if array is not None:
            return array
        from onnx.external_data_helper import load_external_data_for_tensor

        try:
            load_external_data_for_tensor(tensor, str(external_dir))
        except (OSError, ValueError, onnx.checker.ValidationError) as err:
            raise PartitaError(f"{what} '{tensor.name}': cannot read its external data: {err}") from None
    elif external and not tensor.HasField("raw_data"):
        # onnx.load(path) reads external data beside the model file; left unread here it
        # would be read relative to the working directory, never the model's own folder.
        location = next((e.value for e in tensor.external_data if e.key == "location"), "?")
        raise PartitaError(f"{what} '{tensor.name}' keeps its data in an external file ('{location}') that was "
                           "not loaded; pass the model's path, or onnx.load it from its folder with its "
                           "external data")
    try:
        return numpy_helper.to_array(tensor)
    except Exception as err:  # ValueError from a reshape of raw_data, TypeError, OSError
        elements = math.prod(tensor.dims)
        raise PartitaError(
            f"{what} '{tensor.name}' does not hold its declared {list(tensor.dims)} "
            f"{onnx.TensorProto.DataType.Name(tensor.data_type)} tensor ({elements} elements, "
            f"{len(tensor.raw_data)} bytes of raw_data): {err}"
        ) from None
