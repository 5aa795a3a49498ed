"""Kernel records of fused kernels: what a ``byoc.binary`` keeps to launch each one.

A record is a dictionary ``{kind = "fused", entry, block, inputs, dtypes, output,
output_dtype, dims, params, ops}``: shapes use ``-1`` for ``?``, ``dims`` lists the
``[argument, axis]`` of each run-time ``int`` parameter, ``params`` spells the parameter
list (``name:kind:size``) like the CUTLASS records. The runtime reads it without the IR.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IntegerAttr,
    StringAttr,
    i64,
)
from xdsl.ir import Attribute

from partita.lowering.cuda.emitter import FusedKernel

__all__ = ["KIND", "MAX_GRID", "FusedRecord", "fused_record"]

KIND = "fused"
MAX_GRID = 65535
"""Blocks per launch at most; the grid-stride loop covers the rest."""
NUMPY_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def _ints(values) -> ArrayAttr:
    return ArrayAttr([IntegerAttr(v, i64) for v in values])


def _strs(values) -> ArrayAttr:
    return ArrayAttr([StringAttr(v) for v in values])


def fused_record(kernel: FusedKernel) -> DictionaryAttr:
    return DictionaryAttr({
        "kind": StringAttr(KIND),
        "entry": StringAttr(kernel.entry),
        "block": IntegerAttr(kernel.block, i64),
        "inputs": ArrayAttr([_ints(s) for s in kernel.inputs]),
        "dtypes": _strs(kernel.dtypes),
        "output": _ints(kernel.output),
        "output_dtype": StringAttr(kernel.output_dtype),
        "dims": ArrayAttr([_ints(d) for d in kernel.dims]),
        "params": _strs(kernel.params),
        "ops": _strs(kernel.ops),
    })


def _value(attr: Attribute):
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, ArrayAttr):
        return tuple(_value(a) for a in attr.data)
    raise ValueError(f"unexpected attribute {attr} in a fused kernel record")


@dataclass(frozen=True)
class FusedRecord:
    """A fused kernel's launch interface, read back from its record."""

    entry: str
    block: int
    inputs: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    output: tuple[int, ...]
    output_dtype: str
    dims: tuple[tuple[int, int], ...]
    params: tuple[str, ...]
    ops: tuple[str, ...]

    @staticmethod
    def from_attr(record: DictionaryAttr) -> FusedRecord:
        data = {k: _value(v) for k, v in record.data.items() if k != "kind"}
        return FusedRecord(**data)

    def check_inputs(self, shapes, dtypes) -> str | None:
        """Why these input arrays do not fit the kernel (``None`` when they do)."""
        if len(shapes) != len(self.inputs):
            return f"takes {len(self.inputs)} inputs, got {len(shapes)}"
        for k, (shape, dtype, want, want_dtype) in enumerate(zip(shapes, dtypes, self.inputs, self.dtypes)):
            if len(shape) != len(want) or any(w >= 0 and w != s for s, w in zip(shape, want)):
                return f"input #{k} has shape {tuple(shape)}, the kernel takes {want}"
            if str(dtype) != NUMPY_DTYPES[want_dtype]:
                return f"input #{k} is {dtype}, the kernel takes {NUMPY_DTYPES[want_dtype]}"
        return None

    def runtime_dims(self, shapes) -> list[int]:
        return [int(shapes[arg][axis]) for arg, axis in self.dims]

    def grid(self, numel: int) -> tuple[int, int, int]:
        return (max(1, min(MAX_GRID, -(-numel // self.block))), 1, 1)

    def args(self, inputs: list[int], out: int, dims: list[int]) -> list[tuple[str, int]]:
        """Kernel arguments for ``CudaModule.launch``: input pointers, output, int dims."""
        return [("ptr", p) for p in inputs] + [("ptr", out)] + [("int", d) for d in dims]

    def check_output(self, shape, dtype) -> str | None:
        """Why an output array does not fit the kernel (``None`` when it does)."""
        if len(shape) != len(self.output) or any(w >= 0 and w != s for s, w in zip(shape, self.output)):
            return f"output has shape {tuple(shape)}, the kernel writes {self.output}"
        if str(dtype) != NUMPY_DTYPES[self.output_dtype]:
            return f"output is {dtype}, the kernel writes {NUMPY_DTYPES[self.output_dtype]}"
        return None
