"""The ``byoc`` dialect: partitions, targets and the artifacts of external codegen.

A partition exists in three forms (README, "Dialects"): an inline ``byoc.partition`` region, an
outlined ``func.func`` carrying the partition attributes, and an extern declaration. The
attributes below are *discardable* attributes, exactly as TVM keeps them on a Relay
function, so that moving between the forms copies one dictionary and loses nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    DictionaryAttr,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    NoneAttr,
    StringAttr,
    SymbolNameConstraint,
    SymbolRefAttr,
    TensorType,
    i64,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, Region, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    param_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import (
    HasParent,
    IsolatedFromAbove,
    IsTerminator,
    SymbolOpInterface,
    SymbolTable,
    SymbolUserOpInterface,
)
from xdsl.utils.exceptions import VerifyException

from partita.ir.verifier import register_attribute_verifier, register_symbol_check
from partita.target import Target, TargetError, get_target_kind, is_registered

# Discardable attribute names: the public interface shared with TVM's vocabulary.
COMPILER = "byoc.compiler"
"""Name of the external codegen that compiles a partition (a target kind name)."""
GLOBAL_SYMBOL = "byoc.global_symbol"
"""The symbol the partition's compiled code is exported under."""
PRIMITIVE = "byoc.primitive"
"""The partition is a unit of compilation: never fused or split further."""
INLINE = "byoc.inline"
"""The Graph/AOT flows may inline the partition back into its caller."""
EXTERN = "byoc.extern"
"""The function's body was compiled elsewhere: only a declaration remains."""
COMPOSITE = "byoc.composite"
"""Pattern name (``<backend>.<pattern>``) a composite function or region matched."""
TARGET = "byoc.target"
"""Where the function runs: the single source of truth (a ``#byoc.target``)."""
SHAPE_FUNC = "byoc.shape_func"
"""On a ``byoc.call_extern``: the function (``@<name>_shape_func``, by convention) that
computed its dynamic output dimensions (the declaration itself keeps only ``byoc.extern``)."""
REFERENCE_IMPL = "byoc.reference_impl"
"""On the private sibling ``@<name>_reference`` that keeps an extern function's body: the
extern function it implements (``= @<name>``). Used to emulate the external code on the
CPU when no device is present, and to derive shape functions."""
HOST_BODY = "byoc.host_body"
"""On a private function the host runs through the reference interpreter as it is: the
body of an ``nn.loop``, which names it. No pass partitions, fuses, lowers, inlines or
deletes it (``kept_for_reference``)."""


def kept_for_reference(func: FuncOp) -> bool:
    """Whether ``func`` is a body the reference interpreter runs as it is (an extern
    function's ``@<name>_reference`` sibling, or a host-run body): no pass compiles it."""
    return REFERENCE_IMPL in func.attributes or HOST_BODY in func.attributes


TIED_OPERAND = "byoc.tied_operand"
"""On a function's result (MLIR's result attributes, IREE's tied operands): the index of
the operand whose buffer the result is written into in place. The function writes only the
part it changes (a KV cache's new rows), so every caller must pass a buffer it no longer
reads, and ``lower-extern-calls`` makes that operand the call's ``outs``."""

PARTITION_ATTRS = (COMPILER, GLOBAL_SYMBOL, PRIMITIVE, INLINE, COMPOSITE, TARGET)
REFERENCE_SUFFIX = "_reference"
"""``@<name>_reference``: the private sibling keeping extern function ``@<name>``'s body."""


def reference_name(extern_name: str) -> str:
    """Name of the private sibling keeping the body of extern function ``extern_name``."""
    return extern_name + REFERENCE_SUFFIX


# --------------------------------------------------------------------------------------
# Target attribute
# --------------------------------------------------------------------------------------


