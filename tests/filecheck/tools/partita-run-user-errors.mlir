// partita-run and partita-compile: what a new user meets at once says what happens, or
// refuses with an `error:` and exit 1.

// RUN: partita-run %s --partitioner none --fallback-device cpu --dynamic-size 3 2>&1 | filecheck %s --check-prefix=RANDOM
// RANDOM: no --inputs: running on random inputs (seed 0, '?' dims of size 3)
// RANDOM: output0: float32[3, 8]

// RUN: not partita-run %s --dynamic-size 0 2>&1 | filecheck %s --check-prefix=ZERO
// ZERO: error: argument --dynamic-size: 0 is below the minimum of 1

// RUN: not partita-run %s -q --partitioner none --fallback-device cpu --output %t.nodir/out.npz 2>&1 | filecheck %s --check-prefix=NODIR
// NODIR: error: cannot write '{{.*}}.nodir/out.npz': the directory '{{.*}}.nodir' does not exist

// RUN: partita-compile %s -q --partitioner none --fallback-device cpu -o %t.partita
// RUN: not partita-run %t.partita -q --targets cuda,llvm 2>&1 | filecheck %s --check-prefix=COMPILED
// COMPILED: error: '{{.*}}.partita' is already compiled, so --targets cannot apply to it
// RUN: not partita-compile %t.partita -q -o %t.again.partita 2>&1 | filecheck %s --check-prefix=RECOMPILE
// RECOMPILE: error: '{{.*}}.partita' is a compiled Partita model, not textual IR or an ONNX model as partita-compile takes

// RUN: not partita-import %s 2>&1 | filecheck %s --check-prefix=IMPORT
// IMPORT: error: '{{.*}}partita-run-user-errors.mlir' is textual IR, not an ONNX model as partita-import takes: pass it to partita-opt or partita-run

func.func @main(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %0 = nn.relu %x : (tensor<?x8xf32>) -> tensor<?x8xf32>
  func.return %0 : tensor<?x8xf32>
}
