// RUN: partita-opt %s -p outline-compiler-functions --split-input-file | filecheck %s
// RUN: partita-opt %s -p 'outline-compiler-functions{compiler=cublas}' --split-input-file | filecheck %s --check-prefix=CUBLAS
// RUN: partita-opt %s -p 'outline-compiler-functions{dedup=true}' --split-input-file | filecheck %s --check-prefix=DEDUP

// The seed example: the partition moves to a private function named by its global
// symbol, keeping every attribute (byoc.inline included), and main calls it.

// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_0(
// CHECK-SAME:      %{{.*}}: tensor<1600x768xf16>, %{{.*}}: tensor<2304x768xf16>, %{{.*}}: tensor<2304xf16>) -> tensor<1600x2304xf16>
// CHECK-SAME:      attributes {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} {
// CHECK-NEXT:    %[[D:.*]] = nn.dense %a, %c : (tensor<1600x768xf16>, tensor<2304x768xf16>) -> tensor<1600x2304xf16>
// CHECK-NEXT:    %[[A:.*]] = nn.add %[[D]], %d : (tensor<1600x2304xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
// CHECK-NEXT:    func.return %[[A]] : tensor<1600x2304xf16>
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    %[[R:.*]] = func.call @tvmgen_default_cutlass_main_0(%x, %w, %b) : (tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
// CHECK-NEXT:    func.return %[[R]] : tensor<1600x2304xf16>
func.func @main(%x: tensor<1600x768xf16>, %w: tensor<2304x768xf16>, %b: tensor<2304xf16>) -> tensor<1600x2304xf16> {
  %0 = byoc.partition(%x, %w, %b) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} ({
  ^bb0(%a: tensor<1600x768xf16>, %c: tensor<2304x768xf16>, %d: tensor<2304xf16>):
    %1 = nn.dense %a, %c : (tensor<1600x768xf16>, tensor<2304x768xf16>) -> tensor<1600x2304xf16>
    %2 = nn.add %1, %d : (tensor<1600x2304xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
    byoc.yield %2 : tensor<1600x2304xf16>
  }) : (tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
  func.return %0 : tensor<1600x2304xf16>
}

// -----

// Partitions of two compilers; two cutlass partitions are equal up to SSA names and
// global symbol. Without a compiler option all are outlined, in order of first use,
// before main; with compiler=cublas the cutlass ones stay inline; with dedup=true the
// equal ones share the first one's function.

// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_0(%{{.*}}: tensor<16x8xf32>, %{{.*}}: tensor<4x8xf32>) -> tensor<16x4xf32> attributes {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive}
// CHECK:         nn.dense
// CHECK-LABEL: func.func private @tvmgen_default_cublas_main_0(%{{.*}}: tensor<16x4xf32>) -> tensor<16x4xf32> attributes {byoc.compiler = "cublas", byoc.global_symbol = "tvmgen_default_cublas_main_0"}
// CHECK:         nn.relu
// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_1(%{{.*}}: tensor<16x8xf32>, %{{.*}}: tensor<4x8xf32>) -> tensor<16x4xf32> attributes {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_1", byoc.primitive}
// CHECK:         nn.dense
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    %[[P0:.*]] = func.call @tvmgen_default_cutlass_main_0(%x, %w)
// CHECK-NEXT:    %[[P1:.*]] = func.call @tvmgen_default_cublas_main_0(%[[P0]])
// CHECK-NEXT:    %[[P2:.*]] = func.call @tvmgen_default_cutlass_main_1(%y, %w)
// CHECK-NEXT:    %[[S:.*]] = nn.add %[[P1]], %[[P2]]
// CHECK-NEXT:    func.return %[[S]]

// CUBLAS-LABEL: func.func private @tvmgen_default_cublas_main_0(
// CUBLAS-NOT:    func.func private @tvmgen_default_cutlass
// CUBLAS-LABEL: func.func @main(
// CUBLAS-NEXT:    %[[P0:.*]] = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive}
// CUBLAS:         %[[P1:.*]] = func.call @tvmgen_default_cublas_main_0(%[[P0]])
// CUBLAS-NEXT:    byoc.partition(%y, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_1", byoc.primitive}

// DEDUP-LABEL: func.func private @tvmgen_default_cutlass_main_0(
// DEDUP-NOT:   @tvmgen_default_cutlass_main_1
// DEDUP-LABEL: func.func private @tvmgen_default_cublas_main_0(
// DEDUP-NOT:   @tvmgen_default_cutlass_main_1
// DEDUP-LABEL: func.func @main(
// DEDUP-NEXT:    func.call @tvmgen_default_cutlass_main_0(%x, %w)
// DEDUP-NEXT:    func.call @tvmgen_default_cublas_main_0(
// DEDUP-NEXT:    func.call @tvmgen_default_cutlass_main_0(%y, %w)
// DEDUP-NOT:   @tvmgen_default_cutlass_main_1
func.func @main(%x: tensor<16x8xf32>, %y: tensor<16x8xf32>, %w: tensor<4x8xf32>) -> tensor<16x4xf32> {
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive} ({
  ^bb0(%a: tensor<16x8xf32>, %b: tensor<4x8xf32>):
    %1 = nn.dense %a, %b : (tensor<16x8xf32>, tensor<4x8xf32>) -> tensor<16x4xf32>
    byoc.yield %1 : tensor<16x4xf32>
  }) : (tensor<16x8xf32>, tensor<4x8xf32>) -> tensor<16x4xf32>
  %2 = byoc.partition(%0) {byoc.compiler = "cublas", byoc.global_symbol = "tvmgen_default_cublas_main_0"} ({
  ^bb0(%a: tensor<16x4xf32>):
    %3 = nn.relu %a : (tensor<16x4xf32>) -> tensor<16x4xf32>
    byoc.yield %3 : tensor<16x4xf32>
  }) : (tensor<16x4xf32>) -> tensor<16x4xf32>
  %4 = byoc.partition(%y, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_1", byoc.primitive} ({
  ^bb0(%p: tensor<16x8xf32>, %q: tensor<4x8xf32>):
    %5 = nn.dense %p, %q : (tensor<16x8xf32>, tensor<4x8xf32>) -> tensor<16x4xf32>
    byoc.yield %5 : tensor<16x4xf32>
  }) : (tensor<16x8xf32>, tensor<4x8xf32>) -> tensor<16x4xf32>
  %6 = nn.add %2, %4 : (tensor<16x4xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
  func.return %6 : tensor<16x4xf32>
}

// -----

// Nested callers: the partition sits in a helper called from main; its function goes
// right before the helper.

// CHECK-LABEL: func.func private @tvmgen_default_cublas_main_3(
// CHECK-SAME:      attributes {byoc.compiler = "cublas", byoc.global_symbol = "tvmgen_default_cublas_main_3"}
// CHECK-LABEL: func.func private @helper(
// CHECK-NEXT:    func.call @tvmgen_default_cublas_main_3(%h)
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    func.call @helper(%x)
func.func private @helper(%h: tensor<8xf32>) -> tensor<8xf32> {
  %0 = byoc.partition(%h) {byoc.compiler = "cublas", byoc.global_symbol = "tvmgen_default_cublas_main_3"} ({
  ^bb0(%a: tensor<8xf32>):
    %1 = nn.tanh %a : (tensor<8xf32>) -> tensor<8xf32>
    byoc.yield %1 : tensor<8xf32>
  }) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = func.call @helper(%x) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

// An existing function with the same global symbol, attributes and an equal body is
// reused, not duplicated ("existing global symbols").

// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_0(%arg: tensor<8xf32>)
// CHECK-NOT:   func.func private @tvmgen_default_cutlass_main_0
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    %[[C0:.*]] = func.call @tvmgen_default_cutlass_main_0(%x)
// CHECK-NEXT:    %[[C1:.*]] = func.call @tvmgen_default_cutlass_main_0(%[[C0]])
// CHECK-NEXT:    func.return %[[C1]]
func.func private @tvmgen_default_cutlass_main_0(%arg: tensor<8xf32>) -> tensor<8xf32> attributes {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0"} {
  %0 = nn.relu %arg : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = func.call @tvmgen_default_cutlass_main_0(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %1 = byoc.partition(%0) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0"} ({
  ^bb0(%a: tensor<8xf32>):
    %2 = nn.relu %a : (tensor<8xf32>) -> tensor<8xf32>
    byoc.yield %2 : tensor<8xf32>
  }) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %1 : tensor<8xf32>
}

// -----

// Only partitions with a compiler are outlined (TVM outlines functions with a Compiler
// attribute): the composites `partition-eager{merge=true}` nests in a compiler partition
// stay in its body, with or without dedup.

// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_0(%x: tensor<16x32xf32>
// CHECK-NEXT:    %{{.*}} = byoc.partition(%{{.*}}) {byoc.composite = "cutlass.dense_bias_relu"}
// CHECK:         byoc.partition(%{{.*}}) {byoc.composite = "cutlass.dense"}
// CHECK-NOT:   func.func private
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    func.call @tvmgen_default_cutlass_main_0(
// DEDUP-LABEL: func.func private @tvmgen_default_cutlass_main_0(%x: tensor<16x32xf32>
// DEDUP-NEXT:    byoc.partition(%{{.*}}) {byoc.composite = "cutlass.dense_bias_relu"}
// DEDUP-NOT:   func.func private
// DEDUP-LABEL: func.func @main(
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
  func.return %0 : tensor<16x64xf32>
}
