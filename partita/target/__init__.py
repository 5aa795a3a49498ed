"""Targets for partitioning: target kinds, targets and the compilation config.

Pure Python (no xDSL dialect imports) so the ``byoc`` dialect can depend on it.
"""

from partita.target.config import CompilationConfig, split_target_list
from partita.target.kind import (
    DeviceType,
    TargetError,
    TargetKind,
    TargetOption,
    get_target_kind,
    is_external_codegen_for,
    is_registered,
    list_target_kinds,
    register_target_kind,
)
from partita.target.target import Target, as_target

__all__ = [
    "CompilationConfig",
    "DeviceType",
    "Target",
    "TargetError",
    "TargetKind",
    "TargetOption",
    "as_target",
    "get_target_kind",
    "is_external_codegen_for",
    "is_registered",
    "list_target_kinds",
    "register_target_kind",
    "split_target_list",
]
