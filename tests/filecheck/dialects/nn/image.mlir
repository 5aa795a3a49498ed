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
