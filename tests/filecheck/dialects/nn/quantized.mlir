// RUN: partita-opt %s | partita-opt | filecheck %s
// RUN: partita-opt %s --print-op-generic | partita-opt | filecheck %s

// CHECK-LABEL: func.func @integer_products
func.func @integer_products(%a: tensor<?x3x64xui8>, %w: tensor<32x64xi8>, %b: tensor<64x32xi8>, %za: tensor<ui8>, %zb: tensor<i8>) -> (tensor<?x3x32xi32>, tensor<?x3x32xi32>) {
  // CHECK-NEXT: %0 = nn.matmul_integer %a, %w, %za, %zb {transpose_b = true} : (tensor<?x3x64xui8>, tensor<32x64xi8>, tensor<ui8>, tensor<i8>) -> tensor<?x3x32xi32>
  %0 = nn.matmul_integer %a, %w, %za, %zb {transpose_b = true} : (tensor<?x3x64xui8>, tensor<32x64xi8>, tensor<ui8>, tensor<i8>) -> tensor<?x3x32xi32>
  // CHECK-NEXT: %1 = nn.matmul_integer %a, %b, %za, %zb : (tensor<?x3x64xui8>, tensor<64x32xi8>, tensor<ui8>, tensor<i8>) -> tensor<?x3x32xi32>
  %1 = nn.matmul_integer %a, %b, %za, %zb : (tensor<?x3x64xui8>, tensor<64x32xi8>, tensor<ui8>, tensor<i8>) -> tensor<?x3x32xi32>
  func.return %0, %1 : tensor<?x3x32xi32>, tensor<?x3x32xi32>
}

// CHECK-LABEL: func.func @integer_convolutions
func.func @integer_convolutions(%x: tensor<?x4x9x9xui8>, %w: tensor<6x2x3x3xi8>, %zx: tensor<ui8>, %zw: tensor<6xi8>, %y: tensor<1x2x10xi8>, %v: tensor<3x2x4xi8>, %zy: tensor<1xi8>, %zv: tensor<i8>) -> (tensor<?x6x4x9xi32>, tensor<1x3x2xi32>) {
  // CHECK-NEXT: %0 = nn.conv_integer %x, %w, %zx, %zw {strides = array<i64: 2, 1>, padding = array<i64: 1, 1, 0, 1>, dilation = array<i64: 1, 1>, groups = 2 : i64} : (tensor<?x4x9x9xui8>, tensor<6x2x3x3xi8>, tensor<ui8>, tensor<6xi8>) -> tensor<?x6x4x9xi32>
  %0 = nn.conv_integer %x, %w, %zx, %zw {strides = array<i64: 2, 1>, padding = array<i64: 1, 1, 0, 1>, dilation = array<i64: 1, 1>, groups = 2 : i64} : (tensor<?x4x9x9xui8>, tensor<6x2x3x3xi8>, tensor<ui8>, tensor<6xi8>) -> tensor<?x6x4x9xi32>
  // CHECK-NEXT: %1 = nn.conv_integer %y, %v, %zy, %zv {strides = array<i64: 2>, padding = array<i64: 0, 0>, dilation = array<i64: 2>} : (tensor<1x2x10xi8>, tensor<3x2x4xi8>, tensor<1xi8>, tensor<i8>) -> tensor<1x3x2xi32>
  %1 = nn.conv_integer %y, %v, %zy, %zv {strides = array<i64: 2>, padding = array<i64: 0, 0>, dilation = array<i64: 2>} : (tensor<1x2x10xi8>, tensor<3x2x4xi8>, tensor<1xi8>, tensor<i8>) -> tensor<1x3x2xi32>
  func.return %0, %1 : tensor<?x6x4x9xi32>, tensor<1x3x2xi32>
}

// Channels last: the layouts are spelled (channels first, the default, is not).

// CHECK-LABEL: func.func @integer_convolution_nhwc
func.func @integer_convolution_nhwc(%x: tensor<?x9x9x32xui8>, %w: tensor<16x3x3x32xi8>, %zx: tensor<ui8>, %zw: tensor<i8>) -> tensor<?x5x5x16xi32> {
  // CHECK-NEXT: %0 = nn.conv_integer %x, %w, %zx, %zw {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilation = array<i64: 1, 1>, data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<?x9x9x32xui8>, tensor<16x3x3x32xi8>, tensor<ui8>, tensor<i8>) -> tensor<?x5x5x16xi32>
  %0 = nn.conv_integer %x, %w, %zx, %zw {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilation = array<i64: 1, 1>, data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<?x9x9x32xui8>, tensor<16x3x3x32xi8>, tensor<ui8>, tensor<i8>) -> tensor<?x5x5x16xi32>
  func.return %0 : tensor<?x5x5x16xi32>
}

// FP8: 8-bit float operands (E4M3FN, E5M2, mixed), an f32 result, the weight [N, K] or [K, N].

// CHECK-LABEL: func.func @float8_products
func.func @float8_products(%a: tensor<?x3x64xf8E4M3FN>, %w: tensor<32x64xf8E5M2>, %b: tensor<2x64x32xf8E4M3FN>) -> (tensor<?x3x32xf32>, tensor<2x3x32xf32>) {
  // CHECK-NEXT: %0 = nn.matmul_float8 %a, %w {transpose_b = true} : (tensor<?x3x64xf8E4M3FN>, tensor<32x64xf8E5M2>) -> tensor<?x3x32xf32>
  %0 = nn.matmul_float8 %a, %w {transpose_b = true} : (tensor<?x3x64xf8E4M3FN>, tensor<32x64xf8E5M2>) -> tensor<?x3x32xf32>
  // CHECK-NEXT: %1 = nn.matmul_float8 %a, %b : (tensor<?x3x64xf8E4M3FN>, tensor<2x64x32xf8E4M3FN>) -> tensor<2x3x32xf32>
  %1 = nn.matmul_float8 %a, %b : (tensor<?x3x64xf8E4M3FN>, tensor<2x64x32xf8E4M3FN>) -> tensor<2x3x32xf32>
  func.return %0, %1 : tensor<?x3x32xf32>, tensor<2x3x32xf32>
}

// Weight-only 4-bit: the weight [N, K / 2] packed, scales and zero points per block of 32 along K.

// CHECK-LABEL: func.func @weight_only_4_bit
func.func @weight_only_4_bit(%x: tensor<?x3x64xf16>, %w: tensor<32x32xui8>, %s: tensor<32x2xf16>, %z: tensor<32x2xui8>) -> tensor<?x3x32xf16> {
  // CHECK-NEXT: %0 = nn.matmul_nbits %x, %w, %s, %z {block_size = 32 : i64} : (tensor<?x3x64xf16>, tensor<32x32xui8>, tensor<32x2xf16>, tensor<32x2xui8>) -> tensor<?x3x32xf16>
  %0 = nn.matmul_nbits %x, %w, %s, %z {block_size = 32 : i64} : (tensor<?x3x64xf16>, tensor<32x32xui8>, tensor<32x2xf16>, tensor<32x2xui8>) -> tensor<?x3x32xf16>
  func.return %0 : tensor<?x3x32xf16>
}
