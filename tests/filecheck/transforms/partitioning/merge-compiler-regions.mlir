// RUN: partita-opt %s -p 'merge-compiler-regions' --split-input-file | filecheck %s --check-prefix=KEEP
// RUN: partita-opt %s -p 'merge-compiler-regions{merge=true}' --split-input-file | filecheck %s --check-prefix=MERGE

// By default each annotated composite stays a partition of its own.
// KEEP-LABEL: func.func @chain
// KEEP-NEXT:    byoc.partition(%x, %w) {byoc.composite = "cutlass.dense", byoc.compiler = "cutlass"}
// KEEP:         byoc.partition(%0, %w) {byoc.composite = "cutlass.dense", byoc.compiler = "cutlass"}
// KEEP:         nn.relu
// KEEP:         byoc.partition(%3, %w) {byoc.composite = "cutlass.dense", byoc.compiler = "cutlass"}

// With merge=true, the first two composites merge into one region (the composites nest
// inside it, without their own compiler); the third cannot join: the path through
// relu/add would leave the region and come back (a cycle).
// MERGE-LABEL: func.func @chain
// MERGE-NEXT:    %0, %1 = byoc.partition(%x, %w) {byoc.compiler = "cutlass"} ({
// MERGE-NEXT:    ^bb0(%x_1: tensor<2x4xf32>, %w_1: tensor<4x4xf32>):
// MERGE-NEXT:      %2 = byoc.partition(%x_1, %w_1) {byoc.composite = "cutlass.dense"} ({
// MERGE:           %3 = byoc.partition(%2, %w_1) {byoc.composite = "cutlass.dense"} ({
// MERGE:           byoc.yield %2, %3 : tensor<2x4xf32>, tensor<2x4xf32>
// MERGE-NEXT:    }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
// MERGE-NEXT:    nn.relu %0
// MERGE-NEXT:    nn.add %1
// MERGE-NEXT:    byoc.partition(%3, %w) {byoc.composite = "cutlass.dense", byoc.compiler = "cutlass"}
func.func @chain(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
  %0 = byoc.partition(%x, %w) {byoc.composite = "cutlass.dense", byoc.compiler = "cutlass"} ({
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<4x4xf32>):
    %r = nn.dense %a, %b : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = byoc.partition(%0, %w) {byoc.composite = "cutlass.dense", byoc.compiler = "cutlass"} ({
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<4x4xf32>):
    %r = nn.dense %a, %b : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %2 = nn.relu %0 : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %3 = nn.add %1, %2 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %4 = byoc.partition(%3, %w) {byoc.composite = "cutlass.dense", byoc.compiler = "cutlass"} ({
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<4x4xf32>):
    %r = nn.dense %a, %b : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  func.return %4 : tensor<2x4xf32>
}

// -----

// Regions of different compilers never merge.
// MERGE-LABEL: func.func @two_compilers
// MERGE-NEXT:    byoc.partition(%x, %w) {byoc.composite = "cutlass.dense", byoc.compiler = "cutlass"}
// MERGE:         byoc.partition(%0, %w) {byoc.composite = "cublas.dense", byoc.compiler = "cublas"}
func.func @two_compilers(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
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
  func.return %1 : tensor<2x4xf32>
}
