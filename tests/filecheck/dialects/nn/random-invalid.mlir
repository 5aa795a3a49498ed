// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @integer_draws() -> tensor<4xi32> {
  // expected-error@+1 {{element type must be one of f16, bf16, f32, f64, got i32}}
  %0 = nn.random {seed = 1 : i64} : () -> tensor<4xi32>
  func.return %0 : tensor<4xi32>
}

// -----

func.func @unknown_distribution() -> tensor<4xf32> {
  // expected-error@+1 {{distribution must be one of uniform, normal, got 'poisson'}}
  %0 = nn.random {distribution = "poisson"} : () -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @negative_seed() -> tensor<4xf32> {
  // expected-error@+1 {{seed -3 is not a key in [0, 2^63)}}
  %0 = nn.random {seed = -3 : i64} : () -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @unsized_dim() -> tensor<?xf32> {
  // expected-error@+1 {{dim 0 is '?' but no shape reference sizes it}}
  %0 = nn.random : () -> tensor<?xf32>
  func.return %0 : tensor<?xf32>
}
