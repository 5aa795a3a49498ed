// RUN: partita-opt %s -p mark-compiler-functions-as-extern --split-input-file --verify-diagnostics

// The sibling's name is taken: an error, never an overwrite.
// expected-error@+1 {{cannot keep the body of @f as @f_reference: that symbol already exists (defined at}}
func.func private @f(%a: tensor<8xf32>) -> tensor<8xf32> attributes {byoc.compiler = "cutlass"} {
  func.return %a : tensor<8xf32>
}
func.func private @f_reference(%a: tensor<8xf32>) -> tensor<8xf32> {
  func.return %a : tensor<8xf32>
}
