"""Partita's passes, registered by their public (MLIR-style) names.

The table maps each pass name to the module and class that implements it; modules are
imported only when the pass is used, so the tools start fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from xdsl.passes import ModulePass

_PASSES: dict[str, tuple[str, str]] = {
    # Compiler functions (TVM's BYOC utilities).
    "inline-compiler-functions": ("partita.transforms.inline_compiler_functions", "InlineCompilerFunctions"),
    "outline-compiler-functions": ("partita.transforms.outline_compiler_functions", "OutlineCompilerFunctions"),
    "mark-compiler-functions-as-extern": ("partita.transforms.mark_compiler_functions_as_extern", "MarkCompilerFunctionsAsExtern"),
    "lower-extern-calls": ("partita.transforms.lower_extern_calls", "LowerExternCalls"),
    "plan-memory": ("partita.transforms.plan_memory", "PlanMemory"),
    # Targets.
    "bind-target": ("partita.transforms.bind_target", "BindTarget"),
    "split-host-device": ("partita.transforms.split_host_device", "SplitHostDevice"),
    "inline-private-functions": ("partita.transforms.inline_private_functions", "InlinePrivateFunctions"),
    "fold-constant-calls": ("partita.transforms.fold_constant_calls", "FoldConstantCalls"),
    "verify-targets": ("partita.transforms.verify_targets", "VerifyTargets"),
    # Partitioning.
    "merge-composite": ("partita.transforms.merge_composite", "MergeComposite"),
    "annotate-target": ("partita.transforms.annotate_target", "AnnotateTarget"),
    "merge-compiler-regions": ("partita.transforms.merge_compiler_regions", "MergeCompilerRegions"),
    "partition-graph": ("partita.transforms.partition_graph", "PartitionGraph"),
    "partition-eager": ("partita.transforms.partition_eager", "PartitionEager"),
    "collage-partition": ("partita.transforms.collage_partition", "CollagePartition"),
    # Standard MLIR dialects in.
    "legalize-to-nn": ("partita.transforms.legalize_to_nn", "LegalizeToNN"),
    # Graph simplification and layout.
    "simplify-inference": ("partita.transforms.simplify_inference", "SimplifyInference"),
    "to-mixed-precision": ("partita.transforms.to_mixed_precision", "ToMixedPrecision"),
    "convert-layout": ("partita.transforms.convert_layout", "ConvertLayout"),
    "fuse-attention": ("partita.transforms.fuse_attention", "FuseAttention"),
    "fuse-rms-norm": ("partita.transforms.fuse_rms_norm", "FuseRMSNorm"),
    "fuse-layer-norm": ("partita.transforms.fuse_layer_norm", "FuseLayerNorm"),
    "sink-reshapes": ("partita.transforms.sink_reshapes", "SinkReshapes"),
    "simplify-transposes": ("partita.transforms.simplify_transposes", "SimplifyTransposes"),
    "combine-parallel-dense": ("partita.transforms.combine_parallel_dense", "CombineParallelDense"),
    "merge-rotary-embeddings": ("partita.transforms.merge_rotary", "MergeRotaryEmbeddings"),
    "last-key-mask": ("partita.transforms.last_key_mask", "LastKeyMask"),
    "split-kv-attention": ("partita.transforms.split_kv_attention", "SplitKVAttention"),
    # Lowering.
    "fuse-native-kernels": ("partita.transforms.fuse_native_kernels", "FuseNativeKernels"),
    "tie-in-place-updates": ("partita.transforms.tie_in_place_updates", "TieInPlaceUpdates"),
    "cuda-codegen": ("partita.lowering.cuda.codegen", "CudaCodegen"),
    "tune-cutlass-kernels": ("partita.transforms.tune_cutlass_kernels", "TuneCutlassKernels"),
    "cutlass-codegen": ("partita.lowering.cutlass.codegen", "CutlassCodegen"),
    "cublas-codegen": ("partita.lowering.cublas.codegen", "CublasCodegen"),
    "cudnn-codegen": ("partita.lowering.cudnn.codegen", "CudnnCodegen"),
    "tensorrt-codegen": ("partita.lowering.tensorrt.codegen", "TensorRTCodegen"),
}


def _loader(module: str, cls: str) -> Callable[[], type[ModulePass]]:
    def load() -> type[ModulePass]:
        return getattr(importlib.import_module(module), cls)

    return load


def get_all_passes() -> dict[str, Callable[[], type[ModulePass]]]:
    """Lazy factories for every Partita pass, keyed by pass name (``xdsl.universe`` style)."""
    return {name: _loader(module, cls) for name, (module, cls) in _PASSES.items()}
