"""Run an ONNX model through the native CUDA lowering with its kernels built for the host
(``tests/support/cuda_host.py``): every fused kernel is launched on the CPU and checked against the
reference executor on its function, and the whole result against the reference on the
unfused module. Shared by the operator family tests (``tests/test_ops_*.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.interpreter import Interpreter
from xdsl.passes import PassPipeline

from partita.dialects import make_context
from partita.dialects.byoc import tied_operand
from partita.frontends.onnx import import_onnx
from partita.lowering.cuda.codegen import program_of
from partita.lowering.cuda.records import RECORDS, fused_record
from partita.runtime.reference import run
from partita.runtime.reference.nn import NN_FUNCTIONS
from partita.transforms import get_all_passes
from support.cuda_host import HostKernels  # tests/support/cuda_host.py


def _interpreter() -> Interpreter:
    interp = Interpreter(ModuleOp([]))
    for cls in NN_FUNCTIONS:
        interp.register_implementations(cls())
    return interp


def _comparable(a: np.ndarray) -> np.ndarray:
    """``a`` as NumPy compares it: a float8 array (ml_dtypes, which NumPy does not take for
    a float: its NaNs would differ) as f32, exactly."""
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype.name.startswith("float8") else a


def _run_function(function: func.FuncOp, args):
    clone = function.clone()
    clone.sym_visibility = StringAttr("public")
    return run(ModuleOp([clone]), *args, entry=clone.sym_name.data)


def run_host_kernels(model: onnx.ModelProto, inputs: list[np.ndarray], tmp: Path,
                     max_blocks: int = 2, passes: str = "fuse-native-kernels") -> tuple[list[np.ndarray], list[str]]:
    """The outputs of ``model`` computed by its fused kernels on the host, checked op by
    op against the reference, and the names of the ops left in ``@main`` (not constants, nor
    reshapes: the launch plan runs those as views of their input's buffer). A kernel whose
    result is tied to an operand (``passes`` with ``tie-in-place-updates``) writes into a
    copy of that operand, passed as both, as the launch plan passes its buffer."""
    module = import_onnx(model)
    expected = run(module, *inputs)
    PassPipeline.parse_spec(get_all_passes(), passes).apply(make_context(), module)
    functions = {f.sym_name.data: f for f in module.ops if isinstance(f, func.FuncOp)}
    program = program_of(module)
    records = {}
    if program is not None:
        for name, kernel in program.kernels.items():
            records[name] = RECORDS[kernel.kind].from_attr(fused_record(kernel))
        host = HostKernels(program.code, records.values(), tmp)
    main = functions["main"]
    env = dict(zip(main.body.block.args, inputs))
    interp = _interpreter()
    left = []
    for op in main.body.block.ops:
        args = [env[v] for v in op.operands]
        if isinstance(op, func.ReturnOp):
            outs = args
            break
        if isinstance(op, func.CallOp):
            name = op.callee.string_value()
            (want,) = _run_function(functions[name], args)
            rec = records[name]
            arrays = [np.ascontiguousarray(a) for a in args]
            tied = tied_operand(functions[name])
            if tied is not None:
                out = arrays[tied] = arrays[tied].copy()
            else:
                out = np.zeros(want.shape, want.dtype)
            grid, block = rec.geometry(out.shape)
            host.launch(rec, (min(grid[0], max_blocks), *grid[1:]), block, arrays, out)
            np.testing.assert_array_equal(_comparable(out), _comparable(want), err_msg=name)
            env[op.results[0]] = out
            continue
        if op.name not in ("nn.constant", "nn.reshape"):  # a reshape left in @main is a view
            left.append(op.name)
        env.update(zip(op.results, interp.run_op(op, tuple(args))))
    for got, want in zip(outs, expected):
        np.testing.assert_array_equal(_comparable(got), _comparable(want))
    return outs, left
