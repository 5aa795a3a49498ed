// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @last_keys_of_another_batch(%q: tensor<3x2x1x4xf16>, %k: tensor<3x2x9x4xf16>, %last: tensor<2xi64>) {
  // expected-error@+1 {{attention's last-key mask must be [3] (one per batch row) or [1], got [2]}}
  %0 = nn.attention %q, %k, %k, %last {scale = 1.0 : f64} : (tensor<3x2x1x4xf16>, tensor<3x2x9x4xf16>, tensor<3x2x9x4xf16>, tensor<2xi64>) -> tensor<3x2x1x4xf16>
  func.return
}

// -----

func.func @partial_last_keys_of_rank_two(%q: tensor<3x2x1x4xf16>, %k: tensor<3x2x9x4xf16>, %last: tensor<3x1xi64>) {
  // expected-error@+1 {{attention_partial's last-key mask must be [3] (one per batch row) or [1], got [3, 1]}}
  %0 = nn.attention_partial %q, %k, %k, %last {scale = 1.0 : f64, splits = 2 : i64} : (tensor<3x2x1x4xf16>, tensor<3x2x9x4xf16>, tensor<3x2x9x4xf16>, tensor<3x1xi64>) -> tensor<3x2x2x6xf32>
  func.return
}

// -----

func.func @i32_mask(%q: tensor<3x2x1x4xf16>, %k: tensor<3x2x9x4xf16>, %last: tensor<3xi32>) {
  // expected-error@+1 {{mask element type must be one of f16, i1, i64, got i32}}
  %0 = nn.attention %q, %k, %k, %last {scale = 1.0 : f64} : (tensor<3x2x1x4xf16>, tensor<3x2x9x4xf16>, tensor<3x2x9x4xf16>, tensor<3xi32>) -> tensor<3x2x1x4xf16>
  func.return
}
