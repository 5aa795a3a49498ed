// RUN: partita-opt %s | partita-opt | filecheck %s
// RUN: partita-opt %s --print-op-generic | partita-opt | filecheck %s
// RUN: partita-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// CHECK-LABEL: func.func @elementwise
// GENERIC-LABEL: "func.func"() <{sym_name = "elementwise"
func.func @elementwise(%a: tensor<?x4xf32>, %b: tensor<4xf32>) -> tensor<?x4xf32> {
  // CHECK-NEXT: %0 = nn.add %a, %b : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  // GENERIC: "nn.add"(%a, %b) : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  %0 = nn.add %a, %b : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  // CHECK-NEXT: %1 = nn.subtract %0, %b : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  %1 = nn.subtract %0, %b : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  // CHECK-NEXT: %2 = nn.multiply %1, %a : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %2 = nn.multiply %1, %a : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  // CHECK-NEXT: %3 = nn.divide %2, %b : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  %3 = nn.divide %2, %b : (tensor<?x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  // CHECK-NEXT: %4 = nn.relu %3 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %4 = nn.relu %3 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  // CHECK-NEXT: %5 = nn.sigmoid %4 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %5 = nn.sigmoid %4 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  // CHECK-NEXT: %6 = nn.tanh %5 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %6 = nn.tanh %5 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  // CHECK-NEXT: %7 = nn.gelu %6 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  // GENERIC: "nn.gelu"(%{{.*}}) <{approximate = "none"}>
  %7 = nn.gelu %6 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  // CHECK-NEXT: %8 = nn.gelu %7 {approximate = "tanh"} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %8 = nn.gelu %7 {approximate = "tanh"} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  // CHECK-NEXT: %9 = nn.clip %8 {min = 0.000000e+00 : f64, max = 6.000000e+00 : f64} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %9 = nn.clip %8 {min = 0.0 : f64, max = 6.0 : f64} : (tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %9 : tensor<?x4xf32>
}

// CHECK-LABEL: func.func @linear
func.func @linear(%x: tensor<2x3x4xf16>, %w: tensor<5x4xf16>, %m: tensor<4x6xf16>, %bias: tensor<5xf16>, %g: tensor<5xf16>) -> tensor<2x3x5xf16> {
  // CHECK-NEXT: %0 = nn.dense %x, %w : (tensor<2x3x4xf16>, tensor<5x4xf16>) -> tensor<2x3x5xf16>
  %0 = nn.dense %x, %w : (tensor<2x3x4xf16>, tensor<5x4xf16>) -> tensor<2x3x5xf16>
  // CHECK-NEXT: %1 = nn.matmul %x, %m : (tensor<2x3x4xf16>, tensor<4x6xf16>) -> tensor<2x3x6xf16>
  %1 = nn.matmul %x, %m : (tensor<2x3x4xf16>, tensor<4x6xf16>) -> tensor<2x3x6xf16>
  // CHECK-NEXT: %2 = nn.batch_matmul %x, %x {transpose_a = true, transpose_b = false} : (tensor<2x3x4xf16>, tensor<2x3x4xf16>) -> tensor<2x4x4xf16>
  // GENERIC: "nn.batch_matmul"(%x, %x) <{transpose_a = true, transpose_b = false}>
  %2 = nn.batch_matmul %x, %x {transpose_a = true, transpose_b = false} : (tensor<2x3x4xf16>, tensor<2x3x4xf16>) -> tensor<2x4x4xf16>
  // CHECK-NEXT: %3 = nn.batch_matmul %x, %x : (tensor<2x3x4xf16>, tensor<2x3x4xf16>) -> tensor<2x3x3xf16>
  %3 = nn.batch_matmul %x, %x : (tensor<2x3x4xf16>, tensor<2x3x4xf16>) -> tensor<2x3x3xf16>
  // CHECK-NEXT: %4 = nn.bias_add %0, %bias : (tensor<2x3x5xf16>, tensor<5xf16>) -> tensor<2x3x5xf16>
  // GENERIC: "nn.bias_add"(%{{.*}}, %bias) <{axis = -1 : i64}>
  %4 = nn.bias_add %0, %bias : (tensor<2x3x5xf16>, tensor<5xf16>) -> tensor<2x3x5xf16>
  // CHECK-NEXT: %5 = nn.softmax %4 {axis = 1 : i64} : (tensor<2x3x5xf16>) -> tensor<2x3x5xf16>
  %5 = nn.softmax %4 {axis = 1 : i64} : (tensor<2x3x5xf16>) -> tensor<2x3x5xf16>
  // CHECK-NEXT: %6 = nn.layer_norm %5, %g, %bias {epsilon = 1.000000e-06 : f64} : (tensor<2x3x5xf16>, tensor<5xf16>, tensor<5xf16>) -> tensor<2x3x5xf16>
  %6 = nn.layer_norm %5, %g, %bias {epsilon = 1.0e-6 : f64} : (tensor<2x3x5xf16>, tensor<5xf16>, tensor<5xf16>) -> tensor<2x3x5xf16>
  func.return %6 : tensor<2x3x5xf16>
}

