"""PyTorch in: ``torch.export`` programs (and modules, exported here) as ``nn`` IR.

``partita.compile(module, example_inputs=(x,), dynamic_shapes=...)`` exports the module
with ``torch.export`` and converts its ATen graph straight to ``nn`` ops (see
:mod:`partita.frontends.torch.importer`); ``torch.compile(model, backend="partita")`` is
in :mod:`partita.tools.dynamo`. torch is imported only when used (the ``[torch]``
extra).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from xdsl.dialects.builtin import ModuleOp

from partita.ir.diagnostics import PartitaError

__all__ = ["export_module", "import_exported_program", "is_torch_model", "run_on_torch_tensors", "torch_device_of"]


def is_torch_model(model: Any) -> bool:
    """A ``torch.nn.Module`` or an ``ExportedProgram``, told apart without importing torch."""
    names = {f"{c.__module__}.{c.__qualname__}" for c in type(model).__mro__}
    return "torch.nn.modules.module.Module" in names or "torch.export.exported_program.ExportedProgram" in names


def torch_device_of(values: Any) -> Any:
    """The device of the first torch tensor among ``values`` (a dict's values count), or
    None when there is none; torch is not imported for that."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    for value in values:
        for item in value.values() if isinstance(value, dict) else (value,):
            if isinstance(item, torch.Tensor):
                return item.device
    return None


def run_on_torch_tensors(run: Callable[..., tuple[Any, ...]], device: Any, args: Any, named: Any) -> tuple[Any, ...]:
    """``run(*args, **named)`` with torch tensors out, where ``device`` has them: on the
    GPU the results stay there (read through DLPack, then copied on the device, since a
    device output is valid only until the next run), on the CPU they share the host
    arrays the run returns."""
    import torch

    if device.type == "cuda":
        return tuple(torch.from_dlpack(o).clone() for o in run(*args, outputs="device", **named))
    return tuple(torch.from_numpy(o) for o in run(*args, **named))


def export_module(model: Any, example_inputs: Any = None, dynamic_shapes: Any = None) -> ModuleOp:
    """``model`` (a module or an ``ExportedProgram``) as a module with ``@main``."""
    import torch

    from partita.frontends.torch.importer import import_exported_program

    if isinstance(model, torch.export.ExportedProgram):
        if example_inputs is not None or dynamic_shapes is not None:
            raise PartitaError("an ExportedProgram is already exported: example_inputs and dynamic_shapes do not apply")
        return import_exported_program(model)
    if example_inputs is None:
        raise PartitaError(f"compiling a {type(model).__name__} needs example_inputs (a tuple of tensors) for torch.export")
    if not isinstance(example_inputs, tuple):
        example_inputs = tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,)
    example_inputs = tuple(t.detach() if isinstance(t, torch.Tensor) else t for t in example_inputs)
    try:
        program = torch.export.export(model, example_inputs, dynamic_shapes=dynamic_shapes)
    except Exception as err:  # noqa: BLE001 - torch.export's many error types, reported as the user's
        first = str(err).strip().split("\n", 1)[0]
        raise PartitaError(f"torch.export could not export {type(model).__name__}: {type(err).__name__}: {first}") from None
    return import_exported_program(program, f"torch.export({type(model).__name__})")


def import_exported_program(program: Any, source: str = "torch.export") -> ModuleOp:
    from partita.frontends.torch.importer import import_exported_program as convert

    return convert(program, source)
