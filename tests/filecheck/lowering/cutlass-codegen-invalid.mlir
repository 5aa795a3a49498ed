// RUN: partita-opt %s --split-input-file --verify-diagnostics -p 'cutlass-codegen{sm=80}'

func.func @main(%x: tensor<8x16xf16>) -> tensor<8x16xf16> {
  %0 = byoc.partition(%x) {byoc.compiler = "cutlass", byoc.global_symbol = "softmax_0"} ({
  ^bb0(%a: tensor<8x16xf16>):
    // expected-error@+1 {{has no CUTLASS kernel (dense, matmul, batch_matmul, matmul_integer, matmul_float8, NHWC conv2d and NHWC conv_integer do)}}
    %1 = nn.softmax %a : (tensor<8x16xf16>) -> tensor<8x16xf16>
    byoc.yield %1 : tensor<8x16xf16>
  }) : (tensor<8x16xf16>) -> tensor<8x16xf16>
  func.return %0 : tensor<8x16xf16>
}

// -----

func.func @main(%x: tensor<8x16xf64>, %w: tensor<4x16xf64>) -> tensor<8x4xf64> {
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "f64_0"} ({
  ^bb0(%a: tensor<8x16xf64>, %b: tensor<4x16xf64>):
    // expected-error@+1 {{CUTLASS kernels take f16, bf16 or f32, not f64}}
    %1 = nn.dense %a, %b : (tensor<8x16xf64>, tensor<4x16xf64>) -> tensor<8x4xf64>
    byoc.yield %1 : tensor<8x4xf64>
  }) : (tensor<8x16xf64>, tensor<4x16xf64>) -> tensor<8x4xf64>
  func.return %0 : tensor<8x4xf64>
}

// -----

func.func @main(%x: tensor<1x8x8x16xf16>, %w: tensor<16x3x3x16xf16>) -> tensor<1x6x6x16xf16> {
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "conv_0"} ({
  ^bb0(%a: tensor<1x8x8x16xf16>, %b: tensor<16x3x3x16xf16>):
    %1 = nn.conv2d %a, %b {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<1x8x8x16xf16>, tensor<16x3x3x16xf16>) -> tensor<1x6x6x16xf16>
    // expected-error@+1 {{is not part of a CUTLASS kernel's epilogue}}
    %2 = nn.tanh %1 : (tensor<1x6x6x16xf16>) -> tensor<1x6x6x16xf16>
    byoc.yield %2 : tensor<1x6x6x16xf16>
  }) : (tensor<1x8x8x16xf16>, tensor<16x3x3x16xf16>) -> tensor<1x6x6x16xf16>
  func.return %0 : tensor<1x6x6x16xf16>
}

// -----

// FP8 tensor cores are sm_89 and later: sm_80 has no FP8 GEMM.
func.func @main(%x: tensor<8x64xf8E4M3FN>, %w: tensor<16x64xf8E4M3FN>) -> tensor<8x16xf32> {
  // expected-error@+1 {{FP8 CUTLASS GEMMs need FP8 tensor cores (sm >= 89), not sm_80}}
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "fp8_0"} ({
  ^bb0(%a: tensor<8x64xf8E4M3FN>, %b: tensor<16x64xf8E4M3FN>):
    %1 = nn.matmul_float8 %a, %b {transpose_b = true} : (tensor<8x64xf8E4M3FN>, tensor<16x64xf8E4M3FN>) -> tensor<8x16xf32>
    byoc.yield %1 : tensor<8x16xf32>
  }) : (tensor<8x64xf8E4M3FN>, tensor<16x64xf8E4M3FN>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

// The scale is the next native kernel's, not the FP8 GEMM's epilogue.
func.func @main(%x: tensor<8x64xf8E4M3FN>, %w: tensor<16x64xf8E4M3FN>, %s: tensor<f32>) -> tensor<8x16xf32> {
  %0 = byoc.partition(%x, %w, %s) {byoc.compiler = "cutlass", byoc.global_symbol = "fp8_scaled_0"} ({
  ^bb0(%a: tensor<8x64xf8E4M3FN>, %b: tensor<16x64xf8E4M3FN>, %c: tensor<f32>):
    %1 = nn.matmul_float8 %a, %b {transpose_b = true} : (tensor<8x64xf8E4M3FN>, tensor<16x64xf8E4M3FN>) -> tensor<8x16xf32>
    // expected-error@+1 {{is not part of an FP8 CUTLASS GEMM (its scale and bias are the next native kernel's)}}
    %2 = nn.multiply %1, %c : (tensor<8x16xf32>, tensor<f32>) -> tensor<8x16xf32>
    byoc.yield %2 : tensor<8x16xf32>
  }) : (tensor<8x64xf8E4M3FN>, tensor<16x64xf8E4M3FN>, tensor<f32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

// A pinned kernel (tune-cutlass-kernels' choice) must be one the codegen builds.
func.func @main(%x: tensor<256x64xf16>, %w: tensor<128x64xf16>) -> tensor<256x128xf16> {
  // expected-error@+1 {{kernel '96x96x32_2x2x1_3' is not an Sm80 configuration built here (128x128x32_2x2x1_3, }}
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "pinned_0", cutlass.kernel = "96x96x32_2x2x1_3"} ({
  ^bb0(%a: tensor<256x64xf16>, %b: tensor<128x64xf16>):
    %1 = nn.dense %a, %b : (tensor<256x64xf16>, tensor<128x64xf16>) -> tensor<256x128xf16>
    byoc.yield %1 : tensor<256x128xf16>
  }) : (tensor<256x64xf16>, tensor<128x64xf16>) -> tensor<256x128xf16>
  func.return %0 : tensor<256x128xf16>
}

// -----

func.func @main(%x: tensor<256x64xf16>, %w: tensor<128x64xf16>) -> tensor<256x128xf16> {
  // expected-error@+1 {{'cutlass.kernel' must be a string, a kernel label such as "128x128x32_2x2x1_3"}}
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "pinned_1", cutlass.kernel = 3 : i64} ({
  ^bb0(%a: tensor<256x64xf16>, %b: tensor<128x64xf16>):
    %1 = nn.dense %a, %b : (tensor<256x64xf16>, tensor<128x64xf16>) -> tensor<256x128xf16>
    byoc.yield %1 : tensor<256x128xf16>
  }) : (tensor<256x64xf16>, tensor<128x64xf16>) -> tensor<256x128xf16>
  func.return %0 : tensor<256x128xf16>
}

// -----

// f32 on exact SIMT FFMA kernels has one configuration: nothing to pin.
func.func @main(%x: tensor<256x64xf32>, %w: tensor<128x64xf32>) -> tensor<256x128xf32> {
  // expected-error@+1 {{kernel '128x128x32_2x2x1_3' is pinned, but only f16 / bf16 tensor-core GEMMs with 16-byte accesses take a pinned configuration}}
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "pinned_2", cutlass.kernel = "128x128x32_2x2x1_3"} ({
  ^bb0(%a: tensor<256x64xf32>, %b: tensor<128x64xf32>):
    %1 = nn.dense %a, %b : (tensor<256x64xf32>, tensor<128x64xf32>) -> tensor<256x128xf32>
    byoc.yield %1 : tensor<256x128xf32>
  }) : (tensor<256x64xf32>, tensor<128x64xf32>) -> tensor<256x128xf32>
  func.return %0 : tensor<256x128xf32>
}