def _option_to_attr(value: Any) -> Attribute:
    if isinstance(value, bool):
        return BoolAttr.from_bool(value)
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if isinstance(value, float):
        return FloatAttr(value, 64)
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, list | tuple):
        return ArrayAttr([_option_to_attr(v) for v in value])
    raise TypeError(f"cannot represent target option value {value!r} as an attribute")


def _attr_to_option(attr: Attribute) -> Any:
    if isinstance(attr, IntegerAttr):
        width = attr.type.width.data if isinstance(attr.type, IntegerType) else 64
        return bool(attr.value.data) if width == 1 else attr.value.data
    if isinstance(attr, FloatAttr):
        return attr.value.data
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, ArrayAttr):
        return [_attr_to_option(a) for a in attr.data]
    raise VerifyException(f"unsupported target option value {attr}")


@irdl_attr_definition
class TargetAttr(ParametrizedAttribute):
    """``#byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>``.

    Kind name, the explicitly set options, and optionally the host target. Options that
    are left at their defaults are not stored, so printing is canonical.
    """

    name = "byoc.target"

    kind: StringAttr = param_def()
    options: DictionaryAttr = param_def()
    host: Attribute = param_def()  # TargetAttr | NoneAttr

    def __init__(
        self,
        kind: str | StringAttr,
        options: DictionaryAttr | Mapping[str, Attribute] | None = None,
        host: TargetAttr | None = None,
    ):
        if isinstance(kind, str):
            kind = StringAttr(kind)
        if not isinstance(options, DictionaryAttr):
            options = DictionaryAttr(dict(options or {}))
        super().__init__(kind, options, NoneAttr() if host is None else host)

    @property
    def host_target(self) -> TargetAttr | None:
        return self.host if isinstance(self.host, TargetAttr) else None

    @staticmethod
    def from_target(target: Target) -> TargetAttr:
        options = {k: _option_to_attr(v) for k, v in sorted(target.options.items())}
        host = TargetAttr.from_target(target.host) if target.host is not None else None
        return TargetAttr(target.kind.name, options, host)

    def to_target(self) -> Target:
        """The Python ``Target`` this attribute spells; raises ``TargetError`` if invalid."""
        options = {k: _attr_to_option(v) for k, v in self.options.data.items()}
        host = self.host_target.to_target() if self.host_target is not None else None
        return Target.from_dict(self.kind.data, options, host)

    def without_host(self) -> TargetAttr:
        return TargetAttr(self.kind, self.options)

    def verify(self) -> None:
        if not isinstance(self.host, TargetAttr | NoneAttr):
            raise VerifyException("the host of a #byoc.target must be a #byoc.target")
        try:
            self.to_target()
        except TargetError as err:
            raise VerifyException(str(err)) from err

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        with parser.in_angle_brackets():
            kind = StringAttr(parser.parse_str_literal("target kind name"))
            options = DictionaryAttr({})
            host: Attribute = NoneAttr()
            while parser.parse_optional_punctuation(",") is not None:
                if parser.parse_optional_keyword("host") is not None:
                    parser.parse_punctuation("=")
                    host = parser.parse_attribute()
                else:
                    options = DictionaryAttr(parser.parse_optional_dictionary_attr_dict())
        return (kind, options, host)

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string_literal(self.kind.data)
            if self.options.data:
                printer.print_string(", ")
                printer.print_attr_dict(self.options.data)
            if isinstance(self.host, TargetAttr):
                printer.print_string(", host = ")
                printer.print_attribute(self.host)


# --------------------------------------------------------------------------------------
# Verification of the discardable attributes
# --------------------------------------------------------------------------------------


def verify_partition_attributes(attributes: Mapping[str, Attribute]) -> None:
    """Checks the ``byoc.*`` attributes shared by partition functions and regions."""
    if (compiler := attributes.get(COMPILER)) is not None:
        if not isinstance(compiler, StringAttr):
            raise VerifyException(f"'{COMPILER}' must be a string")
        name = compiler.data
        if not is_registered(name) or not get_target_kind(name).is_external_codegen:
            raise VerifyException(
                f"'{COMPILER}' names '{name}', which is not a registered external codegen target kind"
            )
    for name in (GLOBAL_SYMBOL, COMPOSITE):
        if name in attributes and not isinstance(attributes[name], StringAttr):
            raise VerifyException(f"'{name}' must be a string")
    if TARGET in attributes and not isinstance(attributes[TARGET], TargetAttr):
        raise VerifyException(f"'{TARGET}' must be a #byoc.target attribute")


