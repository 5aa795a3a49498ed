// RUN: partita-opt %s -p 'partition-eager{backends=cutlass,cublas}' --split-input-file | filecheck %s
// RUN: partita-opt %s -p 'partition-eager{backends=cutlass,cublas,cudnn}' --split-input-file | filecheck %s --check-prefix=DNN
// RUN: partita-opt %s -p 'partition-eager{backends=cublas bind-constants=true}' --split-input-file | filecheck %s --check-prefix=BIND
// RUN: partita-opt %s -p 'partition-eager{backends=cutlass merge=true},outline-compiler-functions' --split-input-file | filecheck %s --check-prefix=OUTLINE
// RUN: partita-opt %s -p 'partition-eager{backends=cublas sm=80}' --split-input-file | filecheck %s --check-prefix=SM80
// RUN: partita-opt %s -p 'partition-eager{backends=cublas sm=90}' --split-input-file | filecheck %s --check-prefix=SM90

// f16 dense + bias + gelu: one cutlass partition keeping its composite name; the
// second dense (f32 weights by constant) goes to cutlass too: cutlass has priority
// over cublas. The constant stays outside as an operand.
// CHECK-LABEL: func.func @mlp
// CHECK-NEXT:    %0 = byoc.partition(%x, %w, %b) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline, byoc.composite = "cutlass.dense_bias_gelu"} ({
// CHECK:           nn.dense
// CHECK-NEXT:      nn.bias_add
// CHECK-NEXT:      nn.gelu
// CHECK:         %c = nn.constant
// CHECK-NEXT:    byoc.partition(%0, %c) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_1", byoc.primitive, byoc.inline, byoc.composite = "cutlass.dense"}
// With cublas alone: dense + bias is cuBLASLt's BIAS epilogue; the erf GELU stays out
// (cuBLASLt's GELU is the tanh form).
// BIND-LABEL:  func.func @mlp
// BIND:          byoc.partition(%x, %w, %b) {byoc.compiler = "cublas", {{.*}}, byoc.composite = "cublas.dense_bias"}
// BIND:          nn.bias_add
// BIND:          nn.gelu
// BIND-NEXT:     byoc.partition(%{{.*}}) {byoc.compiler = "cublas", byoc.global_symbol = "tvmgen_default_cublas_main_1", {{.*}}} ({
// BIND-NEXT:     ^bb0(%{{.*}}: tensor<16x4xf16>):
// BIND-NEXT:       %c = nn.constant
// Merged, then outlined with no compiler filter: only the compiler partition becomes a
// function; its composites stay inside.
// OUTLINE-LABEL: func.func private @tvmgen_default_cutlass_main_0(%x: tensor<16x8xf16>
// OUTLINE-NEXT:    byoc.partition(%x, %w, %b) {byoc.composite = "cutlass.dense_bias_gelu"}
// OUTLINE:         byoc.partition(%{{.*}}, %c) {byoc.composite = "cutlass.dense"}
// OUTLINE-LABEL: func.func @mlp(
// OUTLINE:         func.call @tvmgen_default_cutlass_main_0(
func.func @mlp(%x: tensor<16x8xf16>, %w: tensor<4x8xf16>, %b: tensor<4xf16>) -> tensor<16x4xf16> {
  %0 = nn.dense %x, %w : (tensor<16x8xf16>, tensor<4x8xf16>) -> tensor<16x4xf16>
  %1 = nn.bias_add %0, %b : (tensor<16x4xf16>, tensor<4xf16>) -> tensor<16x4xf16>
  %2 = nn.gelu %1 : (tensor<16x4xf16>) -> tensor<16x4xf16>
  %c = nn.constant dense<1.0> : tensor<4x4xf16>
  %3 = nn.dense %2, %c : (tensor<16x4xf16>, tensor<4x4xf16>) -> tensor<16x4xf16>
  func.return %3 : tensor<16x4xf16>
}

// -----

// bf16: CUTLASS takes the dense (tensor cores, ahead of cuBLASLt in priority); the relu
// (no bias, so no dense_bias_relu) stays outside.
// CHECK-LABEL: func.func @bf16
// CHECK:         byoc.partition(%x, %w) {byoc.compiler = "cutlass", {{.*}}, byoc.composite = "cutlass.dense"}
// CHECK:         nn.relu
// CHECK-NEXT:    func.return
func.func @bf16(%x: tensor<16x8xbf16>, %w: tensor<4x8xbf16>) -> tensor<16x4xbf16> {
  %0 = nn.dense %x, %w : (tensor<16x8xbf16>, tensor<4x8xbf16>) -> tensor<16x4xbf16>
  %1 = nn.relu %0 : (tensor<16x4xbf16>) -> tensor<16x4xbf16>
  func.return %1 : tensor<16x4xbf16>
}

// -----

