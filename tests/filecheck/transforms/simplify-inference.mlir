// RUN: partita-opt %s --split-input-file -p simplify-inference | filecheck %s

// NCHW: scale = gamma / sqrt(var + eps) = [2, 0.5, 0.5] goes into O of the OIHW weight,
// shift = beta - mean * scale = [-1.5, -0.5, -2] into a bias_add on axis 1; the batch
// norm, the old conv and the dead constants are gone.

// CHECK-LABEL: func.func @conv_nchw
// CHECK-NEXT:    %0 = nn.constant dense<{{\[\[\[\[}}2.000000e+00]]], {{\[\[\[}}1.000000e+00]]], {{\[\[\[}}-5.000000e-01]]]]> : tensor<3x1x1x1xf32>
// CHECK-NEXT:    %1 = nn.conv2d %x, %0 {strides = array<i64: 2, 2>} : (tensor<?x1x4x4xf32>, tensor<3x1x1x1xf32>) -> tensor<?x3x2x2xf32>
// CHECK-NEXT:    %2 = nn.constant dense<[-1.500000e+00, -5.000000e-01, -2.000000e+00]> : tensor<3xf32>
// CHECK-NEXT:    %3 = nn.bias_add %1, %2 {axis = 1 : i64}
// CHECK-NEXT:    %4 = nn.relu %3
// CHECK-NEXT:    func.return %4
func.func @conv_nchw(%x: tensor<?x1x4x4xf32>) -> tensor<?x3x2x2xf32> {
  %w = nn.constant dense<[[[[1.0]]], [[[2.0]]], [[[-1.0]]]]> : tensor<3x1x1x1xf32>
  %0 = nn.conv2d %x, %w {strides = array<i64: 2, 2>} : (tensor<?x1x4x4xf32>, tensor<3x1x1x1xf32>) -> tensor<?x3x2x2xf32>
  %g = nn.constant dense<[2.0, 1.0, 2.0]> : tensor<3xf32>
  %b = nn.constant dense<[0.5, 0.0, -1.0]> : tensor<3xf32>
  %m = nn.constant dense<[1.0, 1.0, 2.0]> : tensor<3xf32>
  %v = nn.constant dense<[0.0, 3.0, 15.0]> : tensor<3xf32>
  %1 = nn.batch_norm %0, %g, %b, %m, %v {epsilon = 1.0 : f64} : (tensor<?x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<?x3x2x2xf32>
  %2 = nn.relu %1 : (tensor<?x3x2x2xf32>) -> tensor<?x3x2x2xf32>
  func.return %2 : tensor<?x3x2x2xf32>
}

// -----

// NHWC / OHWI: the same fold along O (the leading axis), the bias on axis 3.

// CHECK-LABEL: func.func @conv_nhwc
// CHECK-NEXT:    %0 = nn.constant dense<{{\[\[\[\[}}2.000000e+00, 4.000000e+00]]], {{\[\[\[}}5.000000e-01, -5.000000e-01]]]]> : tensor<2x1x1x2xf16>
// CHECK-NEXT:    %1 = nn.conv2d %x, %0 {data_layout = "NHWC", kernel_layout = "OHWI"}
// CHECK-NEXT:    %2 = nn.constant dense<[1.000000e+00, -5.000000e-01]> : tensor<2xf16>
// CHECK-NEXT:    %3 = nn.bias_add %1, %2 {axis = 3 : i64} : (tensor<1x3x3x2xf16>, tensor<2xf16>) -> tensor<1x3x3x2xf16>
// CHECK-NEXT:    func.return %3
func.func @conv_nhwc(%x: tensor<1x3x3x2xf16>) -> tensor<1x3x3x2xf16> {
  %w = nn.constant dense<[[[[1.0, 2.0]]], [[[1.0, -1.0]]]]> : tensor<2x1x1x2xf16>
  %0 = nn.conv2d %x, %w {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<1x3x3x2xf16>, tensor<2x1x1x2xf16>) -> tensor<1x3x3x2xf16>
  %g = nn.constant dense<[2.0, 1.0]> : tensor<2xf16>
  %b = nn.constant dense<[1.0, 0.0]> : tensor<2xf16>
  %m = nn.constant dense<[0.0, 1.0]> : tensor<2xf16>
  %v = nn.constant dense<[1.0, 4.0]> : tensor<2xf16>
  %1 = nn.batch_norm %0, %g, %b, %m, %v {axis = 3 : i64, epsilon = 0.0 : f64} : (tensor<1x3x3x2xf16>, tensor<2xf16>, tensor<2xf16>, tensor<2xf16>, tensor<2xf16>) -> tensor<1x3x3x2xf16>
  func.return %1 : tensor<1x3x3x2xf16>
}

// -----

// Not after a conv (or the conv result has another use, or a channel axis that is not
// the conv's): x * scale + shift with constants broadcasting along the axis, [C, 1, 1]
// for axis 1 of a rank-4 value, [C] for the last axis.

// CHECK-LABEL: func.func @decompose
// CHECK-NEXT:    %0 = nn.relu %x
// CHECK-NEXT:    %1 = nn.constant dense<{{\[\[\[}}2.000000e+00]], {{\[\[}}5.000000e-01]]]> : tensor<2x1x1xf32>
// CHECK-NEXT:    %2 = nn.multiply %0, %1 : (tensor<?x2x3x2xf32>, tensor<2x1x1xf32>) -> tensor<?x2x3x2xf32>
// CHECK-NEXT:    %3 = nn.constant dense<{{\[\[\[}}1.000000e+00]], {{\[\[}}-5.000000e-01]]]> : tensor<2x1x1xf32>
// CHECK-NEXT:    %4 = nn.add %2, %3 : (tensor<?x2x3x2xf32>, tensor<2x1x1xf32>) -> tensor<?x2x3x2xf32>
// CHECK-NEXT:    %5 = nn.constant dense<[2.000000e+00, 5.000000e-01]> : tensor<2xf32>
// CHECK-NEXT:    %6 = nn.multiply %4, %5 : (tensor<?x2x3x2xf32>, tensor<2xf32>) -> tensor<?x2x3x2xf32>
// CHECK-NEXT:    %7 = nn.constant dense<[1.000000e+00, -5.000000e-01]> : tensor<2xf32>
// CHECK-NEXT:    %8 = nn.add %6, %7
// CHECK-NEXT:    func.return %8
func.func @decompose(%x: tensor<?x2x3x2xf32>) -> tensor<?x2x3x2xf32> {
  %0 = nn.relu %x : (tensor<?x2x3x2xf32>) -> tensor<?x2x3x2xf32>
  %g = nn.constant dense<[2.0, 1.0]> : tensor<2xf32>
  %b = nn.constant dense<[1.0, 0.0]> : tensor<2xf32>
  %m = nn.constant dense<[0.0, 1.0]> : tensor<2xf32>
  %v = nn.constant dense<[1.0, 4.0]> : tensor<2xf32>
  %1 = nn.batch_norm %0, %g, %b, %m, %v {epsilon = 0.0 : f64} : (tensor<?x2x3x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<?x2x3x2xf32>
  %2 = nn.batch_norm %1, %g, %b, %m, %v {axis = 3 : i64, epsilon = 0.0 : f64} : (tensor<?x2x3x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<?x2x3x2xf32>
  func.return %2 : tensor<?x2x3x2xf32>
}

// -----

// A conv whose result is also returned keeps its weights: the batch norm decomposes.

// CHECK-LABEL: func.func @shared_conv
// CHECK-NEXT:    %w = nn.constant
// CHECK-NEXT:    %0 = nn.conv2d %x, %w
// CHECK-NEXT:    %1 = nn.constant {{.*}} : tensor<2x1x1xf32>
// CHECK-NEXT:    %2 = nn.multiply %0, %1
// CHECK-NEXT:    %3 = nn.constant {{.*}} : tensor<2x1x1xf32>
// CHECK-NEXT:    %4 = nn.add %2, %3
// CHECK-NEXT:    func.return %4, %0
func.func @shared_conv(%x: tensor<1x1x3x3xf32>) -> (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) {
  %w = nn.constant dense<[[[[1.0]]], [[[2.0]]]]> : tensor<2x1x1x1xf32>
  %0 = nn.conv2d %x, %w : (tensor<1x1x3x3xf32>, tensor<2x1x1x1xf32>) -> tensor<1x2x3x3xf32>
  %g = nn.constant dense<[2.0, 1.0]> : tensor<2xf32>
  %v = nn.constant dense<[1.0, 4.0]> : tensor<2xf32>
  %1 = nn.batch_norm %0, %g, %g, %g, %v : (tensor<1x2x3x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x3x3xf32>
  func.return %1, %0 : tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>
}

// -----

// Non-constant parameters: with a constant variance, the non-constant parts are computed
// with nn arithmetic on the vectors (scale = gamma * 1/sqrt(var + eps), shift = beta -
// mean * scale) and reshaped to broadcast; a non-constant variance needs a square root,
// which nn has no op for: that batch norm is left alone.

// CHECK-LABEL: func.func @non_constant
// CHECK-NEXT:    %0 = nn.constant dense<[5.000000e-01, 2.500000e-01]> : tensor<2xf32>
// CHECK-NEXT:    %1 = nn.multiply %g, %0 : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    %2 = nn.multiply %m, %1 : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    %3 = nn.subtract %b, %2 : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
// CHECK-NEXT:    %4 = nn.reshape %1 : (tensor<2xf32>) -> tensor<2x1x1xf32>
// CHECK-NEXT:    %5 = nn.multiply %x, %4 : (tensor<1x2x3x3xf32>, tensor<2x1x1xf32>) -> tensor<1x2x3x3xf32>
// CHECK-NEXT:    %6 = nn.reshape %3 : (tensor<2xf32>) -> tensor<2x1x1xf32>
// CHECK-NEXT:    %7 = nn.add %5, %6
// CHECK-NEXT:    %8 = nn.batch_norm %7, %g, %b, %m, %g
// CHECK-NEXT:    func.return %8
func.func @non_constant(%x: tensor<1x2x3x3xf32>, %g: tensor<2xf32>, %b: tensor<2xf32>, %m: tensor<2xf32>) -> tensor<1x2x3x3xf32> {
  %v = nn.constant dense<[4.0, 16.0]> : tensor<2xf32>
  %0 = nn.batch_norm %x, %g, %b, %m, %v {epsilon = 0.0 : f64} : (tensor<1x2x3x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x3x3xf32>
  %1 = nn.batch_norm %0, %g, %b, %m, %g : (tensor<1x2x3x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<1x2x3x3xf32>
  func.return %1 : tensor<1x2x3x3xf32>
}
