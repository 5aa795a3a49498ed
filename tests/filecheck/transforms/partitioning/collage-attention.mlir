// RUN: partita-opt %s -p 'collage-partition{targets="cuda -arch=sm_90,cudnn,llvm"}' | filecheck %s
// RUN: partita-opt %s -p 'collage-partition{targets="cuda -arch=sm_90,cudnn,llvm"},cudnn-codegen' -t library-records | filecheck %s --check-prefix=REC

// A Hugging Face style attention (Q·Kᵀ with Kᵀ made by a transpose, divided by sqrt(d), an
// additive mask, softmax, ·V) is one cudnn.sdpa candidate, the transpose included (cuDNN
// reads K as stored: its head dim must be unit-strided): Collage places it whole on cuDNN's
// fused attention, and cudnn-codegen folds the caller's scale constant.

// CHECK:       func.func private @collage_cudnn_0({{.*}}) -> tensor<2x4x64x64xf16> attributes {byoc.compiler = "cudnn", byoc.primitive, byoc.inline, byoc.composite = "cudnn.sdpa", byoc.global_symbol = "collage_cudnn_0"}
// CHECK-NEXT:    nn.transpose
// CHECK-NEXT:    nn.matmul
// CHECK-NEXT:    nn.divide
// CHECK-NEXT:    nn.add
// CHECK-NEXT:    nn.softmax
// CHECK-NEXT:    nn.matmul
// CHECK-LABEL: func.func @main
// CHECK:         func.call @collage_cudnn_0

// REC:      // @collage_cudnn_0 (byoc.binary @cudnn, cudnn)
// REC-NEXT: cudnn sdpa q=2x4x64x64 k=2x4x64x64 (BHSD) v=2x4x64x64 scale=0.125 mask=2x1x1x64 io=HALF compute=FLOAT
func.func @main(%q: tensor<2x4x64x64xf16>, %k: tensor<2x4x64x64xf16>, %v: tensor<2x4x64x64xf16>, %mask: tensor<2x1x1x64xf16>) -> tensor<2x4x64x64xf16> {
  %d = nn.constant dense<8.0> : tensor<f16>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x64x64xf16>) -> tensor<2x4x64x64xf16>
  %0 = nn.matmul %q, %kt : (tensor<2x4x64x64xf16>, tensor<2x4x64x64xf16>) -> tensor<2x4x64x64xf16>
  %1 = nn.divide %0, %d : (tensor<2x4x64x64xf16>, tensor<f16>) -> tensor<2x4x64x64xf16>
  %2 = nn.add %1, %mask : (tensor<2x4x64x64xf16>, tensor<2x1x1x64xf16>) -> tensor<2x4x64x64xf16>
  %3 = nn.softmax %2 : (tensor<2x4x64x64xf16>) -> tensor<2x4x64x64xf16>
  %4 = nn.matmul %3, %v : (tensor<2x4x64x64xf16>, tensor<2x4x64x64xf16>) -> tensor<2x4x64x64xf16>
  func.return %4 : tensor<2x4x64x64xf16>
}
