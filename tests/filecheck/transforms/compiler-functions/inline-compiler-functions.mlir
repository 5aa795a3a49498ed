// RUN: partita-opt %s -p inline-compiler-functions --split-input-file | filecheck %s
// RUN: partita-opt %s -p 'inline-compiler-functions{compiler=cutlass}' --split-input-file | filecheck %s --check-prefix=CUTLASS

// The seed example, outlined form -> inline form: the call becomes a byoc.partition
// carrying every attribute of the function, which is removed.

// CHECK-NOT:   func.func private @tvmgen_default_cutlass_main_0
// CHECK-LABEL: func.func @main(%x: tensor<1600x768xf16>, %w: tensor<2304x768xf16>, %b: tensor<2304xf16>) -> tensor<1600x2304xf16> {
// CHECK-NEXT:    %[[P:.*]] = byoc.partition(%x, %w, %b) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} ({
// CHECK-NEXT:    ^{{.*}}(%a: tensor<1600x768xf16>, %c: tensor<2304x768xf16>, %d: tensor<2304xf16>):
// CHECK-NEXT:      %[[D:.*]] = nn.dense %a, %c : (tensor<1600x768xf16>, tensor<2304x768xf16>) -> tensor<1600x2304xf16>
// CHECK-NEXT:      %[[A:.*]] = nn.add %[[D]], %d : (tensor<1600x2304xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
// CHECK-NEXT:      byoc.yield %[[A]] : tensor<1600x2304xf16>
// CHECK-NEXT:    }) : (tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
// CHECK-NEXT:    func.return %[[P]] : tensor<1600x2304xf16>
func.func private @tvmgen_default_cutlass_main_0(%a: tensor<1600x768xf16>, %c: tensor<2304x768xf16>, %d: tensor<2304xf16>) -> tensor<1600x2304xf16> attributes {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} {
  %0 = nn.dense %a, %c : (tensor<1600x768xf16>, tensor<2304x768xf16>) -> tensor<1600x2304xf16>
  %1 = nn.add %0, %d : (tensor<1600x2304xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
  func.return %1 : tensor<1600x2304xf16>
}
func.func @main(%x: tensor<1600x768xf16>, %w: tensor<2304x768xf16>, %b: tensor<2304xf16>) -> tensor<1600x2304xf16> {
  %0 = func.call @tvmgen_default_cutlass_main_0(%x, %w, %b) : (tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
  func.return %0 : tensor<1600x2304xf16>
}

// -----

// Two compilers; the cutlass function is called twice (its body is cloned per call) and
// has no global symbol (it gets its own name, so outlining gives it back); the cublas
// function is called from a helper called from main. Only the helper and main remain.
// With compiler=cutlass, the cublas function and its call stay as they are.

// CHECK-NOT:   @dense_fn(
// CHECK-NOT:   @relu_fn(
// CHECK-LABEL: func.func private @helper(%h: tensor<16x4xf32>) -> tensor<16x4xf32> {
// CHECK-NEXT:    %[[R:.*]] = byoc.partition(%h) {byoc.compiler = "cublas", byoc.global_symbol = "tvmgen_default_cublas_main_0", byoc.composite = "cublas.relu", byoc.target = #byoc.target<"cublas">} ({
// CHECK:           nn.relu
// CHECK:         func.return %[[R]]
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    %[[P0:.*]] = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.primitive, byoc.global_symbol = "dense_fn"} ({
// CHECK:           nn.dense
// CHECK:         %[[P1:.*]] = byoc.partition(%y, %w) {byoc.compiler = "cutlass", byoc.primitive, byoc.global_symbol = "dense_fn"} ({
// CHECK:           nn.dense
// CHECK:         func.call @helper(%[[P0]])
// CHECK-NOT:   func.func

// CUTLASS-NOT:   @dense_fn(
// CUTLASS-LABEL: func.func private @relu_fn(
// CUTLASS-LABEL: func.func private @helper(
// CUTLASS-NEXT:    func.call @relu_fn(%h)
// CUTLASS-LABEL: func.func @main(
// CUTLASS-NEXT:    byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.primitive, byoc.global_symbol = "dense_fn"}
// CUTLASS:         byoc.partition(%y, %w) {byoc.compiler = "cutlass", byoc.primitive, byoc.global_symbol = "dense_fn"}
func.func private @dense_fn(%a: tensor<16x8xf32>, %b: tensor<4x8xf32>) -> tensor<16x4xf32> attributes {byoc.compiler = "cutlass", byoc.primitive} {
  %0 = nn.dense %a, %b : (tensor<16x8xf32>, tensor<4x8xf32>) -> tensor<16x4xf32>
  func.return %0 : tensor<16x4xf32>
}
func.func private @relu_fn(%a: tensor<16x4xf32>) -> tensor<16x4xf32> attributes {byoc.compiler = "cublas", byoc.global_symbol = "tvmgen_default_cublas_main_0", byoc.composite = "cublas.relu", byoc.target = #byoc.target<"cublas">} {
  %0 = nn.relu %a : (tensor<16x4xf32>) -> tensor<16x4xf32>
  func.return %0 : tensor<16x4xf32>
}
func.func private @helper(%h: tensor<16x4xf32>) -> tensor<16x4xf32> {
  %0 = func.call @relu_fn(%h) : (tensor<16x4xf32>) -> tensor<16x4xf32>
  func.return %0 : tensor<16x4xf32>
}
func.func @main(%x: tensor<16x8xf32>, %y: tensor<16x8xf32>, %w: tensor<4x8xf32>) -> tensor<16x4xf32> {
  %0 = func.call @dense_fn(%x, %w) : (tensor<16x8xf32>, tensor<4x8xf32>) -> tensor<16x4xf32>
  %1 = func.call @dense_fn(%y, %w) : (tensor<16x8xf32>, tensor<4x8xf32>) -> tensor<16x4xf32>
  %2 = func.call @helper(%0) : (tensor<16x4xf32>) -> tensor<16x4xf32>
  %3 = nn.add %2, %1 : (tensor<16x4xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
  func.return %3 : tensor<16x4xf32>
}

// -----

// A partition function calling another one: both calls are inlined, the inner
// partition nested in the outer one; a partition function without callers is kept.

// CHECK-LABEL: func.func private @unused(
// CHECK-LABEL: func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
// CHECK-NEXT:    byoc.partition(%x) {byoc.compiler = "tensorrt", byoc.global_symbol = "outer"} ({
// CHECK-NEXT:    ^{{.*}}(%o: tensor<8xf32>):
// CHECK-NEXT:      byoc.partition(%o) {byoc.compiler = "cudnn", byoc.global_symbol = "inner"} ({
// CHECK-NEXT:      ^{{.*}}(%i: tensor<8xf32>):
// CHECK-NEXT:        nn.tanh %i
// CHECK-NOT:   func.func
func.func private @unused(%u: tensor<8xf32>) -> tensor<8xf32> attributes {byoc.compiler = "cudnn"} {
  func.return %u : tensor<8xf32>
}
func.func private @inner(%i: tensor<8xf32>) -> tensor<8xf32> attributes {byoc.compiler = "cudnn"} {
  %0 = nn.tanh %i : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
func.func private @outer(%o: tensor<8xf32>) -> tensor<8xf32> attributes {byoc.compiler = "tensorrt"} {
  %0 = func.call @inner(%o) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = func.call @outer(%x) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
