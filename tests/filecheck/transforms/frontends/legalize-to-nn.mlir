// RUN: partita-opt %s --split-input-file -p legalize-to-nn | filecheck %s

// linalg.matmul into a zero fill: the fill and the empty tensor go, no add.
// CHECK-LABEL: func.func @matmul
// CHECK-NEXT:    %[[M:.*]] = nn.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    func.return %[[M]]
func.func @matmul(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%f : tensor<4x16xf32>) -> tensor<4x16xf32>
  func.return %m : tensor<4x16xf32>
}

// -----

// A destination that is not zero is accumulated into, as linalg does.
// CHECK-LABEL: func.func @matmul_accumulates
// CHECK-NEXT:    %[[M:.*]] = nn.matmul %a, %b
// CHECK-NEXT:    %[[A:.*]] = nn.add %[[M]], %c
// CHECK-NEXT:    func.return %[[A]]
func.func @matmul_accumulates(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%c : tensor<4x16xf32>) -> tensor<4x16xf32>
  func.return %m : tensor<4x16xf32>
}

// -----

// CHECK-LABEL: func.func @bias_gelu_like
// CHECK-NEXT:    %[[B:.*]] = nn.reshape %bias : (tensor<16xf32>) -> tensor<1x16xf32>
// CHECK-NEXT:    %[[S:.*]] = nn.add %x, %[[B]]
// CHECK-NEXT:    %[[Z:.*]] = nn.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[M:.*]] = nn.maximum %[[S]], %[[Z]]
// CHECK-NEXT:    func.return %[[M]]
func.func @bias_gelu_like(%x: tensor<4x16xf32>, %bias: tensor<16xf32>) -> tensor<4x16xf32> {
  %e = tensor.empty() : tensor<4x16xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x, %bias : tensor<4x16xf32>, tensor<16xf32>) outs(%e : tensor<4x16xf32>) {
  ^bb0(%in: f32, %b: f32, %out: f32):
    %s = arith.addf %in, %b : f32
    %c = arith.constant 0.000000e+00 : f32
    %m = arith.maximumf %s, %c : f32
    linalg.yield %m : f32
  } -> tensor<4x16xf32>
  func.return %r : tensor<4x16xf32>
}

// -----