def verify_function_attributes(func: FuncOp) -> None:
    """Dialect-attribute verification for ``func.func`` (MLIR's verifyOperationAttribute):
    xDSL has no hook for discardable attributes, so the project verifier calls this."""
    attributes = func.attributes
    if EXTERN in attributes and func.body.blocks:
        raise VerifyException(f"'{EXTERN}' is only allowed on a body-less function declaration")
    verify_partition_attributes(attributes)


def tied_operand(function: FuncOp, result: int = 0) -> int | None:
    """The operand ``function``'s result ``result`` is tied to (``TIED_OPERAND``), if any."""
    attrs = function.res_attrs
    if attrs is None or result >= len(attrs.data):
        return None
    attr = attrs.data[result].data.get(TIED_OPERAND)  # type: ignore[union-attr]
    return attr.value.data if isinstance(attr, IntegerAttr) else None


def is_extern(op: Operation | None) -> bool:
    """A ``byoc.extern`` declaration: its body was compiled elsewhere."""
    return isinstance(op, FuncOp) and EXTERN in op.attributes and not op.body.blocks


def is_partition_function(op: Operation, compiler: str | None = None) -> bool:
    """A ``func.func`` with a body and ``byoc.compiler`` (equal to ``compiler`` if given)."""
    if not isinstance(op, FuncOp) or not op.body.blocks:
        return False
    attr = op.attributes.get(COMPILER)
    return isinstance(attr, StringAttr) and (compiler is None or attr.data == compiler)


def compiler_functions(module: Operation, compiler: str) -> list[FuncOp]:
    """The partition functions of ``compiler`` among ``module``'s top-level ops, in order."""
    return [op for op in module.regions[0].block.ops if is_partition_function(op, compiler)]  # type: ignore[misc]


def partition_attributes(op: Operation) -> dict[str, Attribute]:
    """The ``byoc.*`` attributes of a partition function or region, and those of its
    compiler's own namespace (``cutlass.kernel`` for ``byoc.compiler = "cutlass"``), in a
    fresh dict: what outlining and inlining carry between the two."""
    compiler = op.attributes.get(COMPILER)
    own = f"{compiler.data}." if isinstance(compiler, StringAttr) else "byoc."
    return {k: v for k, v in op.attributes.items() if k.startswith("byoc.") or k.startswith(own)}


# --------------------------------------------------------------------------------------
# Operations
# --------------------------------------------------------------------------------------


def _verify_yield(op: Operation, region: Region, result_types: Sequence[Attribute]) -> None:
    terminator = region.block.last_op
    if not isinstance(terminator, YieldOp):
        raise VerifyException(f"'{op.name}' region must end with 'byoc.yield'")
    if tuple(terminator.values.types) != tuple(result_types):
        raise VerifyException(
            f"'byoc.yield' types ({', '.join(map(str, terminator.values.types))}) do not match "
            f"the results of '{op.name}' ({', '.join(map(str, result_types))})"
        )


