"""The native CUDA kernels of real models, checked without a GPU: every fused kernel that
``cuda-codegen`` would compile for the exported fixtures (``tests/models/exported``) is
built for the host (g++, ``tests/support/cuda_host.py``), launched at its real geometry on
the activations the model computes for the fixture's own sample, and compared with the
NumPy reference of its fused function. The per-op kernel tests use random operands; here
every kernel sees the shapes, views, masks and value ranges of the model it was fused for
(the rotary tables computed in the rotary kernel, attention reading head splits of a
packed projection, norms with their prologues)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from support.cuda_host import have_gxx  # tests/support/cuda_host.py
from support.kernel_check import TOLERANCE, build_for_host  # tests/support/kernel_check.py
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.passes import PassPipeline

import partita
from partita.dialects import make_context, nn
from partita.frontends.onnx import import_onnx
from partita.runtime.reference import ReferenceExecutor
from partita.transforms import get_all_passes

EXPORTED = Path(__file__).resolve().parent / "exported"
MODELS = sorted(p.stem for p in EXPORTED.glob("*.onnx"))
TARGETS = ["cuda -arch=sm_90", "cutlass", "llvm"]


def _before_codegen(path: Path, partitioner: str, precision: str | None = None) -> ModuleOp:
    """The model as ``partita.compile`` has it when the codegens start: its fused
    functions are what ``cuda-codegen`` compiles."""
    pipeline = partita.compile(path, TARGETS, partitioner=partitioner, precision=precision).pipeline.split(",")
    placement = pipeline[:next(k for k, p in enumerate(pipeline) if p.split("{")[0].endswith("-codegen"))]
    module = import_onnx(onnx.load(path))
    PassPipeline.parse_spec(get_all_passes(), ",".join(placement)).apply(make_context(), module)
    return module


def _calls(module: ModuleOp, inputs: list[np.ndarray]) -> Iterator[tuple[str, tuple, np.ndarray]]:
    """Each call ``@main`` makes, run by the references on ``inputs``: (callee, its
    arguments, its result)."""
    interpreter = ReferenceExecutor(module).interpreter
    (main,) = [f for f in module.ops if isinstance(f, func.FuncOp) and f.sym_name.data == "main"]
    values = dict(zip(main.args, inputs, strict=True))
    for op in main.body.block.ops:
        if isinstance(op, func.ReturnOp):
            return
        args = tuple(values[v] for v in op.operands)
        results = interpreter.run_op(op, args)
        values.update(zip(op.results, results))
        if isinstance(op, func.CallOp):
            yield op.callee.string_value(), args, results[0]


CASES = [(name, partitioner, None) for name in MODELS for partitioner in ("collage", "eager")] + [
    (name, "collage", "fp16") for name in ("bert", "gpt2", "llama", "vit")]
"""(fixture, partitioner, precision): both partitioners' kernels, and the f16 kernels (flash
attention on tensor cores, f16 row kernels) of the f32 transformers at ``precision="fp16"``."""


def _tolerance(function: func.FuncOp, output: str) -> float | None:
    """The comparison's tolerance: exact for an integer result, else that of the narrowest
    float the function computes in (an f32 result of an f16 GEMM is rounded as f16)."""
    if output not in TOLERANCE:
        return None
    types = {nn.type_name(t.element_type) for op in function.body.walk() for r in op.results
             if isinstance(t := r.type, TensorType)}
    return max(TOLERANCE[t] for t in types | {output} if t in TOLERANCE)


@pytest.mark.skipif(not have_gxx(), reason="needs g++")
@pytest.mark.parametrize(("name", "partitioner", "precision"), CASES)
def test_every_native_kernel_matches_its_reference_on_the_models_activations(name, partitioner, precision,
                                                                             tmp_path) -> None:
    path = EXPORTED / f"{name}.onnx"
    module = _before_codegen(path, partitioner, precision)
    program, records, host = build_for_host(module, tmp_path)
    functions = {f.sym_name.data: f for f in module.ops if isinstance(f, func.FuncOp)}
    sample = list(np.load(path.with_suffix(".npz")).values())
    launched: set[str] = set()
    for callee, args, want in _calls(module, sample):
        if callee not in records:
            continue  # a CUTLASS or library partition
        record, kernel = records[callee], program.kernels[callee]
        out = np.full(np.shape(want), 7, np.asarray(want).dtype)  # a cell left unwritten shows
        grid, block = record.geometry(out.shape)
        host.launch(record, grid, block, [np.ascontiguousarray(a) for a in args], out)
        tolerance = _tolerance(functions[callee], kernel.output_dtype)
        message = f"@{callee} ({', '.join(kernel.ops)})"
        if tolerance is None:
            np.testing.assert_array_equal(out, want, err_msg=message)
        else:
            np.testing.assert_allclose(out.astype(np.float64), np.asarray(want, np.float64), rtol=tolerance,
                                       atol=tolerance, err_msg=message)
        launched.add(callee)
    assert launched == set(records), f"kernels no call reached: {sorted(set(records) - launched)}"
