// --verify-diagnostics checks expected-error, expected-warning and expected-remark, as
// mlir-opt does (line numbers are literal: this FileCheck has no working @LINE): an expectation that no diagnostic meets fails the run, and so does a
// diagnostic nobody expected.

// RUN: not partita-opt %s --split-input-file --verify-diagnostics -p verify-targets -o /dev/null 2>&1 | filecheck %s

func.func @met() attributes {byoc.target = #byoc.target<"llvm">} {
  func.return
}
// CHECK-NOT: unexpected
// CHECK-NOT: "met" was not produced

// -----

// expected-error@+1 {{'func.func' op has no target}}
func.func @untargeted() {
  func.return
}

// -----

// A warning nothing produces is an unmet expectation, no longer silently ignored.
// expected-warning@+1 {{never warned}}
func.func @quiet() attributes {byoc.target = #byoc.target<"llvm">} {
  func.return
}
// CHECK: partita-opt-verify-diagnostics.mlir:24: error: expected warning "never warned" was not produced

// -----

// expected-remark@+1 {{never remarked}}
func.func @silent() attributes {byoc.target = #byoc.target<"llvm">} {
  func.return
}
// CHECK: partita-opt-verify-diagnostics.mlir:32: error: expected remark "never remarked" was not produced

// -----

// An error where a warning was expected is both unexpected and unmet.
// expected-warning@+1 {{has no target}}
func.func @wrong_severity() {
  func.return
}
// CHECK: partita-opt-verify-diagnostics.mlir:41: unexpected error: 'func.func' op has no target
// CHECK: partita-opt-verify-diagnostics.mlir:41: error: expected warning "has no target" was not produced
// CHECK-NOT: unexpected
