"""Kernel records of fused kernels: what a ``byoc.binary`` keeps to launch each one.

A record is a dictionary ``{kind = "fused", entry, block, inputs, dtypes, output,
output_dtype, dims, params, ops}``: shapes use ``-1`` for ``?``, ``dims`` lists the
``[argument, axis]`` of each run-time ``int`` parameter, ``params`` spells the parameter
list (``name:kind:size``) like the CUTLASS records. The runtime reads it without the IR.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from xdsl.dialects.builtin import DictionaryAttr

from partita.lowering.cuda.emitter import FusedKernel
from partita.lowering.records import dataclass_from, fields_attr

__all__ = ["KIND", "MAX_GRID", "FusedRecord", "fused_record"]

KIND = "fused"
MAX_GRID = 65535
"""Blocks per launch at most; the grid-stride loop covers the rest."""
NUMPY_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}


def fused_record(kernel: FusedKernel) -> DictionaryAttr:
    return fields_attr(kernel, [f.name for f in dataclasses.fields(FusedRecord)], kind=KIND)


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
        return dataclass_from(FusedRecord, record, ignore=("kind",))

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
