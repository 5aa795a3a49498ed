// RUN: partita-opt %s --split-input-file -p simplify-transposes | filecheck %s

// A decode step's head split of its one token ([B, 1, H, D] -> [B, H, 1, D]) and the head
// merge back move only the unit sequence dim: reshapes (views), no data moved. One
// dynamic dim is inferred from the element count; two are sized by shape references to
// the transpose's input.

// CHECK-LABEL: func.func @decode_head_split
// CHECK-NEXT:    %0 = nn.reshape %x : (tensor<?x1x4x16xf16>) -> tensor<?x4x1x16xf16>
// CHECK-NEXT:    %1 = nn.reshape %0 : (tensor<?x4x1x16xf16>) -> tensor<?x1x4x16xf16>
// CHECK-NEXT:    %2 = nn.reshape %y, %y, %y {ref_axes = array<i64: 0, 2>, targets = array<i64: 0, 1>} : (tensor<?x1x?x16xf16>, tensor<?x1x?x16xf16>, tensor<?x1x?x16xf16>) -> tensor<?x?x1x16xf16>
// CHECK-NEXT:    func.return %0, %1, %2
func.func @decode_head_split(%x: tensor<?x1x4x16xf16>, %y: tensor<?x1x?x16xf16>) -> (tensor<?x4x1x16xf16>, tensor<?x1x4x16xf16>, tensor<?x?x1x16xf16>) {
  %0 = nn.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x1x4x16xf16>) -> tensor<?x4x1x16xf16>
  %1 = nn.transpose %0 {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x4x1x16xf16>) -> tensor<?x1x4x16xf16>
  %2 = nn.transpose %y {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x1x?x16xf16>) -> tensor<?x?x1x16xf16>
  func.return %0, %1, %2 : tensor<?x4x1x16xf16>, tensor<?x1x4x16xf16>, tensor<?x?x1x16xf16>
}

// -----

// A transpose of a transpose is one transpose of the composed permutation; the inner one
// goes when nothing else reads it. Composed to the identity, nothing is left.

// CHECK-LABEL: func.func @compose
// CHECK-NEXT:    %0 = nn.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x5xf32>) -> tensor<5x2x3xf32>
// CHECK-NEXT:    func.return %0, %x
func.func @compose(%x: tensor<2x3x5xf32>) -> (tensor<5x2x3xf32>, tensor<2x3x5xf32>) {
  %0 = nn.transpose %x {perm = array<i64: 1, 2, 0>} : (tensor<2x3x5xf32>) -> tensor<3x5x2xf32>
  %1 = nn.transpose %0 {perm = array<i64: 1, 2, 0>} : (tensor<3x5x2xf32>) -> tensor<5x2x3xf32>
  %2 = nn.transpose %x {perm = array<i64: 2, 0, 1>} : (tensor<2x3x5xf32>) -> tensor<5x2x3xf32>
  %3 = nn.transpose %2 {perm = array<i64: 1, 2, 0>} : (tensor<5x2x3xf32>) -> tensor<2x3x5xf32>
  func.return %1, %3 : tensor<5x2x3xf32>, tensor<2x3x5xf32>
}

// -----

// What stays: a transpose of two non-unit dims, one whose dynamic dim may not be 1, and
// the inner transpose of a pair when it is read elsewhere (the outer one still composes:
// here to the identity, its input).

// CHECK-LABEL: func.func @stays
// CHECK-NEXT:    %0 = nn.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
// CHECK-NEXT:    %1 = nn.transpose %y {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x?x4x16xf32>) -> tensor<1x4x?x16xf32>
// CHECK-NEXT:    func.return %0, %1, %x
func.func @stays(%x: tensor<1x8x4x16xf32>, %y: tensor<1x?x4x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x?x16xf32>, tensor<1x8x4x16xf32>) {
  %0 = nn.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x8x4x16xf32>) -> tensor<1x4x8x16xf32>
  %1 = nn.transpose %y {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x?x4x16xf32>) -> tensor<1x4x?x16xf32>
  %2 = nn.transpose %0 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x4x8x16xf32>) -> tensor<1x8x4x16xf32>
  func.return %0, %1, %2 : tensor<1x4x8x16xf32>, tensor<1x4x?x16xf32>, tensor<1x8x4x16xf32>
}
