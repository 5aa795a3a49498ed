// RUN: partita-opt %s --split-input-file --verify-diagnostics -p 'cublas-codegen,cudnn-codegen,tensorrt-codegen'

// cuBLASLt's GELU epilogue is the tanh form: an erf GELU cannot be part of a cublas partition.
func.func private @gelu(%x: tensor<8x16xf16>, %w: tensor<4x16xf16>, %b: tensor<4xf16>) -> tensor<8x4xf16> attributes {byoc.compiler = "cublas"} {
  %0 = nn.dense %x, %w : (tensor<8x16xf16>, tensor<4x16xf16>) -> tensor<8x4xf16>
  %1 = nn.bias_add %0, %b : (tensor<8x4xf16>, tensor<4xf16>) -> tensor<8x4xf16>
  // expected-error@+1 {{cuBLASLt's GELU epilogue is the tanh approximation, not the erf form}}
  %2 = nn.gelu %1 : (tensor<8x4xf16>) -> tensor<8x4xf16>
  func.return %2 : tensor<8x4xf16>
}

// -----

func.func private @softmax(%x: tensor<8x16xf16>) -> tensor<8x16xf16> attributes {byoc.compiler = "cublas"} {
  // expected-error@+1 {{has no cuBLAS implementation (dense, matmul, batch_matmul and matmul_float8 do)}}
  %0 = nn.softmax %x : (tensor<8x16xf16>) -> tensor<8x16xf16>
  func.return %0 : tensor<8x16xf16>
}

// -----