@irdl_op_definition
class PartitionOp(IRDLOperation):
    """A partition function inlined into its caller (TVM's ``Compiler``-attributed local
    function). The region is isolated from above: its block arguments stand for the
    operands, so outlining it is a move, not an analysis.

    Syntax (operands, the partition attributes, the region, the function type)::

        %0 = byoc.partition(%x, %w) {byoc.compiler = "cutlass", ...} ({
        ^bb0(%a: tensor<...>, %b: tensor<...>):
          ...
          byoc.yield %1 : tensor<...>
        }) : (tensor<...>, tensor<...>) -> tensor<...>
    """

    name = "byoc.partition"

    inputs = var_operand_def()
    outputs = var_result_def()
    body = region_def("single_block")

    traits = traits_def(IsolatedFromAbove())

    def __init__(
        self,
        inputs: Sequence[SSAValue | Operation],
        result_types: Sequence[Attribute],
        body: Region,
        attributes: Mapping[str, Attribute] | None = None,
    ):
        super().__init__(
            operands=[inputs], result_types=[result_types], regions=[body], attributes=dict(attributes or {})
        )

    @property
    def compiler(self) -> str | None:
        attr = self.attributes.get(COMPILER)
        return attr.data if isinstance(attr, StringAttr) else None

    @property
    def global_symbol(self) -> str | None:
        attr = self.attributes.get(GLOBAL_SYMBOL)
        return attr.data if isinstance(attr, StringAttr) else None

    def verify_(self) -> None:
        block = self.body.block
        if tuple(block.arg_types) != tuple(self.inputs.types):
            raise VerifyException(
                "block argument types ("
                + ", ".join(map(str, block.arg_types))
                + ") do not match the operand types ("
                + ", ".join(map(str, self.inputs.types))
                + ")"
            )
        _verify_yield(self, self.body, self.outputs.types)
        verify_partition_attributes(self.attributes)

    @classmethod
    def parse(cls, parser: Parser) -> PartitionOp:
        inputs = parser.parse_comma_separated_list(
            parser.Delimiter.PAREN, parser.parse_unresolved_operand
        )
        attributes = parser.parse_optional_attr_dict()
        parser.parse_punctuation("(")
        body = parser.parse_region()
        parser.parse_punctuation(")")
        parser.parse_punctuation(":")
        function_type = parser.parse_function_type()
        operands = parser.resolve_operands(inputs, function_type.inputs.data, parser.pos)
        return cls(operands, function_type.outputs.data, body, attributes)

    def print(self, printer: Printer) -> None:
        printer.print_string("(")
        printer.print_list(self.inputs, printer.print_operand)
        printer.print_string(")")
        if self.attributes:
            printer.print_string(" ")
            printer.print_attr_dict(self.attributes)
        printer.print_string(" (")
        printer.print_region(self.body, print_entry_block_args=True, print_empty_block=True)
        printer.print_string(") : ")
        printer.print_function_type(self.inputs.types, self.outputs.types)


