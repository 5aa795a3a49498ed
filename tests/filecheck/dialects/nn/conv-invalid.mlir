// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @groups_do_not_divide(%x: tensor<1x4x9xf32>, %w: tensor<6x1x3xf32>) {
  // expected-error@+1 {{groups 3 does not divide input channels 4}}
  %0 = nn.conv1d %x, %w {groups = 3 : i64} : (tensor<1x4x9xf32>, tensor<6x1x3xf32>) -> tensor<1x6x7xf32>
  func.return
}

// -----

func.func @wrong_rank(%x: tensor<1x4x9x9xf32>, %w: tensor<6x4x3x3xf32>) {
  // expected-error@+1 {{conv3d expects rank 5 input and weight, got 4 and 4}}
  %0 = nn.conv3d %x, %w : (tensor<1x4x9x9xf32>, tensor<6x4x3x3xf32>) -> tensor<1x6x7x7xf32>
  func.return
}

// -----

func.func @layouts_disagree(%x: tensor<1x9x9x4xf32>, %w: tensor<6x4x3x3xf32>) {
  // expected-error@+1 {{kernel_layout 'OIHW' does not match data_layout 'NHWC' (expected 'OHWI')}}
  %0 = nn.conv2d %x, %w {data_layout = "NHWC"} : (tensor<1x9x9x4xf32>, tensor<6x4x3x3xf32>) -> tensor<1x7x7x6xf32>
  func.return
}

// -----

func.func @integer_conv(%x: tensor<1x4x9xi8>, %w: tensor<6x4x3xi8>) {
  // expected-error@+1 {{element type must be one of f16, bf16, f32, f64, got i8}}
  %0 = nn.conv1d %x, %w : (tensor<1x4x9xi8>, tensor<6x4x3xi8>) -> tensor<1x6x7xi8>
  func.return
}

// -----

func.func @transpose_channels(%x: tensor<1x4x3x3xf32>, %w: tensor<2x3x3x3xf32>) {
  // expected-error@+1 {{input channels must match the weight's first dimension: 4 vs 2}}
  %0 = nn.conv2d_transpose %x, %w : (tensor<1x4x3x3xf32>, tensor<2x3x3x3xf32>) -> tensor<1x3x5x5xf32>
  func.return
}

// -----

func.func @pad_larger_than_window(%x: tensor<1x3x10xf32>) {
  // expected-error@+1 {{padding [2, 0] must be smaller than the window}}
  %0 = nn.max_pool1d %x {pool_size = array<i64: 2>, padding = array<i64: 2, 0>} : (tensor<1x3x10xf32>) -> tensor<1x3x11xf32>
  func.return
}

// -----

func.func @wrong_pool_result(%x: tensor<1x3x4x4x4xf32>) {
  // expected-error@+1 {{result shape [1, 3, 2, 2, 2] is incompatible with inferred shape [1, 3, 3, 3, 3]}}
  %0 = nn.avg_pool3d %x {pool_size = array<i64: 2, 2, 2>} : (tensor<1x3x4x4x4xf32>) -> tensor<1x3x2x2x2xf32>
  func.return
}

// -----

func.func @float_lp_pool_only(%x: tensor<1x3x4xi32>) {
  // expected-error@+1 {{element type must be one of f16, bf16, f32, f64, got i32}}
  %0 = nn.lp_pool1d %x {pool_size = array<i64: 2>} : (tensor<1x3x4xi32>) -> tensor<1x3x3xi32>
  func.return
}

// -----

func.func @resize_dynamic_needs_scale_one(%x: tensor<?x3x4xf32>) {
  // expected-error@+1 {{a dynamic output size needs scale 1}}
  %0 = nn.resize %x {scales = array<f64: 2.0, 1.0, 1.0>, sizes = array<i64: -1, 3, 4>} : tensor<?x3x4xf32> -> tensor<?x3x4xf32>
  func.return
}

// -----

func.func @resize_scales_operand(%x: tensor<2x3x4xf32>, %s: tensor<2xf32>) {
  // expected-error@+1 {{the scales operand must be a tensor<3xf32>}}
  %0 = nn.resize %x scales(%s : tensor<2xf32>) {scales = array<f64>, sizes = array<i64: 2, 3, 8>} : tensor<2x3x4xf32> -> tensor<2x3x8xf32>
  func.return
}

