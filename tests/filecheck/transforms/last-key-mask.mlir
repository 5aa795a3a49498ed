// RUN: partita-opt %s --split-input-file -p last-key-mask | filecheck %s

// A static KV cache of 32 keys read at a run-time position, as the exporters write Hugging
// Face's StaticCache (`masked_fill(arange(32) > position, finfo.min)`, fused into the
// attention): the mask becomes the position, reshaped to [1] (one for every batch row),
// and the comparison, read by nothing else, is erased.

// CHECK-LABEL: func.func @static_cache
// CHECK-NEXT:    %0 = nn.reshape %pos : (tensor<1x1xi64>) -> tensor<1xi64>
// CHECK-NEXT:    %1 = nn.attention %q, %k, %v, %0 {scale = 2.500000e-01 : f64, mask_fill = -3.4028234663852886e+38 : f64} : (tensor<1x4x1x16xf32>, tensor<1x4x32x16xf32>, tensor<1x4x32x16xf32>, tensor<1xi64>) -> tensor<1x4x1x16xf32>
// CHECK-NEXT:    func.return %1
func.func @static_cache(%q: tensor<1x4x1x16xf32>, %k: tensor<1x4x32x16xf32>, %v: tensor<1x4x32x16xf32>, %pos: tensor<1x1xi64>) -> tensor<1x4x1x16xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
  %iota = nn.constant dense<[[[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]]]]> : tensor<1x1x1x32xi64>
  %gt = nn.greater %iota, %pos : (tensor<1x1x1x32xi64>, tensor<1x1xi64>) -> tensor<1x1x1x32xi1>
  %keep = nn.not %gt : (tensor<1x1x1x32xi1>) -> tensor<1x1x1x32xi1>
  %0 = nn.attention %q, %k, %v, %keep {scale = 2.500000e-01 : f64, mask_fill = -3.4028234663852886e+38 : f64} : (tensor<1x4x1x16xf32>, tensor<1x4x32x16xf32>, tensor<1x4x32x16xf32>, tensor<1x1x1x32xi1>) -> tensor<1x4x1x16xf32>
  func.return %0 : tensor<1x4x1x16xf32>
}

// -----
// One position per batch row ([B, 1, 1, 1], `arange <= position`, the default -inf fill),
// shared by two layers: the first rewrite keeps the comparison the second still reads, the
// second erases it.

// CHECK-LABEL: func.func @per_row
// CHECK-NEXT:    %0 = nn.reshape %pos : (tensor<2x1x1x1xi64>) -> tensor<2xi64>
// CHECK-NEXT:    %1 = nn.attention %q, %k, %v, %0 {scale = 2.500000e-01 : f64}
// CHECK-NEXT:    %2 = nn.reshape %pos : (tensor<2x1x1x1xi64>) -> tensor<2xi64>
// CHECK-NEXT:    %3 = nn.attention %1, %k, %v, %2 {scale = 2.500000e-01 : f64}
// CHECK-NEXT:    func.return %3
func.func @per_row(%q: tensor<2x4x1x16xf32>, %k: tensor<2x4x32x16xf32>, %v: tensor<2x4x32x16xf32>, %pos: tensor<2x1x1x1xi64>) -> tensor<2x4x1x16xf32> {
  %iota = nn.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]> : tensor<32xi64>
  %keep = nn.less_equal %iota, %pos : (tensor<32xi64>, tensor<2x1x1x1xi64>) -> tensor<2x1x1x32xi1>
  %0 = nn.attention %q, %k, %v, %keep {scale = 2.500000e-01 : f64} : (tensor<2x4x1x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x1x1x32xi1>) -> tensor<2x4x1x16xf32>
  %1 = nn.attention %0, %k, %v, %keep {scale = 2.500000e-01 : f64} : (tensor<2x4x1x16xf32>, tensor<2x4x32x16xf32>, tensor<2x4x32x16xf32>, tensor<2x1x1x32xi1>) -> tensor<2x4x1x16xf32>
  func.return %1 : tensor<2x4x1x16xf32>
}

