// RUN: partita-opt %s --split-input-file | filecheck %s

// Round trip of the reduction family (and the normalization ops beside it): properties
// in the attribute dictionary, defaults elided.

// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<?x5x7xf32>, %i: tensor<4x3xi64>, %b: tensor<2x3xi1>) -> () {
  // CHECK-NEXT: %0 = nn.reduce_sum %x {axes = array<i64: 1>} : (tensor<?x5x7xf32>) -> tensor<?x1x7xf32>
  %0 = nn.reduce_sum %x {axes = array<i64: 1>} : (tensor<?x5x7xf32>) -> tensor<?x1x7xf32>
  // CHECK-NEXT: %1 = nn.reduce_mean %x {axes = array<i64: 0, 2>, keepdims = false} : (tensor<?x5x7xf32>) -> tensor<5xf32>
  %1 = nn.reduce_mean %x {axes = array<i64: 0, 2>, keepdims = false} : (tensor<?x5x7xf32>) -> tensor<5xf32>
  // CHECK-NEXT: %2 = nn.reduce_log_sum_exp %x {axes = array<i64>} : (tensor<?x5x7xf32>) -> tensor<?x5x7xf32>
  %2 = nn.reduce_log_sum_exp %x {axes = array<i64>} : (tensor<?x5x7xf32>) -> tensor<?x5x7xf32>
  // CHECK-NEXT: %3 = nn.reduce_inv_std_dev %x {axes = array<i64: 2>, epsilon = 1.000000e-03 : f64} : (tensor<?x5x7xf32>) -> tensor<?x5x1xf32>
  %3 = nn.reduce_inv_std_dev %x {axes = array<i64: 2>, epsilon = 1.0e-3 : f64} : (tensor<?x5x7xf32>) -> tensor<?x5x1xf32>
  // CHECK-NEXT: %4 = nn.reduce_prod %i {axes = array<i64: 0>, keepdims = false} : (tensor<4x3xi64>) -> tensor<3xi64>
  %4 = nn.reduce_prod %i {axes = array<i64: 0>, keepdims = false} : (tensor<4x3xi64>) -> tensor<3xi64>
  // CHECK-NEXT: %5 = nn.reduce_max %b {axes = array<i64: 1>} : (tensor<2x3xi1>) -> tensor<2x1xi1>
  %5 = nn.reduce_max %b {axes = array<i64: 1>} : (tensor<2x3xi1>) -> tensor<2x1xi1>
  // CHECK-NEXT: %6 = nn.argmax %x {axis = 1 : i64, select_last_index = true} : (tensor<?x5x7xf32>) -> tensor<?x1x7xi64>
  %6 = nn.argmax %x {axis = 1 : i64, select_last_index = true} : (tensor<?x5x7xf32>) -> tensor<?x1x7xi64>
  // CHECK-NEXT: %7 = nn.argmin %i {keepdims = false} : (tensor<4x3xi64>) -> tensor<3xi64>
  %7 = nn.argmin %i {keepdims = false} : (tensor<4x3xi64>) -> tensor<3xi64>
  // CHECK-NEXT: %8 = nn.topk_values %x {k = 3 : i64} : (tensor<?x5x7xf32>) -> tensor<?x5x3xf32>
  %8 = nn.topk_values %x {k = 3 : i64} : (tensor<?x5x7xf32>) -> tensor<?x5x3xf32>
  // CHECK-NEXT: %9 = nn.topk_indices %x {k = 2 : i64, axis = 1 : i64, largest = false} : (tensor<?x5x7xf32>) -> tensor<?x2x7xi64>
  %9 = nn.topk_indices %x {k = 2 : i64, axis = 1 : i64, largest = false} : (tensor<?x5x7xf32>) -> tensor<?x2x7xi64>
  // CHECK-NEXT: %10 = nn.cumsum %i {axis = 0 : i64, exclusive = true, reverse = true} : (tensor<4x3xi64>) -> tensor<4x3xi64>
  %10 = nn.cumsum %i {axis = 0 : i64, exclusive = true, reverse = true} : (tensor<4x3xi64>) -> tensor<4x3xi64>
  func.return
}

// -----

// CHECK-LABEL: func.func @normalizations
func.func @normalizations(%x: tensor<2x6x5xf64>, %s: tensor<6xf64>, %r: tensor<5xf64>) -> () {
  // CHECK-NEXT: %0 = nn.log_softmax %x {axis = 1 : i64} : (tensor<2x6x5xf64>) -> tensor<2x6x5xf64>
  %0 = nn.log_softmax %x {axis = 1 : i64} : (tensor<2x6x5xf64>) -> tensor<2x6x5xf64>
  // CHECK-NEXT: %1 = nn.hardmax %x : (tensor<2x6x5xf64>) -> tensor<2x6x5xf64>
  %1 = nn.hardmax %x : (tensor<2x6x5xf64>) -> tensor<2x6x5xf64>
  // CHECK-NEXT: %2 = nn.group_norm %x, %s, %s {num_groups = 3 : i64} : (tensor<2x6x5xf64>, tensor<6xf64>, tensor<6xf64>) -> tensor<2x6x5xf64>
  %2 = nn.group_norm %x, %s, %s {num_groups = 3 : i64} : (tensor<2x6x5xf64>, tensor<6xf64>, tensor<6xf64>) -> tensor<2x6x5xf64>
  // CHECK-NEXT: %3 = nn.rms_norm %x, %r {axis = 1 : i64} : (tensor<2x6x5xf64>, tensor<5xf64>) -> tensor<2x6x5xf64>
  %3 = nn.rms_norm %x, %r {axis = 1 : i64} : (tensor<2x6x5xf64>, tensor<5xf64>) -> tensor<2x6x5xf64>
  // CHECK-NEXT: %4 = nn.lp_norm %x {p = 1 : i64} : (tensor<2x6x5xf64>) -> tensor<2x6x5xf64>
  %4 = nn.lp_norm %x {p = 1 : i64} : (tensor<2x6x5xf64>) -> tensor<2x6x5xf64>
  // CHECK-NEXT: %5 = nn.mean_variance_norm %x {axes = array<i64: 0, 2>} : (tensor<2x6x5xf64>) -> tensor<2x6x5xf64>
  %5 = nn.mean_variance_norm %x {axes = array<i64: 0, 2>} : (tensor<2x6x5xf64>) -> tensor<2x6x5xf64>
  func.return
}
