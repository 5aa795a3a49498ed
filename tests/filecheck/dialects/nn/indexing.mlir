// RUN: partita-opt %s | partita-opt | filecheck %s
// RUN: partita-opt %s --print-op-generic | partita-opt | filecheck %s

// Indexing ops round-trip; shape references (refs / ref_axes / targets) size '?' dims.

// CHECK-LABEL: func.func @gathers
// CHECK-NEXT: %0 = nn.take %t, %ids : (tensor<10x4xf16>, tensor<?x?xi64>) -> tensor<?x?x4xf16>
// CHECK-NEXT: %1 = nn.gather_elements %t, %i32 {axis = 1 : i64} : (tensor<10x4xf16>, tensor<2x3xi32>) -> tensor<2x3xf16>
// CHECK-NEXT: %2 = nn.gather_nd %t, %nd : (tensor<10x4xf16>, tensor<2x1xi64>) -> tensor<2x4xf16>
// CHECK-NEXT: func.return %0 : tensor<?x?x4xf16>
func.func @gathers(%t: tensor<10x4xf16>, %ids: tensor<?x?xi64>, %i32: tensor<2x3xi32>, %nd: tensor<2x1xi64>) -> tensor<?x?x4xf16> {
  %0 = nn.take %t, %ids {axis = 0 : i64} : (tensor<10x4xf16>, tensor<?x?xi64>) -> tensor<?x?x4xf16>
  %1 = nn.gather_elements %t, %i32 {axis = 1 : i64} : (tensor<10x4xf16>, tensor<2x3xi32>) -> tensor<2x3xf16>
  %2 = nn.gather_nd %t, %nd : (tensor<10x4xf16>, tensor<2x1xi64>) -> tensor<2x4xf16>
  func.return %0 : tensor<?x?x4xf16>
}

