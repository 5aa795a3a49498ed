"""``partita-opt -t library-records``: a lowered module's library calls as their handles
describe them (the runtime decodes the records; the lowering only writes them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.utils.target import Target

from partita.runtime.extern import kernel_handles
from partita.runtime.libraries import LibraryHandle

__all__ = ["LibraryRecordsTarget"]


@dataclass(frozen=True)
class LibraryRecordsTarget(Target):
    """``partita-opt -t library-records``: what each library partition will ask of its
    library, read back from the ``byoc.binary`` records (cuBLASLt descriptors, cuDNN
    graphs, TensorRT ONNX sub-models as text)."""

    name = "library-records"

    def emit(self, ctx: Context, module: ModuleOp, output: IO[str]) -> None:
        handles = [h for h in kernel_handles(module).values() if isinstance(h, LibraryHandle)]
        if not handles:
            output.write("// no library partitions in this module\n")
        for handle in handles:
            output.write(f"// @{handle.function} (byoc.binary @{handle.binary}, {handle.library})\n")
            output.write(handle.describe() + "\n")
