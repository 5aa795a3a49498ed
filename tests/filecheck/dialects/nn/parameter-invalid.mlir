// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @not_a_tensor() {
  // expected-error@+1 {{a parameter has a tensor type, got f32}}
  %w = nn.constant #nn.parameter<"w" : f32, file "w.bin" at 0>
  func.return
}

// -----

func.func @type_mismatch() {
  // expected-error@+1 {{value type tensor<4xf32> does not match result type tensor<8xf32>}}
  %w = "nn.constant"() <{value = #nn.parameter<"w" : tensor<4xf32>, file "w.bin" at 0>}> : () -> tensor<8xf32>
  func.return
}

// -----

func.func @not_a_permutation() {
  // expected-error@+1 {{perm [0, 2, 2] is not a permutation of the dims of tensor<2x3x4xf32>}}
  %w = nn.constant #nn.parameter<"w" : tensor<2x3x4xf32>, file "w.bin" at 0 perm [0, 2, 2]>
  func.return
}

// -----

func.func @bool_parameter() {
  // expected-error@+1 {{a parameter of i1 elements has no stored layout}}
  %w = nn.constant #nn.parameter<"w" : tensor<4096xi1>, file "w.bin" at 0>
  func.return
}

// -----

func.func @dynamic_parameter() {
  // expected-error@+1 {{a parameter has a static shape, not tensor<?x4xf32>}}
  %w = nn.constant #nn.parameter<"w" : tensor<?x4xf32>, file "w.bin" at 0>
  func.return
}
