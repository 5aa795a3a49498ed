// RUN: partita-opt %s --split-input-file -p fuse-layer-norm | filecheck %s

// BERT's LayerNorm as the TorchScript exporter writes it before opset 17: mean, x - m,
// pow(d, 2), mean, + eps, sqrt, d / s, * w, + b. One nn.layer_norm with w and b.

// CHECK-LABEL: func.func @bert_opset14
// CHECK-NEXT:    %0 = nn.layer_norm %x, %w, %b {axis = 2 : i64, epsilon = 1.000000e-12 : f64} : (tensor<?x?x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<?x?x32xf32>
// CHECK-NEXT:    func.return %0
func.func @bert_opset14(%x: tensor<?x?x32xf32>, %w: tensor<32xf32>, %b: tensor<32xf32>) -> tensor<?x?x32xf32> {
  %0 = nn.reduce_mean %x {axes = array<i64: 2>} : (tensor<?x?x32xf32>) -> tensor<?x?x1xf32>
  %1 = nn.subtract %x, %0 : (tensor<?x?x32xf32>, tensor<?x?x1xf32>) -> tensor<?x?x32xf32>
  %2 = nn.constant dense<2.000000e+00> : tensor<f32>
  %3 = nn.pow %1, %2 : (tensor<?x?x32xf32>, tensor<f32>) -> tensor<?x?x32xf32>
  %4 = nn.reduce_mean %3 {axes = array<i64: 2>} : (tensor<?x?x32xf32>) -> tensor<?x?x1xf32>
  %5 = nn.constant dense<1.000000e-12> : tensor<f32>
  %6 = nn.add %4, %5 : (tensor<?x?x1xf32>, tensor<f32>) -> tensor<?x?x1xf32>
  %7 = nn.sqrt %6 : (tensor<?x?x1xf32>) -> tensor<?x?x1xf32>
  %8 = nn.divide %1, %7 : (tensor<?x?x32xf32>, tensor<?x?x1xf32>) -> tensor<?x?x32xf32>
  %9 = nn.multiply %8, %w : (tensor<?x?x32xf32>, tensor<32xf32>) -> tensor<?x?x32xf32>
  %10 = nn.add %9, %b : (tensor<?x?x32xf32>, tensor<32xf32>) -> tensor<?x?x32xf32>
  func.return %10 : tensor<?x?x32xf32>
}

// -----

// A hand-written norm: d * d, eps on the left, d * reciprocal(s), the scale on the left
// and no shift (zeros), a negative axis; eps is the default 1e-05 (not printed).

// CHECK-LABEL: func.func @handwritten
// CHECK-NEXT:    %0 = nn.constant dense<0.000000e+00> : tensor<16xf16>
// CHECK-NEXT:    %1 = nn.layer_norm %x, %w, %0 {axis = 1 : i64} : (tensor<4x16xf16>, tensor<16xf16>, tensor<16xf16>) -> tensor<4x16xf16>
// CHECK-NEXT:    func.return %1
func.func @handwritten(%x: tensor<4x16xf16>, %w: tensor<16xf16>) -> tensor<4x16xf16> {
  %0 = nn.reduce_mean %x {axes = array<i64: -1>} : (tensor<4x16xf16>) -> tensor<4x1xf16>
  %1 = nn.subtract %x, %0 : (tensor<4x16xf16>, tensor<4x1xf16>) -> tensor<4x16xf16>
  %2 = nn.multiply %1, %1 : (tensor<4x16xf16>, tensor<4x16xf16>) -> tensor<4x16xf16>
  %3 = nn.reduce_mean %2 {axes = array<i64: -1>} : (tensor<4x16xf16>) -> tensor<4x1xf16>
  %4 = nn.constant dense<1.000000e-05> : tensor<1xf16>
  %5 = nn.add %4, %3 : (tensor<1xf16>, tensor<4x1xf16>) -> tensor<4x1xf16>
  %6 = nn.sqrt %5 : (tensor<4x1xf16>) -> tensor<4x1xf16>
  %7 = nn.reciprocal %6 : (tensor<4x1xf16>) -> tensor<4x1xf16>
  %8 = nn.multiply %1, %7 : (tensor<4x16xf16>, tensor<4x1xf16>) -> tensor<4x16xf16>
  %9 = nn.multiply %w, %8 : (tensor<16xf16>, tensor<4x16xf16>) -> tensor<4x16xf16>
  func.return %9 : tensor<4x16xf16>
}

// -----

// What stays: the difference read outside the chain (it is a result), a mean over another
// axis (ConvNeXt's channels-first norm), and a variance of something else.

// CHECK-LABEL: func.func @stays
// CHECK-NOT:     nn.layer_norm
// CHECK:         func.return
func.func @stays(%x: tensor<4x16xf32>, %y: tensor<2x8x4xf32>) -> (tensor<4x16xf32>, tensor<4x16xf32>, tensor<2x8x4xf32>) {
  %0 = nn.reduce_mean %x {axes = array<i64: 1>} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %1 = nn.subtract %x, %0 : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %2 = nn.multiply %1, %1 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %3 = nn.reduce_mean %2 {axes = array<i64: 1>} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %4 = nn.constant dense<1.000000e-05> : tensor<f32>
  %5 = nn.add %3, %4 : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %6 = nn.sqrt %5 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %7 = nn.divide %1, %6 : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %10 = nn.reduce_mean %y {axes = array<i64: 1>} : (tensor<2x8x4xf32>) -> tensor<2x1x4xf32>
  %11 = nn.subtract %y, %10 : (tensor<2x8x4xf32>, tensor<2x1x4xf32>) -> tensor<2x8x4xf32>
  %12 = nn.multiply %11, %11 : (tensor<2x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  %13 = nn.reduce_mean %12 {axes = array<i64: 1>} : (tensor<2x8x4xf32>) -> tensor<2x1x4xf32>
  %14 = nn.add %13, %4 : (tensor<2x1x4xf32>, tensor<f32>) -> tensor<2x1x4xf32>
  %15 = nn.sqrt %14 : (tensor<2x1x4xf32>) -> tensor<2x1x4xf32>
  %16 = nn.divide %11, %15 : (tensor<2x8x4xf32>, tensor<2x1x4xf32>) -> tensor<2x8x4xf32>
  func.return %7, %1, %16 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<2x8x4xf32>
}

// -----

// The variance of x itself, not of x - m (a different statistic): nothing fuses.

// CHECK-LABEL: func.func @not_centered
// CHECK-NOT:     nn.layer_norm
// CHECK:         func.return
func.func @not_centered(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %0 = nn.reduce_mean %x {axes = array<i64: 1>} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %1 = nn.subtract %x, %0 : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %2 = nn.multiply %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %3 = nn.reduce_mean %2 {axes = array<i64: 1>} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %4 = nn.constant dense<1.000000e-05> : tensor<f32>
  %5 = nn.add %3, %4 : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %6 = nn.sqrt %5 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %7 = nn.divide %1, %6 : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  func.return %7 : tensor<4x16xf32>
}
