// RUN: partita-opt %s | partita-opt | filecheck %s
// RUN: partita-opt %s --print-op-generic | partita-opt | filecheck %s

// CHECK-LABEL: func.func @image
func.func @image(%x: tensor<?x8x2x3xf32>, %s: tensor<4xf32>, %y: tensor<1x2x6x3xf16>, %r: tensor<8xf32>) -> (tensor<?x8x5x6xf32>, tensor<?x8x4x4xf32>, tensor<?x2x4x6xf32>, tensor<1x18x2x1xf16>, tensor<?x8x4x4xf32>) {
  // CHECK-NEXT: %0 = nn.resize %x {scales = array<f64: 1.000000e+00, 1.000000e+00, 2.500000e+00, 2.000000e+00>, mode = "cubic", coordinate_transformation_mode = "align_corners", sizes = array<i64: -1, 8, 5, 6>} : tensor<?x8x2x3xf32> -> tensor<?x8x5x6xf32>
  %0 = nn.resize %x {scales = array<f64: 1.0, 1.0, 2.5, 2.0>, mode = "cubic", coordinate_transformation_mode = "align_corners", sizes = array<i64: -1, 8, 5, 6>} : tensor<?x8x2x3xf32> -> tensor<?x8x5x6xf32>
  // CHECK-NEXT: %1 = nn.resize %x scales(%s : tensor<4xf32>) {scales = array<f64>, mode = "linear", sizes = array<i64: -1, 8, 4, 4>} : tensor<?x8x2x3xf32> -> tensor<?x8x4x4xf32>
  %1 = nn.resize %x scales(%s : tensor<4xf32>) {scales = array<f64>, mode = "linear", sizes = array<i64: -1, 8, 4, 4>} : tensor<?x8x2x3xf32> -> tensor<?x8x4x4xf32>
  // CHECK-NEXT: %2 = nn.depth_to_space %x {block_size = 2 : i64, mode = "CRD"} : (tensor<?x8x2x3xf32>) -> tensor<?x2x4x6xf32>
  %2 = nn.depth_to_space %x {block_size = 2 : i64, mode = "CRD"} : (tensor<?x8x2x3xf32>) -> tensor<?x2x4x6xf32>
  // CHECK-NEXT: %3 = nn.space_to_depth %y {block_size = 3 : i64} : (tensor<1x2x6x3xf16>) -> tensor<1x18x2x1xf16>
  %3 = nn.space_to_depth %y {block_size = 3 : i64} : (tensor<1x2x6x3xf16>) -> tensor<1x18x2x1xf16>
  // CHECK-NEXT: %4 = nn.resize %x scales(%s : tensor<4xf32>) roi(%r : tensor<8xf32>) {scales = array<f64>, coordinate_transformation_mode = "tf_crop_and_resize", sizes = array<i64: -1, 8, 4, 4>} : tensor<?x8x2x3xf32> -> tensor<?x8x4x4xf32>
  %4 = nn.resize %x scales(%s : tensor<4xf32>) roi(%r : tensor<8xf32>) {scales = array<f64>, roi = array<f64>, coordinate_transformation_mode = "tf_crop_and_resize", sizes = array<i64: -1, 8, 4, 4>} : tensor<?x8x2x3xf32> -> tensor<?x8x4x4xf32>
  func.return %0, %1, %2, %3, %4 : tensor<?x8x5x6xf32>, tensor<?x8x4x4xf32>, tensor<?x2x4x6xf32>, tensor<1x18x2x1xf16>, tensor<?x8x4x4xf32>
}