@irdl_op_definition
class OnTargetOp(IRDLOperation):
    """"Run this part on that device" inside a function (TVM's ``T.target()`` delegation).

    Not isolated: it reads values from the enclosing function; ``split-host-device``
    outlines it into a function of its own with those values as parameters.
    """

    name = "byoc.on_target"

    target = prop_def(TargetAttr)
    outputs = var_result_def()
    body = region_def("single_block")

    assembly_format = "qualified($target) attr-dict-with-keyword (`->` type($outputs)^)? $body"

    def __init__(self, target: TargetAttr, result_types: Sequence[Attribute], body: Region):
        super().__init__(properties={"target": target}, result_types=[result_types], regions=[body])

    def verify_(self) -> None:
        _verify_yield(self, self.body, self.outputs.types)


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminates a ``byoc.partition`` or ``byoc.on_target`` region with its results."""

    name = "byoc.yield"

    values = var_operand_def()

    traits = traits_def(IsTerminator(), HasParent(PartitionOp, OnTargetOp))

    assembly_format = "attr-dict ($values^ `:` type($values))?"

    def __init__(self, *values: SSAValue | Operation):
        super().__init__(operands=[values])


@irdl_op_definition
class AllocTensorOp(IRDLOperation):
    """Allocates the output of an extern call ahead of it, one ``index`` per ``?`` dim."""

    name = "byoc.alloc_tensor"

    dynamic_sizes = var_operand_def(IndexType)
    result = result_def(TensorType)

    assembly_format = "`(` $dynamic_sizes `)` attr-dict `:` type($result)"

    def __init__(self, result_type: TensorType, dynamic_sizes: Sequence[SSAValue | Operation] = ()):
        super().__init__(operands=[dynamic_sizes], result_types=[result_type])

    def verify_(self) -> None:
        assert isinstance(self.result.type, TensorType)
        n_dynamic = sum(1 for d in self.result.type.get_shape() if d < 0)
        if n_dynamic != len(self.dynamic_sizes):
            raise VerifyException(
                f"expected {n_dynamic} dynamic size operand(s) for {self.result.type}, got {len(self.dynamic_sizes)}"
            )


SymbolLookup = Callable[[Operation, SymbolRefAttr], "Operation | None"]
"""Resolves a symbol reference from an op (``SymbolTable.lookup_symbol`` or an index)."""


def check_call_extern(op: Operation, lookup: SymbolLookup) -> None:
    """The callee of a ``byoc.call_extern`` is a function marked extern with its types, and
    the results are the ``outs``' types (also run by the module verifier with its index)."""
    assert isinstance(op, CallExternOp)
    callee = lookup(op, op.callee)
    if not isinstance(callee, FuncOp):
        raise VerifyException(f"'{op.callee}' does not reference a function")
    if EXTERN not in callee.attributes:
        raise VerifyException(f"'{op.callee}' is not marked '{EXTERN}'")
    ins, outs = callee.function_type.inputs.data, callee.function_type.outputs.data
    if tuple(op.inputs.types) != tuple(ins) or tuple(op.results.types) != tuple(outs):
        raise VerifyException(f"types do not match the signature of '{op.callee}'")
    if tuple(op.outs.types) != tuple(op.res.types):
        raise VerifyException("the result types must equal the types of the 'outs' operands")


class CallExternSymbolUser(SymbolUserOpInterface):
    def verify(self, op: Operation) -> None:
        check_call_extern(op, SymbolTable.lookup_symbol)


@irdl_op_definition
class CallExternOp(IRDLOperation):
    """An explicit runtime call of an extern function in destination-passing style: the
    outputs are allocated before the call (TVM's TECompiler lowering of a call)."""

    name = "byoc.call_extern"

    callee = prop_def(SymbolRefAttr)
    inputs = var_operand_def()
    outs = var_operand_def(TensorType)
    res = var_result_def(TensorType)

    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    traits = traits_def(CallExternSymbolUser())

    assembly_format = (
        "$callee `(` $inputs `)` `outs` `(` $outs `)` attr-dict "
        "`:` functional-type($inputs, $res) `,` type($outs)"
    )

    def __init__(
        self,
        callee: str | SymbolRefAttr,
        inputs: Sequence[SSAValue | Operation],
        outs: Sequence[SSAValue | Operation],
    ):
        if isinstance(callee, str):
            callee = SymbolRefAttr(callee)
        out_types = [SSAValue.get(o).type for o in outs]
        super().__init__(
            operands=[inputs, outs], result_types=[out_types], properties={"callee": callee}
        )



DIGEST = "sha256"
"""The ``byoc.binary`` attribute holding the sha256 of the binary's bytes."""


#: Checks of a ``byoc.binary``'s kernel records, each raising ``ValueError`` on a record it
#: cannot decode. A record is decoded by the lowering that wrote it, which sits above this
#: dialect, so the lowering registers its check (``register_record_check``) on import.
_RECORD_CHECKS: list[Callable[[Attribute], None]] = []


def register_record_check(check: Callable[[Attribute], None]) -> None:
    """Make ``byoc.binary``'s verifier run ``check`` on every kernel record."""
    if check not in _RECORD_CHECKS:
        _RECORD_CHECKS.append(check)


