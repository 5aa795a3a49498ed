// RUN: partita-opt %s --split-input-file -p fuse-native-kernels | filecheck %s
// RUN: partita-opt %s --split-input-file -p fuse-native-kernels,fuse-native-kernels | filecheck %s

// A relu -> add(bias) -> gelu chain is one group; dense and softmax stay in @main, and
// the sigmoid -> multiply after the softmax is a second group taking the softmax's
// result and the sigmoid's input. Names count groups in program order.

// CHECK-LABEL: func.func private @main_fused_0(%0: tensor<?x64xf16>, %1: tensor<64xf16>) -> tensor<?x64xf16>
// CHECK-SAME:    attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive}
// CHECK-NEXT:    %2 = nn.relu %0
// CHECK-NEXT:    %3 = nn.add %2, %1
// CHECK-NEXT:    %4 = nn.gelu %3
// CHECK-NEXT:    func.return %4 : tensor<?x64xf16>
// CHECK-LABEL: func.func private @main_fused_1(%0: tensor<?x32xf16>, %1: tensor<?x32xf16>) -> tensor<?x32xf16>
// CHECK-NEXT:    %2 = nn.sigmoid %0
// CHECK-NEXT:    %3 = nn.multiply %2, %1
// CHECK-NEXT:    func.return %3
// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %0 = func.call @main_fused_0(%x, %b) : (tensor<?x64xf16>, tensor<64xf16>) -> tensor<?x64xf16>
// CHECK-NEXT:    %1 = nn.dense %0, %w
// CHECK-NEXT:    %2 = nn.softmax %1
// CHECK-NEXT:    %3 = func.call @main_fused_1(%1, %2)
// CHECK-NEXT:    func.return %3
// CHECK-NOT:   func.func

func.func @main(%x: tensor<?x64xf16>, %w: tensor<32x64xf16>, %b: tensor<64xf16>) -> tensor<?x32xf16> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
  %0 = nn.relu %x : (tensor<?x64xf16>) -> tensor<?x64xf16>
  %1 = nn.add %0, %b : (tensor<?x64xf16>, tensor<64xf16>) -> tensor<?x64xf16>
  %2 = nn.gelu %1 : (tensor<?x64xf16>) -> tensor<?x64xf16>
  %3 = nn.dense %2, %w : (tensor<?x64xf16>, tensor<32x64xf16>) -> tensor<?x32xf16>
  %4 = nn.softmax %3 : (tensor<?x32xf16>) -> tensor<?x32xf16>
  %5 = nn.sigmoid %3 : (tensor<?x32xf16>) -> tensor<?x32xf16>
  %6 = nn.multiply %5, %4 : (tensor<?x32xf16>, tensor<?x32xf16>) -> tensor<?x32xf16>
  func.return %6 : tensor<?x32xf16>
}

// -----

// Convexity: fusing the relu with the add would put the softmax between two parts of
// one kernel (relu -> softmax -> add is a path out of the group and back), so the relu's
// result, used outside, ends its group. An injective diamond (tanh feeding both the
// sigmoid and the multiply) has every use inside and is fused whole.

// CHECK-LABEL: func.func private @f_fused_0(%0: tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-SAME:    attributes {byoc.target = #byoc.target<"cuda">, byoc.primitive}
// CHECK-NEXT:    %1 = nn.relu %0
// CHECK-NEXT:    func.return %1
// CHECK-LABEL: func.func private @f_fused_1(%0: tensor<8x16xf32>, %1: tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT:    %2 = nn.add %0, %1
// CHECK-NEXT:    %3 = nn.tanh %2
// CHECK-NEXT:    %4 = nn.sigmoid %3
// CHECK-NEXT:    %5 = nn.multiply %3, %4
// CHECK-NEXT:    func.return %5
// CHECK-LABEL: func.func @f
// CHECK-NEXT:    %0 = func.call @f_fused_0(%x)
// CHECK-NEXT:    %1 = nn.softmax %0
// CHECK-NEXT:    %2 = func.call @f_fused_1(%0, %1)
// CHECK-NEXT:    func.return %2