// batch_matmul goes to cutlass with or without transpose_b.
// CHECK-LABEL: func.func @bmm
// CHECK:         byoc.partition(%a, %b) {byoc.compiler = "cutlass", {{.*}}, byoc.composite = "cutlass.batch_matmul"}
// CHECK:         byoc.partition(%0, %c) {byoc.compiler = "cutlass", {{.*}}, byoc.composite = "cutlass.batch_matmul"}
// CHECK:         nn.batch_matmul %{{.*}}, %{{.*}} {transpose_b = false}
func.func @bmm(%a: tensor<2x16x8xf32>, %b: tensor<2x4x8xf32>, %c: tensor<2x4x4xf32>) -> tensor<2x16x4xf32> {
  %0 = nn.batch_matmul %a, %b : (tensor<2x16x8xf32>, tensor<2x4x8xf32>) -> tensor<2x16x4xf32>
  %1 = nn.batch_matmul %0, %c {transpose_b = false} : (tensor<2x16x4xf32>, tensor<2x4x4xf32>) -> tensor<2x16x4xf32>
  func.return %1 : tensor<2x16x4xf32>
}

// -----

// conv2d NHWC -> cutlass; NCHW only when cudnn is selected; the softmax stays (cuDNN here
// runs convolutions and whole attentions).
// CHECK-LABEL: func.func @conv_softmax
// CHECK:         byoc.partition(%x, %w) {byoc.compiler = "cutlass", {{.*}}, byoc.composite = "cutlass.conv2d"}
// CHECK-NOT:     byoc.partition
// CHECK:         func.return
// DNN-LABEL:   func.func @conv_softmax
// DNN:           byoc.partition(%x, %w) {byoc.compiler = "cutlass", {{.*}}, byoc.composite = "cutlass.conv2d"}
// DNN:           byoc.partition(%y, %v) {byoc.compiler = "cudnn", byoc.global_symbol = "tvmgen_default_cudnn_main_0", {{.*}}, byoc.composite = "cudnn.conv2d"}
// DNN-NOT:       byoc.partition
// DNN:           nn.softmax
func.func @conv_softmax(%x: tensor<1x8x8x16xf16>, %w: tensor<32x3x3x16xf16>,
                        %y: tensor<1x16x8x8xf16>, %v: tensor<32x16x3x3xf16>) -> (tensor<1x6x6x32xf16>, tensor<1x32x6x6xf16>) {
  %0 = nn.conv2d %x, %w {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<1x8x8x16xf16>, tensor<32x3x3x16xf16>) -> tensor<1x6x6x32xf16>
  %1 = nn.conv2d %y, %v : (tensor<1x16x8x8xf16>, tensor<32x16x3x3xf16>) -> tensor<1x32x6x6xf16>
  %2 = nn.softmax %1 {axis = 1 : i64} : (tensor<1x32x6x6xf16>) -> tensor<1x32x6x6xf16>
  func.return %0, %2 : tensor<1x6x6x32xf16>, tensor<1x32x6x6xf16>
}

// -----

// An existing partition is respected: its dense is not re-partitioned, its symbol is
// kept, and new symbols do not collide with it.
// CHECK-LABEL: func.func @existing
// CHECK-NEXT:    byoc.partition(%x, %w) {byoc.compiler = "cublas", byoc.global_symbol = "tvmgen_default_cutlass_main_0"} ({
// CHECK-NEXT:    ^bb0(%a: tensor<2x4xf32>, %b: tensor<4x4xf32>):
// CHECK-NEXT:      %r = nn.dense %a, %b
// CHECK-NEXT:      byoc.yield %r
// CHECK:         byoc.partition(%0, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_1"
func.func @existing(%x: tensor<2x4xf32>, %w: tensor<4x4xf32>) -> tensor<2x4xf32> {
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cublas", byoc.global_symbol = "tvmgen_default_cutlass_main_0"} ({
  ^bb0(%a: tensor<2x4xf32>, %b: tensor<4x4xf32>):
    %r = nn.dense %a, %b : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    byoc.yield %r : tensor<2x4xf32>
  }) : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %1 = nn.dense %0, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  func.return %1 : tensor<2x4xf32>
}

// -----

// cuBLASLt's FP8 matmul needs FP8 tensor cores (sm_89 and later): for sm_80 its rows are
// skipped and the product stays for the native kernel; for sm_90 it is one partition with
// its scale.
// SM80-LABEL: func.func @fp8
// SM80-NOT:     byoc.partition
// SM90-LABEL: func.func @fp8
// SM90-NEXT:    byoc.partition(%x, %w, %s) {byoc.compiler = "cublas", {{.*}}byoc.composite = "cublas.matmul_float8_scale"}
func.func @fp8(%x: tensor<?x64xf8E4M3FN>, %w: tensor<32x64xf8E4M3FN>, %s: tensor<f32>) -> tensor<?x32xf32> {
  %0 = nn.matmul_float8 %x, %w {transpose_b = true} : (tensor<?x64xf8E4M3FN>, tensor<32x64xf8E4M3FN>) -> tensor<?x32xf32>
  %1 = nn.multiply %0, %s : (tensor<?x32xf32>, tensor<f32>) -> tensor<?x32xf32>
  func.return %1 : tensor<?x32xf32>
}
