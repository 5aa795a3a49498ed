// RUN: partita-opt %s --split-input-file -p merge-rotary-embeddings | filecheck %s

// LLaMA after combine-parallel-dense: Q (4 heads) and K (2 heads) are adjacent slices of
// one projection, each rotated with the same tables. One rotation of 6 heads, Q and K its
// head slices.

// CHECK-LABEL: func.func @qk
// CHECK-NEXT:    %0 = nn.strided_slice %y {begin = array<i64: 0, 0, 0>, end = array<i64: 9223372036854775807, 9223372036854775807, 48>, strides = array<i64: 1, 1, 1>} : (tensor<?x?x64xf16>) -> tensor<?x?x48xf16>
// CHECK-NEXT:    %1 = nn.reshape %0, %ids, %ids {ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 1>} : (tensor<?x?x48xf16>, tensor<?x?xi64>, tensor<?x?xi64>) -> tensor<?x?x6x8xf16>
// CHECK-NEXT:    %2 = nn.rotary_embedding %1, %c, %s {layout = "BSHD"} : (tensor<?x?x6x8xf16>, tensor<1x?x4xf16>, tensor<1x?x4xf16>) -> tensor<?x?x6x8xf16>
// CHECK-NEXT:    %3 = nn.strided_slice %2 {begin = array<i64: 0, 0, 0, 0>, end = array<i64: 9223372036854775807, 9223372036854775807, 4, 9223372036854775807>, strides = array<i64: 1, 1, 1, 1>} : (tensor<?x?x6x8xf16>) -> tensor<?x?x4x8xf16>
// CHECK-NEXT:    %4 = nn.strided_slice %2 {begin = array<i64: 0, 0, 4, 0>, end = array<i64: 9223372036854775807, 9223372036854775807, 6, 9223372036854775807>, strides = array<i64: 1, 1, 1, 1>} : (tensor<?x?x6x8xf16>) -> tensor<?x?x2x8xf16>
// CHECK-NEXT:    func.return %3, %4
func.func @qk(%y: tensor<?x?x64xf16>, %ids: tensor<?x?xi64>, %c: tensor<1x?x4xf16>, %s: tensor<1x?x4xf16>) -> (tensor<?x?x4x8xf16>, tensor<?x?x2x8xf16>) {
  %0 = nn.strided_slice %y {begin = array<i64: 0, 0, 0>, end = array<i64: 9223372036854775807, 9223372036854775807, 32>, strides = array<i64: 1, 1, 1>} : (tensor<?x?x64xf16>) -> tensor<?x?x32xf16>
  %1 = nn.reshape %0, %ids, %ids {ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 1>} : (tensor<?x?x32xf16>, tensor<?x?xi64>, tensor<?x?xi64>) -> tensor<?x?x4x8xf16>
  %2 = nn.rotary_embedding %1, %c, %s {layout = "BSHD"} : (tensor<?x?x4x8xf16>, tensor<1x?x4xf16>, tensor<1x?x4xf16>) -> tensor<?x?x4x8xf16>
  %3 = nn.strided_slice %y {begin = array<i64: 0, 0, 32>, end = array<i64: 9223372036854775807, 9223372036854775807, 48>, strides = array<i64: 1, 1, 1>} : (tensor<?x?x64xf16>) -> tensor<?x?x16xf16>
  %4 = nn.reshape %3, %ids, %ids {ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 1>} : (tensor<?x?x16xf16>, tensor<?x?xi64>, tensor<?x?xi64>) -> tensor<?x?x2x8xf16>
  %5 = nn.rotary_embedding %4, %c, %s {layout = "BSHD"} : (tensor<?x?x2x8xf16>, tensor<1x?x4xf16>, tensor<1x?x4xf16>) -> tensor<?x?x2x8xf16>
  func.return %2, %5 : tensor<?x?x4x8xf16>, tensor<?x?x2x8xf16>
}

// -----

// What stays: other tables, a gap between the slices, a head split read elsewhere too.

