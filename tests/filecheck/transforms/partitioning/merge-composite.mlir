// RUN: partita-opt %s -p 'merge-composite{backend=cutlass}' --split-input-file | filecheck %s
// RUN: partita-opt %s -p 'merge-composite{backend=cutlass bind-constants=true}' --split-input-file | filecheck %s --check-prefix=BIND

// The largest pattern ending at a root wins: dense -> bias_add -> gelu is one composite.
// CHECK-LABEL: func.func @dense_bias_gelu
// CHECK-NEXT:    %0 = byoc.partition(%x, %w, %b) {byoc.composite = "cutlass.dense_bias_gelu"} ({
// CHECK-NEXT:    ^bb0(%x_1: tensor<16x8xf16>, %w_1: tensor<4x8xf16>, %b_1: tensor<4xf16>):
// CHECK-NEXT:      %1 = nn.dense %x_1, %w_1
// CHECK-NEXT:      %2 = nn.bias_add %1, %b_1
// CHECK-NEXT:      %3 = nn.gelu %2
// CHECK-NEXT:      byoc.yield %3 : tensor<16x4xf16>
// CHECK-NEXT:    }) : (tensor<16x8xf16>, tensor<4x8xf16>, tensor<4xf16>) -> tensor<16x4xf16>
// CHECK-NEXT:    func.return %0
func.func @dense_bias_gelu(%x: tensor<16x8xf16>, %w: tensor<4x8xf16>, %b: tensor<4xf16>) -> tensor<16x4xf16> {
  %0 = nn.dense %x, %w : (tensor<16x8xf16>, tensor<4x8xf16>) -> tensor<16x4xf16>
  %1 = nn.bias_add %0, %b : (tensor<16x4xf16>, tensor<4xf16>) -> tensor<16x4xf16>
  %2 = nn.gelu %1 : (tensor<16x4xf16>) -> tensor<16x4xf16>
  func.return %2 : tensor<16x4xf16>
}

// -----

// The biased value escapes (it is also returned), so dense_bias_relu is rejected at the
// relu; dense_bias matches at the add and the relu stays outside.
// CHECK-LABEL: func.func @escaping_intermediate
// CHECK:         byoc.partition(%x, %w, %b) {byoc.composite = "cutlass.dense_bias"}
// CHECK:           nn.add
// CHECK:         byoc.yield
// CHECK-NEXT:    })
// CHECK-NEXT:    nn.relu
// CHECK-NOT:     byoc.partition
func.func @escaping_intermediate(%x: tensor<16x8xf32>, %w: tensor<4x8xf32>, %b: tensor<4xf32>) -> (tensor<16x4xf32>, tensor<16x4xf32>) {
  %0 = nn.dense %x, %w : (tensor<16x8xf32>, tensor<4x8xf32>) -> tensor<16x4xf32>
  %1 = nn.add %0, %b : (tensor<16x4xf32>, tensor<4xf32>) -> tensor<16x4xf32>
  %2 = nn.relu %1 : (tensor<16x4xf32>) -> tensor<16x4xf32>
  func.return %1, %2 : tensor<16x4xf32>, tensor<16x4xf32>
}

// -----

// bf16 is a CUTLASS GEMM type (tensor cores); f64 is rejected by the predicate: nothing
// is matched.
// CHECK-LABEL: func.func @bf16
// CHECK:         byoc.partition(%x, %w) {byoc.composite = "cutlass.dense"}
// CHECK-LABEL: func.func @f64_rejected
// CHECK-NOT:     byoc.partition
// CHECK:         func.return
func.func @bf16(%x: tensor<16x8xbf16>, %w: tensor<4x8xbf16>) -> tensor<16x4xbf16> {
  %0 = nn.dense %x, %w : (tensor<16x8xbf16>, tensor<4x8xbf16>) -> tensor<16x4xbf16>
  func.return %0 : tensor<16x4xbf16>
}
func.func @f64_rejected(%x: tensor<16x8xf64>, %w: tensor<4x8xf64>) -> tensor<16x4xf64> {
  %0 = nn.dense %x, %w : (tensor<16x8xf64>, tensor<4x8xf64>) -> tensor<16x4xf64>
  func.return %0 : tensor<16x4xf64>
}

// -----