// CHECK-LABEL: func.func @cnn
func.func @cnn(%img: tensor<?x3x8x8xbf16>, %k: tensor<6x3x3x3xbf16>, %c: tensor<6xbf16>, %nhwc: tensor<1x8x8x3xbf16>, %ko: tensor<4x3x3x3xbf16>) -> tensor<?x6x1x1xbf16> {
  // CHECK-NEXT: %0 = nn.conv2d %img, %k {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>} : (tensor<?x3x8x8xbf16>, tensor<6x3x3x3xbf16>) -> tensor<?x6x4x4xbf16>
  // GENERIC: "nn.conv2d"(%img, %k) <{strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilation = array<i64: 1, 1>, data_layout = "NCHW", kernel_layout = "OIHW", groups = 1 : i64}>
  %0 = nn.conv2d %img, %k {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>, dilation = array<i64: 1, 1>} : (tensor<?x3x8x8xbf16>, tensor<6x3x3x3xbf16>) -> tensor<?x6x4x4xbf16>
  // CHECK-NEXT: %1 = nn.conv2d %nhwc, %ko {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<1x8x8x3xbf16>, tensor<4x3x3x3xbf16>) -> tensor<1x6x6x4xbf16>
  %1 = nn.conv2d %nhwc, %ko {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<1x8x8x3xbf16>, tensor<4x3x3x3xbf16>) -> tensor<1x6x6x4xbf16>
  // CHECK-NEXT: %2 = nn.batch_norm %0, %c, %c, %c, %c : (tensor<?x6x4x4xbf16>, tensor<6xbf16>, tensor<6xbf16>, tensor<6xbf16>, tensor<6xbf16>) -> tensor<?x6x4x4xbf16>
  %2 = nn.batch_norm %0, %c, %c, %c, %c : (tensor<?x6x4x4xbf16>, tensor<6xbf16>, tensor<6xbf16>, tensor<6xbf16>, tensor<6xbf16>) -> tensor<?x6x4x4xbf16>
  // CHECK-NEXT: %3 = nn.max_pool2d %2 {pool_size = array<i64: 3, 3>, strides = array<i64: 2, 2>, ceil_mode = true} : (tensor<?x6x4x4xbf16>) -> tensor<?x6x2x2xbf16>
  %3 = nn.max_pool2d %2 {pool_size = array<i64: 3, 3>, strides = array<i64: 2, 2>, ceil_mode = true} : (tensor<?x6x4x4xbf16>) -> tensor<?x6x2x2xbf16>
  // CHECK-NEXT: %4 = nn.avg_pool2d %2 {pool_size = array<i64: 3, 3>, padding = array<i64: 1, 1, 1, 1>, count_include_pad = true} : (tensor<?x6x4x4xbf16>) -> tensor<?x6x4x4xbf16>
  %4 = nn.avg_pool2d %2 {pool_size = array<i64: 3, 3>, padding = array<i64: 1, 1, 1, 1>, count_include_pad = true} : (tensor<?x6x4x4xbf16>) -> tensor<?x6x4x4xbf16>
  // CHECK-NEXT: %5 = nn.lrn %4 {size = 5 : i64, alpha = 2.000000e-04 : f64} : (tensor<?x6x4x4xbf16>) -> tensor<?x6x4x4xbf16>
  // GENERIC: "nn.lrn"(%{{.*}}) <{size = 5 : i64, alpha = 2.000000e-04 : f64, axis = 1 : i64, beta = 7.500000e-01 : f64, bias = 1.000000e+00 : f64}>
  %5 = nn.lrn %4 {size = 5 : i64, alpha = 2.0e-4 : f64} : (tensor<?x6x4x4xbf16>) -> tensor<?x6x4x4xbf16>
  // CHECK-NEXT: %6 = nn.global_avg_pool2d %5 : (tensor<?x6x4x4xbf16>) -> tensor<?x6x1x1xbf16>
  %6 = nn.global_avg_pool2d %5 : (tensor<?x6x4x4xbf16>) -> tensor<?x6x1x1xbf16>
  func.return %6 : tensor<?x6x1x1xbf16>
}

