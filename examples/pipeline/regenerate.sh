#!/usr/bin/env bash
# Regenerates the IR of each pipeline stage from 0-input.mlir, one partita-opt run per stage,
# exactly as partita.compile(..., partitioner="eager") runs them. The byoc.binary in
# 4-codegen.mlir names the cubin in the cache of the machine that generated it.
set -euo pipefail
cd "$(dirname "$0")"
targets='"cuda -arch=sm_90,cutlass,llvm"'
stage() { # stage OUT IN PIPELINE
  partita-opt "$2" -p "$3" -o "$1"
  echo "$1: $3"
}
stage 1-partitioned.mlir 0-input.mlir 'partition-eager{backends=cutlass}'
stage 2-outlined.mlir 1-partitioned.mlir 'outline-compiler-functions'
stage 3-bound.mlir 2-outlined.mlir "bind-target{targets=$targets},verify-targets"
stage 4-codegen.mlir 3-bound.mlir 'cutlass-codegen{sm=90}'
stage 5-lowered.mlir 4-codegen.mlir 'mark-compiler-functions-as-extern,lower-extern-calls'
partita-opt 3-bound.mlir -t 'cutlass-cpp{sm=90}' -o 4-codegen.cu
echo "4-codegen.cu: the CUDA C++ cutlass-codegen compiled"
# The collage alternative to stage 1.
stage 1-collage.mlir 0-input.mlir "collage-partition{targets=$targets}"
