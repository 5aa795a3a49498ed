// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @axis_on_the_parts(%x: tensor<2x16x1xf32>) -> tensor<2x16x2xf32> {
  // expected-error@+1 {{axis 2 is out of range for an input of rank 3 (accepted: 0 to 1)}}
  %0 = nn.dft %x {axis = 2 : i64} : (tensor<2x16x1xf32>) -> tensor<2x16x2xf32>
  func.return %0 : tensor<2x16x2xf32>
}

// -----

func.func @rfft_of_a_complex_signal(%x: tensor<2x16x2xf32>) -> tensor<2x9x2xf32> {
  // expected-error@+1 {{a onesided forward DFT (rfft) takes a real input (last dim 1), got a complex one}}
  %0 = nn.dft %x {axis = 1 : i64, onesided = true} : (tensor<2x16x2xf32>) -> tensor<2x9x2xf32>
  func.return %0 : tensor<2x9x2xf32>
}

// -----

func.func @rfft_bins(%x: tensor<2x16x1xf32>) -> tensor<2x16x2xf32> {
  // expected-error@+1 {{result shape [2, 16, 2] is incompatible with inferred shape [2, 9, 2]}}
  %0 = nn.dft %x {axis = 1 : i64, onesided = true} : (tensor<2x16x1xf32>) -> tensor<2x16x2xf32>
  func.return %0 : tensor<2x16x2xf32>
}

// -----

func.func @frame_past_the_signal(%x: tensor<2x16x1xf32>) -> tensor<2x1x17x2xf32> {
  // expected-error@+1 {{frame_length 32 is longer than the signal (16)}}
  %0 = nn.stft %x {frame_step = 4 : i64, frame_length = 32 : i64} : tensor<2x16x1xf32> -> tensor<2x1x17x2xf32>
  func.return %0 : tensor<2x1x17x2xf32>
}

// -----

func.func @window_of_another_length(%x: tensor<2x16x1xf32>, %w: tensor<6xf32>) -> tensor<2x3x5x2xf32> {
  // expected-error@+1 {{the window must hold frame_length = 8 values, got shape [6]}}
  %0 = nn.stft %x window %w : tensor<6xf32> {frame_step = 4 : i64, frame_length = 8 : i64} : tensor<2x16x1xf32> -> tensor<2x3x5x2xf32>
  func.return %0 : tensor<2x3x5x2xf32>
}