// CHECK-LABEL: func.func @data_movement
func.func @data_movement(%x: tensor<2x3xf32>, %y: tensor<?x3xf32>) -> tensor<?x3xf32> {
  // CHECK-NEXT: %0 = nn.pad %x {pad_before = array<i64: 1, 0>, pad_after = array<i64: 0, 2>, pad_value = -1.000000e+00 : f64} : (tensor<2x3xf32>) -> tensor<3x5xf32>
  %0 = nn.pad %x {pad_before = array<i64: 1, 0>, pad_after = array<i64: 0, 2>, pad_value = -1.0 : f64} : (tensor<2x3xf32>) -> tensor<3x5xf32>
  // CHECK-NEXT: %1 = nn.reshape %0 : (tensor<3x5xf32>) -> tensor<?x3xf32>
  %1 = nn.reshape %0 : (tensor<3x5xf32>) -> tensor<?x3xf32>
  // CHECK-NEXT: %2 = nn.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %2 = nn.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  // CHECK-NEXT: %3 = nn.concatenate %1, %y, %x {axis = 0 : i64} : (tensor<?x3xf32>, tensor<?x3xf32>, tensor<2x3xf32>) -> tensor<?x3xf32>
  // GENERIC: "nn.concatenate"(%{{.*}}, %y, %x) <{axis = 0 : i64}>
  %3 = nn.concatenate %1, %y, %x {axis = 0 : i64} : (tensor<?x3xf32>, tensor<?x3xf32>, tensor<2x3xf32>) -> tensor<?x3xf32>
  // CHECK-NEXT: %4 = nn.constant dense<1.500000e+00> : tensor<2x3xf32>
  // GENERIC: "nn.constant"() <{value = dense<1.500000e+00> : tensor<2x3xf32>}> : () -> tensor<2x3xf32>
  %4 = nn.constant dense<1.5> : tensor<2x3xf32>
  // CHECK-NEXT: %5 = nn.constant dense<[[1.000000e+00, 2.000000e+00], [3.000000e+00, 4.500000e+00]]> : tensor<2x2xf16> {note = "weights"}
  %5 = nn.constant dense<[[1.0, 2.0], [3.0, 4.5]]> : tensor<2x2xf16> {note = "weights"}
  // CHECK-NEXT: %6 = nn.shape_of %y : (tensor<?x3xf32>) -> tensor<2xi64>
  // GENERIC: "nn.shape_of"(%y) : (tensor<?x3xf32>) -> tensor<2xi64>
  %6 = nn.shape_of %y : (tensor<?x3xf32>) -> tensor<2xi64>
  func.return %3 : tensor<?x3xf32>
}

// Splats stay splats, in both forms: 480 MB of f32, 300 MB of i8 and 1.2 GB of i1 take
// one element each (xDSL alone would build a Python list of every element).
// CHECK-LABEL: func.func @large_splats
func.func @large_splats() -> tensor<30000000x4xf32> {
  // CHECK-NEXT: %0 = nn.constant dense<1.000000e+00> : tensor<30000000x4xf32>
  // GENERIC: "nn.constant"() <{value = dense<1.000000e+00> : tensor<30000000x4xf32>}> : () -> tensor<30000000x4xf32>
  %0 = nn.constant dense<1.0> : tensor<30000000x4xf32>
  // CHECK-NEXT: %1 = nn.constant dense<-3> : tensor<300000000xi8>
  %1 = nn.constant dense<-3> : tensor<300000000xi8>
  // CHECK-NEXT: %2 = nn.constant dense<true> : tensor<40000x30000xi1>
  %2 = nn.constant dense<true> : tensor<40000x30000xi1>
  // A hex payload of one element is a splat too.
  // CHECK-NEXT: %3 = nn.constant dense<2.000000e+00> : tensor<20000000x8xf32>
  %3 = nn.constant dense<"0x00000040"> : tensor<20000000x8xf32>
  func.return %0 : tensor<30000000x4xf32>
}

// NaN and the infinities print as hex bit patterns, and a hex literal in a float tensor
// is read back as one (MLIR's rule): an attention mask of -inf survives the round trip.
// CHECK-LABEL: func.func @nonfinite
func.func @nonfinite() -> tensor<4xf32> {
  // CHECK-NEXT: %0 = nn.constant dense<0xff800000> : tensor<8x8xf32>
  %0 = nn.constant dense<0xFF800000> : tensor<8x8xf32>
  // CHECK-NEXT: %1 = nn.constant dense<[0x7fc00000, 0xff800000, 0x7f800000, 1.500000e+00]> : tensor<4xf32>
  %1 = nn.constant dense<[0x7fc00000, 0xff800000, 0x7f800000, 1.5]> : tensor<4xf32>
  // CHECK-NEXT: %2 = nn.constant dense<[0xfc00, 2.500000e-01]> : tensor<2xf16>
  %2 = nn.constant dense<[0xfc00, 0.25]> : tensor<2xf16>
  func.return %1 : tensor<4xf32>
}
