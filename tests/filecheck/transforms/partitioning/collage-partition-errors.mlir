// RUN: partita-opt %s -p 'collage-partition{targets=cutlass native=none}' --split-input-file --verify-diagnostics
// RUN: not partita-opt %s -p 'collage-partition{targets=cutlass cost=magic}' --split-input-file 2>&1 | filecheck %s --check-prefix=COST
// RUN: not partita-opt %s -p 'collage-partition{targets="tensorrt,llvm" cost=mock costs="llvm=1"}' --split-input-file 2>&1 | filecheck %s --check-prefix=MOCK

// COST: error: collage-partition: unknown cost model 'magic'; expected roofline, measure or mock
// MOCK: error: collage-partition: cannot cost tensorrt.dense on 'tensorrt': MockEstimator has no cost for

// Only cutlass and no native target (native=none): a softmax cannot be placed.
func.func @main(%x: tensor<16x8xf16>, %w: tensor<4x8xf16>) -> tensor<16x4xf16> {
  %0 = nn.dense %x, %w : (tensor<16x8xf16>, tensor<4x8xf16>) -> tensor<16x4xf16>
  // expected-error@+1 {{'nn.softmax' op cannot be placed by collage-partition: no candidate covers it}}
  %1 = nn.softmax %0 {axis = -1 : i64} : (tensor<16x4xf16>) -> tensor<16x4xf16>
  func.return %1 : tensor<16x4xf16>
}