// -----

func.func @depth_to_space_channels(%x: tensor<1x6x2x2xf32>) {
  // expected-error@+1 {{channels 6 are not a multiple of block_size^2 = 4}}
  %0 = nn.depth_to_space %x {block_size = 2 : i64} : (tensor<1x6x2x2xf32>) -> tensor<1x1x4x4xf32>
  func.return
}

// -----

func.func @col2im_columns_not_a_multiple_of_the_block(%c: tensor<1x5x16xf32>) {
  // expected-error@+1 {{input dim 1 (5) is not a multiple of prod(block_shape) = 4}}
  %0 = nn.col2im %c {image_shape = array<i64: 5, 5>, block_shape = array<i64: 2, 2>} : (tensor<1x5x16xf32>) -> tensor<1x1x5x5xf32>
  func.return
}

// -----

func.func @col2im_block_count(%c: tensor<1x4x15xf32>) {
  // expected-error@+1 {{input dim 2 must count the [4, 4] sliding blocks: 15 vs 16}}
  %0 = nn.col2im %c {image_shape = array<i64: 5, 5>, block_shape = array<i64: 2, 2>} : (tensor<1x4x15xf32>) -> tensor<1x1x5x5xf32>
  func.return
}

// -----

func.func @col2im_block_larger_than_the_image(%c: tensor<1x36x1xf32>) {
  // expected-error@+1 {{window of extent 6 larger than padded input 5}}
  %0 = nn.col2im %c {image_shape = array<i64: 5, 5>, block_shape = array<i64: 6, 6>} : (tensor<1x36x1xf32>) -> tensor<1x1x5x5xf32>
  func.return
}

// -----

func.func @max_unpool_indices_of_another_shape(%x: tensor<1x1x2x2xf32>, %i: tensor<1x1x2x3xi64>) {
  // expected-error@+1 {{indices must have the input's shape [1, 1, 2, 2], got [1, 1, 2, 3]}}
  %0 = nn.max_unpool %x, %i {output_size = array<i64: 4, 4>} : (tensor<1x1x2x2xf32>, tensor<1x1x2x3xi64>) -> tensor<1x1x4x4xf32>
  func.return
}

// -----

func.func @max_unpool_float_indices(%x: tensor<1x1x2x2xf32>, %i: tensor<1x1x2x2xf32>) {
  // expected-error@+1 {{indices element type must be one of i32, i64, got f32}}
  %0 = nn.max_unpool %x, %i {output_size = array<i64: 4, 4>} : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>) -> tensor<1x1x4x4xf32>
  func.return
}

// -----

func.func @max_unpool_output_size_rank(%x: tensor<1x1x2x2xf32>, %i: tensor<1x1x2x2xi64>) {
  // expected-error@+1 {{output_size must hold 2 positive extents, got [4]}}
  %0 = nn.max_unpool %x, %i {output_size = array<i64: 4>} : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xi64>) -> tensor<1x1x4xf32>
  func.return
}

// -----

func.func @deform_conv2d_offset_channels(%x: tensor<1x2x5x6xf32>, %w: tensor<3x2x3x3xf32>, %o: tensor<1x12x3x4xf32>) {
  // expected-error@+1 {{offset must hold (dy, dx) per tap and offset group: 12 vs 18}}
  %0 = nn.deform_conv2d %x, %w, %o : (tensor<1x2x5x6xf32>, tensor<3x2x3x3xf32>, tensor<1x12x3x4xf32>) -> tensor<1x3x3x4xf32>
  func.return
}

// -----

func.func @deform_conv2d_mask_taps(%x: tensor<1x2x5x6xf32>, %w: tensor<3x2x3x3xf32>, %o: tensor<1x18x3x4xf32>, %m: tensor<1x8x3x4xf32>) {
  // expected-error@+1 {{mask must hold one weight per tap and offset group: 8 vs 9}}
  %0 = nn.deform_conv2d %x, %w, %o, %m : (tensor<1x2x5x6xf32>, tensor<3x2x3x3xf32>, tensor<1x18x3x4xf32>, tensor<1x8x3x4xf32>) -> tensor<1x3x3x4xf32>
  func.return
}
