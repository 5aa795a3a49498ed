"""``torch.compile(model, backend="partita")``: TorchDynamo hands each captured graph to
:func:`partita_backend`, which exports it, converts it to nn and compiles it with
``partita.compile``. A graph Partita cannot convert runs eagerly (with a warning), as a
graph break does; compiled graphs are cached per input signature (shapes and dtypes),
so a new batch size compiles once and is then reused.

Importing this module registers the backend with TorchDynamo; ``pyproject.toml`` also
names it under ``torch_dynamo_backends`` so an installed Partita needs no import. It sits
with the tools, above the driver whose ``compile`` it calls (the importer it drives is
``partita.frontends.torch``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from partita.driver import compile as compile_model
from partita.ir.diagnostics import PartitaError

__all__ = ["PartitaGraph", "partita_backend"]


def _signature(inputs: Sequence[Any]) -> tuple[Any, ...]:
    return tuple((tuple(t.shape), str(t.dtype)) if hasattr(t, "shape") else ("scalar", repr(t)) for t in inputs)


class PartitaGraph:
    """The callable TorchDynamo runs in place of one captured graph."""

    def __init__(self, graph_module: Any, options: dict[str, Any]):
        self.graph_module = graph_module
        self.options = options
        self.executables: dict[tuple[Any, ...], Any] = {}
        self.eager_signatures: set[tuple[Any, ...]] = set()
        outputs = next(n for n in graph_module.graph.nodes if n.op == "output").args[0]
        self.returns_sequence = isinstance(outputs, (tuple, list))

    def _compile(self, inputs: Sequence[Any]) -> Any:
        return compile_model(self.graph_module, example_inputs=tuple(inputs), **self.options)

    def __call__(self, *inputs: Any) -> Any:

        key = _signature(inputs)
        if key in self.eager_signatures:
            return self.graph_module(*inputs)
        exe = self.executables.get(key)
        if exe is None:
            try:
                exe = self.executables[key] = self._compile(inputs)
            except PartitaError as err:
                warnings.warn(f"partita: running this graph eagerly: {err}", stacklevel=2)
                self.eager_signatures.add(key)
                return self.graph_module(*inputs)
        outputs = exe.run(*inputs)  # torch tensors in, torch tensors out, on their device
        return outputs if self.returns_sequence else outputs[0]


def partita_backend(graph_module: Any, example_inputs: Sequence[Any], **options: Any) -> Callable[..., Any]:
    """A TorchDynamo backend; ``options`` are ``partita.compile``'s (targets, partitioner...),
    given as ``torch.compile(model, backend="partita", options={...})``."""
    return PartitaGraph(graph_module, dict(options.get("options", options)))


def register() -> None:
    """Registers ``partita`` with TorchDynamo (once). When the installed entry point names
    this function, TorchDynamo registers it on first use and loading it runs this import:
    registering here too would be a duplicate. An entry point naming another place (an
    install older than the module's move) is replaced by registering here."""
    from importlib.metadata import entry_points

    from torch._dynamo import register_backend

    ours = f"{__name__}:{partita_backend.__name__}"
    if any(ep.name == "partita" and ep.value == ours for ep in entry_points(group="torch_dynamo_backends")):
        return
    try:
        register_backend(name="partita")(partita_backend)
    except AssertionError:  # "duplicate name": registered already
        pass


register()