@irdl_op_definition
class BinaryOp(IRDLOperation):
    """A compiled artifact of external codegen, kept in the module beside the extern
    declarations it implements (the runtime module of TVM's BYOC flow).

    The attribute dictionary records what the runtime needs: ``format`` (``"cubin"``),
    ``target``, its cache ``key``, ``sha256`` (the digest of the bytes, which names them in
    the content-addressed cubin cache and is checked before they reach the driver),
    ``nvrtc`` (the compiler's version), ``cache_dir`` only when compiled into a cache other
    than the default one (``path`` in IR written before), and ``kernels``: per extern
    function, a dictionary with the entry name and launch description, verified here.
    """

    name = "byoc.binary"

    sym_name = prop_def(SymbolNameConstraint())

    traits = traits_def(SymbolOpInterface())

    assembly_format = "$sym_name attr-dict-with-keyword"

    FORMATS: ClassVar[tuple[str, ...]] = ("cubin", "ptx", "library", "onnx")
    """``library``: records of library calls (cuBLASLt, cuDNN); ``onnx``: TensorRT sub-models."""
    INLINE_FORMATS: ClassVar[tuple[str, ...]] = ("library", "onnx")
    """Formats held whole by the op's records (no file, no bytes beside the IR)."""

    @property
    def is_inline(self) -> bool:
        fmt = self.attributes.get("format")
        return isinstance(fmt, StringAttr) and fmt.data in self.INLINE_FORMATS

    def __init__(self, sym_name: str, attributes: Mapping[str, Attribute]):
        super().__init__(properties={"sym_name": StringAttr(sym_name)}, attributes=dict(attributes))

    def verify_(self) -> None:
        fmt = self.attributes.get("format")
        if not isinstance(fmt, StringAttr) or fmt.data not in self.FORMATS:
            raise VerifyException(f"'byoc.binary' needs a 'format' attribute, one of {', '.join(self.FORMATS)}")
        kernels = self.attributes.get("kernels")
        if not isinstance(kernels, DictionaryAttr):
            raise VerifyException("'byoc.binary' needs a 'kernels' dictionary")
        for name in ("path", "cache_dir", "nvrtc", "key", "arch"):
            if name in self.attributes and not isinstance(self.attributes[name], StringAttr):
                raise VerifyException(f"'byoc.binary' attribute '{name}' must be a string")
        digest = self.attributes.get(DIGEST)
        if digest is not None and not (
            isinstance(digest, StringAttr) and len(digest.data) == 64 and all(c in "0123456789abcdef" for c in digest.data)
        ):
            raise VerifyException(f"'byoc.binary' attribute '{DIGEST}' must be a sha256 hex digest")
        for function, record in kernels.data.items():
            for check in _RECORD_CHECKS:
                try:
                    check(record)
                except ValueError as err:
                    raise VerifyException(f"kernel record of @{function}: {err}") from None


register_attribute_verifier("byoc", verify_function_attributes)
register_symbol_check(CallExternOp, check_call_extern)

BYOC = Dialect(
    "byoc",
    [PartitionOp, YieldOp, OnTargetOp, AllocTensorOp, CallExternOp, BinaryOp],
    [TargetAttr],
)

__all__ = [
    "BYOC",
    "COMPILER",
    "COMPOSITE",
    "DIGEST",
    "EXTERN",
    "GLOBAL_SYMBOL",
    "HOST_BODY",
    "INLINE",
    "PRIMITIVE",
    "REFERENCE_IMPL",
    "REFERENCE_SUFFIX",
    "SHAPE_FUNC",
    "TARGET",
    "TIED_OPERAND",
    "AllocTensorOp",
    "BinaryOp",
    "CallExternOp",
    "OnTargetOp",
    "PartitionOp",
    "TargetAttr",
    "YieldOp",
    "compiler_functions",
    "is_extern",
    "is_partition_function",
    "kept_for_reference",
    "partition_attributes",
    "reference_name",
    "register_record_check",
    "tied_operand",
    "verify_function_attributes",
    "verify_partition_attributes",
]
