// RUN: partita-opt %s -p 'inline-compiler-functions{symbols=tvmgen_default_cutlass_main_0 dissolve=true}' | filecheck %s
// RUN: partita-opt %s -p 'outline-compiler-functions,inline-compiler-functions{symbols=tvmgen_default_cutlass_main_0 dissolve=true}' | filecheck %s
// RUN: partita-opt %s -p 'outline-compiler-functions,inline-compiler-functions{symbols=tvmgen_default_cutlass_main_0}' | filecheck %s --check-prefix=KEEP
// RUN: not partita-opt %s -p 'inline-compiler-functions{symbols="tvmgen_default_cutlass_main_0,nope" dissolve=true}' 2>&1 | filecheck %s --check-prefix=MISSING

// Dissolving the partition bound to a global symbol undoes partitioning: its ops, and those
// of the composites inside it, go back into the caller, whether the partition is still an
// inline region or was outlined; the other partition is left alone. Without dissolve, the
// named partition function is inlined back as a region, the other stays outlined.

// CHECK-NOT:   func.func private @tvmgen_default_cutlass_main_0
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    %[[D:.*]] = nn.dense %x, %w
// CHECK-NEXT:    %[[B:.*]] = nn.bias_add %[[D]], %b
// CHECK-NEXT:    %[[R:.*]] = nn.relu %[[B]]
// CHECK-NEXT:    %[[D2:.*]] = nn.dense %[[R]], %w2
// CHECK-NEXT:    %[[P:.*]] = {{(func.call @tvmgen_default_cublas_main_0|byoc.partition)}}(%[[D2]])
// CHECK:         func.return %[[P]]
// CHECK-NOT:   byoc.composite

// KEEP-LABEL: func.func private @tvmgen_default_cublas_main_0(
// KEEP-NOT:   func.func private @tvmgen_default_cutlass_main_0
// KEEP-LABEL: func.func @main(
// KEEP-NEXT:    byoc.partition(%x, %w, %b, %w2) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0"
// KEEP:         byoc.composite = "cutlass.dense_bias_relu"
// KEEP:         func.call @tvmgen_default_cublas_main_0(

// MISSING: error: inline-compiler-functions: no partition function or partition is bound to 'nope'
func.func @main(%x: tensor<16x32xf32>, %w: tensor<64x32xf32>, %b: tensor<64xf32>, %w2: tensor<64x64xf32>) -> tensor<16x64xf32> {
  %0 = byoc.partition(%x, %w, %b, %w2) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} ({
  ^bb0(%x_1: tensor<16x32xf32>, %w_1: tensor<64x32xf32>, %b_1: tensor<64xf32>, %w2_1: tensor<64x64xf32>):
    %1 = byoc.partition(%x_1, %w_1, %b_1) {byoc.composite = "cutlass.dense_bias_relu"} ({
    ^bb0(%x_2: tensor<16x32xf32>, %w_2: tensor<64x32xf32>, %b_2: tensor<64xf32>):
      %2 = nn.dense %x_2, %w_2 : (tensor<16x32xf32>, tensor<64x32xf32>) -> tensor<16x64xf32>
      %3 = nn.bias_add %2, %b_2 {axis = 1 : i64} : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
      %4 = nn.relu %3 : (tensor<16x64xf32>) -> tensor<16x64xf32>
      byoc.yield %4 : tensor<16x64xf32>
    }) : (tensor<16x32xf32>, tensor<64x32xf32>, tensor<64xf32>) -> tensor<16x64xf32>
    %2 = byoc.partition(%1, %w2_1) {byoc.composite = "cutlass.dense"} ({
    ^bb0(%3: tensor<16x64xf32>, %w2_2: tensor<64x64xf32>):
      %4 = nn.dense %3, %w2_2 : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
      byoc.yield %4 : tensor<16x64xf32>
    }) : (tensor<16x64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
    byoc.yield %2 : tensor<16x64xf32>
  }) : (tensor<16x32xf32>, tensor<64x32xf32>, tensor<64xf32>, tensor<64x64xf32>) -> tensor<16x64xf32>
  %5 = byoc.partition(%0) {byoc.compiler = "cublas", byoc.global_symbol = "tvmgen_default_cublas_main_0"} ({
  ^bb0(%a: tensor<16x64xf32>):
    %6 = nn.relu %a : (tensor<16x64xf32>) -> tensor<16x64xf32>
    byoc.yield %6 : tensor<16x64xf32>
  }) : (tensor<16x64xf32>) -> tensor<16x64xf32>
  func.return %5 : tensor<16x64xf32>
}