// batch_matmul in every transpose combination.
// CHECK-LABEL: func.func @batch_matmul
// CHECK:         byoc.partition(%a, %b) {byoc.composite = "cutlass.batch_matmul"}
// CHECK:         byoc.partition(%0, %c) {byoc.composite = "cutlass.batch_matmul"}
// CHECK:           nn.batch_matmul %{{.*}}, %{{.*}} {transpose_b = false}
// CHECK:         func.return
func.func @batch_matmul(%a: tensor<2x16x8xf16>, %b: tensor<2x4x8xf16>, %c: tensor<2x4x4xf16>) -> tensor<2x16x4xf16> {
  %0 = nn.batch_matmul %a, %b : (tensor<2x16x8xf16>, tensor<2x4x8xf16>) -> tensor<2x16x4xf16>
  %1 = nn.batch_matmul %0, %c {transpose_b = false} : (tensor<2x16x4xf16>, tensor<2x4x4xf16>) -> tensor<2x16x4xf16>
  func.return %1 : tensor<2x16x4xf16>
}

// -----

// conv2d: NHWC/OHWI with bias and relu is a composite; NCHW is not.
// CHECK-LABEL: func.func @conv2d_layouts
// CHECK:         byoc.partition(%x, %w, %b) {byoc.composite = "cutlass.conv2d_bias_relu"}
// CHECK:           nn.conv2d
// CHECK:           nn.bias_add
// CHECK:           nn.relu
// CHECK:         byoc.yield
// CHECK-NOT:     byoc.partition
// CHECK:         nn.conv2d %y, %v
// CHECK-NOT:     byoc.partition
func.func @conv2d_layouts(%x: tensor<1x8x8x16xf16>, %w: tensor<32x3x3x16xf16>, %b: tensor<32xf16>,
                          %y: tensor<1x16x8x8xf16>, %v: tensor<32x16x3x3xf16>) -> (tensor<1x6x6x32xf16>, tensor<1x32x6x6xf16>) {
  %0 = nn.conv2d %x, %w {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<1x8x8x16xf16>, tensor<32x3x3x16xf16>) -> tensor<1x6x6x32xf16>
  %1 = nn.bias_add %0, %b {axis = 3 : i64} : (tensor<1x6x6x32xf16>, tensor<32xf16>) -> tensor<1x6x6x32xf16>
  %2 = nn.relu %1 : (tensor<1x6x6x32xf16>) -> tensor<1x6x6x32xf16>
  %3 = nn.conv2d %y, %v : (tensor<1x16x8x8xf16>, tensor<32x16x3x3xf16>) -> tensor<1x32x6x6xf16>
  func.return %2, %3 : tensor<1x6x6x32xf16>, tensor<1x32x6x6xf16>
}

// -----

// Constants stay outside the composite (an operand) unless bind-constants=true.
// CHECK-LABEL: func.func @constant_weight
// CHECK:         %c = nn.constant
// CHECK-NEXT:    byoc.partition(%x, %c) {byoc.composite = "cutlass.dense"}
// BIND-LABEL:  func.func @constant_weight
// BIND-NEXT:     byoc.partition(%x) {byoc.composite = "cutlass.dense"}
// BIND-NEXT:     ^bb0(%x_1: tensor<2x4xf32>):
// BIND-NEXT:       %c = nn.constant
// BIND-NEXT:       nn.dense %x_1, %c
func.func @constant_weight(%x: tensor<2x4xf32>) -> tensor<2x3xf32> {
  %c = nn.constant dense<1.0> : tensor<3x4xf32>
  %0 = nn.dense %x, %c : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// Ops inside an existing partition are not visited.
// CHECK-LABEL: func.func @existing_partition
// CHECK-NEXT:    byoc.partition(%x, %w) {byoc.compiler = "cublas", byoc.global_symbol = "mine"} ({
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      nn.dense
// CHECK-NEXT:      byoc.yield
func.func @existing_partition(%x: tensor<2x4xf32>, %w: tensor<3x4xf32>) -> tensor<2x3xf32> {
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cublas", byoc.global_symbol = "mine"} ({
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<3x4xf32>):
    %1 = nn.dense %a, %b : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
    byoc.yield %1 : tensor<2x3xf32>
  }) : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// -----

