// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @mixed_element_types(%a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error@+1 {{operands and results must share one element type, got f16, f32}}
  %0 = nn.add %a, %b : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  func.return
}

// -----

func.func @integer_tensor(%a: tensor<4xi32>) {
  // expected-error@+1 {{element type must be one of f16, bf16, f32, f64, got i32}}
  %0 = nn.softmax %a : (tensor<4xi32>) -> tensor<4xi32>
  func.return
}

// -----

func.func @not_broadcastable(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) {
  // expected-error@+1 {{are not broadcastable}}
  %0 = nn.multiply %a, %b : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  func.return
}

// -----

func.func @wrong_result_shape(%a: tensor<?x3xf32>) {
  // expected-error@+1 {{result shape [?, 4] is incompatible with inferred shape [?, 3]}}
  %0 = nn.sigmoid %a : (tensor<?x3xf32>) -> tensor<?x4xf32>
  func.return
}

// -----

func.func @gelu_mode(%a: tensor<3xf32>) {
  // expected-error@+1 {{approximate must be "none" or "tanh", got 'erf'}}
  %0 = nn.gelu %a {approximate = "erf"} : (tensor<3xf32>) -> tensor<3xf32>
  func.return
}


// -----

func.func @dense_k(%x: tensor<2x4xf32>, %w: tensor<8x5xf32>) {
  // expected-error@+1 {{dense reduction dimension mismatch: 4 vs 5}}
  %0 = nn.dense %x, %w : (tensor<2x4xf32>, tensor<8x5xf32>) -> tensor<2x8xf32>
  func.return
}

// -----

func.func @matmul_rank(%x: tensor<4xf32>, %w: tensor<4x5xf32>) {
  // expected-error@+1 {{matmul expects rank >= 2 operands, got 1 and 2}}
  %0 = nn.matmul %x, %w : (tensor<4xf32>, tensor<4x5xf32>) -> tensor<5xf32>
  func.return
}

// -----

func.func @batch_matmul_k(%a: tensor<2x3x4xf32>, %b: tensor<2x6x5xf32>) {
  // expected-error@+1 {{batch_matmul reduction dimension mismatch: 4 vs 5}}
  %0 = nn.batch_matmul %a, %b : (tensor<2x3x4xf32>, tensor<2x6x5xf32>) -> tensor<2x3x6xf32>
  func.return
}

// -----

func.func @bias_size(%x: tensor<2x4xf32>, %b: tensor<3xf32>) {
  // expected-error@+1 {{bias size does not match input dimension 1: 4 vs 3}}
  %0 = nn.bias_add %x, %b : (tensor<2x4xf32>, tensor<3xf32>) -> tensor<2x4xf32>
  func.return
}

// -----