// cuBLASLt's FP8 matmul never multiplies E5M2 by E5M2.
func.func private @e5m2(%x: tensor<8x16xf8E5M2>, %w: tensor<16x16xf8E5M2>) -> tensor<8x16xf32> attributes {byoc.compiler = "cublas"} {
  // expected-error@+1 {{cuBLASLt's FP8 matmul multiplies E4M3 by E4M3 or E5M2, not f8E5M2 by f8E5M2}}
  %0 = nn.matmul_float8 %x, %w {transpose_b = true} : (tensor<8x16xf8E5M2>, tensor<16x16xf8E5M2>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

// FP8 is the "TN" form only: a weight stored [K, N] is refused.
func.func private @nn_form(%x: tensor<8x16xf8E4M3FN>, %w: tensor<16x32xf8E4M3FN>) -> tensor<8x32xf32> attributes {byoc.compiler = "cublas"} {
  // expected-error@+1 {{cuBLASLt's FP8 matmul takes the "TN" form only: a right operand stored [..., N, K] (transpose_b)}}
  %0 = nn.matmul_float8 %x, %w : (tensor<8x16xf8E4M3FN>, tensor<16x32xf8E4M3FN>) -> tensor<8x32xf32>
  func.return %0 : tensor<8x32xf32>
}

// -----

// A batched FP8 product needs equal batch dims: a right operand broadcast over them is refused.
func.func private @broadcast_batch(%x: tensor<2x8x16xf8E4M3FN>, %w: tensor<1x16x16xf8E4M3FN>) -> tensor<2x8x16xf32> attributes {byoc.compiler = "cublas"} {
  // expected-error@+1 {{cuBLASLt's batched FP8 matmul needs equal batch dims (no broadcasting)}}
  %0 = nn.matmul_float8 %x, %w {transpose_b = true} : (tensor<2x8x16xf8E4M3FN>, tensor<1x16x16xf8E4M3FN>) -> tensor<2x8x16xf32>
  func.return %0 : tensor<2x8x16xf32>
}

// -----

func.func private @unaligned(%x: tensor<8x24xf8E4M3FN>, %w: tensor<16x24xf8E4M3FN>) -> tensor<8x16xf32> attributes {byoc.compiler = "cublas"} {
  // expected-error@+1 {{cuBLASLt's FP8 matmul needs N and K multiples of 16 (16-byte rows), got N=16, K=24}}
  %0 = nn.matmul_float8 %x, %w {transpose_b = true} : (tensor<8x24xf8E4M3FN>, tensor<16x24xf8E4M3FN>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}

// -----

// The scale is one f32 element: a per-channel one stays a native multiply.
func.func private @per_channel(%x: tensor<8x16xf8E4M3FN>, %w: tensor<16x16xf8E4M3FN>, %s: tensor<16xf32>) -> tensor<8x16xf32> attributes {byoc.compiler = "cublas"} {
  %0 = nn.matmul_float8 %x, %w {transpose_b = true} : (tensor<8x16xf8E4M3FN>, tensor<16x16xf8E4M3FN>) -> tensor<8x16xf32>
  // expected-error@+1 {{is not part of a cuBLASLt FP8 matmul (its one-element f32 scale is)}}
  %1 = nn.multiply %0, %s : (tensor<8x16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
  func.return %1 : tensor<8x16xf32>
}

// -----

// cuDNN's fused attention runs f16 and bf16 only.
func.func private @attn(%q: tensor<4x16x64xf32>, %k: tensor<4x16x64xf32>, %s: tensor<f32>, %v: tensor<4x16x64xf32>) -> tensor<4x16x64xf32> attributes {byoc.compiler = "cudnn"} {
  %0 = nn.batch_matmul %q, %k : (tensor<4x16x64xf32>, tensor<4x16x64xf32>) -> tensor<4x16x16xf32>
  %1 = nn.multiply %0, %s : (tensor<4x16x16xf32>, tensor<f32>) -> tensor<4x16x16xf32>
  %2 = nn.softmax %1 : (tensor<4x16x16xf32>) -> tensor<4x16x16xf32>
  // expected-error@+1 {{cuDNN attention takes f16 or bf16, not f32}}
  %3 = nn.batch_matmul %2, %v {transpose_b = false} : (tensor<4x16x16xf32>, tensor<4x16x64xf32>) -> tensor<4x16x64xf32>
  func.return %3 : tensor<4x16x64xf32>
}

// -----

// The attention scale is folded into the cuDNN graph: it must be a constant.
func.func private @attn(%q: tensor<4x16x64xf16>, %k: tensor<4x16x64xf16>, %s: tensor<f16>, %v: tensor<4x16x64xf16>) -> tensor<4x16x64xf16> attributes {byoc.compiler = "cudnn"} {
  %0 = nn.batch_matmul %q, %k : (tensor<4x16x64xf16>, tensor<4x16x64xf16>) -> tensor<4x16x16xf16>
  %1 = nn.multiply %0, %s : (tensor<4x16x16xf16>, tensor<f16>) -> tensor<4x16x16xf16>
  %2 = nn.softmax %1 : (tensor<4x16x16xf16>) -> tensor<4x16x16xf16>
  %3 = nn.batch_matmul %2, %v {transpose_b = false} : (tensor<4x16x16xf16>, tensor<4x16x64xf16>) -> tensor<4x16x64xf16>
  func.return %3 : tensor<4x16x64xf16>
}

func.func @main(%q: tensor<4x16x64xf16>, %k: tensor<4x16x64xf16>, %s: tensor<f16>, %v: tensor<4x16x64xf16>) -> tensor<4x16x64xf16> {
  // expected-error@+1 {{passes a non-constant attention scale to a cuDNN attention}}
  %0 = func.call @attn(%q, %k, %s, %v) : (tensor<4x16x64xf16>, tensor<4x16x64xf16>, tensor<f16>, tensor<4x16x64xf16>) -> tensor<4x16x64xf16>
  func.return %0 : tensor<4x16x64xf16>
}

// -----

func.func private @lrn(%x: tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32> attributes {byoc.compiler = "tensorrt"} {
  // expected-error@+1 {{has no TensorRT (ONNX) conversion, so it cannot be part of a TensorRT partition}}
  %0 = nn.lrn %x {size = 3 : i64} : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  func.return %0 : tensor<1x4x3x3xf32>
}