func.func @f(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = nn.relu %x : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %1 = nn.softmax %0 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %2 = nn.add %0, %1 : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %3 = nn.tanh %2 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %4 = nn.sigmoid %3 : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %5 = nn.multiply %3, %4 : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return %5 : tensor<8x16xf32>
}

// -----

// A value that escapes (the relu's result is also returned) forces a boundary, even
// though its other user is injective. Constants feeding a group become arguments,
// transpose and reshape fuse with their neighbours, and names skip existing symbols.

// CHECK-LABEL: func.func private @g_fused_1(%0: tensor<24xf32>) -> tensor<4x6xf32>
// CHECK-NEXT:    %r = nn.reshape %0
// CHECK-NEXT:    %1 = nn.relu %r
// CHECK-NEXT:    func.return %1
// CHECK-LABEL: func.func private @g_fused_2(%0: tensor<4x6xf32>, %1: tensor<6xf32>) -> tensor<6x4xf32>
// CHECK-NEXT:    %2 = nn.bias_add %0, %1 {axis = 1 : i64}
// CHECK-NEXT:    %3 = nn.clip %2 {min = 0.000000e+00 : f64, max = 6.000000e+00 : f64}
// CHECK-NEXT:    %4 = nn.transpose %3 {perm = array<i64: 1, 0>}
// CHECK-NEXT:    func.return %4
// CHECK-LABEL: func.func @g
// CHECK-NEXT:    %c = nn.constant
// CHECK-NEXT:    %0 = func.call @g_fused_1(%x)
// CHECK-NEXT:    %1 = func.call @g_fused_2(%0, %c)
// CHECK-NEXT:    func.return %0, %1
// CHECK-LABEL: func.func private @g_fused_0()

func.func @g(%x: tensor<24xf32>) -> (tensor<4x6xf32>, tensor<6x4xf32>) {
  %c = nn.constant dense<1.0> : tensor<6xf32>
  %r = nn.reshape %x : (tensor<24xf32>) -> tensor<4x6xf32>
  %0 = nn.relu %r : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %1 = nn.bias_add %0, %c {axis = 1 : i64} : (tensor<4x6xf32>, tensor<6xf32>) -> tensor<4x6xf32>
  %2 = nn.clip %1 {min = 0.0 : f64, max = 6.0 : f64} : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %3 = nn.transpose %2 {perm = array<i64: 1, 0>} : (tensor<4x6xf32>) -> tensor<6x4xf32>
  func.return %0, %3 : tensor<4x6xf32>, tensor<6x4xf32>
}
func.func private @g_fused_0() -> ()

// -----

// Partition functions and functions on other targets are not fused; a group of
// reshapes only is a change of metadata and stays where it is.

// CHECK-LABEL: func.func private @part
// CHECK-NEXT:    nn.relu
// CHECK-LABEL: func.func @h
// CHECK-NEXT:    nn.relu
// CHECK-LABEL: func.func @k
// CHECK-NEXT:    nn.reshape
// CHECK-NEXT:    nn.reshape
// CHECK-NEXT:    nn.dense
// CHECK-NOT:   func.call

func.func private @part(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.compiler = "cutlass", byoc.target = #byoc.target<"cutlass">} {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
func.func @h(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"llvm">} {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
func.func @k(%x: tensor<2x3x4xf32>, %w: tensor<5x4xf32>) -> tensor<6x5xf32> {
  %0 = nn.reshape %x : (tensor<2x3x4xf32>) -> tensor<24xf32>
  %1 = nn.reshape %0 : (tensor<24xf32>) -> tensor<6x4xf32>
  %2 = nn.dense %1, %w : (tensor<6x4xf32>, tensor<5x4xf32>) -> tensor<6x5xf32>
  func.return %2 : tensor<6x5xf32>
}