// CHECK-LABEL: func.func @row_sum
// CHECK-NEXT:    %[[R:.*]] = nn.reduce_sum %x {axes = array<i64: 1>, keepdims = false} : (tensor<4x16xf32>) -> tensor<4xf32>
// CHECK-NEXT:    func.return %[[R]]
func.func @row_sum(%x: tensor<4x16xf32>) -> tensor<4xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4x16xf32>) outs(%f : tensor<4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %in, %acc : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @tensors
// CHECK-NEXT:    %[[C:.*]] = nn.reshape %x : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
// CHECK-NEXT:    %[[T:.*]] = nn.add %[[C]], %y
// CHECK-NEXT:    %[[K:.*]] = nn.exp %[[T]]
// CHECK-NEXT:    %[[J:.*]] = nn.concatenate %[[K]], %[[C]] {axis = 0 : i64}
// CHECK-NEXT:    func.return %[[J]]
func.func @tensors(%x: tensor<2x3x4xf32>, %y: tensor<6x4xf32>) -> tensor<12x4xf32> {
  %c = tensor.collapse_shape %x [[0, 1], [2]] : tensor<2x3x4xf32> into tensor<6x4xf32>
  %t = arith.addf %c, %y : tensor<6x4xf32>
  %k = math.exp %t : tensor<6x4xf32>
  %j = tensor.concat dim(0) %k, %c : (tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<12x4xf32>
  func.return %j : tensor<12x4xf32>
}

// -----

// CHECK-LABEL: func.func @slice_pad
// CHECK-NEXT:    %[[S:.*]] = nn.strided_slice %x {begin = array<i64: 1, 2>, end = array<i64: 5, 6>, strides = array<i64: 1, 1>}
// CHECK-NEXT:    %[[P:.*]] = nn.pad %[[S]] {pad_before = array<i64: 1, 1>, pad_after = array<i64: 1, 1>}
// CHECK-NEXT:    func.return %[[P]]
func.func @slice_pad(%x: tensor<8x8xf32>) -> tensor<6x6xf32> {
  %s = tensor.extract_slice %x[1, 2] [4, 4] [1, 1] : tensor<8x8xf32> to tensor<4x4xf32>
  %cst = arith.constant 0.000000e+00 : f32
  %p = tensor.pad %s low[1, 1] high[1, 1] {
  ^bb0(%i: index, %j: index):
    tensor.yield %cst : f32
  } : tensor<4x4xf32> to tensor<6x6xf32>
  func.return %p : tensor<6x6xf32>
}

// -----

// CHECK-LABEL: func.func @tosa
// CHECK-NEXT:    %[[M:.*]] = nn.batch_matmul %a, %b {transpose_b = false}
// CHECK-NEXT:    %[[C:.*]] = nn.clip %[[M]] {min = 0.000000e+00 : f64, max = 6.000000e+00 : f64}
// CHECK-NEXT:    %[[R:.*]] = nn.reduce_sum %[[C]] {axes = array<i64: 1>}
// CHECK-NEXT:    func.return %[[R]]
func.func @tosa(%a: tensor<1x4x8xf32>, %b: tensor<1x8x2xf32>) -> tensor<1x1x2xf32> {
  %zp = "tosa.const"() {values = dense<0.000000e+00> : tensor<1xf32>} : () -> tensor<1xf32>
  %m = tosa.matmul %a, %b, %zp, %zp : (tensor<1x4x8xf32>, tensor<1x8x2xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x2xf32>
  %c = tosa.clamp %m {min_val = 0.000000e+00 : f32, max_val = 6.000000e+00 : f32} : (tensor<1x4x2xf32>) -> tensor<1x4x2xf32>
  %r = tosa.reduce_sum %c {axis = 1 : i32} : (tensor<1x4x2xf32>) -> tensor<1x1x2xf32>
  func.return %r : tensor<1x1x2xf32>
}

// -----

// conv and pooling in linalg's NCHW forms.
// CHECK-LABEL: func.func @conv_pool
// CHECK-NEXT:    %[[C:.*]] = nn.conv2d %x, %w : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x6x6xf32>
// CHECK-NEXT:    %[[P:.*]] = nn.max_pool2d %[[C]] {pool_size = array<i64: 2, 2>, strides = array<i64: 2, 2>}
// CHECK-NEXT:    func.return %[[P]]
func.func @conv_pool(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x3x3xf32> {
  %zero = arith.constant 0.000000e+00 : f32
  %e = tensor.empty() : tensor<1x4x6x6xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  %c = linalg.conv_2d_nchw_fchw {dilations = dense<[1, 1]> : tensor<2xi64>, strides = dense<[1, 1]> : tensor<2xi64>} ins(%x, %w : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) outs(%f : tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  %ninf = arith.constant 0xFF800000 : f32
  %win = tensor.empty() : tensor<2x2xf32>
  %pe = tensor.empty() : tensor<1x4x3x3xf32>
  %pf = linalg.fill ins(%ninf : f32) outs(%pe : tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  %p = linalg.pooling_nchw_max {dilations = dense<[1, 1]> : tensor<2xi64>, strides = dense<[2, 2]> : tensor<2xi64>} ins(%c, %win : tensor<1x4x6x6xf32>, tensor<2x2xf32>) outs(%pf : tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  func.return %p : tensor<1x4x3x3xf32>
}

// -----

// copy is the value itself; broadcast reshapes then broadcasts; a max reduction into a
// filled destination keeps the destination in the max.
// CHECK-LABEL: func.func @more
// CHECK-NEXT:    %[[R:.*]] = nn.reshape %v : (tensor<16xf32>) -> tensor<1x16xf32>
// CHECK-NEXT:    %[[B:.*]] = nn.broadcast_to %[[R]] : (tensor<1x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %[[S:.*]] = nn.add %x, %[[B]]
// CHECK-NEXT:    %[[F:.*]] = nn.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK-NEXT:    %[[M:.*]] = nn.reduce_max %[[S]] {axes = array<i64: 1>, keepdims = false}
// CHECK-NEXT:    %[[O:.*]] = nn.maximum %[[M]], %[[F]]
// CHECK-NEXT:    func.return %[[O]]
func.func @more(%x: tensor<4x16xf32>, %v: tensor<16xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4x16xf32>
  %c = linalg.copy ins(%x : tensor<4x16xf32>) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  %e2 = tensor.empty() : tensor<4x16xf32>
  %b = linalg.broadcast ins(%v : tensor<16xf32>) outs(%e2 : tensor<4x16xf32>) dimensions = [0]
  %s = arith.addf %c, %b : tensor<4x16xf32>
  %zero = arith.constant 0.000000e+00 : f32
  %e3 = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e3 : tensor<4xf32>) -> tensor<4xf32>
  %r = linalg.reduce ins(%s : tensor<4x16xf32>) outs(%f : tensor<4xf32>) dimensions = [1]
    (%in: f32, %acc: f32) {
      %t = arith.maximumf %in, %acc : f32
      linalg.yield %t : f32
    }
  func.return %r : tensor<4xf32>
}

// -----

// TOSA element-wise ops, NHWC pools (averages over the window's inside only) and concat.
// CHECK-LABEL: func.func @tosa_more
// CHECK-NEXT:    %[[S:.*]] = nn.add %a, %b
// CHECK-NEXT:    %[[D:.*]] = nn.subtract %[[S]], %b
// CHECK-NEXT:    %[[M:.*]] = nn.multiply %[[D]], %a
// CHECK-NEXT:    %[[N:.*]] = nn.sin %[[M]]
// CHECK-NEXT:    %[[P:.*]] = nn.max_pool2d %[[N]] {pool_size = array<i64: 2, 2>, strides = array<i64: 2, 2>, layout = "NHWC"}
// CHECK-NEXT:    %[[Q:.*]] = nn.avg_pool2d %[[N]] {pool_size = array<i64: 2, 2>, strides = array<i64: 2, 2>, layout = "NHWC"}
// CHECK-NEXT:    %[[C:.*]] = nn.concatenate %[[P]], %[[Q]] {axis = 3 : i64}
// CHECK-NEXT:    func.return %[[C]]
func.func @tosa_more(%a: tensor<1x4x4x2xf32>, %b: tensor<1x4x4x2xf32>) -> tensor<1x2x2x4xf32> {
  %s = tosa.add %a, %b : (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %d = tosa.sub %s, %b : (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %sh = "tosa.const"() {values = dense<0> : tensor<1xi8>} : () -> tensor<1xi8>
  %m = tosa.mul %d, %a, %sh : (tensor<1x4x4x2xf32>, tensor<1x4x4x2xf32>, tensor<1xi8>) -> tensor<1x4x4x2xf32>
  %n = tosa.sin %m : (tensor<1x4x4x2xf32>) -> tensor<1x4x4x2xf32>
  %p = tosa.max_pool2d %n {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>} : (tensor<1x4x4x2xf32>) -> tensor<1x2x2x2xf32>
  %zp = "tosa.const"() {values = dense<0.000000e+00> : tensor<1xf32>} : () -> tensor<1xf32>
  %q = tosa.avg_pool2d %n, %zp, %zp {kernel = array<i64: 2, 2>, stride = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, acc_type = f32} : (tensor<1x4x4x2xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x2x2x2xf32>
  %c = tosa.concat %p, %q {axis = 3 : i32} : (tensor<1x2x2x2xf32>, tensor<1x2x2x2xf32>) -> tensor<1x2x2x4xf32>
  func.return %c : tensor<1x2x2x4xf32>
}

// -----

// insert_slice: the source padded to the destination, chosen by a constant mask.
// CHECK-LABEL: func.func @insert
// CHECK-NEXT:    %[[P:.*]] = nn.pad %x {pad_before = array<i64: 1, 2>, pad_after = array<i64: 1, 1>}
// CHECK-NEXT:    %[[M:.*]] = nn.constant dense<{{.*}}> : tensor<4x5xi1>
// CHECK-NEXT:    %[[W:.*]] = nn.where %[[M]], %[[P]], %y
// CHECK-NEXT:    func.return %[[W]]
func.func @insert(%x: tensor<2x2xf32>, %y: tensor<4x5xf32>) -> tensor<4x5xf32> {
  %r = tensor.insert_slice %x into %y[1, 2] [2, 2] [1, 1] : tensor<2x2xf32> into tensor<4x5xf32>
  func.return %r : tensor<4x5xf32>
}
