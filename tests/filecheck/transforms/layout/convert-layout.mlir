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

// -----

// QDQ convolutions as ONNX imports them (conv_integer, cast, one multiply by the per-channel
// sx * sw, quantize, the next conv_integer) go NHWC whole: the weights and the multiply's
// [1, C, 1, 1] scale are permuted at compile time, the zero points (scalar or per output
// channel) stay, and the transposes sink through cast, multiply, quantize and bias_add,
// one at the entry and one at the exit.

// CHECK-LABEL: func.func @conv_integer_chain
// CHECK:         nn.transpose %x {perm = array<i64: 0, 2, 3, 1>} : (tensor<?x16x4x4xui8>) -> tensor<?x4x4x16xui8>
// CHECK-NEXT:    nn.constant dense<1> : tensor<16x3x3x16xi8>
// CHECK-NEXT:    nn.conv_integer {{.*}}, %zx, %zw {{{.*}}data_layout = "NHWC", kernel_layout = "OHWI"} : {{.*}} -> tensor<?x4x4x16xi32>
// CHECK-NEXT:    nn.cast {{.*}} -> tensor<?x4x4x16xf32>
// CHECK-NEXT:    nn.constant dense<{{\[\[\[\[}}5.000000e-01, 2.500000e-01{{.*}}1.250000e-01]]]]> : tensor<1x1x1x16xf32>
// CHECK-NEXT:    nn.multiply {{.*}} -> tensor<?x4x4x16xf32>
// CHECK-NOT:     nn.transpose
// CHECK:         nn.quantize {{[^{]*}} : {{.*}} -> tensor<?x4x4x16xui8>
// CHECK-NOT:     nn.transpose
// CHECK:         nn.constant dense<2> : tensor<4x1x1x16xi8>
// CHECK-NEXT:    nn.conv_integer {{.*}}, %zy, %zw2 {{{.*}}data_layout = "NHWC"{{.*}} -> tensor<?x2x2x4xi32>
// CHECK-NEXT:    nn.cast
// CHECK-NOT:     nn.transpose
// CHECK:         %[[B:.*]] = nn.bias_add {{.*}}axis = 3 : i64
// CHECK-NEXT:    %[[R:.*]] = nn.transpose %[[B]] {perm = array<i64: 0, 3, 1, 2>} : (tensor<?x2x2x4xf32>) -> tensor<?x4x2x2xf32>
// CHECK-NEXT:    func.return %[[R]]
func.func @conv_integer_chain(%x: tensor<?x16x4x4xui8>) -> tensor<?x4x2x2xf32> {
  %w1 = nn.constant dense<1> : tensor<16x16x3x3xi8>
  %zx = nn.constant dense<0> : tensor<ui8>
  %zw = nn.constant dense<0> : tensor<i8>
  %0 = nn.conv_integer %x, %w1, %zx, %zw {strides = array<i64: 1, 1>, padding = array<i64: 1, 1, 1, 1>, dilation = array<i64: 1, 1>} : (tensor<?x16x4x4xui8>, tensor<16x16x3x3xi8>, tensor<ui8>, tensor<i8>) -> tensor<?x16x4x4xi32>
  %1 = nn.cast %0 : (tensor<?x16x4x4xi32>) -> tensor<?x16x4x4xf32>
  %s = nn.constant dense<[[[[0.5]], [[0.25]], [[0.5]], [[0.25]], [[0.5]], [[0.25]], [[0.5]], [[0.25]], [[0.5]], [[0.25]], [[0.5]], [[0.25]], [[0.5]], [[0.25]], [[0.5]], [[0.125]]]]> : tensor<1x16x1x1xf32>
  %2 = nn.multiply %1, %s : (tensor<?x16x4x4xf32>, tensor<1x16x1x1xf32>) -> tensor<?x16x4x4xf32>
  %sy = nn.constant dense<0.1> : tensor<f32>
  %zy = nn.constant dense<0> : tensor<ui8>
  %3 = nn.quantize %2, %sy, %zy : (tensor<?x16x4x4xf32>, tensor<f32>, tensor<ui8>) -> tensor<?x16x4x4xui8>
  %w2 = nn.constant dense<2> : tensor<4x16x1x1xi8>
  %zw2 = nn.constant dense<0> : tensor<4xi8>
  %4 = nn.conv_integer %3, %w2, %zy, %zw2 {strides = array<i64: 2, 2>, padding = array<i64: 0, 0, 0, 0>, dilation = array<i64: 1, 1>} : (tensor<?x16x4x4xui8>, tensor<4x16x1x1xi8>, tensor<ui8>, tensor<4xi8>) -> tensor<?x4x2x2xi32>
  %5 = nn.cast %4 : (tensor<?x4x2x2xi32>) -> tensor<?x4x2x2xf32>
  %b = nn.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %6 = nn.bias_add %5, %b {axis = 1 : i64} : (tensor<?x4x2x2xf32>, tensor<4xf32>) -> tensor<?x4x2x2xf32>
  func.return %6 : tensor<?x4x2x2xf32>
}

// -----

// A 1-d conv_integer has no NHWC form: left alone.

// CHECK-LABEL: func.func @conv_integer_1d
// CHECK-NOT:   nn.transpose
// CHECK:       nn.conv_integer
// CHECK-NOT:   data_layout
func.func @conv_integer_1d(%x: tensor<1x3x12xi8>, %w: tensor<2x3x4xi8>, %z: tensor<i8>) -> tensor<1x2x9xi32> {
  %0 = nn.conv_integer %x, %w, %z, %z {strides = array<i64: 1>, padding = array<i64: 0, 0>, dilation = array<i64: 1>} : (tensor<1x3x12xi8>, tensor<2x3x4xi8>, tensor<i8>, tensor<i8>) -> tensor<1x2x9xi32>
  func.return %0 : tensor<1x2x9xi32>
}
