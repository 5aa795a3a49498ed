// RUN: partita-opt %s --split-input-file --verify-diagnostics -p 'cutlass-codegen{sm=80}'

func.func @main(%x: tensor<8x16xf16>) -> tensor<8x16xf16> {
  %0 = byoc.partition(%x) {byoc.compiler = "cutlass", byoc.global_symbol = "softmax_0"} ({
  ^bb0(%a: tensor<8x16xf16>):
    // expected-error@+1 {{has no CUTLASS kernel (dense, matmul, batch_matmul, matmul_integer, NHWC conv2d and NHWC conv_integer do)}}
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
