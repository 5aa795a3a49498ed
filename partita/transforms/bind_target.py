"""bind-target: give every function without a ``byoc.target`` one from the config.

TVM's ``BindTarget``: the compilation config (``targets``, or ``target`` + ``host``)
only fills in what is missing. A target already on a function is the single source of
truth, even when the config does not name it (that is how a function is delegated to
another device): it is never replaced nor rejected here; the stage that has no code
generator for it reports it. Only its host is filled in: an entry function whose
explicit target has no host gets the config's host, as TVM's ``BindTarget`` does.

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

from partita.dialects.byoc import is_extern, kept_for_reference
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

    fallback_device: str | None = None
    """Device type of the default target (``cpu`` gives TVM's default; see
    ``CompilationConfig``)."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        config, default = config_from_options(self.name, self.targets, self.target, self.host,
                                              self.fallback_device)
        for func in func_index(op).values():
            existing = func_target(func)
            if existing is not None:
                if is_entry(func) and existing.host is None and not existing.same_as(config.host_target):
                    set_func_target(func, existing.with_host(config.host_target))
                continue
            if is_extern(func) or kept_for_reference(func):  # runs on the host, as it is
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
