"""Codegens (``lowering/<backend>/codegen.py``), their records, NVRTC and cubins.

Importing any part of the lowering registers the kernel-record check with the ``byoc``
dialect's verifier: the dialect sits below the lowerings whose records it carries.
"""

from partita.lowering import records as _records  # noqa: F401