// CHECK-LABEL: func.func @scatters
// CHECK-NEXT: %0 = nn.scatter_nd %c, %i, %u {reduction = "add"} : (tensor<2x4x8xf32>, tensor<3x2xi64>, tensor<3x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %1 = nn.scatter_elements %d, %e, %v {axis = -1 : i64, reduction = "max"} : (tensor<2x4xf32>, tensor<2x3xi64>, tensor<2x3xf32>) -> tensor<2x4xf32>
// CHECK-NEXT: func.return %0 : tensor<2x4x8xf32>
func.func @scatters(%c: tensor<2x4x8xf32>, %i: tensor<3x2xi64>, %u: tensor<3x8xf32>, %d: tensor<2x4xf32>, %e: tensor<2x3xi64>, %v: tensor<2x3xf32>) -> tensor<2x4x8xf32> {
  %0 = nn.scatter_nd %c, %i, %u {reduction = "add"} : (tensor<2x4x8xf32>, tensor<3x2xi64>, tensor<3x8xf32>) -> tensor<2x4x8xf32>
  %1 = nn.scatter_elements %d, %e, %v {axis = -1 : i64, reduction = "max"} : (tensor<2x4xf32>, tensor<2x3xi64>, tensor<2x3xf32>) -> tensor<2x4xf32>
  func.return %0 : tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @shape_refs
// CHECK-NEXT: %0 = nn.strided_slice %x, %ids {begin = array<i64: 0, 3>, end = array<i64: 0, -100>, strides = array<i64: 1, -2>, ref_axes = array<i64: 1>, targets = array<i64: 0>} : (tensor<16x4xi1>, tensor<?x?xi64>) -> tensor<?x2xi1>
// CHECK-NEXT: %1 = nn.arange %ids {start = 0.000000e+00 : f64, delta = 1.000000e+00 : f64, ref_axes = array<i64: 1>, targets = array<i64: 0>} : (tensor<?x?xi64>) -> tensor<?xi64>
// CHECK-NEXT: %2 = nn.reshape %m, %m, %m {ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 3>} : (tensor<?x?xi64>, tensor<?x?xi64>, tensor<?x?xi64>) -> tensor<?x1x1x?xi64>
// CHECK-NEXT: %3 = nn.broadcast_to %2, %m {ref_axes = array<i64: 1>, targets = array<i64: 2>} : (tensor<?x1x1x?xi64>, tensor<?x?xi64>) -> tensor<?x1x?x?xi64>
// CHECK-NEXT: func.return %1 : tensor<?xi64>

func.func @shape_refs(%x: tensor<16x4xi1>, %ids: tensor<?x?xi64>, %m: tensor<?x?xi64>) -> tensor<?xi64> {
  %0 = nn.strided_slice %x, %ids {begin = array<i64: 0, 3>, end = array<i64: 0, -100>, strides = array<i64: 1, -2>, ref_axes = array<i64: 1>, targets = array<i64: 0>} : (tensor<16x4xi1>, tensor<?x?xi64>) -> tensor<?x2xi1>
  %1 = nn.arange %ids {start = 0.0 : f64, delta = 1.0 : f64, ref_axes = array<i64: 1>, targets = array<i64: 0>} : (tensor<?x?xi64>) -> tensor<?xi64>
  %2 = nn.reshape %m, %m, %m {ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 3>} : (tensor<?x?xi64>, tensor<?x?xi64>, tensor<?x?xi64>) -> tensor<?x1x1x?xi64>
  %3 = nn.broadcast_to %2, %m {ref_axes = array<i64: 1>, targets = array<i64: 2>} : (tensor<?x1x1x?xi64>, tensor<?x?xi64>) -> tensor<?x1x?x?xi64>
  func.return %1 : tensor<?xi64>
}

// The first tokens of an axis of unknown size: [1:4] has 3 (checked when shapes bind).
// CHECK-LABEL: func.func @head_of_a_dynamic_axis
// CHECK-NEXT: %0 = nn.strided_slice %x {begin = array<i64: 1, 0>, end = array<i64: 4, 9223372036854775807>, strides = array<i64: 1, 1>} : (tensor<?x2xf32>) -> tensor<3x2xf32>
func.func @head_of_a_dynamic_axis(%x: tensor<?x2xf32>) -> tensor<3x2xf32> {
  %0 = nn.strided_slice %x {begin = array<i64: 1, 0>, end = array<i64: 4, 9223372036854775807>, strides = array<i64: 1, 1>} : (tensor<?x2xf32>) -> tensor<3x2xf32>
  func.return %0 : tensor<3x2xf32>
}

// The first boxes of however many a run kept: a clamped [0:4] has up to 4; and every
// other one from the second, [1::2].
// CHECK-LABEL: func.func @clamped_and_strided_dynamic_axes
// CHECK-NEXT: %0 = nn.strided_slice %x {begin = array<i64: 0, 0>, end = array<i64: 4, 9223372036854775807>, strides = array<i64: 1, 1>, clamped = array<i64: 0>} : (tensor<?x2xf32>) -> tensor<?x2xf32>
// CHECK-NEXT: %1 = nn.strided_slice %x {begin = array<i64: 1, 0>, end = array<i64: 9223372036854775807, 9223372036854775807>, strides = array<i64: 2, 1>} : (tensor<?x2xf32>) -> tensor<?x2xf32>
func.func @clamped_and_strided_dynamic_axes(%x: tensor<?x2xf32>) -> tensor<?x2xf32> {
  %0 = nn.strided_slice %x {begin = array<i64: 0, 0>, end = array<i64: 4, 9223372036854775807>, strides = array<i64: 1, 1>, clamped = array<i64: 0>} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  %1 = nn.strided_slice %x {begin = array<i64: 1, 0>, end = array<i64: 9223372036854775807, 9223372036854775807>, strides = array<i64: 2, 1>} : (tensor<?x2xf32>) -> tensor<?x2xf32>
  func.return %0 : tensor<?x2xf32>
}

// Refs of one target add up: a decoder's key positions, arange(past + seq).
// CHECK-LABEL: func.func @summed_refs
// CHECK-NEXT: %0 = nn.arange %past, %ids {start = 0.000000e+00 : f64, delta = 1.000000e+00 : f64, ref_axes = array<i64: 2, 1>, targets = array<i64: 0, 0>} : (tensor<1x2x?x4xf32>, tensor<?x?xi64>) -> tensor<?xi64>
// CHECK-NEXT: %1 = nn.arange %w, %w {start = 0.000000e+00 : f64, delta = 1.000000e+00 : f64, ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 0>} : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<8xi64>
func.func @summed_refs(%past: tensor<1x2x?x4xf32>, %ids: tensor<?x?xi64>, %w: tensor<3x5xf32>) -> tensor<?xi64> {
  %0 = nn.arange %past, %ids {start = 0.0 : f64, delta = 1.0 : f64, ref_axes = array<i64: 2, 1>, targets = array<i64: 0, 0>} : (tensor<1x2x?x4xf32>, tensor<?x?xi64>) -> tensor<?xi64>
  %1 = nn.arange %w, %w {start = 0.0 : f64, delta = 1.0 : f64, ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 0>} : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<8xi64>
  func.return %0 : tensor<?xi64>
}

// CHECK-LABEL: func.func @others
// CHECK-NEXT: %0 = nn.tile %x {repeats = array<i64: 2, 3>} : (tensor<3x4xui8>) -> tensor<6x12xui8>
// CHECK-NEXT: %1 = nn.trilu %x {k = -1 : i64, upper = 0 : i64} : (tensor<3x4xui8>) -> tensor<3x4xui8>
// CHECK-NEXT: %2 = nn.one_hot %i {depth = 5 : i64, axis = 0 : i64, on_value = 2.000000e+00 : f64} : (tensor<3xi64>) -> tensor<5x3xf32>
// CHECK-NEXT: %3 = nn.pad %x {pad_before = array<i64: 1, 2>, pad_after = array<i64: 0, 3>, mode = "reflect"} : (tensor<3x4xui8>) -> tensor<4x9xui8>
// CHECK-NEXT: func.return %0 : tensor<6x12xui8>
func.func @others(%x: tensor<3x4xui8>, %i: tensor<3xi64>) -> tensor<6x12xui8> {
  %0 = nn.tile %x {repeats = array<i64: 2, 3>} : (tensor<3x4xui8>) -> tensor<6x12xui8>
  %1 = nn.trilu %x {k = -1 : i64, upper = 0 : i64} : (tensor<3x4xui8>) -> tensor<3x4xui8>
  %2 = nn.one_hot %i {depth = 5 : i64, axis = 0 : i64, on_value = 2.0 : f64, off_value = 0.0 : f64} : (tensor<3xi64>) -> tensor<5x3xf32>
  %3 = nn.pad %x {pad_before = array<i64: 1, 2>, pad_after = array<i64: 0, 3>, mode = "reflect"} : (tensor<3x4xui8>) -> tensor<4x9xui8>
  func.return %0 : tensor<6x12xui8>
}

// CHECK-LABEL: func.func @reverse_sequence
func.func @reverse_sequence(%x: tensor<5x?x4xf16>, %l: tensor<?xi64>, %y: tensor<3x6xi8>, %m: tensor<3xi32>) -> (tensor<5x?x4xf16>, tensor<3x6xi8>) {
  // CHECK-NEXT: %0 = nn.reverse_sequence %x, %l : (tensor<5x?x4xf16>, tensor<?xi64>) -> tensor<5x?x4xf16>
  %0 = nn.reverse_sequence %x, %l : (tensor<5x?x4xf16>, tensor<?xi64>) -> tensor<5x?x4xf16>
  // CHECK-NEXT: %1 = nn.reverse_sequence %y, %m {batch_axis = 0 : i64, time_axis = 1 : i64} : (tensor<3x6xi8>, tensor<3xi32>) -> tensor<3x6xi8>
  %1 = nn.reverse_sequence %y, %m {batch_axis = 0 : i64, time_axis = 1 : i64} : (tensor<3x6xi8>, tensor<3xi32>) -> tensor<3x6xi8>
  func.return %0, %1 : tensor<5x?x4xf16>, tensor<3x6xi8>
}

// CHECK-LABEL: func.func @tensor_scatter
func.func @tensor_scatter(%c: tensor<2x4x?x8xf16>, %u: tensor<2x4x1x8xf16>, %w: tensor<2xi64>) -> (tensor<2x4x?x8xf16>, tensor<2x4x?x8xf16>) {
  // CHECK-NEXT: %0 = nn.tensor_scatter %c, %u, %w : (tensor<2x4x?x8xf16>, tensor<2x4x1x8xf16>, tensor<2xi64>) -> tensor<2x4x?x8xf16>
  %0 = nn.tensor_scatter %c, %u, %w : (tensor<2x4x?x8xf16>, tensor<2x4x1x8xf16>, tensor<2xi64>) -> tensor<2x4x?x8xf16>
  // CHECK-NEXT: %1 = nn.tensor_scatter %c, %u, %w {circular = true} : (tensor<2x4x?x8xf16>, tensor<2x4x1x8xf16>, tensor<2xi64>) -> tensor<2x4x?x8xf16>
  %1 = nn.tensor_scatter %c, %u, %w {circular = true} : (tensor<2x4x?x8xf16>, tensor<2x4x1x8xf16>, tensor<2xi64>) -> tensor<2x4x?x8xf16>
  func.return %0, %1 : tensor<2x4x?x8xf16>, tensor<2x4x?x8xf16>
}
