"""A ``torch.export`` ``ExportedProgram`` as a ``func.func @main`` of ``nn`` ops.

The ATen graph is converted node by node, as TVM's ``from_exported_program`` does (no
ONNX in between): parameters and buffers become ``nn.constant``s, user inputs become the
function's arguments (a ``torch.export.Dim`` dimension is a ``?``), and each ATen op one or
a few nn ops, each located at the node it came from (``aten.linear.default @ linear_1``).
An ATen op with no conversion is an error naming it and where it is, not a crash.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, NameLoc, StringAttr, TensorType, UnknownLoc
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.utils.exceptions import VerifyException

from partita.dialects import nn
from partita.dialects.nn.base import element_type_of, numpy_dtype
from partita.frontends.torch.aten import ATEN_CONVERTERS, first_result, np_dtype, static_dims
from partita.ir.budget import charge
from partita.ir.diagnostics import PartitaError

__all__ = ["import_exported_program"]


class _Importer:
    def __init__(self, program: Any, source: str):
        self.program = program
        self.source = source
        self.block = Block()
        self.values: dict[str, Any] = {}
        self.location: NameLoc | None = None
        self.sym_sources: dict[Any, tuple[SSAValue, int]] = {}
        """Each symbolic dim of the inputs (a sympy symbol) and the input axis it is."""

    def emit(self, op: Operation) -> SSAValue:
        if self.location is not None:
            op.location = self.location
        self.block.add_op(op)
        return op.results[0]

    def constant(self, value: Any, like: SSAValue | None = None) -> SSAValue:
        """A tensor, a NumPy array (as it is) or a Python number (of ``like``'s element
        type, else f32) as an nn.constant."""
        if hasattr(value, "detach"):
            array = value.detach().cpu().contiguous().numpy()
        elif isinstance(value, np.ndarray):
            array = value
        else:
            dtype = np.float32
            if like is not None:
                dtype = numpy_dtype(like.type.element_type)  # type: ignore[attr-defined]
            array = np.asarray(value, dtype=dtype)
        try:  # the constant's attribute is a copy: charged like the ONNX import's folds
            charge(array.nbytes, "materializing it as a constant at import")
        except PartitaError as err:
            raise PartitaError(err.message, self.location or self.source) from None
        return self.emit(nn.ConstantOp(np.ascontiguousarray(array)))

    def tensor(self, value: Any, like: SSAValue | None = None) -> SSAValue:
        return value if isinstance(value, SSAValue) else self.constant(value, like)

    def arg(self, value: Any) -> Any:
        """A node argument: graph nodes become their values, lists are mapped."""
        import torch.fx

        if isinstance(value, torch.fx.Node):
            return self.values[value.name]
        if isinstance(value, (list, tuple)):
            return type(value)(self.arg(v) for v in value)
        return value

    def output_shape(self, node: Any) -> list[int]:
        return static_dims(first_result(node).shape)

    def sized_shape(self, node: Any) -> tuple[list[int], list[tuple[SSAValue, int, int]]]:
        """The node's result shape with ``?`` for its symbolic dims, and the shape
        references that size them (``sized_dims``)."""
        return self.sized_dims(first_result(node).shape)

    def sized_dims(self, dims: Sequence[Any]) -> tuple[list[int], list[tuple[SSAValue, int, int]]]:
        """``dims`` (ints and ``SymInt``s) with ``?`` for the symbolic ones, and the shape
        references that size them: a dim that is one of the inputs' symbols (a
        ``torch.export.Dim``) is that input's dim; a compound one (``s0 * s1``) has none
        (an op infers at most one such)."""
        shape, refs = [], []
        for k, d in enumerate(dims):
            expr = getattr(getattr(d, "node", None), "expr", None)
            if expr is None:
                shape.append(int(d))
            elif expr.is_number:
                shape.append(int(expr))
            else:
                shape.append(nn.DYN)
                if expr in self.sym_sources:
                    refs.append((*self.sym_sources[expr], k))
        return shape, refs

    def run(self) -> ModuleOp:
        import torch

        program = self.program
        specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
        user_inputs, arg_types = [], []
        for node in program.graph.nodes:
            if node.op != "placeholder":
                continue
            spec = specs.get(node.name)
            kind = spec.kind.name if spec is not None else "USER_INPUT"
            if kind == "USER_INPUT":
                fake = node.meta["val"]
                if not isinstance(fake, torch.Tensor):
                    raise PartitaError(f"input '{node.name}' is not a tensor ({type(fake).__name__}); "
                                       "pass only tensors as example inputs")
                typ = TensorType(element_type_of(np_dtype(fake.dtype)), static_dims(fake.shape))
                arg = self.block.insert_arg(typ, len(self.block.args))
                arg.name_hint = node.name
                self.values[node.name] = arg
                for axis, d in enumerate(fake.shape):
                    expr = getattr(getattr(d, "node", None), "expr", None)
                    if expr is not None and expr.is_Symbol:
                        self.sym_sources.setdefault(expr, (arg, axis))
                user_inputs.append(node.name)
                arg_types.append(typ)
            else:  # PARAMETER, BUFFER, CONSTANT_TENSOR: weights, folded into the module
                target = spec.target
                value = program.state_dict.get(target)
                if value is None:
                    value = program.constants.get(target)
                if value is None:
                    raise PartitaError(f"the exported program has no value for '{target}'")
                self.location = NameLoc(StringAttr(f"{self.source}: {target}"), UnknownLoc())
                self.values[node.name] = self.constant(value)
        results: list[SSAValue] = []
        for node in program.graph.nodes:
            if node.op == "call_function":
                self.location = NameLoc(StringAttr(f"{self.source}: {_describe(node)}"), UnknownLoc())
                if _is_symbolic_scalar(node):  # sizes and their arithmetic: the export's SymInt
                    self.values[node.name] = node.meta["val"]
                    continue
                name = _target_name(node.target)
                convert = ATEN_CONVERTERS.get(name)
                if convert is None:
                    raise PartitaError(f"ATen op '{name}' has no conversion to nn yet",
                                       f"{self.source}: {_describe(node)}")
                try:
                    self.values[node.name] = convert(self, node, list(self.arg(node.args)), self.arg(dict(node.kwargs)))
                except PartitaError:
                    raise
                except (ValueError, TypeError, NotImplementedError, VerifyException, AttributeError, IndexError,
                        KeyError) as err:  # a form of the op its converter does not take
                    raise PartitaError(f"cannot convert '{_target_name(node.target)}': {err}",
                                       f"{self.source}: {_describe(node)}") from None
            elif node.op == "output":
                outputs = node.args[0]
                results = [self.values[o.name] for o in outputs]
        for value in results:
            if not isinstance(value, SSAValue):
                raise PartitaError("the model returns something that is not a tensor computed from its inputs")
        self.block.add_op(func.ReturnOp(*results))
        function = func.FuncOp("main", (arg_types, [r.type for r in results]), Region(self.block))
        return ModuleOp([function])


def _is_symbolic_scalar(node: Any) -> bool:
    """A node computing a size or a check on sizes (``sym_size``, ``s0 * 4``, ``torch._check``):
    its value is the fake ``SymInt`` / ``SymBool`` the export recorded (shape rules read the
    sizes from the tensors' fake shapes, never from these)."""
    import torch

    val = node.meta.get("val")
    return isinstance(val, (torch.SymInt, torch.SymBool, torch.SymFloat)) or (
        val is None and _target_name(node.target) in ("aten._assert_scalar.default", "aten.sym_constrain_range_for_size.default"))


def _target_name(target: Any) -> str:
    if target is operator.getitem:
        return "getitem"
    return str(target)


def _describe(node: Any) -> str:
    return f"{_target_name(node.target)} @ {node.name}"


def import_exported_program(program: Any, source: str = "torch.export") -> ModuleOp:
    """The ``nn`` module of an ``ExportedProgram`` (its entry is ``@main``). A program
    that writes in place (``x[:, 0].mul_(2)``, through a view) is functionalized first
    (``run_decompositions`` with no decomposition: the writes become ``slice_scatter`` and
    copies), so every value is computed once."""
    if any(_mutates(node) for node in program.graph.nodes):
        program = program.run_decompositions(decomp_table={})
    return _Importer(program, source).run()


def _mutates(node: Any) -> bool:
    schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
    return schema is not None and schema.is_mutable
