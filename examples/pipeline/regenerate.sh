#!/usr/bin/env bash
# Regenerates the IR of each pipeline stage from 0-input.mlir, one partita-opt run per stage,
# exactly as partita.compile(..., partitioner="eager") runs them. The byoc.binary ops in
# 5-codegen.mlir name their cubins by sha256 only (no path of this machine): the codegen
# leaves them in the cubin cache, and on another machine the same pinned NVRTC reproduces
# them (tests/tools/test_tool_errors.py checks that). Run it with the pinned NVRTC.
set -euo pipefail
cd "$(dirname "$0")"
python3 -c 'from partita.lowering.nvrtc import nvrtc_version as v
import sys; sys.exit(0 if v() == (13, 0) else f"NVRTC {v()} is not the pinned 13.0: pip install nvidia-cuda-nvrtc==13.0.*")'
partita-opt() { python3 -m partita.tools.opt "$@"; }
targets='"cuda -arch=sm_90,cutlass,llvm"'
stage() { # stage OUT IN PIPELINE
  partita-opt "$2" -p "$3" -o "$1"
  echo "$1: $3"
}
stage 1-partitioned.mlir 0-input.mlir 'partition-eager{backends=cutlass}'
stage 2-outlined.mlir 1-partitioned.mlir 'outline-compiler-functions'
stage 3-bound.mlir 2-outlined.mlir "bind-target{targets=$targets},split-host-device,inline-private-functions,verify-targets"
stage 4-fused.mlir 3-bound.mlir 'fuse-native-kernels{target=cuda}'
stage 5-codegen.mlir 4-fused.mlir 'cutlass-codegen{sm=90},cuda-codegen{arch=sm_90}'
stage 6-lowered.mlir 5-codegen.mlir 'mark-compiler-functions-as-extern,lower-extern-calls'
partita-opt 4-fused.mlir -t 'cutlass-cpp{sm=90}' -o 5-cutlass.cu
echo "5-cutlass.cu: the CUDA C++ cutlass-codegen compiled"
partita-opt 4-fused.mlir -t cuda-c -o 5-native.cu
echo "5-native.cu: the CUDA C cuda-codegen compiled"
# The collage alternative to stage 1.
stage 1-collage.mlir 0-input.mlir "collage-partition{targets=$targets}"