// CHECK-LABEL: func.func @other_tables
// CHECK-COUNT-2: nn.rotary_embedding
// CHECK-NOT:     nn.rotary_embedding
func.func @other_tables(%y: tensor<2x5x64xf32>, %c: tensor<1x5x4xf32>, %s: tensor<1x5x4xf32>, %c2: tensor<1x5x4xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>) {
  %0 = nn.strided_slice %y {begin = array<i64: 0, 0, 0>, end = array<i64: 2, 5, 16>, strides = array<i64: 1, 1, 1>} : (tensor<2x5x64xf32>) -> tensor<2x5x16xf32>
  %1 = nn.reshape %0 : (tensor<2x5x16xf32>) -> tensor<2x5x2x8xf32>
  %2 = nn.rotary_embedding %1, %c, %s {layout = "BSHD"} : (tensor<2x5x2x8xf32>, tensor<1x5x4xf32>, tensor<1x5x4xf32>) -> tensor<2x5x2x8xf32>
  %3 = nn.strided_slice %y {begin = array<i64: 0, 0, 16>, end = array<i64: 2, 5, 32>, strides = array<i64: 1, 1, 1>} : (tensor<2x5x64xf32>) -> tensor<2x5x16xf32>
  %4 = nn.reshape %3 : (tensor<2x5x16xf32>) -> tensor<2x5x2x8xf32>
  %5 = nn.rotary_embedding %4, %c2, %s {layout = "BSHD"} : (tensor<2x5x2x8xf32>, tensor<1x5x4xf32>, tensor<1x5x4xf32>) -> tensor<2x5x2x8xf32>
  func.return %2, %5 : tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>
}

// -----

// CHECK-LABEL: func.func @gap
// CHECK-COUNT-2: nn.rotary_embedding
// CHECK-NOT:     nn.rotary_embedding
func.func @gap(%y: tensor<2x5x64xf32>, %c: tensor<1x5x4xf32>, %s: tensor<1x5x4xf32>, %c2: tensor<1x5x4xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>) {
  %0 = nn.strided_slice %y {begin = array<i64: 0, 0, 0>, end = array<i64: 2, 5, 16>, strides = array<i64: 1, 1, 1>} : (tensor<2x5x64xf32>) -> tensor<2x5x16xf32>
  %1 = nn.reshape %0 : (tensor<2x5x16xf32>) -> tensor<2x5x2x8xf32>
  %2 = nn.rotary_embedding %1, %c, %s {layout = "BSHD"} : (tensor<2x5x2x8xf32>, tensor<1x5x4xf32>, tensor<1x5x4xf32>) -> tensor<2x5x2x8xf32>
  %3 = nn.strided_slice %y {begin = array<i64: 0, 0, 24>, end = array<i64: 2, 5, 40>, strides = array<i64: 1, 1, 1>} : (tensor<2x5x64xf32>) -> tensor<2x5x16xf32>
  %4 = nn.reshape %3 : (tensor<2x5x16xf32>) -> tensor<2x5x2x8xf32>
  %5 = nn.rotary_embedding %4, %c, %s {layout = "BSHD"} : (tensor<2x5x2x8xf32>, tensor<1x5x4xf32>, tensor<1x5x4xf32>) -> tensor<2x5x2x8xf32>
  func.return %2, %5 : tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>
}

// -----

// CHECK-LABEL: func.func @read_elsewhere
// CHECK-COUNT-2: nn.rotary_embedding
// CHECK-NOT:     nn.rotary_embedding
func.func @read_elsewhere(%y: tensor<2x5x64xf32>, %c: tensor<1x5x4xf32>, %s: tensor<1x5x4xf32>, %c2: tensor<1x5x4xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>) {
  %0 = nn.strided_slice %y {begin = array<i64: 0, 0, 0>, end = array<i64: 2, 5, 16>, strides = array<i64: 1, 1, 1>} : (tensor<2x5x64xf32>) -> tensor<2x5x16xf32>
  %1 = nn.reshape %0 : (tensor<2x5x16xf32>) -> tensor<2x5x2x8xf32>
  %2 = nn.rotary_embedding %1, %c, %s {layout = "BSHD"} : (tensor<2x5x2x8xf32>, tensor<1x5x4xf32>, tensor<1x5x4xf32>) -> tensor<2x5x2x8xf32>
  %3 = nn.strided_slice %y {begin = array<i64: 0, 0, 16>, end = array<i64: 2, 5, 32>, strides = array<i64: 1, 1, 1>} : (tensor<2x5x64xf32>) -> tensor<2x5x16xf32>
  %4 = nn.reshape %3 : (tensor<2x5x16xf32>) -> tensor<2x5x2x8xf32>
  %5 = nn.rotary_embedding %4, %c, %s {layout = "BSHD"} : (tensor<2x5x2x8xf32>, tensor<1x5x4xf32>, tensor<1x5x4xf32>) -> tensor<2x5x2x8xf32>
  func.return %2, %5, %4 : tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>
}
