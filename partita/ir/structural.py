"""Structural hashing and equality of IR, up to SSA names and locations.

xDSL 0.74 can compare two regions (``Region.is_structurally_equivalent``) but has no hash,
so finding equal partitions among n would take n^2 comparisons. ``structural_hash`` is a
64-bit digest of what that comparison looks at: op names, operand and result types,
properties and discardable attributes, and where each operand comes from, written as a
position relative to the hashed root (the n-th op's m-th result, or the k-th block's
i-th argument) rather than an SSA name. Values defined outside the root are numbered in
order of first use, so ``f(%a, %b)`` and ``f(%b, %a)`` differ but renaming does not.

The digest is stable across processes (attributes are digested through their printed
form, memoised per attribute), so it can also key a persistent cost cache. Equal IR has
equal hashes; equal hashes must still be confirmed with ``structurally_equal``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from functools import lru_cache

from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

__all__ = ["attributes_digest", "blocks_equal", "structural_hash", "structurally_equal"]


@lru_cache(maxsize=1 << 16)
def _attr_digest(attr: Attribute) -> bytes:
    return hashlib.blake2b(str(attr).encode(), digest_size=8).digest()


def attributes_digest(attributes: Mapping[str, Attribute], exclude: Iterable[str] = ()) -> bytes:
    """Order-independent digest of an attribute dictionary (minus ``exclude``)."""
    skip = set(exclude)
    h = hashlib.blake2b(digest_size=8)
    for name in sorted(attributes):
        if name not in skip:
            h.update(name.encode())
            h.update(b"=")
            h.update(_attr_digest(attributes[name]))
            h.update(b";")
    return h.digest()


class _Hasher:
    def __init__(self) -> None:
        self.h = hashlib.blake2b(digest_size=8)
        self.positions: dict[SSAValue, bytes] = {}
        self.free = 0
        self.n_ops = 0
        self.block_ids: dict[Block, int] = {}

    def token(self, data: bytes) -> None:
        self.h.update(data)

    def value(self, value: SSAValue) -> bytes:
        pos = self.positions.get(value)
        if pos is None:  # defined outside the hashed root: number by first use
            pos = b"f%d" % self.free
            self.free += 1
            self.positions[value] = pos
        return pos

    def region(self, region: Region) -> None:
        self.token(b"R%d" % len(region.blocks))
        for block in region.blocks:  # successors may refer to later blocks
            self.block_ids[block] = len(self.block_ids)
        for block in region.blocks:
            self.block(block)

    def block(self, block: Block) -> None:
        index = self.block_ids.setdefault(block, len(self.block_ids))
        self.token(b"B%d" % len(block.args))
        for i, arg in enumerate(block.args):
            self.positions[arg] = b"a%d.%d" % (index, i)
            self.token(_attr_digest(arg.type))
        for op in block.ops:
            self.op(op)

    def op(self, op: Operation) -> None:
        index = self.n_ops
        self.n_ops += 1
        token = self.token
        token(b"O")
        token(op.name.encode())
        token(b"(")
        for operand in op.operands:
            token(self.value(operand))
            token(_attr_digest(operand.type))
            token(b",")
        token(b")->(")
        for result in op.results:
            token(_attr_digest(result.type))
        token(b")")
        if op.properties:
            token(b"P")
            token(attributes_digest(op.properties))
        if op.attributes:
            token(b"A")
            token(attributes_digest(op.attributes))
        for succ in op.successors:
            token(b"S%d" % self.block_ids.get(succ, -1))
        for region in op.regions:
            self.region(region)
        for i, result in enumerate(op.results):
            self.positions[result] = b"r%d.%d" % (index, i)

    def digest(self) -> int:
        return int.from_bytes(self.h.digest(), "little")


def structural_hash(node: Operation | Region | Block) -> int:
    """64-bit structural hash of an op (with its regions), a region or a block; linear in
    its size. Equal up to SSA names and locations implies equal hash."""
    hasher = _Hasher()
    if isinstance(node, Operation):
        hasher.op(node)
    elif isinstance(node, Region):
        hasher.region(node)
    else:
        hasher.block(node)
    return hasher.digest()


def _same_result_types(a: Block, b: Block) -> bool:
    # ``Operation.is_structurally_equivalent`` does not compare result types (0.74).
    for op_a, op_b in zip(a.walk(), b.walk()):
        if op_a.result_types != op_b.result_types:
            return False
    return True


def blocks_equal(a: Block, b: Block, *, ignore_terminator_name: bool = False) -> bool:
    """Structural equality of two blocks: argument types, ops (via xDSL's
    ``is_structurally_equivalent``) and result types. With ``ignore_terminator_name``, the
    last ops only need to use corresponding values (``byoc.yield`` vs ``func.return``)."""
    if a.arg_types != b.arg_types or len(a.ops) != len(b.ops):
        return False
    context: dict = {}
    for arg_a, arg_b in zip(a.args, b.args):
        context[arg_a] = arg_b
    context[a] = b
    ops_a, ops_b = list(a.ops), list(b.ops)
    body_a, body_b = (ops_a[:-1], ops_b[:-1]) if ignore_terminator_name and ops_a else (ops_a, ops_b)
    for op_a, op_b in zip(body_a, body_b):
        if not op_a.is_structurally_equivalent(op_b, context):
            return False
    if ignore_terminator_name and ops_a:
        term_a, term_b = ops_a[-1], ops_b[-1]
        if len(term_a.operands) != len(term_b.operands) or term_a.regions or term_b.regions:
            return False
        if any(context.get(x, x) is not y for x, y in zip(term_a.operands, term_b.operands)):
            return False
    return _same_result_types(a, b)


def structurally_equal(a: Region, b: Region) -> bool:
    """``Region.is_structurally_equivalent`` plus equal result types."""
    if not a.is_structurally_equivalent(b):
        return False
    return all(_same_result_types(x, y) for x, y in zip(a.blocks, b.blocks))