// CHECK-LABEL: func.func @sampling
func.func @sampling(%x: tensor<2x3x9x7xf32>, %rois: tensor<?x4xf32>, %b: tensor<?xi64>, %g: tensor<2x4x5x2xf32>, %v: tensor<1x2x3x4x5xf16>, %g3: tensor<1x2x2x2x3xf16>) -> (tensor<?x3x2x2xf32>, tensor<2x3x4x5xf32>, tensor<1x2x2x2x2xf16>) {
  // CHECK-NEXT: %0 = nn.roi_align %x, %rois, %b {mode = "max", output_height = 2 : i64, output_width = 2 : i64, spatial_scale = 5.000000e-01 : f64} : (tensor<2x3x9x7xf32>, tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x3x2x2xf32>
  %0 = nn.roi_align %x, %rois, %b {mode = "max", output_height = 2 : i64, output_width = 2 : i64, spatial_scale = 0.5 : f64} : (tensor<2x3x9x7xf32>, tensor<?x4xf32>, tensor<?xi64>) -> tensor<?x3x2x2xf32>
  // CHECK-NEXT: %1 = nn.grid_sample %x, %g {mode = "cubic", padding_mode = "reflection", align_corners = true} : (tensor<2x3x9x7xf32>, tensor<2x4x5x2xf32>) -> tensor<2x3x4x5xf32>
  %1 = nn.grid_sample %x, %g {mode = "cubic", padding_mode = "reflection", align_corners = true} : (tensor<2x3x9x7xf32>, tensor<2x4x5x2xf32>) -> tensor<2x3x4x5xf32>
  // CHECK-NEXT: %2 = nn.grid_sample %v, %g3 : (tensor<1x2x3x4x5xf16>, tensor<1x2x2x2x3xf16>) -> tensor<1x2x2x2x2xf16>
  %2 = nn.grid_sample %v, %g3 : (tensor<1x2x3x4x5xf16>, tensor<1x2x2x2x3xf16>) -> tensor<1x2x2x2x2xf16>
  func.return %0, %1, %2 : tensor<?x3x2x2xf32>, tensor<2x3x4x5xf32>, tensor<1x2x2x2x2xf16>
}

// CHECK-LABEL: func.func @affine_grid
func.func @affine_grid(%t: tensor<?x2x3xf32>, %t3: tensor<2x3x4xf16>, %size: tensor<4xi64>) -> (tensor<?x5x6x2xf32>, tensor<2x3x4x5x3xf16>, tensor<?x?x?x?xf32>) {
  // CHECK-NEXT: %0 = nn.affine_grid %t {size = array<i64: 5, 6>} : (tensor<?x2x3xf32>) -> tensor<?x5x6x2xf32>
  %0 = nn.affine_grid %t {size = array<i64: 5, 6>} : (tensor<?x2x3xf32>) -> tensor<?x5x6x2xf32>
  // CHECK-NEXT: %1 = nn.affine_grid %t3 {size = array<i64: 3, 4, 5>, align_corners = true} : (tensor<2x3x4xf16>) -> tensor<2x3x4x5x3xf16>
  %1 = nn.affine_grid %t3 {size = array<i64: 3, 4, 5>, align_corners = true} : (tensor<2x3x4xf16>) -> tensor<2x3x4x5x3xf16>
  // CHECK-NEXT: %2 = nn.dyn(%t : tensor<?x2x3xf32>) params(%size : tensor<4xi64>) {kind = "affine_grid", param_names = "size", options = {align_corners = true}} -> tensor<?x?x?x?xf32>
  %2 = nn.dyn(%t : tensor<?x2x3xf32>) params(%size : tensor<4xi64>) {kind = "affine_grid", param_names = "size", options = {align_corners = true}} -> tensor<?x?x?x?xf32>
  func.return %0, %1, %2 : tensor<?x5x6x2xf32>, tensor<2x3x4x5x3xf16>, tensor<?x?x?x?xf32>
}

// CHECK-LABEL: func.func @antialiased_resize
func.func @antialiased_resize(%x: tensor<1x3x9x7xf32>) -> tensor<1x3x4x3xf32> {
  // CHECK-NEXT: %0 = nn.resize %x {scales = array<f64: 1.000000e+00, 1.000000e+00, 4.000000e-01, 4.000000e-01>, mode = "linear", antialias = true, sizes = array<i64: 1, 3, 4, 3>} : tensor<1x3x9x7xf32> -> tensor<1x3x4x3xf32>
  %0 = nn.resize %x {scales = array<f64: 1.0, 1.0, 0.4, 0.4>, mode = "linear", antialias = true, sizes = array<i64: 1, 3, 4, 3>} : tensor<1x3x9x7xf32> -> tensor<1x3x4x3xf32>
  func.return %0 : tensor<1x3x4x3xf32>
}
