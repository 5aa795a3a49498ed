// RUN: partita-opt %s | partita-opt | filecheck %s
// RUN: partita-opt %s --print-op-generic | partita-opt | filecheck %s

// CHECK-LABEL: func.func @convolutions
func.func @convolutions(%x1: tensor<?x4x11xf32>, %w1: tensor<6x4x3xf32>, %x2: tensor<2x6x9x8xf16>, %w2: tensor<4x3x3x2xf16>, %x3: tensor<1x2x5x6x4xf64>, %w3: tensor<3x2x2x3x2xf64>, %n: tensor<?x7x7x5xbf16>, %dw: tensor<10x3x3x1xbf16>) -> (tensor<?x6x5xf32>, tensor<2x4x5x7xf16>, tensor<1x3x5x3x4xf64>, tensor<?x7x7x10xbf16>) {
  // CHECK-NEXT: %0 = nn.conv1d %x1, %w1 {strides = array<i64: 2>, padding = array<i64: 1, 2>, dilation = array<i64: 2>} : (tensor<?x4x11xf32>, tensor<6x4x3xf32>) -> tensor<?x6x5xf32>
  %0 = nn.conv1d %x1, %w1 {strides = array<i64: 2>, padding = array<i64: 1, 2>, dilation = array<i64: 2>} : (tensor<?x4x11xf32>, tensor<6x4x3xf32>) -> tensor<?x6x5xf32>
  // CHECK-NEXT: %1 = nn.conv2d %x2, %w2 {strides = array<i64: 2, 1>, padding = array<i64: 1, 0, 2, 1>, dilation = array<i64: 1, 2>, groups = 2 : i64} : (tensor<2x6x9x8xf16>, tensor<4x3x3x2xf16>) -> tensor<2x4x5x7xf16>
  %1 = nn.conv2d %x2, %w2 {strides = array<i64: 2, 1>, padding = array<i64: 1, 0, 2, 1>, dilation = array<i64: 1, 2>, groups = 2 : i64} : (tensor<2x6x9x8xf16>, tensor<4x3x3x2xf16>) -> tensor<2x4x5x7xf16>
  // CHECK-NEXT: %2 = nn.conv3d %x3, %w3 {strides = array<i64: 1, 2, 1>, padding = array<i64: 0, 1, 1, 1, 0, 0>} : (tensor<1x2x5x6x4xf64>, tensor<3x2x2x3x2xf64>) -> tensor<1x3x5x3x4xf64>
  %2 = nn.conv3d %x3, %w3 {strides = array<i64: 1, 2, 1>, padding = array<i64: 0, 1, 1, 1, 0, 0>} : (tensor<1x2x5x6x4xf64>, tensor<3x2x2x3x2xf64>) -> tensor<1x3x5x3x4xf64>
  // CHECK-NEXT: %3 = nn.conv2d %n, %dw {padding = array<i64: 1, 1, 1, 1>, data_layout = "NHWC", kernel_layout = "OHWI", groups = 5 : i64} : (tensor<?x7x7x5xbf16>, tensor<10x3x3x1xbf16>) -> tensor<?x7x7x10xbf16>
  %3 = nn.conv2d %n, %dw {padding = array<i64: 1, 1, 1, 1>, data_layout = "NHWC", kernel_layout = "OHWI", groups = 5 : i64} : (tensor<?x7x7x5xbf16>, tensor<10x3x3x1xbf16>) -> tensor<?x7x7x10xbf16>
  func.return %0, %1, %2, %3 : tensor<?x6x5xf32>, tensor<2x4x5x7xf16>, tensor<1x3x5x3x4xf64>, tensor<?x7x7x10xbf16>
}

// CHECK-LABEL: func.func @transposed
func.func @transposed(%x: tensor<?x4x3x4xf32>, %w: tensor<4x3x3x2xf32>, %y: tensor<2x3x5xf32>, %v: tensor<3x2x4xf32>) -> (tensor<?x6x7x11xf32>, tensor<2x2x14xf32>) {
  // CHECK-NEXT: %0 = nn.conv2d_transpose %x, %w {strides = array<i64: 2, 3>, padding = array<i64: 1, 0, 0, 1>, output_padding = array<i64: 1, 0>, dilation = array<i64: 1, 2>, groups = 2 : i64} : (tensor<?x4x3x4xf32>, tensor<4x3x3x2xf32>) -> tensor<?x6x7x11xf32>
  %0 = nn.conv2d_transpose %x, %w {strides = array<i64: 2, 3>, padding = array<i64: 1, 0, 0, 1>, output_padding = array<i64: 1, 0>, dilation = array<i64: 1, 2>, groups = 2 : i64} : (tensor<?x4x3x4xf32>, tensor<4x3x3x2xf32>) -> tensor<?x6x7x11xf32>
  // CHECK-NEXT: %1 = nn.conv1d_transpose %y, %v {strides = array<i64: 3>, padding = array<i64: 1, 1>} : (tensor<2x3x5xf32>, tensor<3x2x4xf32>) -> tensor<2x2x14xf32>
  %1 = nn.conv1d_transpose %y, %v {strides = array<i64: 3>, padding = array<i64: 1, 1>} : (tensor<2x3x5xf32>, tensor<3x2x4xf32>) -> tensor<2x2x14xf32>
  func.return %0, %1 : tensor<?x6x7x11xf32>, tensor<2x2x14xf32>
}

