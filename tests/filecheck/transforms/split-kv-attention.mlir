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
// A static KV cache of 256 keys read at a run-time position (Hugging Face's StaticCache:
// `masked_fill(arange(256) > position, finfo.min)`): the mask becomes the partial's last-key
// mask, the position reshaped to [1] (one for every batch row), so a step reads the keys up
// to the position only; the comparison, read by nothing else, is erased. A fill above -1e30 keeps the boolean mask (its hidden keys' weights
// need not vanish), and so does a comparison with anything but 0 .. Skv - 1.

// CHECK-LABEL: func.func @static_cache
// CHECK-NEXT:    %0 = nn.reshape %pos : (tensor<1x1xi64>) -> tensor<1xi64>
// CHECK-NEXT:    %1 = nn.attention_partial %q, %k, %v, %0 {scale = 1.250000e-01 : f64, splits = 2 : i64, mask_fill = -3.4028234663852886e+38 : f64} : (tensor<1x8x1x64xf16>, tensor<1x8x256x64xf16>, tensor<1x8x256x64xf16>, tensor<1xi64>) -> tensor<1x8x2x66xf32>
// CHECK-NEXT:    %2 = nn.attention_combine %1
// CHECK-LABEL: func.func @finite_fill
// CHECK:         nn.attention_partial %q, %k, %v, %keep {{.*}} tensor<1x1x1x256xi1>)
// CHECK-LABEL: func.func @not_an_iota
// CHECK:         nn.attention_partial %q, %k, %v, %keep {{.*}} tensor<1x1x1x256xi1>)
func.func @static_cache(%q: tensor<1x8x1x64xf16>, %k: tensor<1x8x256x64xf16>, %v: tensor<1x8x256x64xf16>, %pos: tensor<1x1xi64>) -> tensor<1x8x1x64xf16> {
  %iota = nn.constant dense<[[[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239, 240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255]]]]> : tensor<1x1x1x256xi64>
  %gt = nn.greater %iota, %pos : (tensor<1x1x1x256xi64>, tensor<1x1xi64>) -> tensor<1x1x1x256xi1>
  %keep = nn.not %gt : (tensor<1x1x1x256xi1>) -> tensor<1x1x1x256xi1>
  %0 = nn.attention %q, %k, %v, %keep {scale = 1.250000e-01 : f64, mask_fill = -3.4028234663852886e+38 : f64} : (tensor<1x8x1x64xf16>, tensor<1x8x256x64xf16>, tensor<1x8x256x64xf16>, tensor<1x1x1x256xi1>) -> tensor<1x8x1x64xf16>
  func.return %0 : tensor<1x8x1x64xf16>
}
func.func @finite_fill(%q: tensor<1x8x1x64xf16>, %k: tensor<1x8x256x64xf16>, %v: tensor<1x8x256x64xf16>, %pos: tensor<1x1xi64>) -> tensor<1x8x1x64xf16> {
  %iota = nn.constant dense<[[[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239, 240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255]]]]> : tensor<1x1x1x256xi64>
  %gt = nn.greater %iota, %pos : (tensor<1x1x1x256xi64>, tensor<1x1xi64>) -> tensor<1x1x1x256xi1>
  %keep = nn.not %gt : (tensor<1x1x1x256xi1>) -> tensor<1x1x1x256xi1>
  %0 = nn.attention %q, %k, %v, %keep {scale = 1.250000e-01 : f64, mask_fill = -1.000000e+04 : f64} : (tensor<1x8x1x64xf16>, tensor<1x8x256x64xf16>, tensor<1x8x256x64xf16>, tensor<1x1x1x256xi1>) -> tensor<1x8x1x64xf16>
  func.return %0 : tensor<1x8x1x64xf16>
}
func.func @not_an_iota(%q: tensor<1x8x1x64xf16>, %k: tensor<1x8x256x64xf16>, %v: tensor<1x8x256x64xf16>, %pos: tensor<1x1xi64>) -> tensor<1x8x1x64xf16> {
  %iota = nn.constant dense<[[[[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239, 240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255, 256]]]]> : tensor<1x1x1x256xi64>
  %gt = nn.greater %iota, %pos : (tensor<1x1x1x256xi64>, tensor<1x1xi64>) -> tensor<1x1x1x256xi1>
  %keep = nn.not %gt : (tensor<1x1x1x256xi1>) -> tensor<1x1x1x256xi1>
  %0 = nn.attention %q, %k, %v, %keep {scale = 1.250000e-01 : f64} : (tensor<1x8x1x64xf16>, tensor<1x8x256x64xf16>, tensor<1x8x256x64xf16>, tensor<1x1x1x256xi1>) -> tensor<1x8x1x64xf16>
  func.return %0 : tensor<1x8x1x64xf16>
}
