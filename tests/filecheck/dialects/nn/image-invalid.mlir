// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @roi_align_of_a_flat_image(%x: tensor<3x9x7xf32>, %rois: tensor<5x4xf32>, %b: tensor<5xi64>) {
  // expected-error@+1 {{the input must be NCHW (rank 4), got rank 3}}
  %0 = nn.roi_align %x, %rois, %b : (tensor<3x9x7xf32>, tensor<5x4xf32>, tensor<5xi64>) -> tensor<5x3x1x1xf32>
  func.return
}

// -----

func.func @roi_align_indices_per_region(%x: tensor<2x3x9x7xf32>, %rois: tensor<5x4xf32>, %b: tensor<4xi64>) {
  // expected-error@+1 {{batch_indices must hold one index per region (5), got [4]}}
  %0 = nn.roi_align %x, %rois, %b : (tensor<2x3x9x7xf32>, tensor<5x4xf32>, tensor<4xi64>) -> tensor<5x3x1x1xf32>
  func.return
}

// -----

func.func @roi_align_unknown_mode(%x: tensor<2x3x9x7xf32>, %rois: tensor<5x4xf32>, %b: tensor<5xi64>) {
  // expected-error@+1 {{mode must be one of avg, max, got 'min'}}
  %0 = nn.roi_align %x, %rois, %b {mode = "min"} : (tensor<2x3x9x7xf32>, tensor<5x4xf32>, tensor<5xi64>) -> tensor<5x3x1x1xf32>
  func.return
}

// -----

func.func @grid_of_the_wrong_rank(%x: tensor<2x3x9x7xf32>, %g: tensor<2x4x5x3xf32>) {
  // expected-error@+1 {{the grid's last axis must hold 2 coordinates, got 3}}
  %0 = nn.grid_sample %x, %g : (tensor<2x3x9x7xf32>, tensor<2x4x5x3xf32>) -> tensor<2x3x4x5xf32>
  func.return
}

// -----

func.func @volumetric_cubic(%x: tensor<1x2x3x4x5xf32>, %g: tensor<1x2x2x2x3xf32>) {
  // expected-error@+1 {{cubic sampling takes 2 spatial axes (N x C x H x W), got 3}}
  %0 = nn.grid_sample %x, %g {mode = "cubic"} : (tensor<1x2x3x4x5xf32>, tensor<1x2x2x2x3xf32>) -> tensor<1x2x2x2x2xf32>
  func.return
}

// -----

func.func @grid_batches_differ(%x: tensor<2x3x9x7xf32>, %g: tensor<3x4x5x2xf32>) {
  // expected-error@+1 {{input and grid batches differ (2 and 3)}}
  %0 = nn.grid_sample %x, %g : (tensor<2x3x9x7xf32>, tensor<3x4x5x2xf32>) -> tensor<2x3x4x5xf32>
  func.return
}

// -----

func.func @affine_grid_theta_of_the_wrong_shape(%t: tensor<2x2x4xf32>) {
  // expected-error@+1 {{theta must be N x 2 x 3 for 2 spatial axes, got [2, 2, 4]}}
  %0 = nn.affine_grid %t {size = array<i64: 5, 6>} : (tensor<2x2x4xf32>) -> tensor<2x5x6x2xf32>
  func.return
}

// -----

func.func @affine_grid_of_four_axes(%t: tensor<2x4x5xf32>) {
  // expected-error@+1 {{size must hold 2 or 3 spatial extents, got [2, 3, 4, 5]}}
  %0 = nn.affine_grid %t {size = array<i64: 2, 3, 4, 5>} : (tensor<2x4x5xf32>) -> tensor<2x2x3x4x5x4xf32>
  func.return
}

// -----

func.func @affine_grid_of_an_integer_theta(%t: tensor<2x2x3xi32>) {
  // expected-error@+1 {{element type must be one of f16, bf16, f32, f64, got i32}}
  %0 = nn.affine_grid %t {size = array<i64: 5, 6>} : (tensor<2x2x3xi32>) -> tensor<2x5x6x2xi32>
  func.return
}

// -----

func.func @antialias_without_a_filter(%x: tensor<1x1x8x8xf32>) {
  // expected-error@+1 {{antialias needs linear or cubic mode (nearest has no filter to widen)}}
  %0 = nn.resize %x {scales = array<f64: 1.0, 1.0, 0.5, 0.5>, mode = "nearest", antialias = true, sizes = array<i64: 1, 1, 4, 4>} : tensor<1x1x8x8xf32> -> tensor<1x1x4x4xf32>
  func.return
}
