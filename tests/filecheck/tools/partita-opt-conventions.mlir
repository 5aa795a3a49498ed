// mlir-opt's conventions: --version, --list-passes, '-' for standard input, --pass-pipeline.

// RUN: partita-opt --version | filecheck %s --check-prefix=VERSION
// VERSION: partita-opt 0.1.0 (xDSL 0.74.0)

// RUN: partita-opt --list-passes | filecheck %s --check-prefix=LIST
// LIST-LABEL: Partita's passes
// LIST:      outline-compiler-functions
// LIST-NEXT:   {{[A-Za-z].+}}
// LIST-NEXT:   --compiler=<string, optional>  (default: none)
// LIST-NEXT:   --dedup=<bool>  (default: false)
// LIST-NEXT:   --prefix=<string>  (default: tvmgen_default)
// LIST:      partition-eager
// LIST:        --bind-constants=<bool>  (default: false)
// LIST:      plan-memory
// LIST-NEXT:   {{[A-Za-z].+}}
// LIST-NEXT:   --alignment=<int>  (default: 256)
// Partita's own passes only, not xDSL's ~170.
// LIST-NOT:  canonicalize

// RUN: partita-opt - --pass-pipeline 'builtin.module(inline-private-functions{all=true}, plan-memory)' < %s | filecheck %s
// RUN: partita-opt - -p 'inline-private-functions{all=true},plan-memory' < %s | filecheck %s
// RUN: partita-opt < %s --pass-pipeline 'any(inline-private-functions{all=true})' | filecheck %s
// CHECK-LABEL: func.func @main
// CHECK-NOT:   func.call
// CHECK:       arith.addf

func.func private @twice(%x: f32) -> f32 {
  %y = arith.addf %x, %x : f32
  func.return %y : f32
}
func.func @main(%x: f32) -> f32 {
  %y = func.call @twice(%x) : (f32) -> f32
  func.return %y : f32
}

// RUN: not partita-opt %s --pass-pipeline 'builtin.module(func.func(verify-targets))' 2>&1 | filecheck %s --check-prefix=NESTED
// NESTED: error: --pass-pipeline: nested pass managers ('func.func(...') are not supported
// RUN: not partita-opt %s -p verify-targets --pass-pipeline 'builtin.module(verify-targets)' 2>&1 | filecheck %s --check-prefix=BOTH
// BOTH: error: give the passes with -p or with --pass-pipeline, not both
