// RUN: partita-opt %s -p outline-compiler-functions --split-input-file --verify-diagnostics

// Without dedup, a partition needs a global symbol to be named after.
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'byoc.partition' op has no 'byoc.global_symbol' to outline it under}}
  %0 = byoc.partition(%x) {byoc.compiler = "cutlass"} ({
  ^bb0(%a: tensor<8xf32>):
    %1 = nn.relu %a : (tensor<8xf32>) -> tensor<8xf32>
    byoc.yield %1 : tensor<8xf32>
  }) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

// A global symbol naming an existing function with a different body is an error naming
// both, never an overwrite.
func.func private @tvmgen_default_cutlass_main_0(%arg: tensor<8xf32>) -> tensor<8xf32> attributes {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0"} {
  %0 = nn.tanh %arg : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{cannot be outlined as @tvmgen_default_cutlass_main_0: the module already has a different 'func.func' @tvmgen_default_cutlass_main_0 (defined at}}
  %0 = byoc.partition(%x) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0"} ({
  ^bb0(%a: tensor<8xf32>):
    %1 = nn.relu %a : (tensor<8xf32>) -> tensor<8xf32>
    byoc.yield %1 : tensor<8xf32>
  }) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

// Two partitions claiming one global symbol with different bodies clash as well.
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = byoc.partition(%x) {byoc.compiler = "cublas", byoc.global_symbol = "shared"} ({
  ^bb0(%a: tensor<8xf32>):
    %1 = nn.relu %a : (tensor<8xf32>) -> tensor<8xf32>
    byoc.yield %1 : tensor<8xf32>
  }) : (tensor<8xf32>) -> tensor<8xf32>
  // expected-error@+1 {{cannot be outlined as @shared: the module already has a different 'func.func' @shared}}
  %2 = byoc.partition(%0) {byoc.compiler = "cublas", byoc.global_symbol = "shared"} ({
  ^bb0(%a: tensor<8xf32>):
    %3 = nn.sigmoid %a : (tensor<8xf32>) -> tensor<8xf32>
    byoc.yield %3 : tensor<8xf32>
  }) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %2 : tensor<8xf32>
}

// -----

// A symbol that is not a function (here a byoc.binary) cannot be reused either.
byoc.binary @blob attributes {format = "cubin", kernels = {}}
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{the module already has a different 'byoc.binary' @blob}}
  %0 = byoc.partition(%x) {byoc.compiler = "cublas", byoc.global_symbol = "blob"} ({
  ^bb0(%a: tensor<8xf32>):
    %1 = nn.relu %a : (tensor<8xf32>) -> tensor<8xf32>
    byoc.yield %1 : tensor<8xf32>
  }) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
