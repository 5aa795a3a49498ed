"""Codegens (``lowering/<backend>/codegen.py``), their records, NVRTC and cubins.

Importing any part of the lowering registers every record kind (each codegen's records
module registers its decoder) and the kernel-record check with the ``byoc`` dialect's
verifier: the dialect sits below the lowerings whose records it carries.
"""

from partita.lowering import records as _records  # noqa: F401  (first: the others register into it)
from partita.lowering.cublas import codegen as _cublas  # noqa: F401
from partita.lowering.cuda import records as _cuda  # noqa: F401
from partita.lowering.cudnn import codegen as _cudnn  # noqa: F401
from partita.lowering.cutlass import records as _cutlass  # noqa: F401
from partita.lowering.tensorrt import codegen as _tensorrt  # noqa: F401
