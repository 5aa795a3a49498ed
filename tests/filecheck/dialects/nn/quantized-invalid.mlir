// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @transposed_rhs_mismatch(%a: tensor<3x64xi8>, %w: tensor<64x32xi8>, %z: tensor<i8>) {
  // expected-error@+1 {{matmul reduction dimension mismatch}}
  %0 = nn.matmul_integer %a, %w, %z, %z {transpose_b = true} : (tensor<3x64xi8>, tensor<64x32xi8>, tensor<i8>, tensor<i8>) -> tensor<3x64xi32>
  func.return
}

// -----

func.func @float_conv_integer(%x: tensor<1x2x5x5xf32>, %w: tensor<3x2x3x3xf32>, %z: tensor<f32>) {
  // expected-error@+1 {{input element type must be one of i8, ui8, got f32}}
  %0 = nn.conv_integer %x, %w, %z, %z {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x2x5x5xf32>, tensor<3x2x3x3xf32>, tensor<f32>, tensor<f32>) -> tensor<1x3x3x3xi32>
  func.return
}

// -----

func.func @zero_point_type(%x: tensor<1x2x5x5xui8>, %w: tensor<3x2x3x3xi8>, %zx: tensor<i8>, %zw: tensor<i8>) {
  // expected-error@+1 {{input zero point element type must be one of ui8, got i8}}
  %0 = nn.conv_integer %x, %w, %zx, %zw {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x2x5x5xui8>, tensor<3x2x3x3xi8>, tensor<i8>, tensor<i8>) -> tensor<1x3x3x3xi32>
  func.return
}

// -----

func.func @per_channel_input_zero_point(%x: tensor<1x2x5x5xui8>, %w: tensor<3x2x3x3xi8>, %zx: tensor<2xui8>, %zw: tensor<i8>) {
  // expected-error@+1 {{input zero point must have one element, got shape [2]}}
  %0 = nn.conv_integer %x, %w, %zx, %zw {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x2x5x5xui8>, tensor<3x2x3x3xi8>, tensor<2xui8>, tensor<i8>) -> tensor<1x3x3x3xi32>
  func.return
}

// -----

func.func @weight_zero_point_length(%x: tensor<1x2x5x5xui8>, %w: tensor<3x2x3x3xi8>, %zx: tensor<ui8>, %zw: tensor<2xi8>) {
  // expected-error@+1 {{weight zero point must be one element or one per output channel (3), got shape [2]}}
  %0 = nn.conv_integer %x, %w, %zx, %zw {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x2x5x5xui8>, tensor<3x2x3x3xi8>, tensor<ui8>, tensor<2xi8>) -> tensor<1x3x3x3xi32>
  func.return
}

// -----

func.func @result_type(%x: tensor<1x2x5x5xui8>, %w: tensor<3x2x3x3xi8>, %zx: tensor<ui8>, %zw: tensor<i8>) {
  // expected-error@+1 {{result element type must be one of i32, got i8}}
  %0 = nn.conv_integer %x, %w, %zx, %zw {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilation = array<i64: 1, 1>} : (tensor<1x2x5x5xui8>, tensor<3x2x3x3xi8>, tensor<ui8>, tensor<i8>) -> tensor<1x3x3x3xi8>
  func.return
}

// -----

func.func @rank_two(%x: tensor<2x5xui8>, %w: tensor<3x5xi8>, %zx: tensor<ui8>, %zw: tensor<i8>) {
  // expected-error@+1 {{conv_integer expects an input of rank 3 to 5, got rank 2}}
  %0 = nn.conv_integer %x, %w, %zx, %zw {strides = array<i64>, padding = array<i64>, dilation = array<i64>} : (tensor<2x5xui8>, tensor<3x5xi8>, tensor<ui8>, tensor<i8>) -> tensor<2x3xi32>
  func.return
}

// -----