// CHECK-LABEL: func.func @pools
func.func @pools(%a: tensor<?x3x10xf32>, %b: tensor<1x2x5x6x5xf32>, %c: tensor<2x6x5x3xf16>, %d: tensor<1x1x4x4xui8>) -> (tensor<?x3x5xf32>, tensor<1x2x3x4x3xf32>, tensor<2x3x4x3xf16>, tensor<1x1x2x2xui8>) {
  // CHECK-NEXT: %0 = nn.max_pool1d %a {pool_size = array<i64: 3>, strides = array<i64: 2>, padding = array<i64: 1, 0>, ceil_mode = true} : (tensor<?x3x10xf32>) -> tensor<?x3x5xf32>
  %0 = nn.max_pool1d %a {pool_size = array<i64: 3>, strides = array<i64: 2>, padding = array<i64: 1, 0>, ceil_mode = true} : (tensor<?x3x10xf32>) -> tensor<?x3x5xf32>
  // CHECK-NEXT: %1 = nn.avg_pool3d %b {pool_size = array<i64: 3, 2, 3>, strides = array<i64: 2, 2, 2>, padding = array<i64: 1, 1, 1, 1, 0, 1>, ceil_mode = true, count_include_pad = true} : (tensor<1x2x5x6x5xf32>) -> tensor<1x2x3x4x3xf32>
  %1 = nn.avg_pool3d %b {pool_size = array<i64: 3, 2, 3>, strides = array<i64: 2, 2, 2>, padding = array<i64: 1, 1, 1, 1, 0, 1>, ceil_mode = true, count_include_pad = true} : (tensor<1x2x5x6x5xf32>) -> tensor<1x2x3x4x3xf32>
  // CHECK-NEXT: %2 = nn.lp_pool2d %c {pool_size = array<i64: 2, 3>, strides = array<i64: 2, 1>, padding = array<i64: 1, 1, 0, 0>, layout = "NHWC", p = 3.000000e+00 : f64} : (tensor<2x6x5x3xf16>) -> tensor<2x3x4x3xf16>
  %2 = nn.lp_pool2d %c {pool_size = array<i64: 2, 3>, strides = array<i64: 2, 1>, padding = array<i64: 1, 1, 0, 0>, layout = "NHWC", p = 3.0 : f64} : (tensor<2x6x5x3xf16>) -> tensor<2x3x4x3xf16>
  // CHECK-NEXT: %3 = nn.max_pool2d %d {pool_size = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<1x1x4x4xui8>) -> tensor<1x1x2x2xui8>
  %3 = nn.max_pool2d %d {pool_size = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<1x1x4x4xui8>) -> tensor<1x1x2x2xui8>
  func.return %0, %1, %2, %3 : tensor<?x3x5xf32>, tensor<1x2x3x4x3xf32>, tensor<2x3x4x3xf16>, tensor<1x1x2x2xui8>
}

// CHECK-LABEL: func.func @col2im_and_max_unpool
func.func @col2im_and_max_unpool(%c: tensor<?x12x6xf32>, %x: tensor<2x3x2x3xf16>, %i: tensor<2x3x2x3xi64>) -> (tensor<?x3x5x5xf32>, tensor<2x3x5x7xf16>) {
  // CHECK-NEXT: %0 = nn.col2im %c {image_shape = array<i64: 5, 5>, block_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 1, 0, 1>} : (tensor<?x12x6xf32>) -> tensor<?x3x5x5xf32>
  %0 = nn.col2im %c {image_shape = array<i64: 5, 5>, block_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, padding = array<i64: 0, 1, 0, 1>} : (tensor<?x12x6xf32>) -> tensor<?x3x5x5xf32>
  // CHECK-NEXT: %1 = nn.max_unpool %x, %i {output_size = array<i64: 5, 7>} : (tensor<2x3x2x3xf16>, tensor<2x3x2x3xi64>) -> tensor<2x3x5x7xf16>
  %1 = nn.max_unpool %x, %i {output_size = array<i64: 5, 7>} : (tensor<2x3x2x3xf16>, tensor<2x3x2x3xi64>) -> tensor<2x3x5x7xf16>
  func.return %0, %1 : tensor<?x3x5x5xf32>, tensor<2x3x5x7xf16>
}

// CHECK-LABEL: func.func @deform_conv2d
func.func @deform_conv2d(%x: tensor<?x4x6x6xf32>, %w: tensor<6x2x2x2xf32>, %o: tensor<?x16x5x5xf32>, %m: tensor<?x8x5x5xf32>) -> (tensor<?x6x5x5xf32>, tensor<?x6x5x5xf32>) {
  // CHECK-NEXT: %0 = nn.deform_conv2d %x, %w, %o {groups = 2 : i64, offset_groups = 2 : i64} : (tensor<?x4x6x6xf32>, tensor<6x2x2x2xf32>, tensor<?x16x5x5xf32>) -> tensor<?x6x5x5xf32>
  %0 = nn.deform_conv2d %x, %w, %o {groups = 2 : i64, offset_groups = 2 : i64} : (tensor<?x4x6x6xf32>, tensor<6x2x2x2xf32>, tensor<?x16x5x5xf32>) -> tensor<?x6x5x5xf32>
  // CHECK-NEXT: %1 = nn.deform_conv2d %x, %w, %o, %m {groups = 2 : i64, offset_groups = 2 : i64} : (tensor<?x4x6x6xf32>, tensor<6x2x2x2xf32>, tensor<?x16x5x5xf32>, tensor<?x8x5x5xf32>) -> tensor<?x6x5x5xf32>
  %1 = nn.deform_conv2d %x, %w, %o, %m {groups = 2 : i64, offset_groups = 2 : i64} : (tensor<?x4x6x6xf32>, tensor<6x2x2x2xf32>, tensor<?x16x5x5xf32>, tensor<?x8x5x5xf32>) -> tensor<?x6x5x5xf32>
  func.return %0, %1 : tensor<?x6x5x5xf32>, tensor<?x6x5x5xf32>
}
