"""Check native kernels of nn ops against the references, without a GPU: a module of
functions goes through ``fuse-native-kernels``; each fused function's kernel (CUDA C from
``cuda-codegen``'s emitter) is built for the host with g++ (``cuda_host``), launched on
random inputs, and compared with the reference executor on the same function."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.dialects.func import FuncOp
from xdsl.passes import PassPipeline

from partita.dialects import make_context
from partita.ir import parse_module
from partita.lowering.cuda.codegen import program_of
from partita.lowering.cuda.records import RECORDS, fused_record
from partita.runtime.reference import run
from partita.transforms import get_all_passes
from support.cuda_host import HostKernels  # tests/support/cuda_host.py

TOLERANCE = {"f32": 2e-5, "f64": 1e-12, "f16": 4e-3, "bf16": 3e-2}


def fuse(text: str) -> ModuleOp:
    ctx = make_context()
    module = parse_module(text, ctx, "model.mlir")
    PassPipeline.parse_spec(get_all_passes(), "fuse-native-kernels").apply(ctx, module)
    return module


def fused_functions(module: ModuleOp) -> dict[str, FuncOp]:
    return {f.sym_name.data: f for f in module.ops
            if isinstance(f, FuncOp) and f.body.blocks and "_fused_" in f.sym_name.data}


def host_ops(module: ModuleOp) -> list[str]:
    """nn ops left in the public (host) functions after fusion."""
    return [o.name for f in module.ops if isinstance(f, FuncOp) and f.body.blocks
            and "_fused_" not in f.sym_name.data
            for o in f.body.walk() if o.name.startswith("nn.") and o.name != "nn.constant"]


def random_input(shape, dtype: str, rng: np.random.Generator) -> np.ndarray:
    np_dtype = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32,
                "f64": np.float64, "f8E4M3FN": ml_dtypes.float8_e4m3fn,
                "f8E5M2": ml_dtypes.float8_e5m2}.get(dtype)
    if np_dtype is not None:
        return rng.standard_normal(shape).astype(np_dtype)
    if dtype == "i1":
        return rng.integers(0, 2, shape).astype(np.bool_)
    info = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
            "ui8": np.uint8, "ui16": np.uint16, "ui32": np.uint32, "ui64": np.uint64}[dtype]
    lo = 0 if dtype.startswith("u") else -5
    return rng.integers(lo, 6, shape).astype(info)


def build_for_host(module: ModuleOp, directory: Path):
    """The fused kernels of ``module``: the program, the records by function, and the
    kernels built for the host."""
    program = program_of(module)
    assert program is not None
    records = {name: RECORDS[k.kind].from_attr(fused_record(k)) for name, k in program.kernels.items()}
    return program, records, HostKernels(program.code, list(records.values()), directory)


def launch_beside_reference(function: FuncOp, name: str, rec, host: HostKernels,
                            args: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(kernel output, reference output) of the fused ``function`` on ``args``: the kernel
    launched on the host with at most two blocks, so blocks stride over rows."""
    clone = function.clone()
    clone.sym_visibility = StringAttr("public")
    (expected,) = run(ModuleOp([clone]), *args, entry=name)
    out = np.zeros(expected.shape, expected.dtype)
    grid, block = rec.geometry(out.shape)
    host.launch(rec, (min(grid[0], 2), 1, 1), block, args, out)
    return out, expected


def check_kernels(module: ModuleOp, directory: Path, dynamic: int = 3) -> list[str]:
    """Build every fused function's kernel for the host, launch it on random inputs
    (each ``?`` dim = ``dynamic``) and compare with the reference. Returns the anchors."""
    program, records, host = build_for_host(module, directory)
    anchors = []
    for k, (name, function) in enumerate(fused_functions(module).items()):
        rec, kernel = records[name], program.kernels[name]
        rng = np.random.default_rng(k)
        args = [random_input(tuple(dynamic if d < 0 else d for d in shape), t, rng)
                for shape, t in zip(rec.inputs, rec.dtypes)]
        out, expected = launch_beside_reference(function, name, rec, host, args)
        tol = TOLERANCE.get(kernel.output_dtype)
        if tol is None:
            np.testing.assert_array_equal(out, expected, err_msg=name)
        else:
            np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64),
                                       rtol=tol, atol=tol, err_msg=name)
        anchors.append(kernel.anchor)
    return anchors