// A residual add after a dense, in either operand order, is the dense's epilogue (CUTLASS
// reads the residual as its source C). A bias row is no residual (dense_bias takes it),
// and neither is a tensor broadcast along the rows: the dense is matched alone.
// CHECK-LABEL: func.func @dense_residual
// CHECK:         byoc.partition(%x, %w, %r) {byoc.composite = "cutlass.dense_residual"}
// CHECK:         byoc.partition(%x, %w, %r) {byoc.composite = "cutlass.residual_dense"}
// CHECK:           nn.add %{{.*}}, %{{.*}} :
// CHECK-NEXT:      byoc.yield
// CHECK-LABEL: func.func @not_a_residual
// CHECK:         byoc.partition(%x, %w, %b) {byoc.composite = "cutlass.dense_bias"}
// CHECK:         byoc.partition(%x, %w) {byoc.composite = "cutlass.dense"}
// CHECK:         byoc.yield
// CHECK-NEXT:    })
// CHECK-NEXT:    nn.add
func.func @dense_residual(%x: tensor<?x8xf16>, %w: tensor<4x8xf16>, %r: tensor<?x4xf16>) -> (tensor<?x4xf16>, tensor<?x4xf16>) {
  %0 = nn.dense %x, %w : (tensor<?x8xf16>, tensor<4x8xf16>) -> tensor<?x4xf16>
  %1 = nn.add %0, %r : (tensor<?x4xf16>, tensor<?x4xf16>) -> tensor<?x4xf16>
  %2 = nn.dense %x, %w : (tensor<?x8xf16>, tensor<4x8xf16>) -> tensor<?x4xf16>
  %3 = nn.add %r, %2 : (tensor<?x4xf16>, tensor<?x4xf16>) -> tensor<?x4xf16>
  func.return %1, %3 : tensor<?x4xf16>, tensor<?x4xf16>
}
func.func @not_a_residual(%x: tensor<16x8xf16>, %w: tensor<4x8xf16>, %b: tensor<1x4xf16>, %c: tensor<16x1xf16>) -> (tensor<16x4xf16>, tensor<16x4xf16>) {
  %0 = nn.dense %x, %w : (tensor<16x8xf16>, tensor<4x8xf16>) -> tensor<16x4xf16>
  %1 = nn.add %0, %b : (tensor<16x4xf16>, tensor<1x4xf16>) -> tensor<16x4xf16>
  %2 = nn.dense %x, %w : (tensor<16x8xf16>, tensor<4x8xf16>) -> tensor<16x4xf16>
  %3 = nn.add %2, %c : (tensor<16x4xf16>, tensor<16x1xf16>) -> tensor<16x4xf16>
  func.return %1, %3 : tensor<16x4xf16>, tensor<16x4xf16>
}

// -----

// x + x @ W^T (a square W): the residual is the dense's own input, which a kernel argument
// cannot be twice; the dense is matched alone.
// CHECK-LABEL: func.func @residual_is_the_input
// CHECK:         byoc.partition(%x, %w) {byoc.composite = "cutlass.dense"}
// CHECK:         byoc.yield
// CHECK-NEXT:    })
// CHECK-NEXT:    nn.add
func.func @residual_is_the_input(%x: tensor<16x8xf16>, %w: tensor<8x8xf16>) -> tensor<16x8xf16> {
  %0 = nn.dense %x, %w : (tensor<16x8xf16>, tensor<8x8xf16>) -> tensor<16x8xf16>
  %1 = nn.add %x, %0 : (tensor<16x8xf16>, tensor<16x8xf16>) -> tensor<16x8xf16>
  func.return %1 : tensor<16x8xf16>
}

// -----

// A pre-norm transformer's projection back into the residual stream, (x @ W^T + b) + h in
// either order of the outer add: one composite, whose bias CUTLASS's broadcast epilogue
// reads as its vector and whose residual as its source C.
// CHECK-LABEL: func.func @dense_bias_residual
// CHECK:         byoc.partition(%x, %w, %b, %h) {byoc.composite = "cutlass.dense_bias_residual"}
// CHECK:           nn.dense
// CHECK-NEXT:      nn.add
// CHECK-NEXT:      nn.add
// CHECK-NEXT:      byoc.yield
// CHECK:         byoc.partition(%x, %w, %b, %h) {byoc.composite = "cutlass.residual_dense_bias"}
func.func @dense_bias_residual(%x: tensor<?x8xf16>, %w: tensor<4x8xf16>, %b: tensor<4xf16>, %h: tensor<?x4xf16>) -> (tensor<?x4xf16>, tensor<?x4xf16>) {
  %0 = nn.dense %x, %w : (tensor<?x8xf16>, tensor<4x8xf16>) -> tensor<?x4xf16>
  %1 = nn.add %0, %b : (tensor<?x4xf16>, tensor<4xf16>) -> tensor<?x4xf16>
  %2 = nn.add %1, %h : (tensor<?x4xf16>, tensor<?x4xf16>) -> tensor<?x4xf16>
  %3 = nn.dense %x, %w : (tensor<?x8xf16>, tensor<4x8xf16>) -> tensor<?x4xf16>
  %4 = nn.add %3, %b : (tensor<?x4xf16>, tensor<4xf16>) -> tensor<?x4xf16>
  %5 = nn.add %h, %4 : (tensor<?x4xf16>, tensor<?x4xf16>) -> tensor<?x4xf16>
  func.return %2, %5 : tensor<?x4xf16>, tensor<?x4xf16>
}

// -----

