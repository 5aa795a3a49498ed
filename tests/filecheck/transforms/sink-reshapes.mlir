// RUN: partita-opt %s --split-input-file -p sink-reshapes | filecheck %s

// GPT-2's MLP: the exporter reshapes c_fc's [B * S, N] result to [B, S, N] before the
// GELU. The GELU moves before the reshape, right after the bias, where a GEMM epilogue
// takes it; the shape reference of the reshape goes with it.

// CHECK-LABEL: func.func @gpt2_mlp
// CHECK-NEXT:    %0 = nn.dense %x, %w
// CHECK-NEXT:    %1 = nn.add %0, %b
// CHECK-NEXT:    %2 = nn.gelu %1 {approximate = "tanh"} : (tensor<?x128xf32>) -> tensor<?x128xf32>
// CHECK-NEXT:    %3 = nn.reshape %2, %ids, %ids {ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 1>} : (tensor<?x128xf32>, tensor<?x?xi64>, tensor<?x?xi64>) -> tensor<?x?x128xf32>
// CHECK-NEXT:    func.return %3
func.func @gpt2_mlp(%x: tensor<?x32xf32>, %w: tensor<128x32xf32>, %b: tensor<128xf32>, %ids: tensor<?x?xi64>) -> tensor<?x?x128xf32> {
  %0 = nn.dense %x, %w : (tensor<?x32xf32>, tensor<128x32xf32>) -> tensor<?x128xf32>
  %1 = nn.add %0, %b : (tensor<?x128xf32>, tensor<128xf32>) -> tensor<?x128xf32>
  %2 = nn.reshape %1, %ids, %ids {ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 1>} : (tensor<?x128xf32>, tensor<?x?xi64>, tensor<?x?xi64>) -> tensor<?x?x128xf32>
  %3 = nn.gelu %2 {approximate = "tanh"} : (tensor<?x?x128xf32>) -> tensor<?x?x128xf32>
  func.return %3 : tensor<?x?x128xf32>
}

// -----

// A chain of activations moves as a whole (to a fixed point).

// CHECK-LABEL: func.func @chain
// CHECK-NEXT:    %0 = nn.relu %x : (tensor<6x4xf16>) -> tensor<6x4xf16>
// CHECK-NEXT:    %1 = nn.tanh %0 : (tensor<6x4xf16>) -> tensor<6x4xf16>
// CHECK-NEXT:    %2 = nn.reshape %1 : (tensor<6x4xf16>) -> tensor<2x3x4xf16>
// CHECK-NEXT:    func.return %2
func.func @chain(%x: tensor<6x4xf16>) -> tensor<2x3x4xf16> {
  %0 = nn.reshape %x : (tensor<6x4xf16>) -> tensor<2x3x4xf16>
  %1 = nn.relu %0 : (tensor<2x3x4xf16>) -> tensor<2x3x4xf16>
  %2 = nn.tanh %1 : (tensor<2x3x4xf16>) -> tensor<2x3x4xf16>
  func.return %2 : tensor<2x3x4xf16>
}

// -----

// What stays: a reshape read twice (the activation would run twice), a cast (the
// attention and RMSNorm matchers read casts where the exporter put them), a binary op.

// CHECK-LABEL: func.func @stays
// CHECK-NEXT:    %0 = nn.reshape %x
// CHECK-NEXT:    %1 = nn.relu %0
// CHECK-NEXT:    %2 = nn.reshape %x
// CHECK-NEXT:    %3 = nn.cast %2
// CHECK-NEXT:    %4 = nn.reshape %x
// CHECK-NEXT:    %5 = nn.add %4, %4
// CHECK-NEXT:    func.return %0, %1, %3, %5
func.func @stays(%x: tensor<6x4xf16>) -> (tensor<2x3x4xf16>, tensor<2x3x4xf16>, tensor<2x3x4xf32>, tensor<2x3x4xf16>) {
  %0 = nn.reshape %x : (tensor<6x4xf16>) -> tensor<2x3x4xf16>
  %1 = nn.relu %0 : (tensor<2x3x4xf16>) -> tensor<2x3x4xf16>
  %2 = nn.reshape %x : (tensor<6x4xf16>) -> tensor<2x3x4xf16>
  %3 = nn.cast %2 {dtype = f32} : (tensor<2x3x4xf16>) -> tensor<2x3x4xf32>
  %4 = nn.reshape %x : (tensor<6x4xf16>) -> tensor<2x3x4xf16>
  %5 = nn.add %4, %4 : (tensor<2x3x4xf16>, tensor<2x3x4xf16>) -> tensor<2x3x4xf16>
  func.return %0, %1, %3, %5 : tensor<2x3x4xf16>, tensor<2x3x4xf16>, tensor<2x3x4xf32>, tensor<2x3x4xf16>
}

// -----