// -----
// Left as they are: a fill above -1e9 (its hidden keys' weights need not vanish), a
// comparison with anything but 0 .. Skv - 1, a position per key, and a function on the host.

// CHECK-LABEL: func.func @finite_fill
// CHECK:         nn.attention %q, %k, %v, %keep
// CHECK-LABEL: func.func @not_an_iota
// CHECK:         nn.attention %q, %k, %v, %keep
// CHECK-LABEL: func.func @per_key
// CHECK:         nn.attention %q, %k, %v, %keep
// CHECK-LABEL: func.func @on_host
// CHECK:         nn.attention %q, %k, %v, %keep
func.func @finite_fill(%q: tensor<1x4x1x16xf32>, %k: tensor<1x4x32x16xf32>, %v: tensor<1x4x32x16xf32>, %pos: tensor<1xi64>) -> tensor<1x4x1x16xf32> {
  %iota = nn.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]> : tensor<32xi64>
  %keep = nn.less_equal %iota, %pos : (tensor<32xi64>, tensor<1xi64>) -> tensor<32xi1>
  %0 = nn.attention %q, %k, %v, %keep {scale = 2.500000e-01 : f64, mask_fill = -1.000000e+04 : f64} : (tensor<1x4x1x16xf32>, tensor<1x4x32x16xf32>, tensor<1x4x32x16xf32>, tensor<32xi1>) -> tensor<1x4x1x16xf32>
  func.return %0 : tensor<1x4x1x16xf32>
}
func.func @not_an_iota(%q: tensor<1x4x1x16xf32>, %k: tensor<1x4x32x16xf32>, %v: tensor<1x4x32x16xf32>, %pos: tensor<1xi64>) -> tensor<1x4x1x16xf32> {
  %iota = nn.constant dense<[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32]> : tensor<32xi64>
  %keep = nn.less_equal %iota, %pos : (tensor<32xi64>, tensor<1xi64>) -> tensor<32xi1>
  %0 = nn.attention %q, %k, %v, %keep {scale = 2.500000e-01 : f64} : (tensor<1x4x1x16xf32>, tensor<1x4x32x16xf32>, tensor<1x4x32x16xf32>, tensor<32xi1>) -> tensor<1x4x1x16xf32>
  func.return %0 : tensor<1x4x1x16xf32>
}
func.func @per_key(%q: tensor<1x4x1x16xf32>, %k: tensor<1x4x32x16xf32>, %v: tensor<1x4x32x16xf32>, %pos: tensor<32xi64>) -> tensor<1x4x1x16xf32> {
  %iota = nn.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]> : tensor<32xi64>
  %keep = nn.less_equal %iota, %pos : (tensor<32xi64>, tensor<32xi64>) -> tensor<32xi1>
  %0 = nn.attention %q, %k, %v, %keep {scale = 2.500000e-01 : f64} : (tensor<1x4x1x16xf32>, tensor<1x4x32x16xf32>, tensor<1x4x32x16xf32>, tensor<32xi1>) -> tensor<1x4x1x16xf32>
  func.return %0 : tensor<1x4x1x16xf32>
}
func.func @on_host(%q: tensor<1x4x1x16xf32>, %k: tensor<1x4x32x16xf32>, %v: tensor<1x4x32x16xf32>, %pos: tensor<1xi64>) -> tensor<1x4x1x16xf32> attributes {byoc.target = #byoc.target<"llvm">} {
  %iota = nn.constant dense<[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]> : tensor<32xi64>
  %keep = nn.less_equal %iota, %pos : (tensor<32xi64>, tensor<1xi64>) -> tensor<32xi1>
  %0 = nn.attention %q, %k, %v, %keep {scale = 2.500000e-01 : f64} : (tensor<1x4x1x16xf32>, tensor<1x4x32x16xf32>, tensor<1x4x32x16xf32>, tensor<32xi1>) -> tensor<1x4x1x16xf32>
  func.return %0 : tensor<1x4x1x16xf32>
}