// The residual is the dense's own input, or a second bias row: the bias add is matched
// with the dense, and the outer add stays outside.
// CHECK-LABEL: func.func @bias_then_not_a_residual
// CHECK:         byoc.partition(%x, %w, %b) {byoc.composite = "cutlass.dense_bias"}
// CHECK:         byoc.yield
// CHECK-NEXT:    })
// CHECK-NEXT:    nn.add
// CHECK:         byoc.partition(%x, %w, %b) {byoc.composite = "cutlass.dense_bias"}
// CHECK:         byoc.yield
// CHECK-NEXT:    })
// CHECK-NEXT:    nn.add
func.func @bias_then_not_a_residual(%x: tensor<16x8xf16>, %w: tensor<8x8xf16>, %b: tensor<8xf16>) -> (tensor<16x8xf16>, tensor<16x8xf16>) {
  %0 = nn.dense %x, %w : (tensor<16x8xf16>, tensor<8x8xf16>) -> tensor<16x8xf16>
  %1 = nn.add %0, %b : (tensor<16x8xf16>, tensor<8xf16>) -> tensor<16x8xf16>
  %2 = nn.add %1, %x : (tensor<16x8xf16>, tensor<16x8xf16>) -> tensor<16x8xf16>
  %3 = nn.dense %x, %w : (tensor<16x8xf16>, tensor<8x8xf16>) -> tensor<16x8xf16>
  %4 = nn.add %3, %b : (tensor<16x8xf16>, tensor<8xf16>) -> tensor<16x8xf16>
  %5 = nn.add %4, %b : (tensor<16x8xf16>, tensor<8xf16>) -> tensor<16x8xf16>
  func.return %2, %5 : tensor<16x8xf16>, tensor<16x8xf16>
}

// -----

// A ResNet block's second convolution (its batch norm folded into the bias), the shortcut
// and the block's ReLU, in either order of the add: one composite, CUTLASS's broadcast
// convolution. Without the ReLU the add alone joins.
// CHECK-LABEL: func.func @conv_bias_residual
// CHECK:         byoc.partition(%x, %w, %b, %s) {byoc.composite = "cutlass.conv2d_bias_residual_relu"}
// CHECK:         byoc.partition(%x, %w, %b, %s) {byoc.composite = "cutlass.residual_conv2d_bias_relu"}
// CHECK:         byoc.partition(%x, %w, %b, %s) {byoc.composite = "cutlass.conv2d_bias_residual"}
func.func @conv_bias_residual(%x: tensor<2x8x8x16xf16>, %w: tensor<16x3x3x16xf16>, %b: tensor<16xf16>, %s: tensor<2x8x8x16xf16>) -> (tensor<2x8x8x16xf16>, tensor<2x8x8x16xf16>, tensor<2x8x8x16xf16>) {
  %0 = nn.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>, data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<2x8x8x16xf16>, tensor<16x3x3x16xf16>) -> tensor<2x8x8x16xf16>
  %1 = nn.bias_add %0, %b {axis = 3 : i64} : (tensor<2x8x8x16xf16>, tensor<16xf16>) -> tensor<2x8x8x16xf16>
  %2 = nn.add %1, %s : (tensor<2x8x8x16xf16>, tensor<2x8x8x16xf16>) -> tensor<2x8x8x16xf16>
  %3 = nn.relu %2 : (tensor<2x8x8x16xf16>) -> tensor<2x8x8x16xf16>
  %4 = nn.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>, data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<2x8x8x16xf16>, tensor<16x3x3x16xf16>) -> tensor<2x8x8x16xf16>
  %5 = nn.bias_add %4, %b {axis = 3 : i64} : (tensor<2x8x8x16xf16>, tensor<16xf16>) -> tensor<2x8x8x16xf16>
  %6 = nn.add %s, %5 : (tensor<2x8x8x16xf16>, tensor<2x8x8x16xf16>) -> tensor<2x8x8x16xf16>
  %7 = nn.relu %6 : (tensor<2x8x8x16xf16>) -> tensor<2x8x8x16xf16>
  %8 = nn.conv2d %x, %w {padding = array<i64: 1, 1, 1, 1>, data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<2x8x8x16xf16>, tensor<16x3x3x16xf16>) -> tensor<2x8x8x16xf16>
  %9 = nn.bias_add %8, %b {axis = 3 : i64} : (tensor<2x8x8x16xf16>, tensor<16xf16>) -> tensor<2x8x8x16xf16>
  %10 = nn.add %9, %s : (tensor<2x8x8x16xf16>, tensor<2x8x8x16xf16>) -> tensor<2x8x8x16xf16>
  func.return %3, %7, %10 : tensor<2x8x8x16xf16>, tensor<2x8x8x16xf16>, tensor<2x8x8x16xf16>
}
