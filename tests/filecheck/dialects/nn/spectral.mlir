// RUN: partita-opt %s | partita-opt | filecheck %s
// RUN: partita-opt %s --print-op-generic | partita-opt | filecheck %s

// nn.dft and nn.stft round-trip: an irfft (its length from the bins: 2 * (8 - 1)), a
// padded rfft, a full DFT (axis 1, the default, is not printed), an STFT with and without
// a window.

// CHECK-LABEL: func.func @spectral
// CHECK-NEXT: %0 = nn.dft %c {inverse = true, onesided = true} : (tensor<2x8x2xf32>) -> tensor<2x14x1xf32>
// CHECK-NEXT: %1 = nn.dft %x {length = 20 : i64, onesided = true} : (tensor<2x16x1xf32>) -> tensor<2x11x2xf32>
// CHECK-NEXT: %2 = nn.dft %x : (tensor<2x16x1xf32>) -> tensor<2x16x2xf32>
// CHECK-NEXT: %3 = nn.stft %x window %w : tensor<8xf32> {frame_step = 4 : i64, frame_length = 8 : i64} : tensor<2x16x1xf32> -> tensor<2x3x5x2xf32>
// CHECK-NEXT: %4 = nn.stft %x {frame_step = 2 : i64, frame_length = 4 : i64, onesided = false} : tensor<2x16x1xf32> -> tensor<2x7x4x2xf32>
func.func @spectral(%x: tensor<2x16x1xf32>, %c: tensor<2x8x2xf32>, %w: tensor<8xf32>) -> (tensor<2x14x1xf32>, tensor<2x11x2xf32>, tensor<2x16x2xf32>, tensor<2x3x5x2xf32>, tensor<2x7x4x2xf32>) {
  %0 = nn.dft %c {axis = 1 : i64, inverse = true, onesided = true} : (tensor<2x8x2xf32>) -> tensor<2x14x1xf32>
  %1 = nn.dft %x {axis = 1 : i64, length = 20 : i64, onesided = true} : (tensor<2x16x1xf32>) -> tensor<2x11x2xf32>
  %2 = nn.dft %x {axis = 1 : i64} : (tensor<2x16x1xf32>) -> tensor<2x16x2xf32>
  %3 = nn.stft %x window %w : tensor<8xf32> {frame_step = 4 : i64, frame_length = 8 : i64} : tensor<2x16x1xf32> -> tensor<2x3x5x2xf32>
  %4 = nn.stft %x {frame_step = 2 : i64, frame_length = 4 : i64, onesided = false} : tensor<2x16x1xf32> -> tensor<2x7x4x2xf32>
  func.return %0, %1, %2, %3, %4 : tensor<2x14x1xf32>, tensor<2x11x2xf32>, tensor<2x16x2xf32>, tensor<2x3x5x2xf32>, tensor<2x7x4x2xf32>
}
