// RUN: partita-opt %s -p 'partition-graph' --split-input-file | filecheck %s

// Annotated composites become partitions keeping their composite name; symbols count
// per compiler after those already used in the module; an unclaimed composite is
// inlined back; a finished partition is untouched.
// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %0 = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_4", byoc.primitive, byoc.inline, byoc.composite = "cutlass.dense"} ({
// CHECK:         [[B:%.*]] = byoc.partition(%0, %w) {byoc.compiler = "cublas", byoc.global_symbol = "tvmgen_default_cublas_main_0", byoc.primitive, byoc.inline, byoc.composite = "cublas.dense"} ({
// CHECK:         }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
// CHECK-NEXT:    [[S:%.*]] = nn.softmax [[B]]
// CHECK-NEXT:    [[P:%.*]] = byoc.partition([[S]], %w) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_3"} ({
// CHECK:         byoc.partition([[P]], %w) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_5", byoc.primitive, byoc.inline} ({
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      byoc.partition({{.*}}) {byoc.composite = "cutlass.dense"} ({
func.func @main(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
  %0 = byoc.partition(%x, %w) {byoc.composite = "cutlass.dense", byoc.compiler = "cutlass"} ({
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<4x4xf32>):
    %r = nn.dense %a, %b : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = byoc.partition(%0, %w) {byoc.composite = "cublas.dense", byoc.compiler = "cublas"} ({
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<4x4xf32>):
    %r = nn.dense %a, %b : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %2 = byoc.partition(%1) {byoc.composite = "cudnn.softmax"} ({
  ^bb0(%a: tensor<2x4xf32>):
    %r = nn.softmax %a : (tensor<2x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %3 = byoc.partition(%2, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_3"} ({
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<4x4xf32>):
    %r = nn.dense %a, %b : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %4 = byoc.partition(%3, %w) {byoc.compiler = "cutlass"} ({
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<4x4xf32>):
    %r = byoc.partition(%a, %b) {byoc.composite = "cutlass.dense", byoc.compiler = "cutlass"} ({
    ^bb0(%c: tensor<2x4xf32>, %d: tensor<4x4xf32>):
      %s = nn.dense %c, %d : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
      byoc.yield %s : tensor<2x4xf32>
    }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  func.return %4 : tensor<2x4xf32>
}
