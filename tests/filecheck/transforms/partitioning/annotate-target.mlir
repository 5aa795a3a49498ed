// RUN: partita-opt %s -p 'annotate-target{backends=cutlass,cudnn}' --split-input-file | filecheck %s

// Composites are claimed by the backend their name starts with, if it is selected.
// CHECK-LABEL: func.func @composites
// CHECK:         byoc.partition(%x, %w) {byoc.composite = "cutlass.dense", byoc.compiler = "cutlass"}
// CHECK:         byoc.partition(%0, %w) {byoc.composite = "cublas.dense"} (
// CHECK:         byoc.partition(%1) {byoc.composite = "cudnn.softmax", byoc.compiler = "cudnn"}
// Plain ops (no backend lists them as single ops) and finished partitions are left alone.
// CHECK:         nn.relu %2 :
// CHECK:         byoc.partition(%3, %w) {byoc.compiler = "cublas", byoc.global_symbol = "done"} (
func.func @composites(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
  %0 = byoc.partition(%x, %w) {byoc.composite = "cutlass.dense"} ({
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<4x4xf32>):
    %r = nn.dense %a, %b : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = byoc.partition(%0, %w) {byoc.composite = "cublas.dense"} ({
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<4x4xf32>):
    %r = nn.dense %a, %b : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %2 = byoc.partition(%1) {byoc.composite = "cudnn.softmax"} ({
  ^bb0(%a: tensor<2x4xf32>):
    %r = nn.softmax %a : (tensor<2x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %3 = nn.relu %2 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %4 = byoc.partition(%3, %w) {byoc.compiler = "cublas", byoc.global_symbol = "done"} ({
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<4x4xf32>):
    %r = nn.dense %a, %b : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  func.return %4 : tensor<2x4xf32>
}
