"""verify-targets: check that every function says where it runs, consistently.

TVM's ``VerifyTargets`` checks, each violation an error located at the function or
call (the first one, in module order):

* every function has a ``byoc.target`` (a ``#byoc.target``), except ``byoc.extern``
  declarations, whose code was compiled elsewhere, and their ``byoc.reference_impl``
  bodies, which only the reference executor runs (to emulate the external code);
* a partition function's (``byoc.compiler = "X"``) target kind is ``X``;
* a ``func.call`` crosses targets only from host to device (see ``call_allowed``).
  A call inside a ``byoc.on_target`` region runs on that region's target.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.dialects.func import CallOp
from xdsl.passes import ModulePass

from partita.dialects.byoc import TARGET, is_extern, kept_for_reference
from partita.ir import op_error
from partita.target import DeviceType, Target, is_external_codegen_for
from partita.transforms.target_utils import (
    effective_target,
    func_compiler,
    func_index,
    func_target,
)


def call_allowed(caller: Target, callee: Target) -> bool:
    """May code on ``caller`` call a function on ``callee``?  Hosts are ignored when
    comparing targets.  Allowed: the same target; a host-capable (cpu) caller calling a
    device (non-cpu) function; a caller calling a function whose host it is, or its own
    host's code; a device target handing work to an external codegen of its device
    type (``cuda`` -> ``cutlass``).  Everything else (device -> host, device ->
    another device, cpu -> another cpu kind) is rejected."""
    if caller.same_as(callee):
        return True
    if caller.kind.host_capable and callee.device_type is not DeviceType.CPU:
        return True
    if callee.host is not None and callee.host.same_as(caller):
        return True
    if caller.host is not None and caller.host.same_as(callee):
        return True
    return is_external_codegen_for(callee, caller)


@dataclass(frozen=True)
class VerifyTargets(ModulePass):
    name = "verify-targets"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        funcs = func_index(op)
        for func in funcs.values():
            if is_extern(func) or kept_for_reference(func):
                continue
            if TARGET not in func.attributes:
                raise op_error(func, "has no target (a 'byoc.target' attribute)")
            target = func_target(func)
            if target is None:
                raise op_error(func, "'byoc.target' must be a #byoc.target attribute")
            compiler = func_compiler(func)
            if compiler is not None and target.kind_name != compiler:
                raise op_error(
                    func,
                    f"target kind '{target.kind_name}' differs from its compiler '{compiler}'",
                )
        for func in funcs.values():
            for call in func.walk():
                if not isinstance(call, CallOp):
                    continue
                callee = funcs.get(call.callee.string_value())
                if callee is None or is_extern(callee):
                    continue
                caller_target = effective_target(call)
                callee_target = func_target(callee)
                assert caller_target is not None and callee_target is not None
                if not call_allowed(caller_target, callee_target):
                    raise op_error(
                        call,
                        f"calls @{callee.sym_name.data} on target '{callee_target}' from "
                        f"target '{caller_target}': calls across targets must go from a "
                        "host to a device (or to an external codegen of the same device)",
                    )