func.func @conv_integer_layouts(%x: tensor<1x5x5x2xui8>, %w: tensor<3x3x3x2xi8>, %zx: tensor<ui8>, %zw: tensor<i8>) {
  // expected-error@+1 {{kernel_layout 'OIHW' does not match data_layout 'NHWC' (expected 'OHWI')}}
  %0 = nn.conv_integer %x, %w, %zx, %zw {strides = array<i64: 1, 1>, padding = array<i64: 0, 0, 0, 0>, dilation = array<i64: 1, 1>, data_layout = "NHWC", kernel_layout = "OIHW"} : (tensor<1x5x5x2xui8>, tensor<3x3x3x2xi8>, tensor<ui8>, tensor<i8>) -> tensor<1x3x3x3xi32>
  func.return
}

// -----

// The FNUZ encodings are no FP8 tensor-core type.
func.func @fnuz_float8(%a: tensor<3x64xf8E4M3FNUZ>, %w: tensor<32x64xf8E4M3FN>) {
  // expected-error@+1 {{lhs element type must be one of f8E4M3FN, f8E5M2, got f8E4M3FNUZ}}
  %0 = nn.matmul_float8 %a, %w {transpose_b = true} : (tensor<3x64xf8E4M3FNUZ>, tensor<32x64xf8E4M3FN>) -> tensor<3x32xf32>
  func.return
}

// -----

func.func @float8_result(%a: tensor<3x64xf8E4M3FN>, %w: tensor<32x64xf8E4M3FN>) {
  // expected-error@+1 {{result element type must be one of f32, got f16}}
  %0 = nn.matmul_float8 %a, %w {transpose_b = true} : (tensor<3x64xf8E4M3FN>, tensor<32x64xf8E4M3FN>) -> tensor<3x32xf16>
  func.return
}

// -----

func.func @float8_reduction(%a: tensor<3x64xf8E4M3FN>, %w: tensor<64x32xf8E4M3FN>) {
  // expected-error@+1 {{matmul reduction dimension mismatch}}
  %0 = nn.matmul_float8 %a, %w {transpose_b = true} : (tensor<3x64xf8E4M3FN>, tensor<64x32xf8E4M3FN>) -> tensor<3x64xf32>
  func.return
}

// -----

func.func @nbits_block(%x: tensor<3x64xf32>, %w: tensor<8x32xui8>, %s: tensor<8x3xf32>, %z: tensor<8x3xui8>) {
  // expected-error@+1 {{block_size must be a power of two >= 16, got 24}}
  %0 = nn.matmul_nbits %x, %w, %s, %z {block_size = 24 : i64} : (tensor<3x64xf32>, tensor<8x32xui8>, tensor<8x3xf32>, tensor<8x3xui8>) -> tensor<3x8xf32>
  func.return
}

// -----

func.func @nbits_unpacked(%x: tensor<3x64xf32>, %w: tensor<8x64xui8>, %s: tensor<8x2xf32>, %z: tensor<8x2xui8>) {
  // expected-error@+1 {{weight must be [8, 32] (two codes a byte, one per block of 32), got [8, 64]}}
  %0 = nn.matmul_nbits %x, %w, %s, %z {block_size = 32 : i64} : (tensor<3x64xf32>, tensor<8x64xui8>, tensor<8x2xf32>, tensor<8x2xui8>) -> tensor<3x8xf32>
  func.return
}

// -----

func.func @nbits_scale_type(%x: tensor<3x64xf32>, %w: tensor<8x32xui8>, %s: tensor<8x2xf16>, %z: tensor<8x2xui8>) {
  // expected-error@+1 {{scales element type must be one of f32, got f16}}
  %0 = nn.matmul_nbits %x, %w, %s, %z {block_size = 32 : i64} : (tensor<3x64xf32>, tensor<8x32xui8>, tensor<8x2xf16>, tensor<8x2xui8>) -> tensor<3x8xf32>
  func.return
}

// -----

func.func @nbits_dynamic_k(%x: tensor<3x?xf32>, %w: tensor<8x32xui8>, %s: tensor<8x2xf32>, %z: tensor<8x2xui8>) {
  // expected-error@+1 {{the reduction dimension ([?]) must be a static multiple of block_size 32}}
  %0 = nn.matmul_nbits %x, %w, %s, %z {block_size = 32 : i64} : (tensor<3x?xf32>, tensor<8x32xui8>, tensor<8x2xf32>, tensor<8x2xui8>) -> tensor<3x8xf32>
  func.return
}