// GPT-2's projections back into the residual stream: `h + reshape(c_proj(x) + b)`, the add
// in either order. It moves before the reshape, reading `h` reshaped the GEMM's way (the
// one run-time dim inferred), so dense, bias and residual are adjacent for CUTLASS's
// broadcast epilogue; the reshape back to [B, S, N] keeps its shape references.

// CHECK-LABEL: func.func @gpt2_residual
// CHECK-NEXT:    %0 = nn.dense %x, %w
// CHECK-NEXT:    %1 = nn.add %0, %b
// CHECK-NEXT:    %2 = nn.reshape %h : (tensor<?x?x32xf32>) -> tensor<?x32xf32>
// CHECK-NEXT:    %3 = nn.add %2, %1 : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32>
// CHECK-NEXT:    %4 = nn.reshape %3, %ids, %ids {ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 1>} : (tensor<?x32xf32>, tensor<?x?xi64>, tensor<?x?xi64>) -> tensor<?x?x32xf32>
// CHECK-NEXT:    %5 = nn.dense %x, %w
// CHECK-NEXT:    %6 = nn.reshape %h : (tensor<?x?x32xf32>) -> tensor<?x32xf32>
// CHECK-NEXT:    %7 = nn.add %5, %6 : (tensor<?x32xf32>, tensor<?x32xf32>) -> tensor<?x32xf32>
// CHECK-NEXT:    %8 = nn.reshape %7, %ids, %ids
// CHECK-NEXT:    func.return %4, %8
func.func @gpt2_residual(%x: tensor<?x32xf32>, %w: tensor<32x32xf32>, %b: tensor<32xf32>, %h: tensor<?x?x32xf32>, %ids: tensor<?x?xi64>) -> (tensor<?x?x32xf32>, tensor<?x?x32xf32>) {
  %0 = nn.dense %x, %w : (tensor<?x32xf32>, tensor<32x32xf32>) -> tensor<?x32xf32>
  %1 = nn.add %0, %b : (tensor<?x32xf32>, tensor<32xf32>) -> tensor<?x32xf32>
  %2 = nn.reshape %1, %ids, %ids {ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 1>} : (tensor<?x32xf32>, tensor<?x?xi64>, tensor<?x?xi64>) -> tensor<?x?x32xf32>
  %3 = nn.add %h, %2 : (tensor<?x?x32xf32>, tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
  %4 = nn.dense %x, %w : (tensor<?x32xf32>, tensor<32x32xf32>) -> tensor<?x32xf32>
  %5 = nn.reshape %4, %ids, %ids {ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 1>} : (tensor<?x32xf32>, tensor<?x?xi64>, tensor<?x?xi64>) -> tensor<?x?x32xf32>
  %6 = nn.add %5, %h : (tensor<?x?x32xf32>, tensor<?x?x32xf32>) -> tensor<?x?x32xf32>
  func.return %3, %6 : tensor<?x?x32xf32>, tensor<?x?x32xf32>
}

// -----

// What stays: an add that broadcasts (a bias row after the reshape), an add of a reshape
// that is no GEMM's result, and a GEMM result whose reshape is read twice.

// CHECK-LABEL: func.func @residual_stays
// CHECK-NEXT:    %0 = nn.dense %x, %w
// CHECK-NEXT:    %1 = nn.reshape %0
// CHECK-NEXT:    %2 = nn.add %1, %b
// CHECK-NEXT:    %3 = nn.reshape %x
// CHECK-NEXT:    %4 = nn.add %3, %h
// CHECK-NEXT:    %5 = nn.reshape %0
// CHECK-NEXT:    %6 = nn.add %5, %h
// CHECK-NEXT:    func.return %2, %4, %6, %5
func.func @residual_stays(%x: tensor<6x4xf16>, %w: tensor<4x4xf16>, %b: tensor<4xf16>, %h: tensor<2x3x4xf16>) -> (tensor<2x3x4xf16>, tensor<2x3x4xf16>, tensor<2x3x4xf16>, tensor<2x3x4xf16>) {
  %0 = nn.dense %x, %w : (tensor<6x4xf16>, tensor<4x4xf16>) -> tensor<6x4xf16>
  %1 = nn.reshape %0 : (tensor<6x4xf16>) -> tensor<2x3x4xf16>
  %2 = nn.add %1, %b : (tensor<2x3x4xf16>, tensor<4xf16>) -> tensor<2x3x4xf16>
  %3 = nn.reshape %x : (tensor<6x4xf16>) -> tensor<2x3x4xf16>
  %4 = nn.add %3, %h : (tensor<2x3x4xf16>, tensor<2x3x4xf16>) -> tensor<2x3x4xf16>
  %5 = nn.reshape %0 : (tensor<6x4xf16>) -> tensor<2x3x4xf16>
  %6 = nn.add %5, %h : (tensor<2x3x4xf16>, tensor<2x3x4xf16>) -> tensor<2x3x4xf16>
  func.return %2, %4, %6, %5 : tensor<2x3x4xf16>, tensor<2x3x4xf16>, tensor<2x3x4xf16>, tensor<2x3x4xf16>
}
