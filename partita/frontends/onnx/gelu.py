"""GELU (Erf form) matching on the ONNX graph, before conversion."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import onnx


def match_gelu(
    graph: onnx.GraphProto,
    constants: Mapping[str, np.ndarray],
    tensor_array: Callable[[onnx.TensorProto, str], np.ndarray],
) -> tuple[dict[int, str], set[int]]:
    """Find ``x * 0.5 * (1 + Erf(x / sqrt 2))`` (any Mul order, Div by sqrt 2 or Mul by
    1/sqrt 2) among ``graph``'s nodes, given its ``constants`` (initializers) and the
    importer's checked ``tensor_array`` for ``Constant`` nodes. Returns each GELU as the
    index of its last node -> the name of ``x``, and the other nodes the GELUs absorb."""
    gelu: dict[int, str] = {}
    absorbed: set[int] = set()
    nodes = list(graph.node)
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    users: dict[str, list[int]] = {}
    for i, n in enumerate(nodes):
        for name in n.input:
            users.setdefault(name, []).append(i)
    outputs = {o.name for o in graph.output}
    consts = dict(constants)
    for n in nodes:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            consts[n.output[0]] = tensor_array(n.attribute[0].t, f"constant '{n.output[0]}'")

    def const_is(name: str, value: float) -> bool:
        v = consts.get(name)
        if v is None or v.size != 1 or not np.issubdtype(v.dtype, np.floating):
            return False
        # Equal up to the rounding of the constant's own type (sqrt 2 in f16 is 1.414).
        return math.isclose(float(v.reshape(-1)[0]), value, rel_tol=2 * float(np.finfo(v.dtype).eps))

    def single_user(name: str) -> int | None:
        u = users.get(name, [])
        return u[0] if len(u) == 1 and name not in outputs else None

    def other(node: onnx.NodeProto, name: str) -> str | None:
        ins = list(node.input)
        if len(ins) != 2 or name not in ins:
            return None
        return ins[1] if ins[0] == name else ins[0]

    for ei, erf in enumerate(nodes):
        if erf.op_type != "Erf" or erf.input[0] not in producer:
            continue
        si = producer[erf.input[0]]
        scale = nodes[si]
        if scale.op_type == "Div" and const_is(scale.input[1], math.sqrt(2)):
            x = scale.input[0]
        elif scale.op_type == "Mul" and len(scale.input) == 2:
            a, b = scale.input
            x = a if const_is(b, 1 / math.sqrt(2)) else b if const_is(a, 1 / math.sqrt(2)) \
                else None
        else:
            x = None
        if x is None or single_user(scale.output[0]) != ei:
            continue
        ai = single_user(erf.output[0])
        if ai is None or nodes[ai].op_type != "Add" or not const_is(
                other(nodes[ai], erf.output[0]) or "", 1.0):
            continue
        mi = single_user(nodes[ai].output[0])
        if mi is None or nodes[mi].op_type != "Mul":
            continue
        m = nodes[mi]
        t = other(m, nodes[ai].output[0])
        pattern = [si, ei, ai, mi]
        if t == x:  # (x * (1 + erf)) * 0.5
            fi = single_user(m.output[0])
            if fi is None or nodes[fi].op_type != "Mul" or not const_is(
                    other(nodes[fi], m.output[0]) or "", 0.5):
                continue
            pattern.append(fi)
        elif t is not None and const_is(t, 0.5):  # x * ((1 + erf) * 0.5)
            fi = single_user(m.output[0])
            if fi is None or nodes[fi].op_type != "Mul" or other(nodes[fi], m.output[0]) != x:
                continue
            pattern.append(fi)
        elif t in producer and nodes[producer[t]].op_type == "Mul":  # (x * 0.5) * (1 + erf)
            hi = producer[t]
            if other(nodes[hi], x) is None or not const_is(other(nodes[hi], x), 0.5) or \
                    single_user(t) != mi:
                continue
            pattern.append(hi)
            fi = mi
        else:
            continue
        final = max(pattern)
        gelu[final] = x
        absorbed.update(i for i in pattern if i != final)
    return gelu, absorbed


