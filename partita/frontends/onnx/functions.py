"""ONNX function ops expanded into their bodies: an op the schema defines as a function of
other ops (CenterCropPad, HannWindow, Attention's variants...) is imported as those ops when
no converter takes it (none exists, or the converter refuses the variant), as onnxruntime
does for function ops it has no kernel for. The body is the schema's, for the newest
function version at or below the model's opset; context-dependent functions are built for
the node's input types."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx
from onnx import AttributeProto, FunctionProto, NodeProto, TypeProto

__all__ = ["function_body"]


def _function(node: NodeProto, opset: int, input_types: Sequence[TypeProto]
              ) -> tuple[FunctionProto, dict[str, AttributeProto]] | None:
    """The function body and the schema's attribute defaults."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, node.domain)
    except onnx.defs.SchemaError:
        return None
    defaults = {name: a.default_value for name, a in schema.attributes.items()
                if a.default_value.type != AttributeProto.UNDEFINED}
    fixed = [v for v in schema.function_opset_versions if v <= opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    version = max(fixed + dependent, default=None)
    if version is None:
        return None
    if version in fixed:
        text = schema.get_function_with_opset_version(version)
    else:
        try:
            text = schema.get_context_dependent_function_with_opset_version(
                version, node.SerializeToString(), [t.SerializeToString() for t in input_types])
        except Exception:  # noqa: BLE001 - onnx refuses input types it cannot build the body for
            return None
    if not text:
        return None
    function = FunctionProto()
    function.ParseFromString(text)
    return function, defaults


def function_body(node: NodeProto, opset: int, input_types: Sequence[TypeProto], prefix: str) -> list[NodeProto] | None:
    """``node`` as the nodes of its schema's function body (``None`` when the op has none):
    its inputs and outputs wired to the node's, every internal value named under
    ``prefix`` (inside a control-flow op's subgraph too, where the subgraph reads it),
    attribute references resolved from the node's attributes, else the function's or the
    schema's defaults."""
    found = _function(node, opset, input_types)
    if found is None:
        return None
    function, defaults = found
    names = {name: node.input[k] if k < len(node.input) else "" for k, name in enumerate(function.input)}
    names.update({name: node.output[k] for k, name in enumerate(function.output)
                  if k < len(node.output) and node.output[k]})
    attributes = {**defaults, **{a.name: a for a in function.attribute_proto}, **{a.name: a for a in node.attribute}}

    def rename(name: str) -> str:
        return names.get(name, prefix + name if name else "")

    body = []
    for inner in function.node:
        expanded = NodeProto()
        expanded.CopyFrom(inner)
        del expanded.input[:], expanded.output[:], expanded.attribute[:]
        expanded.input.extend(rename(n) for n in inner.input)
        expanded.output.extend(rename(n) for n in inner.output)
        expanded.name = prefix + (inner.name or inner.op_type)
        for attribute in inner.attribute:
            if attribute.ref_attr_name:
                if attribute.ref_attr_name not in attributes:
                    continue  # unset: the inner op's own default
                resolved = AttributeProto()
                resolved.CopyFrom(attributes[attribute.ref_attr_name])
                resolved.name = attribute.name
                expanded.attribute.append(resolved)
            else:
                expanded.attribute.append(_with_captures_renamed(attribute, rename, set()))
        body.append(expanded)
    return body


def _with_captures_renamed(attribute: AttributeProto, rename: Callable[[str], str],
                           outer: set[str]) -> AttributeProto:
    """``attribute``, its subgraphs' reads of the function's values renamed as the body's
    are (a subgraph's own inputs, initializers and outputs, and those of the subgraphs
    around it, ``outer``, keep their names)."""
    if attribute.type not in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        return attribute
    renamed = AttributeProto()
    renamed.CopyFrom(attribute)
    for graph in [renamed.g] if attribute.type == AttributeProto.GRAPH else list(renamed.graphs):
        local = outer | {v.name for v in graph.input} | {t.name for t in graph.initializer} | \
            {name for n in graph.node for name in n.output}
        for inner in graph.node:
            names = [name if not name or name in local else rename(name) for name in inner.input]
            del inner.input[:]
            inner.input.extend(names)
            for k, sub in enumerate(inner.attribute):
                inner.attribute[k].CopyFrom(_with_captures_renamed(sub, rename, local))
        for value in graph.output:
            if value.name not in local:  # an output that is an enclosing value itself
                value.name = rename(value.name)
    return renamed
