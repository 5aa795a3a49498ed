"""GELU matching (the erf form and the tanh approximation) on the ONNX graph, before conversion."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import onnx


def match_gelu(
    graph: onnx.GraphProto,
    constants: Mapping[str, np.ndarray],
    tensor_array: Callable[[onnx.TensorProto, str], np.ndarray],
) -> tuple[dict[int, tuple[str, str]], set[int]]:
    """Find the GELUs among ``graph``'s nodes, given its ``constants`` (initializers) and the
    importer's checked ``tensor_array`` for ``Constant`` nodes:

    * the erf form ``x * 0.5 * (1 + Erf(x / sqrt 2))`` (Div by sqrt 2 or Mul by 1/sqrt 2);
    * the tanh approximation ``x * 0.5 * (1 + Tanh(sqrt(2 / pi) * (x + 0.044715 *
      Pow(x, 3))))`` (GPT-2's and Hugging Face's ``gelu_new``; ``nn.gelu`` with
      ``approximate = "tanh"``, which CUTLASS's ``GELU_taylor`` epilogue computes);

    any Mul and Add operand order, the 0.5 applied first, last or to ``1 + ...``. Returns
    each GELU as the index of its last node -> (the name of ``x``, ``approximate``), and
    the other nodes the GELUs absorb."""
    gelu: dict[int, tuple[str, str]] = {}
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

    def scaled(index: int, factor: float) -> str | None:
        """``y`` when node ``index`` is ``Mul(y, factor)`` (either order)."""
        n = nodes[index]
        if n.op_type != "Mul" or len(n.input) != 2:
            return None
        a, b = n.input
        return a if const_is(b, factor) else b if const_is(a, factor) else None

    def erf_argument(si: int) -> str | None:
        """``x`` when node ``si`` is ``x / sqrt 2`` or ``x * (1 / sqrt 2)``."""
        scale = nodes[si]
        if scale.op_type == "Div" and const_is(scale.input[1], math.sqrt(2)):
            return scale.input[0]
        return scaled(si, 1 / math.sqrt(2))

    def tanh_argument(si: int) -> tuple[str, list[int]] | None:
        """``(x, nodes)`` when node ``si`` is ``sqrt(2 / pi) * (x + 0.044715 * x ** 3)``."""
        inner = scaled(si, math.sqrt(2 / math.pi))
        ai = producer.get(inner or "")
        if ai is None or nodes[ai].op_type != "Add" or single_user(inner) != si:
            return None
        for cube_term in nodes[ai].input:
            x = other(nodes[ai], cube_term)
            ci = producer.get(cube_term)
            if x is None or ci is None or single_user(cube_term) != ai:
                continue
            cube = scaled(ci, 0.044715)
            pi = producer.get(cube or "")
            if pi is None or single_user(cube) != ci:
                continue
            p = nodes[pi]
            if p.op_type == "Pow" and p.input[0] == x and const_is(p.input[1], 3.0):
                return x, [si, ai, ci, pi]
        return None

    for ei, unit in enumerate(nodes):
        if unit.op_type not in ("Erf", "Tanh") or unit.input[0] not in producer:
            continue
        si = producer[unit.input[0]]
        if single_user(unit.input[0]) != ei:
            continue
        if unit.op_type == "Erf":
            x, pattern, approximate = erf_argument(si), [si, ei], "none"
        else:
            found = tanh_argument(si)
            if found is None:
                continue
            x, pattern, approximate = found[0], [*found[1], ei], "tanh"
        if x is None:
            continue
        ai = single_user(unit.output[0])
        if ai is None or nodes[ai].op_type != "Add" or not const_is(
                other(nodes[ai], unit.output[0]) or "", 1.0):
            continue
        mi = single_user(nodes[ai].output[0])
        if mi is None or nodes[mi].op_type != "Mul":
            continue
        m = nodes[mi]
        t = other(m, nodes[ai].output[0])
        pattern += [ai, mi]
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
        gelu[final] = (x, approximate)
        absorbed.update(i for i in pattern if i != final)
    return gelu, absorbed
