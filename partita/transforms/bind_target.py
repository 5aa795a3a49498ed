"""bind-target: give every function without a ``byoc.target`` one from the config.

TVM's ``BindTarget``: the compilation config (``targets``, or ``target`` + ``host``)
only fills in what is missing; a target already on a function is never overwritten,
but it must be one of the config's targets (kind and explicit options).

* an entry (public) function gets the default target with its host;
* a partition function (``byoc.compiler = "X"``) gets the config's ``X`` target;
* any other internal (private) function gets the default target without host
  (device code; only entry functions carry the host);
* ``byoc.extern`` declarations are left alone (compiled elsewhere);
* inline ``byoc.partition`` regions are left alone: they get their target when
  ``outline-compiler-functions`` makes them functions and this pass runs again.

Running the pass twice is the same as running it once.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from partita.dialects.byoc import is_extern
from partita.ir import op_error
from partita.transforms.target_utils import (
    TargetOption,
    config_from_options,
    func_compiler,
    func_index,
    func_target,
    is_entry,
    set_func_target,
)


@dataclass(frozen=True)
class BindTarget(ModulePass):
    name = "bind-target"

    targets: TargetOption = None
    """Comma-separated target list, e.g. ``"cuda -arch=sm_90,cutlass,llvm"``."""

    target: TargetOption = None
    """The default target (must be in ``targets`` when both are given)."""

    host: TargetOption = None
    """The host target (default: TVM's rules on the target list)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        config, default = config_from_options(self.name, self.targets, self.target, self.host)
        for func in func_index(op).values():
            existing = func_target(func)
            if existing is not None:
                if existing not in config:
                    raise op_error(
                        func,
                        f"explicit target '{existing}' is not in the compilation config "
                        f"({config}; host {config.host_target})",
                    )
                continue
            if is_extern(func):
                continue
            compiler = func_compiler(func)
            if compiler is not None:
                found = config.find_target_for_kind(compiler)
                if found is None:
                    raise op_error(
                        func,
                        f"has byoc.compiler = \"{compiler}\" but the compilation config "
                        f"({config}) has no '{compiler}' target",
                    )
                set_func_target(func, found.without_host())
            elif is_entry(func):
                set_func_target(func, default)
            else:
                set_func_target(func, default.without_host())
