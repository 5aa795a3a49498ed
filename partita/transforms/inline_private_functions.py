"""inline-private-functions: inline private, non-recursive callees into their callers.

TVM's ``InlinePrivateFunctions``, used for code generators whose kernels cannot call
device subroutines (target kinds with ``can_call_subroutines=False``, e.g. ``metal``).
By default only callees on such targets are inlined; ``all=true`` inlines every
eligible callee.  A call site is inlined only when caller and callee run on the same
target (kind and options; hosts ignored) or either has no target: inlining never moves
code to another device.  Callees that are (mutually) recursive, public, body-less or
have more than one block are never inlined.  A callee is erased once every call to it
was inlined.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import CallOp, FuncOp, ReturnOp
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from partita.transforms.target_utils import effective_target, func_index, func_target, is_entry


def _callees(func: FuncOp, funcs: dict[str, FuncOp]) -> list[str]:
    return [
        op.callee.string_value()
        for op in func.walk()
        if isinstance(op, CallOp) and op.callee.string_value() in funcs
    ]


def recursive_functions(funcs: dict[str, FuncOp]) -> set[str]:
    """Functions on a cycle of the call graph (Tarjan's SCCs, iterative)."""
    graph = {name: _callees(f, funcs) for name, f in funcs.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: set[str] = set()
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, edge = work.pop()
            if edge == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            if edge < len(graph[node]):
                work.append((node, edge + 1))
                succ = graph[node][edge]
                if succ not in index:
                    work.append((succ, 0))
                elif succ in on_stack:
                    low[node] = min(low[node], index[succ])
                continue
            if work:  # propagate to the parent (the frame below)
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    result.update(component)
    return result


def inline_call(call: CallOp, callee: FuncOp) -> None:
    """Replace ``call`` by a copy of ``callee``'s (single-block) body."""
    block = callee.body.clone().block
    for arg, value in zip(block.args, call.arguments, strict=True):
        for use in list(arg.uses):  # not replace_all_uses_with: keep the caller's names
            use.operation.operands[use.index] = value
    terminator = block.last_op
    assert isinstance(terminator, ReturnOp)
    values = list(terminator.arguments)  # after the arguments were replaced
    Rewriter.erase_op(terminator)
    Rewriter.inline_block(block, InsertPoint.before(call))
    Rewriter.replace_op(call, [], values)


@dataclass(frozen=True)
class InlinePrivateFunctions(ModulePass):
    name = "inline-private-functions"

    all: bool = False
    """Inline every eligible callee, not only those on targets without subroutines."""

    def _candidates(self, funcs: dict[str, FuncOp]) -> dict[str, FuncOp]:
        recursive = recursive_functions(funcs)
        result: dict[str, FuncOp] = {}
        for name, func in funcs.items():
            if is_entry(func) or len(func.body.blocks) != 1 or name in recursive:
                continue
            if not self.all:
                target = func_target(func)
                if target is None or target.kind.can_call_subroutines:
                    continue
            result[name] = func
        return result

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        funcs = func_index(op)
        candidates = self._candidates(funcs)
        if not candidates:
            return
        inlined: set[str] = set()
        for func in funcs.values():
            # Inlined bodies may hold further calls: repeat until none is inlinable.
            # This terminates because candidates are not recursive.
            changed = True
            while changed:
                changed = False
                for call in [c for c in func.walk() if isinstance(c, CallOp)]:
                    name = call.callee.string_value()
                    callee = candidates.get(name)
                    if callee is None or callee is func:
                        continue
                    caller_target = effective_target(call)
                    callee_target = func_target(callee)
                    if (
                        caller_target is not None
                        and callee_target is not None
                        and not caller_target.same_as(callee_target)
                    ):
                        continue
                    inline_call(call, callee)
                    inlined.add(name)
                    changed = True
        self._erase_unused(op, funcs, inlined)

    @staticmethod
    def _erase_unused(module: ModuleOp, funcs: dict[str, FuncOp], inlined: set[str]) -> None:
        """Erase inlined callees nobody calls any more (erasing one may free others)."""
        uses: dict[str, int] = dict.fromkeys(funcs, 0)
        for func in funcs.values():
            for name in _callees(func, funcs):
                uses[name] += 1
        worklist = [name for name in inlined if uses[name] == 0]
        while worklist:
            name = worklist.pop()
            func = funcs.pop(name)
            for callee in _callees(func, funcs):
                uses[callee] -= 1
                if uses[callee] == 0 and callee in inlined:
                    worklist.append(callee)
            Rewriter.erase_op(func)
