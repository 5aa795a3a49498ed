// RUN: partita-opt %s -p cublas-codegen | filecheck %s
// RUN: partita-opt %s -p cublas-codegen -t library-records | filecheck %s --check-prefix=REC

// Every cublas function becomes an extern declaration implemented by a cuBLASLt matmul
// record: cuBLASLt is column-major, so Dᵀ = Wᵀ-view · Xᵀ-view: Lt's A is the weight read
// transposed (T), Lt's B the input (N), and D is N x M with ld N.

func.func private @dense_gelu(%x: tensor<?x64xf16>, %w: tensor<128x64xf16>, %b: tensor<128xf16>) -> tensor<?x128xf16> attributes {byoc.compiler = "cublas", byoc.primitive} {
  %0 = nn.dense %x, %w : (tensor<?x64xf16>, tensor<128x64xf16>) -> tensor<?x128xf16>
  %1 = nn.bias_add %0, %b : (tensor<?x128xf16>, tensor<128xf16>) -> tensor<?x128xf16>
  %2 = nn.gelu %1 {approximate = "tanh"} : (tensor<?x128xf16>) -> tensor<?x128xf16>
  func.return %2 : tensor<?x128xf16>
}

func.func private @bmm(%a: tensor<4x8x16xf32>, %b: tensor<4x8x32xf32>) -> tensor<4x16x32xf32> attributes {byoc.compiler = "cublas", byoc.primitive} {
  %0 = nn.batch_matmul %a, %b {transpose_a = true, transpose_b = false} : (tensor<4x8x16xf32>, tensor<4x8x32xf32>) -> tensor<4x16x32xf32>
  func.return %0 : tensor<4x16x32xf32>
}

// FP8: Lt's A (the weight) E5M2, its B (the activations) E4M3, D f32; the scale is read
// through A_SCALE_POINTER, the role of the function's third argument.
func.func private @fp8(%x: tensor<?x64xf8E4M3FN>, %w: tensor<32x64xf8E5M2>, %s: tensor<f32>) -> tensor<?x32xf32> attributes {byoc.compiler = "cublas", byoc.primitive} {
  %0 = nn.matmul_float8 %x, %w {transpose_b = true} : (tensor<?x64xf8E4M3FN>, tensor<32x64xf8E5M2>) -> tensor<?x32xf32>
  %1 = nn.multiply %0, %s : (tensor<?x32xf32>, tensor<f32>) -> tensor<?x32xf32>
  func.return %1 : tensor<?x32xf32>
}

// CHECK-LABEL: func.func private @dense_gelu(tensor<?x64xf16>, tensor<128x64xf16>, tensor<128xf16>) -> tensor<?x128xf16> attributes {byoc.extern}
// CHECK-LABEL: func.func private @dense_gelu_reference
// CHECK-LABEL: func.func private @bmm(tensor<4x8x16xf32>, tensor<4x8x32xf32>) -> tensor<4x16x32xf32> attributes {byoc.extern}
// CHECK-LABEL: func.func private @fp8(tensor<?x64xf8E4M3FN>, tensor<32x64xf8E5M2>, tensor<f32>) -> tensor<?x32xf32> attributes {byoc.extern}
// CHECK:       byoc.binary @cublas attributes {format = "library", target = #byoc.target<"cublas">,
// CHECK-SAME:    kernels = {dense_gelu = {kind = "cublaslt", op = "dense", m = -1 : i64, n = 128 : i64, k = 64 : i64, batch = 1 : i64, trans_lhs = 0 : i64, trans_rhs = 1 : i64, dtype = "f16", data_type = "CUDA_R_16F", a_type = "CUDA_R_16F", b_type = "CUDA_R_16F", compute_type = "COMPUTE_32F", scale_type = "CUDA_R_32F", epilogue = "GELU_BIAS", roles = ["lhs", "rhs", "bias"], workspace = 33554432 : i64, alignment = 16 : i64},
// CHECK-SAME:    bmm = {kind = "cublaslt", op = "batch_matmul", m = 16 : i64, n = 32 : i64, k = 8 : i64, batch = 4 : i64, trans_lhs = 1 : i64, trans_rhs = 0 : i64, dtype = "f32", data_type = "CUDA_R_32F", a_type = "CUDA_R_32F", b_type = "CUDA_R_32F", compute_type = "COMPUTE_32F_FAST_TF32", scale_type = "CUDA_R_32F", epilogue = "DEFAULT", roles = ["lhs", "rhs"]
// CHECK-SAME:    fp8 = {kind = "cublaslt", op = "dense", m = -1 : i64, n = 32 : i64, k = 64 : i64, batch = 1 : i64, trans_lhs = 0 : i64, trans_rhs = 1 : i64, dtype = "f32", data_type = "CUDA_R_32F", a_type = "CUDA_R_8F_E5M2", b_type = "CUDA_R_8F_E4M3", compute_type = "COMPUTE_32F", scale_type = "CUDA_R_32F", epilogue = "DEFAULT", roles = ["lhs", "rhs", "scale"]

// REC:      // @dense_gelu (byoc.binary @cublas, cublas)
// REC-NEXT: cublasLtMatmul dense m=? n=128 k=64 batch=1 CUDA_R_16F compute=COMPUTE_32F epilogue=GELU_BIAS A(T)=64x128 ld=64 B(N)=64x? ld=64 D=128x? ld=128 workspace=33554432 align=16 args=(lhs, rhs, bias)
// REC:      // @bmm (byoc.binary @cublas, cublas)
// REC-NEXT: cublasLtMatmul batch_matmul m=16 n=32 k=8 batch=4 CUDA_R_32F compute=COMPUTE_32F_FAST_TF32 epilogue=DEFAULT A(N)=32x8 ld=32 B(T)=16x8 ld=16 D=32x16 ld=32
// REC:      // @fp8 (byoc.binary @cublas, cublas)
// REC-NEXT: cublasLtMatmul dense m=? n=32 k=64 batch=1 CUDA_R_32F compute=COMPUTE_32F epilogue=DEFAULT A=CUDA_R_8F_E5M2 B=CUDA_R_8F_E4M3 scale=A_SCALE_POINTER A(T)=64x32 ld=64 B(N)=64x? ld=64 D=32x? ld=32 workspace=33554432 align=16 args=(lhs, rhs, scale)
