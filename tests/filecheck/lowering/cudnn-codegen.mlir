// RUN: partita-opt %s -p cudnn-codegen | filecheck %s
// RUN: partita-opt %s -p cudnn-codegen -t library-records | filecheck %s --check-prefix=REC

// A convolution with its bias and ReLU, and an attention whose scale is the caller's
// constant (1/8 divided in: attn_scale 0.125) and whose Kᵀ is made by a transpose in the
// partition: K is read as stored (BHSD), as cuDNN needs its head dim unit-strided.

func.func private @conv(%x: tensor<?x8x8x16xf16>, %w: tensor<32x3x3x8xf16>, %b: tensor<32xf16>) -> tensor<?x8x8x32xf16> attributes {byoc.compiler = "cudnn", byoc.primitive} {
  %0 = nn.conv2d %x, %w {data_layout = "NHWC", kernel_layout = "OHWI", padding = array<i64: 1, 1, 1, 1>, groups = 2 : i64} : (tensor<?x8x8x16xf16>, tensor<32x3x3x8xf16>) -> tensor<?x8x8x32xf16>
  %1 = nn.bias_add %0, %b {axis = 3 : i64} : (tensor<?x8x8x32xf16>, tensor<32xf16>) -> tensor<?x8x8x32xf16>
  %2 = nn.relu %1 : (tensor<?x8x8x32xf16>) -> tensor<?x8x8x32xf16>
  func.return %2 : tensor<?x8x8x32xf16>
}

func.func private @attn(%q: tensor<2x4x16x64xf16>, %k: tensor<2x4x16x64xf16>, %s: tensor<f16>, %v: tensor<2x4x16x64xf16>) -> tensor<2x4x16x64xf16> attributes {byoc.compiler = "cudnn", byoc.primitive} {
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x16x64xf16>) -> tensor<2x4x64x16xf16>
  %0 = nn.matmul %q, %kt : (tensor<2x4x16x64xf16>, tensor<2x4x64x16xf16>) -> tensor<2x4x16x16xf16>
  %1 = nn.divide %0, %s : (tensor<2x4x16x16xf16>, tensor<f16>) -> tensor<2x4x16x16xf16>
  %2 = nn.softmax %1 : (tensor<2x4x16x16xf16>) -> tensor<2x4x16x16xf16>
  %3 = nn.matmul %2, %v : (tensor<2x4x16x16xf16>, tensor<2x4x16x64xf16>) -> tensor<2x4x16x64xf16>
  func.return %3 : tensor<2x4x16x64xf16>
}

func.func @main(%q: tensor<2x4x16x64xf16>, %k: tensor<2x4x16x64xf16>, %v: tensor<2x4x16x64xf16>) -> tensor<2x4x16x64xf16> {
  %s = nn.constant dense<8.0> : tensor<f16>
  %0 = func.call @attn(%q, %k, %s, %v) : (tensor<2x4x16x64xf16>, tensor<2x4x16x64xf16>, tensor<f16>, tensor<2x4x16x64xf16>) -> tensor<2x4x16x64xf16>
  func.return %0 : tensor<2x4x16x64xf16>
}

// CHECK-LABEL: func.func private @conv({{.*}}) -> tensor<?x8x8x32xf16> attributes {byoc.extern}
// CHECK-LABEL: func.func private @attn({{.*}}) -> tensor<2x4x16x64xf16> attributes {byoc.extern}
// CHECK:       byoc.binary @cudnn attributes {format = "library", target = #byoc.target<"cudnn">,
// CHECK-SAME:    kernels = {conv = {kind = "cudnn", graph = "conv2d", layout = "NHWC", x = [-1 : i64, 16 : i64, 8 : i64, 8 : i64], w = [32 : i64, 8 : i64, 3 : i64, 3 : i64], y = [-1 : i64, 32 : i64, 8 : i64, 8 : i64], groups = 2 : i64, pre_padding = [1 : i64, 1 : i64], post_padding = [1 : i64, 1 : i64], {{.*}} io_type = "HALF", compute_type = "FLOAT", epilogue = "bias_relu", roles = ["x", "w", "bias"]},
// CHECK-SAME:    attn = {kind = "cudnn", graph = "sdpa", rank = 4 : i64, q = [2 : i64, 4 : i64, 16 : i64, 64 : i64], k = [2 : i64, 4 : i64, 16 : i64, 64 : i64], v = [2 : i64, 4 : i64, 16 : i64, 64 : i64], k_storage = "BHSD", mask = [], scale = "0.125", {{.*}} roles = ["q", "k", "scale", "v"]}

// REC:      // @conv (byoc.binary @cudnn, cudnn)
// REC-NEXT: cudnn conv_fprop NHWC x=?x16x8x8 w=32x8x3x3 y=?x32x8x8 groups=2 pad=[1, 1]/[1, 1] stride=[1, 1] dilation=[1, 1] io=HALF compute=FLOAT epilogue=bias_relu
// REC:      // @attn (byoc.binary @cudnn, cudnn)
// REC-NEXT: cudnn sdpa q=2x4x16x64 k=2x4x16x64 (BHSD) v=2x4x16x64 scale=0.125 mask=none io=HALF compute=FLOAT
