"""Global symbol caches: which function name a ``byoc.partition`` is outlined under.

TVM's ``OutlineCompilerFunctionsWithExistingGlobalSymbols`` names each function after the
partition's ``global_symbol``; Collage instead shares one function among equal candidates.
Both are one interface, ``GlobalSymbolCache.symbol_for(partition) -> str``, so
``outline_partitions`` (and the Collage partitioner) need not know the policy:

- ``ExistingGlobalSymbolCache``: the partition's ``byoc.global_symbol``; none is an error.
- ``StructuralDedupCache``: structurally equal partitions (same body, types and
  attributes other than the global symbol) get the same name. Candidates are bucketed by
  ``structural_hash`` and confirmed with structural equality, so n partitions cost O(n).

Fresh names come from ``FreshSymbolNames``, deterministic and never clashing with a
symbol of the module or a global symbol some partition already asks for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Attribute, Operation, Region

from partita.dialects.byoc import GLOBAL_SYMBOL, PartitionOp
from partita.ir import op_error, symbol_name
from partita.ir.structural import attributes_digest, structural_hash, structurally_equal

__all__ = [
    "ExistingGlobalSymbolCache",
    "FreshSymbolNames",
    "GlobalSymbolCache",
    "StructuralDedupCache",
    "partition_key",
    "partitions_equal",
    "symbol_name",
    "taken_symbols",
]


class GlobalSymbolCache(Protocol):
    """Names the function a partition is outlined to. Equal names mean one function.

    A cache may set ``confirms_equality = True`` when it only gives one name to
    structurally equal partitions; the outliner then does not compare again against the
    functions it created itself in the same run (it still checks pre-existing ones).
    """

    def symbol_for(self, partition: PartitionOp) -> str: ...


def taken_symbols(module: ModuleOp) -> set[str]:
    """Names a fresh symbol must avoid: the module's symbols and every global symbol a
    partition in it already claims."""
    taken = {name for op in module.ops if (name := symbol_name(op)) is not None}
    for op in module.walk():
        if isinstance(op, PartitionOp) and (gs := op.global_symbol) is not None:
            taken.add(gs)
    return taken


@dataclass
class FreshSymbolNames:
    """Deterministic unique names from ``template`` (``{prefix}``, ``{compiler}``, ``{k}``),
    ``k`` counting up from 0 per compiler and skipping taken names. Collage uses
    ``FreshSymbolNames(taken, template="collage_{compiler}_{k}")``."""

    taken: set[str] = field(default_factory=set)
    prefix: str = "tvmgen_default"
    template: str = "{prefix}_{compiler}_main_{k}"
    _next: dict[str, int] = field(default_factory=dict)

    @classmethod
    def continuing(cls, module: ModuleOp, prefix: str = "tvmgen_default") -> FreshSymbolNames:
        """Names for ``module`` whose ``k`` continues, per compiler, one past the largest
        ``<prefix>_<compiler>_main_<k>`` already there (as TVM keeps counting)."""
        names = cls(taken_symbols(module), prefix=prefix)
        pattern = re.compile(re.escape(prefix) + r"_(?P<compiler>\w+?)_main_(?P<k>\d+)\Z")
        for name in names.taken:
            if (m := pattern.match(name)) is not None:
                compiler = m.group("compiler")
                names._next[compiler] = max(names._next.get(compiler, 0), int(m.group("k")) + 1)
        return names

    def fresh(self, compiler: str | None) -> str:
        key = compiler or "default"
        k = self._next.get(key, 0)
        while True:
            name = self.template.format(prefix=self.prefix, compiler=key, k=k)
            k += 1
            if name not in self.taken:
                break
        self._next[key] = k
        self.taken.add(name)
        return name


def partition_key(op: Operation) -> tuple[int, bytes]:
    """Hash key of a partition (or outlined function) for deduplication: its body and all
    ``byoc.*``/discardable attributes except the global symbol (the name is what we pick)."""
    return structural_hash(op.regions[0]), attributes_digest(op.attributes, exclude=(GLOBAL_SYMBOL,))


@dataclass
class _Signature:
    """What makes two partitions interchangeable, kept apart from the partition (whose
    body is moved away when it is outlined)."""

    inputs: tuple[Attribute, ...]
    outputs: tuple[Attribute, ...]
    attributes: dict[str, Attribute]
    body: Region

    @staticmethod
    def of(op: PartitionOp, *, copy: bool = False) -> _Signature:
        attributes = {k: v for k, v in op.attributes.items() if k != GLOBAL_SYMBOL}
        return _Signature(op.inputs.types, op.outputs.types, attributes,
                          op.body.clone() if copy else op.body)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _Signature)
            and self.inputs == other.inputs
            and self.outputs == other.outputs
            and self.attributes == other.attributes
            and structurally_equal(self.body, other.body)
        )


def partitions_equal(a: PartitionOp, b: PartitionOp) -> bool:
    """Same operand and result types, attributes (but the global symbol) and body."""
    return _Signature.of(a) == _Signature.of(b)


class ExistingGlobalSymbolCache:
    """TVM's policy: the function is named by the partition's ``byoc.global_symbol``."""

    def symbol_for(self, partition: PartitionOp) -> str:
        name = partition.global_symbol
        if name is None:
            raise op_error(
                partition,
                f"has no '{GLOBAL_SYMBOL}' to outline it under (use dedup=true to name it, or set one)",
            )
        return name


class StructuralDedupCache:
    """Equal partitions share one name: the first one's global symbol, else a fresh one.

    Linear: each partition is hashed once, and compared only with the representatives of
    its hash bucket (one per distinct partition with that hash).
    """

    confirms_equality = True

    def __init__(self, module: ModuleOp | None = None, *, names: FreshSymbolNames | None = None,
                 prefix: str = "tvmgen_default"):
        self.names = names if names is not None else FreshSymbolNames(prefix=prefix)
        if module is not None:
            self.names.taken |= taken_symbols(module)
        self._buckets: dict[tuple[int, bytes], list[tuple[_Signature, str]]] = {}
        self._issued: set[str] = set()

    def symbol_for(self, partition: PartitionOp) -> str:
        bucket = self._buckets.setdefault(partition_key(partition), [])
        signature = _Signature.of(partition)
        for representative, name in bucket:
            if representative == signature:
                return name
        name = partition.global_symbol or self.names.fresh(partition.compiler)
        if name in self._issued:  # one name per equivalence class, never two
            raise op_error(
                partition,
                f"cannot be outlined as @{name}: a different partition already has that global symbol",
            )
        self._issued.add(name)
        # Keep a copy of the body: the partition's own is moved when it is outlined.
        bucket.append((_Signature.of(partition, copy=True), name))
        return name
