// RUN: partita-opt %s --split-input-file -p fuse-rms-norm | filecheck %s

// Hugging Face's LlamaRMSNorm as the TorchScript exporter writes it: pow, mean over the
// last axis, + eps, sqrt, 1 / s, x * r, w * n. One nn.rms_norm with w as its scale.

// CHECK-LABEL: func.func @llama
// CHECK-NEXT:    %0 = nn.constant dense<1.000000e+00> : tensor<32xf32>
// CHECK-NEXT:    %1 = nn.rms_norm %x, %0 {axis = 2 : i64, epsilon = 1.000000e-06 : f64} : (tensor<?x?x32xf32>, tensor<32xf32>) -> tensor<?x?x32xf32>
// CHECK-NEXT:    func.return %1
func.func @llama(%x: tensor<?x?x32xf32>) -> tensor<?x?x32xf32> {
  %0 = nn.constant dense<2.000000e+00> : tensor<f32>
  %1 = nn.pow %x, %0 : (tensor<?x?x32xf32>, tensor<f32>) -> tensor<?x?x32xf32>
  %2 = nn.reduce_mean %1 {axes = array<i64: 2>} : (tensor<?x?x32xf32>) -> tensor<?x?x1xf32>
  %3 = nn.constant dense<1.000000e-06> : tensor<f32>
  %4 = nn.add %2, %3 : (tensor<?x?x1xf32>, tensor<f32>) -> tensor<?x?x1xf32>
  %5 = nn.sqrt %4 : (tensor<?x?x1xf32>) -> tensor<?x?x1xf32>
  %6 = nn.constant dense<1.000000e+00> : tensor<f32>
  %7 = nn.divide %6, %5 : (tensor<f32>, tensor<?x?x1xf32>) -> tensor<?x?x1xf32>
  %8 = nn.multiply %x, %7 : (tensor<?x?x32xf32>, tensor<?x?x1xf32>) -> tensor<?x?x32xf32>
  %9 = nn.constant dense<1.000000e+00> : tensor<32xf32>
  %10 = nn.multiply %9, %8 : (tensor<32xf32>, tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
  func.return %10 : tensor<?x?x32xf32>
}

// -----
// f16 storage: the statistics in f32 between casts, reciprocal(s), eps on the left (the
// default 1e-05, not printed); the weight multiplies
// after the narrowing cast, so it stays (the norm's scale is a one-element 1).

// CHECK-LABEL: func.func @narrow
// CHECK-NEXT:    %0 = nn.cast %x
// CHECK-NEXT:    %1 = nn.constant dense<1.000000e+00> : tensor<1xf32>
// CHECK-NEXT:    %2 = nn.rms_norm %0, %1 {axis = 1 : i64} : (tensor<4x16xf32>, tensor<1xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %3 = nn.cast %2
// CHECK-NEXT:    %4 = nn.multiply %w, %3
// CHECK-NEXT:    func.return %4
func.func @narrow(%x: tensor<4x16xf16>, %w: tensor<16xf16>) -> tensor<4x16xf16> {
  %0 = nn.cast %x : (tensor<4x16xf16>) -> tensor<4x16xf32>
  %1 = nn.multiply %0, %0 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %2 = nn.reduce_mean %1 {axes = array<i64: -1>} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %3 = nn.constant dense<1.000000e-05> : tensor<f32>
  %4 = nn.add %3, %2 : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %5 = nn.sqrt %4 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %6 = nn.reciprocal %5 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %7 = nn.multiply %6, %0 : (tensor<4x1xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %8 = nn.cast %7 : (tensor<4x16xf32>) -> tensor<4x16xf16>
  %9 = nn.multiply %w, %8 : (tensor<16xf16>, tensor<4x16xf16>) -> tensor<4x16xf16>
  func.return %9 : tensor<4x16xf16>
}

// -----
// x / s with the weight on the right.

// CHECK-LABEL: func.func @divided
// CHECK-NEXT:    %0 = nn.rms_norm %x, %w {axis = 1 : i64, epsilon = 1.000000e-06 : f64}
// CHECK-NEXT:    func.return %0
func.func @divided(%x: tensor<4x16xf32>, %w: tensor<16xf32>) -> tensor<4x16xf32> {
  %0 = nn.constant dense<2.000000e+00> : tensor<f32>
  %1 = nn.pow %x, %0 : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %2 = nn.reduce_mean %1 {axes = array<i64: 1>} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %3 = nn.constant dense<1.000000e-06> : tensor<f32>
  %4 = nn.add %2, %3 : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %5 = nn.sqrt %4 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %6 = nn.divide %x, %5 : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %7 = nn.multiply %6, %w : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  func.return %7 : tensor<4x16xf32>
}

// -----
// Partial matches stay op by op: the mean square is read elsewhere too; the mean is over
// the first axis; a pow of 3.

// CHECK-LABEL: func.func @partial
// CHECK-NOT:     nn.rms_norm
// CHECK:         func.return
func.func @partial(%x: tensor<4x16xf32>) -> (tensor<4x16xf32>, tensor<4x1xf32>, tensor<1x16xf32>, tensor<4x1xf32>) {
  %0 = nn.multiply %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %1 = nn.reduce_mean %0 {axes = array<i64: 1>} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %2 = nn.constant dense<1.000000e-06> : tensor<f32>
  %3 = nn.add %1, %2 : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %4 = nn.sqrt %3 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %5 = nn.divide %x, %4 : (tensor<4x16xf32>, tensor<4x1xf32>) -> tensor<4x16xf32>
  %6 = nn.multiply %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %7 = nn.reduce_mean %6 {axes = array<i64: 0>} : (tensor<4x16xf32>) -> tensor<1x16xf32>
  %8 = nn.constant dense<3.000000e+00> : tensor<f32>
  %9 = nn.pow %x, %8 : (tensor<4x16xf32>, tensor<f32>) -> tensor<4x16xf32>
  %10 = nn.reduce_mean %9 {axes = array<i64: 1>} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %11 = nn.add %10, %2 : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %12 = nn.sqrt %11 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  func.return %5, %1, %7, %12 : tensor<4x16xf32>, tensor<4x1xf32>, tensor<1x16xf32>, tensor<4x1xf32>
}
