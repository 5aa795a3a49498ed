"""ONNX frontend: an ``onnx.ModelProto`` becomes one public ``func.func @main`` of nn ops.

Decisions worth knowing:
- ``MatMul`` by a 2-D constant becomes ``nn.dense`` with the weight transposed at import
  (``w[N, K]``), the form CUTLASS/cuBLAS dense patterns match; other MatMuls are
  ``nn.matmul``. ``Gemm`` is always ``nn.dense`` (+ ``nn.add`` for ``C``).
- The Erf form of GELU, ``x * 0.5 * (1 + Erf(x / sqrt(2)))`` and its usual reorderings, is
  matched on the ONNX graph before conversion and becomes one ``nn.gelu``.
- Unsupported ops, opsets, attributes or element types raise ``PartitaError`` naming the
  node (``node 3 'attn/Erf' (Erf)``); nothing is skipped silently.

Converters live in one module per operator family, mirroring ``partita.dialects.nn``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import onnx
from xdsl.dialects.builtin import ModuleOp

# The family modules register their converters on import.
from partita.frontends.onnx import (  # noqa: F401
    attention,
    control_flow,
    conv,
    elementwise,
    image,
    indexing,
    linalg,
    loss,
    normalization,
    quantization,
    random,
    recurrent,
    reduction,
    selection,
    sequences,
    spectral,
    text,
    transform,
)
from partita.frontends.onnx.embedded import parse_leaving_weights
from partita.frontends.onnx.importer import Importer, SequenceShapes
from partita.frontends.onnx.model import MAX_OPSET, MIN_OPSET
from partita.frontends.onnx.registry import CONVERTERS
from partita.ir import PartitaError, verify_module
from partita.ir.parameters import PARAMETER_THRESHOLD_BYTES

SUPPORTED_OPS = tuple(sorted(CONVERTERS))

def load_model(model: onnx.ModelProto | str | Path, *, external_data: bool = True) -> onnx.ModelProto:
    """An ONNX model from a proto or a file; errors are ``PartitaError``s. Without
    ``external_data`` the tensors stored outside the model stay references (the importer
    reads each one once, from the model's own folder), and so do the large initializers
    stored inside it (``partita.frontends.onnx.embedded``): the model's weights are never
    read into memory."""
    if isinstance(model, onnx.ModelProto):
        return model
    path = Path(model)
    if not path.is_file():
        raise PartitaError(f"cannot read '{path}': no such file")
    proto = None if external_data else parse_leaving_weights(path.resolve(), PARAMETER_THRESHOLD_BYTES)
    try:
        if proto is None:
            proto = onnx.load(str(path), load_external_data=external_data)
    except Exception as err:  # onnx raises DecodeError, ValidationError, OSError...
        why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PartitaError(f"'{path}' is not an ONNX model: {why}") from None
    if not proto.HasField("graph") or not proto.opset_import:
        raise PartitaError(f"'{path}' is not an ONNX model (no graph or opset)")
    if not external_data:  # what onnx.load checks when it reads the data itself
        from onnx.external_data_helper import ExternalDataInfo, uses_external_data

        for tensor in proto.graph.initializer:
            where = Path(ExternalDataInfo(tensor).location) if uses_external_data(tensor) else None
            if where is not None and (where.is_absolute() or ".." in where.parts):
                raise PartitaError(f"'{path}' is not an ONNX model: tensor '{tensor.name}' has its external data at "
                                   f"'{where}', which points outside the directory of the model")
    return proto


def import_onnx(model: onnx.ModelProto | str | Path, *, name: str = "main",
                sequence_lengths: Mapping[str, SequenceShapes] | None = None) -> ModuleOp:
    """Import an ONNX model as a module with one public ``func.func @name`` of nn ops.

    A sequence input (a list of tensors) has no length in the model: ``sequence_lengths``
    gives it by input name, as TVM's ``from_onnx(model, shape=...)`` takes the shapes a model
    leaves open: an int (each element of the model's element type), or one shape per element
    (``None`` for a run-time dim) where the model gives the elements none. Each element is an
    argument of its own, and a sequence output one result per element (``partita.ir.abi``)."""
    proto = load_model(model, external_data=False)
    source = "<onnx>" if isinstance(model, onnx.ModelProto) else str(model)
    folder = None if isinstance(model, onnx.ModelProto) else Path(model).resolve().parent
    module = Importer(proto, source, external_dir=folder, sequence_lengths=sequence_lengths).run(name)

    verify_module(module)
    return module


__all__ = ["MAX_OPSET", "MIN_OPSET", "SUPPORTED_OPS", "import_onnx", "load_model"]
