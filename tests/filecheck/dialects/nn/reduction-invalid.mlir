// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @axis_out_of_range(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{reduction axis 2 out of range for rank 2}}
  %0 = nn.reduce_sum %x {axes = array<i64: 2>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return
}

// -----

func.func @repeated_axis(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{reduction axes [1, -1] repeat an axis}}
  %0 = nn.reduce_max %x {axes = array<i64: 1, -1>} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  func.return
}

// -----

func.func @wrong_reduced_shape(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{result shape [2, 1] is incompatible with inferred shape [2]}}
  %0 = nn.reduce_mean %x {axes = array<i64: 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<2x1xf32>
  func.return
}

// -----

func.func @bool_sum(%x: tensor<2x3xi1>) {
  // expected-error@+1 {{element type must be one of}}
  %0 = nn.reduce_sum %x {axes = array<i64: 1>} : (tensor<2x3xi1>) -> tensor<2x1xi1>
  func.return
}

// -----

func.func @argmax_result_type(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{result element type must be one of i64, got i32}}
  %0 = nn.argmax %x : (tensor<2x3xf32>) -> tensor<1x3xi32>
  func.return
}

// -----

func.func @topk_too_large(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{topk k = 4 exceeds the axis size 3}}
  %0 = nn.topk_values %x {k = 4 : i64} : (tensor<2x3xf32>) -> tensor<2x4xf32>
  func.return
}

// -----

func.func @group_norm_groups(%x: tensor<2x6x5xf32>, %s: tensor<6xf32>) {
  // expected-error@+1 {{num_groups 4 does not divide the 6 channels}}
  %0 = nn.group_norm %x, %s, %s {num_groups = 4 : i64} : (tensor<2x6x5xf32>, tensor<6xf32>, tensor<6xf32>) -> tensor<2x6x5xf32>
  func.return
}