func.func @softmax_axis(%x: tensor<2x4xf32>) {
  // expected-error@+1 {{axis -3 out of range for rank 2}}
  %0 = nn.softmax %x {axis = -3 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  func.return
}

// -----

func.func @layer_norm_gamma(%x: tensor<2x4xf32>, %g: tensor<2x4xf32>) {
  // expected-error@+1 {{gamma must have shape [4], got [2, 4]}}
  %0 = nn.layer_norm %x, %g, %g : (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  func.return
}

// -----

func.func @batch_norm_channels(%x: tensor<1x6x4x4xf32>, %c: tensor<5xf32>) {
  // expected-error@+1 {{gamma size does not match input dimension 1: 6 vs 5}}
  %0 = nn.batch_norm %x, %c, %c, %c, %c : (tensor<1x6x4x4xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>, tensor<5xf32>) -> tensor<1x6x4x4xf32>
  func.return
}

// -----

func.func @conv_groups(%x: tensor<1x6x8x8xf32>, %w: tensor<8x2x3x3xf32>) {
  // expected-error@+1 {{groups 4 does not divide input channels 6}}
  %0 = nn.conv2d %x, %w {groups = 4 : i64} : (tensor<1x6x8x8xf32>, tensor<8x2x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}

// -----

func.func @conv_channels(%x: tensor<1x6x8x8xf32>, %w: tensor<8x2x3x3xf32>) {
  // expected-error@+1 {{input channels 6 != weight input channels 2 * groups 1}}
  %0 = nn.conv2d %x, %w : (tensor<1x6x8x8xf32>, tensor<8x2x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}

// -----

func.func @conv_strides(%x: tensor<1x6x8x8xf32>, %w: tensor<8x6x3x3xf32>) {
  // expected-error@+1 {{strides values must be >= 1, got [0, 1]}}
  %0 = nn.conv2d %x, %w {strides = array<i64: 0, 1>} : (tensor<1x6x8x8xf32>, tensor<8x6x3x3xf32>) -> tensor<1x8x6x6xf32>
  func.return
}

// -----

func.func @conv_layout_pair(%x: tensor<1x8x8x6xf32>, %w: tensor<8x6x3x3xf32>) {
  // expected-error@+1 {{kernel_layout 'OIHW' does not match data_layout 'NHWC' (expected 'OHWI')}}
  %0 = nn.conv2d %x, %w {data_layout = "NHWC"} : (tensor<1x8x8x6xf32>, tensor<8x6x3x3xf32>) -> tensor<1x6x6x8xf32>
  func.return
}

// -----

func.func @conv_result(%x: tensor<1x6x8x8xf32>, %w: tensor<8x6x3x3xf32>) {
  // expected-error@+1 {{result shape [1, 8, 8, 8] is incompatible with inferred shape [1, 8, 6, 6]}}
  %0 = nn.conv2d %x, %w : (tensor<1x6x8x8xf32>, tensor<8x6x3x3xf32>) -> tensor<1x8x8x8xf32>
  func.return
}

// -----

func.func @pool_layout(%x: tensor<1x6x8x8xf32>) {
  // expected-error@+1 {{unsupported layout 'HWCN' (expected NCHW or NHWC)}}
  %0 = nn.max_pool2d %x {pool_size = array<i64: 2, 2>, layout = "HWCN"} : (tensor<1x6x8x8xf32>) -> tensor<1x6x7x7xf32>
  func.return
}

// -----

func.func @pool_padding(%x: tensor<1x6x8x8xf32>) {
  // expected-error@+1 {{padding [2, 0, 0, 0] must be smaller than the window}}
  %0 = nn.avg_pool2d %x {pool_size = array<i64: 2, 2>, padding = array<i64: 2, 0, 0, 0>} : (tensor<1x6x8x8xf32>) -> tensor<1x6x9x7xf32>
  func.return
}

// -----

func.func @global_pool_rank(%x: tensor<6x8x8xf32>) {
  // expected-error@+1 {{global pooling expects a rank 4 input, got rank 3}}
  %0 = nn.global_avg_pool2d %x : (tensor<6x8x8xf32>) -> tensor<6x1x1xf32>
  func.return
}

// -----

func.func @lrn_size(%x: tensor<1x6x8x8xf32>) {
  // expected-error@+1 {{lrn size must be >= 1, got 0}}
  %0 = nn.lrn %x {size = 0 : i64} : (tensor<1x6x8x8xf32>) -> tensor<1x6x8x8xf32>
  func.return
}

// -----

func.func @pad_length(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{pad_after must have 2 values, got 1}}
  %0 = nn.pad %x {pad_before = array<i64: 0, 0>, pad_after = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<3x3xf32>
  func.return
}

// -----

func.func @reshape_count(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{reshape changes the element count: 6 vs 8}}
  %0 = nn.reshape %x : (tensor<2x3xf32>) -> tensor<2x4xf32>
  func.return
}

// -----

func.func @reshape_two_dynamic(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{reshape result may have at most one dynamic dimension}}
  %0 = nn.reshape %x : (tensor<2x3xf32>) -> tensor<?x?xf32>
  func.return
}

// -----

func.func @transpose_perm(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{perm [1, 1] is not a permutation of rank 2}}
  %0 = nn.transpose %x {perm = array<i64: 1, 1>} : (tensor<2x3xf32>) -> tensor<3x3xf32>
  func.return
}

// -----

func.func @concat_dims(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) {
  // expected-error@+1 {{concatenate dimension 1 mismatch: 3 vs 4}}
  %0 = nn.concatenate %a, %b {axis = 0 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<4x3xf32>
  func.return
}

// -----

func.func @constant_type() {
  // expected-error@+1 {{value type tensor<2xf32> does not match result type tensor<3xf32>}}
  %0 = "nn.constant"() <{value = dense<1.0> : tensor<2xf32>}> : () -> tensor<3xf32>
  func.return
}

// -----

func.func @shape_of_rank(%x: tensor<?x3xf32>) {
  // expected-error@+1 {{shape [3] is incompatible with inferred shape [2]}}
  %0 = nn.shape_of %x : (tensor<?x3xf32>) -> tensor<3xi64>
  func.return
}

// -----

func.func @shape_of_i32(%x: tensor<?x3xf32>) {
  // expected-error@+1 {{result element type must be i64, got i32}}
  %0 = nn.shape_of %x : (tensor<?x3xf32>) -> tensor<2xi32>
  func.return
}
