// RUN: partita-opt %s --split-input-file -p split-kv-attention | filecheck %s
// RUN: partita-opt %s --split-input-file -p 'split-kv-attention{sms=16 min-kv-len=4096}' | filecheck %s --check-prefix=SMALL

// A decode step of a GQA model on the cuda target: one query row, a KV cache of dynamic
// length. 32 (batch x head) rows fill two waves of 132 SMs with ceil(264 / 32) = 9
// splits; causal is a no-op for one row and is dropped. With 16 SMs: 1 split, no rewrite.

// CHECK-LABEL: func.func @decode
// CHECK-NEXT:    %0 = nn.attention_partial %q, %k, %v {scale = 1.250000e-01 : f64, splits = 9 : i64} : (tensor<1x32x1x128xf16>, tensor<1x8x?x128xf16>, tensor<1x8x?x128xf16>) -> tensor<1x32x9x130xf32>
// CHECK-NEXT:    %1 = nn.attention_combine %0 : (tensor<1x32x9x130xf32>) -> tensor<1x32x1x128xf16>
// CHECK-NEXT:    func.return %1
// SMALL-LABEL: func.func @decode
// SMALL-NEXT:    nn.attention %q, %k, %v
func.func @decode(%q: tensor<1x32x1x128xf16>, %k: tensor<1x8x?x128xf16>, %v: tensor<1x8x?x128xf16>) -> tensor<1x32x1x128xf16> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
  %0 = nn.attention %q, %k, %v {scale = 1.250000e-01 : f64, causal = true} : (tensor<1x32x1x128xf16>, tensor<1x8x?x128xf16>, tensor<1x8x?x128xf16>) -> tensor<1x32x1x128xf16>
  func.return %0 : tensor<1x32x1x128xf16>
}

// -----
// BSHD with a boolean key padding mask [B, 1, 1, Skv] and the undefined-row guard; a
// static KV of 1000 keys caps the splits at ceil(1000 / 128) = 8 (264 / 2 would be 132).
// The layout and the guard reach the combine; with min-kv-len=4096 the KV is too short.

// CHECK-LABEL: func.func @bshd_masked
// CHECK-NEXT:    %0 = nn.attention_partial %q, %k, %v, %m {scale = 1.250000e-01 : f64, splits = 8 : i64, layout = "BSHD"} : (tensor<2x1x1x64xbf16>, tensor<2x1000x1x64xbf16>, tensor<2x1000x1x64xbf16>, tensor<2x1x1x1000xi1>) -> tensor<2x1x8x66xf32>
// CHECK-NEXT:    %1 = nn.attention_combine %0 {zero_undefined_rows = true, layout = "BSHD"} : (tensor<2x1x8x66xf32>) -> tensor<2x1x1x64xbf16>
// SMALL-LABEL: func.func @bshd_masked
// SMALL-NEXT:    nn.attention %q, %k, %v, %m
func.func @bshd_masked(%q: tensor<2x1x1x64xbf16>, %k: tensor<2x1000x1x64xbf16>, %v: tensor<2x1000x1x64xbf16>, %m: tensor<2x1x1x1000xi1>) -> tensor<2x1x1x64xbf16> {
  %0 = nn.attention %q, %k, %v, %m {scale = 1.250000e-01 : f64, zero_undefined_rows = true, layout = "BSHD"} : (tensor<2x1x1x64xbf16>, tensor<2x1000x1x64xbf16>, tensor<2x1000x1x64xbf16>, tensor<2x1x1x1000xi1>) -> tensor<2x1x1x64xbf16>
  func.return %0 : tensor<2x1x1x64xbf16>
}

// -----
// Left alone: two query rows (prefill), a short static KV (< 256 keys), a mask that is
// no key padding mask (one per head), a head dim that is no multiple of 8, and a one-row
// attention placed elsewhere (the host; a cuDNN partition).

