// RUN: partita-opt %s -p 'convert-layout{conv2d=NHWC}' --split-input-file | filecheck %s

// A Conv -> BiasAdd -> Relu -> MaxPool -> Conv -> Add(bias [C,1,1]) -> Relu -> GlobalAvgPool
// chain keeps one transpose at its entry and one at its exit; constant weights and the
// broadcast bias are permuted at compile time.

// CHECK-LABEL: func.func @chain
// CHECK-COUNT-1: nn.transpose %x {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NOT:     nn.transpose
// CHECK:         nn.constant {{.*}} : tensor<3x1x1x2xf32>
// CHECK:         nn.conv2d {{.*}}data_layout = "NHWC", kernel_layout = "OHWI"{{.*}} -> tensor<?x4x4x3xf32>
// CHECK-NEXT:    nn.bias_add {{.*}}axis = 3 : i64
// CHECK-NEXT:    nn.relu
// CHECK-NEXT:    nn.max_pool2d {{.*}}layout = "NHWC"{{.*}} -> tensor<?x2x2x3xf32>
// CHECK-NOT:     nn.transpose
// CHECK:         nn.conv2d {{.*}}data_layout = "NHWC"
// CHECK-NEXT:    nn.constant dense<{{\[\[\[\[}}1.000000e-01, 2.000000e-01, 3.000000e-01]]]]> : tensor<1x1x1x3xf32>
// CHECK-NEXT:    nn.add {{.*}} -> tensor<?x2x2x3xf32>
// CHECK-NEXT:    nn.relu
// CHECK-NEXT:    %[[G:.*]] = nn.global_avg_pool2d {{.*}}layout = "NHWC"{{.*}} -> tensor<?x1x1x3xf32>
// CHECK-NEXT:    %[[R:.*]] = nn.transpose %[[G]] {perm = array<i64: 0, 3, 1, 2>} : (tensor<?x1x1x3xf32>) -> tensor<?x3x1x1xf32>
// CHECK-NEXT:    func.return %[[R]]
func.func @chain(%x: tensor<?x2x4x4xf32>, %b: tensor<3xf32>) -> tensor<?x3x1x1xf32> {
  %w1 = nn.constant dense<[[[[1.0]], [[2.0]]], [[[3.0]], [[4.0]]], [[[5.0]], [[6.0]]]]> : tensor<3x2x1x1xf32>
  %0 = nn.conv2d %x, %w1 : (tensor<?x2x4x4xf32>, tensor<3x2x1x1xf32>) -> tensor<?x3x4x4xf32>
  %1 = nn.bias_add %0, %b {axis = 1 : i64} : (tensor<?x3x4x4xf32>, tensor<3xf32>) -> tensor<?x3x4x4xf32>
  %2 = nn.relu %1 : (tensor<?x3x4x4xf32>) -> tensor<?x3x4x4xf32>
  %3 = nn.max_pool2d %2 {pool_size = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<?x3x4x4xf32>) -> tensor<?x3x2x2xf32>
  %w2 = nn.constant dense<[[[[1.0]], [[0.0]], [[-1.0]]], [[[0.5]], [[0.5]], [[0.5]]], [[[2.0]], [[1.0]], [[0.0]]]]> : tensor<3x3x1x1xf32>
  %4 = nn.conv2d %3, %w2 : (tensor<?x3x2x2xf32>, tensor<3x3x1x1xf32>) -> tensor<?x3x2x2xf32>
  %c = nn.constant dense<[[[0.1]], [[0.2]], [[0.3]]]> : tensor<3x1x1xf32>
  %5 = nn.add %4, %c : (tensor<?x3x2x2xf32>, tensor<3x1x1xf32>) -> tensor<?x3x2x2xf32>
  %6 = nn.relu %5 : (tensor<?x3x2x2xf32>) -> tensor<?x3x2x2xf32>
  %7 = nn.global_avg_pool2d %6 : (tensor<?x3x2x2xf32>) -> tensor<?x3x1x1xf32>
  func.return %7 : tensor<?x3x1x1xf32>
}

// -----

// A non-constant weight gets a transpose op; a residual add of two NHWC branches is done
// in NHWC, and a layout-sensitive user (reshape) gets the transpose back just before it.

// CHECK-LABEL: func.func @residual
// CHECK-NEXT:    nn.transpose %x {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NEXT:    nn.transpose %w {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NEXT:    nn.conv2d
// CHECK-NEXT:    nn.transpose %w {perm = array<i64: 0, 2, 3, 1>}
// CHECK-NEXT:    nn.conv2d
// CHECK-NEXT:    nn.add {{.*}} -> tensor<1x3x3x2xf32>
// CHECK-NEXT:    nn.sigmoid {{.*}} -> tensor<1x3x3x2xf32>
// CHECK-NEXT:    %[[T:.*]] = nn.transpose {{.*}}perm = array<i64: 0, 3, 1, 2>
// CHECK-NEXT:    nn.reshape %[[T]]
// CHECK-NOT:     nn.transpose
func.func @residual(%x: tensor<1x2x3x3xf32>, %w: tensor<2x2x3x3xf32>) -> tensor<1x18xf32> {
  %0 = nn.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x2x3x3xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %1 = nn.conv2d %0, %w {padding = array<i64: 1, 1, 1, 1>} : (tensor<1x2x3x3xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %2 = nn.add %1, %0 : (tensor<1x2x3x3xf32>, tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %3 = nn.sigmoid %2 : (tensor<1x2x3x3xf32>) -> tensor<1x2x3x3xf32>
  %4 = nn.reshape %3 : (tensor<1x2x3x3xf32>) -> tensor<1x18xf32>
  func.return %4 : tensor<1x18xf32>
}

// -----

// Already-NHWC convolutions and non-4-d ops are left alone.

// CHECK-LABEL: func.func @untouched
// CHECK-NOT:   nn.transpose
// CHECK:       nn.conv2d {{.*}}data_layout = "NHWC"
// CHECK-NEXT:  nn.softmax
func.func @untouched(%x: tensor<1x4x4x2xf32>, %w: tensor<3x1x1x2xf32>) -> tensor<1x4x4x3xf32> {
  %0 = nn.conv2d %x, %w {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<1x4x4x2xf32>, tensor<3x1x1x2xf32>) -> tensor<1x4x4x3xf32>
  %1 = nn.softmax %0 : (tensor<1x4x4x3xf32>) -> tensor<1x4x4x3xf32>
  func.return %1 : tensor<1x4x4x3xf32>
}
