// RUN: partita-opt %s -p inline-compiler-functions --split-input-file --verify-diagnostics

// A recursive partition function cannot be inlined.
func.func private @rec(%a: tensor<8xf32>) -> tensor<8xf32> attributes {byoc.compiler = "cutlass"} {
  // expected-error@+1 {{calls partition function @rec recursively: cannot inline it}}
  %0 = func.call @rec(%a) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = func.call @rec(%x) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