// CHECK-LABEL: func.func @prefill
// CHECK-NEXT:    nn.attention %q, %k, %v
// CHECK-LABEL: func.func @short
// CHECK-NEXT:    nn.attention %q, %k, %v
// CHECK-LABEL: func.func @per_head_mask
// CHECK-NEXT:    nn.attention %q, %k, %v, %m
// CHECK-LABEL: func.func @odd_dim
// CHECK-NEXT:    nn.attention %q, %k, %v
// CHECK-LABEL: func.func @on_host
// CHECK-NEXT:    nn.attention %q, %k, %v
// CHECK-LABEL: func.func private @cudnn_part
// CHECK-NEXT:    nn.attention %q, %k, %v
// CHECK-NOT:     nn.attention_partial
func.func @prefill(%q: tensor<1x4x2x64xf16>, %k: tensor<1x4x?x64xf16>, %v: tensor<1x4x?x64xf16>) -> tensor<1x4x2x64xf16> {
  %0 = nn.attention %q, %k, %v {scale = 1.250000e-01 : f64} : (tensor<1x4x2x64xf16>, tensor<1x4x?x64xf16>, tensor<1x4x?x64xf16>) -> tensor<1x4x2x64xf16>
  func.return %0 : tensor<1x4x2x64xf16>
}
func.func @short(%q: tensor<1x4x1x64xf16>, %k: tensor<1x4x255x64xf16>, %v: tensor<1x4x255x64xf16>) -> tensor<1x4x1x64xf16> {
  %0 = nn.attention %q, %k, %v {scale = 1.250000e-01 : f64} : (tensor<1x4x1x64xf16>, tensor<1x4x255x64xf16>, tensor<1x4x255x64xf16>) -> tensor<1x4x1x64xf16>
  func.return %0 : tensor<1x4x1x64xf16>
}
func.func @per_head_mask(%q: tensor<1x4x1x64xf32>, %k: tensor<1x4x?x64xf32>, %v: tensor<1x4x?x64xf32>, %m: tensor<1x4x1x1xf32>) -> tensor<1x4x1x64xf32> {
  %0 = nn.attention %q, %k, %v, %m {scale = 1.250000e-01 : f64} : (tensor<1x4x1x64xf32>, tensor<1x4x?x64xf32>, tensor<1x4x?x64xf32>, tensor<1x4x1x1xf32>) -> tensor<1x4x1x64xf32>
  func.return %0 : tensor<1x4x1x64xf32>
}
func.func @odd_dim(%q: tensor<1x4x1x60xf16>, %k: tensor<1x4x?x60xf16>, %v: tensor<1x4x?x60xf16>) -> tensor<1x4x1x60xf16> {
  %0 = nn.attention %q, %k, %v {scale = 1.250000e-01 : f64} : (tensor<1x4x1x60xf16>, tensor<1x4x?x60xf16>, tensor<1x4x?x60xf16>) -> tensor<1x4x1x60xf16>
  func.return %0 : tensor<1x4x1x60xf16>
}
func.func @on_host(%q: tensor<1x4x1x64xf16>, %k: tensor<1x4x?x64xf16>, %v: tensor<1x4x?x64xf16>) -> tensor<1x4x1x64xf16> attributes {byoc.target = #byoc.target<"llvm">} {
  %0 = nn.attention %q, %k, %v {scale = 1.250000e-01 : f64} : (tensor<1x4x1x64xf16>, tensor<1x4x?x64xf16>, tensor<1x4x?x64xf16>) -> tensor<1x4x1x64xf16>
  func.return %0 : tensor<1x4x1x64xf16>
}
func.func private @cudnn_part(%q: tensor<1x4x1x64xf16>, %k: tensor<1x4x?x64xf16>, %v: tensor<1x4x?x64xf16>) -> tensor<1x4x1x64xf16> attributes {byoc.compiler = "cudnn", byoc.target = #byoc.target<"cudnn">} {
  %0 = nn.attention %q, %k, %v {scale = 1.250000e-01 : f64} : (tensor<1x4x1x64xf16>, tensor<1x4x?x64xf16>, tensor<1x4x?x64xf16>) -> tensor<1x4x1x64xf16>
  func.return %0 : tensor<1x4x1x64xf16>
}

// -----
// A last-key mask (last-key-mask: a static cache read at a position) reaches the partial.

// CHECK-LABEL: func.func @last_key
// CHECK-NEXT:    %0 = nn.attention_partial %q, %k, %v, %last {scale = 1.250000e-01 : f64, splits = 2 : i64, mask_fill = -3.4028234663852886e+38 : f64} : (tensor<2x8x1x64xf16>, tensor<2x8x256x64xf16>, tensor<2x8x256x64xf16>, tensor<2xi64>) -> tensor<2x8x2x66xf32>
func.func @last_key(%q: tensor<2x8x1x64xf16>, %k: tensor<2x8x256x64xf16>, %v: tensor<2x8x256x64xf16>, %last: tensor<2xi64>) -> tensor<2x8x1x64xf16> {
  %0 = nn.attention %q, %k, %v, %last {scale = 1.250000e-01 : f64, mask_fill = -3.4028234663852886e+38 : f64} : (tensor<2x8x1x64xf16>, tensor<2x8x256x64xf16>, tensor<2x8x256x64xf16>, tensor<2xi64>) -> tensor<2x8x1x64xf16>
  func.return %0 : tensor<2x8x1x64xf16>
}
