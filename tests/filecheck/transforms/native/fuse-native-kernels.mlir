// RUN: partita-opt %s --split-input-file -p fuse-native-kernels | filecheck %s
// RUN: partita-opt %s --split-input-file -p fuse-native-kernels,fuse-native-kernels | filecheck %s

// A relu -> add(bias) -> gelu chain is one group; the dense anchors a group of its own
// (its producers never join it, and its result is used twice); the softmax anchors a
// third, with the sigmoid of its input and the multiply as its epilogue. Names count
// groups in program order.

// CHECK-LABEL: func.func private @main_fused_0(%0: tensor<?x64xf16>, %1: tensor<64xf16>) -> tensor<?x64xf16>
// CHECK-SAME:    attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive}
// CHECK-NEXT:    %2 = nn.relu %0
// CHECK-NEXT:    %3 = nn.add %2, %1
// CHECK-NEXT:    %4 = nn.gelu %3
// CHECK-NEXT:    func.return %4 : tensor<?x64xf16>
// CHECK-LABEL: func.func private @main_fused_1(%0: tensor<?x64xf16>, %1: tensor<32x64xf16>) -> tensor<?x32xf16>
// CHECK-NEXT:    %2 = nn.dense %0, %1
// CHECK-NEXT:    func.return %2
// CHECK-LABEL: func.func private @main_fused_2(%0: tensor<?x32xf16>) -> tensor<?x32xf16>
// CHECK-NEXT:    %1 = nn.softmax %0
// CHECK-NEXT:    %2 = nn.sigmoid %0
// CHECK-NEXT:    %3 = nn.multiply %2, %1
// CHECK-NEXT:    func.return %3
// CHECK-LABEL: func.func @main
// CHECK-NEXT:    %0 = func.call @main_fused_0(%x, %b) : (tensor<?x64xf16>, tensor<64xf16>) -> tensor<?x64xf16>
// CHECK-NEXT:    %1 = func.call @main_fused_1(%0, %w)
// CHECK-NEXT:    %2 = func.call @main_fused_2(%1)
// CHECK-NEXT:    func.return %2
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

// Convexity: the relu computes the softmax's operand, so it never joins the softmax's
// group (an anchor's producers stay outside) and, used by the add too, ends its own.
// The add and the injective diamond after it (tanh feeding both the sigmoid and the
// multiply) are the softmax's epilogue.

// CHECK-LABEL: func.func private @f_fused_0(%0: tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-SAME:    attributes {byoc.target = #byoc.target<"cuda">, byoc.primitive}
// CHECK-NEXT:    %1 = nn.relu %0
// CHECK-NEXT:    func.return %1
// CHECK-LABEL: func.func private @f_fused_1(%0: tensor<8x16xf32>) -> tensor<8x16xf32>
// CHECK-NEXT:    %1 = nn.softmax %0
// CHECK-NEXT:    %2 = nn.add %0, %1
// CHECK-NEXT:    %3 = nn.tanh %2
// CHECK-NEXT:    %4 = nn.sigmoid %3
// CHECK-NEXT:    %5 = nn.multiply %3, %4
// CHECK-NEXT:    func.return %5
// CHECK-LABEL: func.func @f
// CHECK-NEXT:    %0 = func.call @f_fused_0(%x)
// CHECK-NEXT:    %1 = func.call @f_fused_1(%0)
// CHECK-NEXT:    func.return %1

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
// reshapes only is a change of metadata and stays where it is; an op no kernel computes
// (a transposed convolution over dynamic H and W) runs on the host.

// CHECK-LABEL: func.func private @part
// CHECK-NEXT:    nn.relu
// CHECK-LABEL: func.func @h
// CHECK-NEXT:    nn.relu
// CHECK-LABEL: func.func @k
// CHECK-NEXT:    nn.reshape
// CHECK-NEXT:    nn.reshape
// CHECK-LABEL: func.func @p
// CHECK-NEXT:    nn.conv2d_transpose
// CHECK-NOT:   func.call

func.func private @part(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.compiler = "cutlass", byoc.target = #byoc.target<"cutlass">} {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
func.func @h(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"llvm">} {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
func.func @k(%x: tensor<2x3x4xf32>, %s: tensor<4xf32>) -> tensor<6x4xf32> {
  %0 = nn.reshape %x : (tensor<2x3x4xf32>) -> tensor<24xf32>
  %1 = nn.reshape %0 : (tensor<24xf32>) -> tensor<6x4xf32>
  func.return %1 : tensor<6x4xf32>
}
func.func @p(%x: tensor<1x4x?x?xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x3x?x?xf32> {
  %0 = nn.conv2d_transpose %x, %w : (tensor<1x4x?x?xf32>, tensor<4x3x3x3xf32>) -> tensor<1x3x?x?xf32>
  func.return %0 : tensor<1x3x?x?xf32>
}

// -----

// GEMM epilogues (TVM's out-elemwise-fusable): bias_add, the residual add and the relu
// join the dense; the relu producing the dense's input stays a kernel of its own even
// though the residual add reads it too (it would feed the anchor from inside). A
// transpose after a batch_matmul remaps indices: it starts a new group. Of two softmaxes
// under one add, the earlier keeps the add (the later's result is a side input). The
// last add broadcasts the matmul's result: it is no epilogue of the matmul, and joins
// the softmax's group instead, the matmul's result a side input.

// CHECK-LABEL: func.func private @e_fused_0(%0: tensor<?x8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT:    nn.relu
// CHECK-NEXT:    func.return
// CHECK-LABEL: func.func private @e_fused_1(%0: tensor<?x8xf32>, %1: tensor<8x8xf32>, %2: tensor<8xf32>) -> tensor<?x8xf32>
// CHECK-NEXT:    %3 = nn.dense %0, %1
// CHECK-NEXT:    %4 = nn.bias_add %3, %2
// CHECK-NEXT:    %5 = nn.add %4, %0
// CHECK-NEXT:    %6 = nn.relu %5
// CHECK-NEXT:    func.return %6
// CHECK-LABEL: func.func private @e_fused_2(%0: tensor<2x4x8xf32>, %1: tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
// CHECK-NEXT:    nn.batch_matmul
// CHECK-NEXT:    func.return
// CHECK-LABEL: func.func private @e_fused_3(%0: tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
// CHECK-NEXT:    nn.transpose
// CHECK-NEXT:    func.return
// CHECK-LABEL: func.func private @e_fused_4(%0: tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
// CHECK-NEXT:    nn.softmax
// CHECK-NEXT:    func.return
// CHECK-LABEL: func.func private @e_fused_5(%0: tensor<4x8xf32>, %1: tensor<8x4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT:    nn.matmul
// CHECK-NEXT:    func.return
// CHECK-LABEL: func.func private @e_fused_6(%0: tensor<2x4x4xf32>, %1: tensor<2x4x4xf32>, %2: tensor<4x4xf32>) -> tensor<2x4x4xf32>
// CHECK-NEXT:    %3 = nn.softmax %0
// CHECK-NEXT:    %4 = nn.add %3, %1
// CHECK-NEXT:    %5 = nn.add %4, %2
// CHECK-NEXT:    func.return %5
// CHECK-LABEL: func.func @e
// CHECK-NEXT:    %0 = func.call @e_fused_0(%x)
// CHECK-NEXT:    %1 = func.call @e_fused_1(%0, %w, %b)
// CHECK-NEXT:    %2 = func.call @e_fused_2(%p, %q)
// CHECK-NEXT:    %3 = func.call @e_fused_3(%2)
// CHECK-NEXT:    %4 = func.call @e_fused_4(%2)
// CHECK-NEXT:    %5 = func.call @e_fused_5(%u, %v)
// CHECK-NEXT:    %6 = func.call @e_fused_6(%3, %4, %5)
// CHECK-NEXT:    func.return %1, %6

func.func @e(%x: tensor<?x8xf32>, %w: tensor<8x8xf32>, %b: tensor<8xf32>, %p: tensor<2x4x8xf32>, %q: tensor<2x8x4xf32>, %u: tensor<4x8xf32>, %v: tensor<8x4xf32>) -> (tensor<?x8xf32>, tensor<2x4x4xf32>) {
  %0 = nn.relu %x : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %1 = nn.dense %0, %w : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  %2 = nn.bias_add %1, %b : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  %3 = nn.add %2, %0 : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %4 = nn.relu %3 : (tensor<?x8xf32>) -> tensor<?x8xf32>
  %5 = nn.batch_matmul %p, %q {transpose_b = false} : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  %6 = nn.transpose %5 {perm = array<i64: 0, 2, 1>} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %7 = nn.softmax %6 : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %8 = nn.softmax %5 : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %9 = nn.add %7, %8 : (tensor<2x4x4xf32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %10 = nn.matmul %u, %v : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %11 = nn.add %9, %10 : (tensor<2x4x4xf32>, tensor<4x4xf32>) -> tensor<2x4x4xf32>
  func.return %4, %11 : tensor<?x8xf32>, tensor<2x4x4xf32>
}

// -----

// Two equal layers (around an opaque call): structurally equal groups share one function (TVM's compiler cache),
// so the kernel is compiled once; a group with another shape gets its own.

// CHECK-LABEL: func.func private @layers_fused_0(%{{.*}}: tensor<4x8xf32>, %{{.*}}: tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NOT:   func.func private @layers_fused_
// CHECK-LABEL: func.func private @layers_fused_1(%{{.*}}: tensor<2x8xf32>, %{{.*}}: tensor<8xf32>) -> tensor<2x8xf32>
// CHECK-LABEL: func.func @layers(
// CHECK:         %[[A:.*]] = func.call @layers_fused_0(%x, %b)
// CHECK:         %[[P:.*]] = func.call @opaque(%[[A]])
// CHECK:         %[[B:.*]] = func.call @layers_fused_0(%[[P]], %c)
// CHECK:         func.call @layers_fused_1(%y, %b)
func.func private @opaque(tensor<4x8xf32>) -> tensor<4x8xf32>
func.func @layers(%x: tensor<4x8xf32>, %y: tensor<2x8xf32>, %b: tensor<8xf32>, %c: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<2x8xf32>) attributes {byoc.target = #byoc.target<"cuda">} {
  %0 = nn.bias_add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = nn.relu %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = func.call @opaque(%1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = nn.bias_add %2, %c : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %4 = nn.relu %3 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = nn.bias_add %y, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %6 = nn.relu %5 : (tensor<2x8xf32>) -> tensor<2x8xf32>
  func.return %4, %6 : tensor<4x8xf32>, tensor<2x8xf32>
}

// -----

// Pools anchor window kernels: the relu computing the max pool's operand stays outside,
// the bias_add and relu after it are its epilogue; a pad and a concatenate are injective
// and fuse with the element-wise ops around them; a pool over dynamic spatial dims is a
// window kernel too (an image of any size: its result dims come from its shape rule).

// CHECK-LABEL: func.func private @cnn_fused_0(%0: tensor<?x8x16x16xf32>) -> tensor<?x8x16x16xf32>
// CHECK-NEXT:    nn.relu
// CHECK-NEXT:    func.return
// CHECK-LABEL: func.func private @cnn_fused_1(%0: tensor<?x8x16x16xf32>, %1: tensor<8xf32>) -> tensor<?x8x8x8xf32>
// CHECK-NEXT:    %2 = nn.max_pool2d %0
// CHECK-NEXT:    %3 = nn.bias_add %2, %1
// CHECK-NEXT:    %4 = nn.relu %3
// CHECK-NEXT:    func.return %4
// CHECK-LABEL: func.func private @cnn_fused_2(%0: tensor<?x8x8x8xf32>, %1: tensor<?x2x10x10xf32>) -> tensor<?x10x10x10xf32>
// CHECK-NEXT:    %2 = nn.pad %0
// CHECK-NEXT:    %3 = nn.concatenate %2, %1 {axis = 1 : i64}
// CHECK-NEXT:    %4 = nn.tanh %3
// CHECK-NEXT:    func.return %4
// CHECK-LABEL: func.func private @cnn_fused_3(%0: tensor<?x10x10x10xf32>) -> tensor<?x10x1x1xf32>
// CHECK-NEXT:    nn.global_avg_pool2d
// CHECK-NEXT:    func.return
// CHECK-LABEL: func.func private @cnn_fused_4(%0: tensor<1x1x?x?xf32>) -> tensor<1x1x?x?xf32>
// CHECK-NEXT:    nn.avg_pool2d
// CHECK-NEXT:    func.return
// CHECK-LABEL: func.func @cnn
// CHECK-NEXT:    %0 = func.call @cnn_fused_0(%x)
// CHECK-NEXT:    %1 = func.call @cnn_fused_1(%0, %b)
// CHECK-NEXT:    %2 = func.call @cnn_fused_2(%1, %y)
// CHECK-NEXT:    %3 = func.call @cnn_fused_3(%2)
// CHECK-NEXT:    %4 = func.call @cnn_fused_4(%z)
// CHECK-NEXT:    func.return %3, %4
func.func @cnn(%x: tensor<?x8x16x16xf32>, %b: tensor<8xf32>, %y: tensor<?x2x10x10xf32>, %z: tensor<1x1x?x?xf32>) -> (tensor<?x10x1x1xf32>, tensor<1x1x?x?xf32>) attributes {byoc.target = #byoc.target<"cuda">} {
  %0 = nn.relu %x : (tensor<?x8x16x16xf32>) -> tensor<?x8x16x16xf32>
  %1 = nn.max_pool2d %0 {pool_size = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<?x8x16x16xf32>) -> tensor<?x8x8x8xf32>
  %2 = nn.bias_add %1, %b {axis = 1 : i64} : (tensor<?x8x8x8xf32>, tensor<8xf32>) -> tensor<?x8x8x8xf32>
  %3 = nn.relu %2 : (tensor<?x8x8x8xf32>) -> tensor<?x8x8x8xf32>
  %4 = nn.pad %3 {pad_before = array<i64: 0, 0, 1, 1>, pad_after = array<i64: 0, 0, 1, 1>} : (tensor<?x8x8x8xf32>) -> tensor<?x8x10x10xf32>
  %5 = nn.concatenate %4, %y {axis = 1 : i64} : (tensor<?x8x10x10xf32>, tensor<?x2x10x10xf32>) -> tensor<?x10x10x10xf32>
  %6 = nn.tanh %5 : (tensor<?x10x10x10xf32>) -> tensor<?x10x10x10xf32>
  %7 = nn.global_avg_pool2d %6 : (tensor<?x10x10x10xf32>) -> tensor<?x10x1x1xf32>
  %8 = nn.avg_pool2d %z {pool_size = array<i64: 2, 2>} : (tensor<1x1x?x?xf32>) -> tensor<1x1x?x?xf32>
  func.return %7, %8 : tensor<?x10x1x1xf32>, tensor<1x1x?x?xf32>
}

// -----
// A row anchor takes in the element-wise group computing its row input (its prologue)
// when every value of that group is used only there: the square before a mean, the
// residual add before a layer norm. A producer also read elsewhere (the relu, read by the
// softmax's epilogue) or one that remaps indices (the transpose) stays outside.

// CHECK-LABEL: func.func private @q_fused_0(%0: tensor<4x16xf32>) -> tensor<4x1xf32>
// CHECK-NEXT:    %1 = nn.multiply %0, %0
// CHECK-NEXT:    %2 = nn.reduce_mean %1
// CHECK-NEXT:    func.return %2
// CHECK-LABEL: func.func private @q_fused_1(%0: tensor<4x16xf32>, %1: tensor<4x16xf32>, %2: tensor<16xf32>, %3: tensor<16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %4 = nn.add %0, %1
// CHECK-NEXT:    %5 = nn.layer_norm %4, %2, %3
// CHECK-NEXT:    func.return %5
// CHECK-LABEL: func.func private @q_fused_2(%0: tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %1 = nn.relu %0
// CHECK-NEXT:    func.return %1
// CHECK-LABEL: func.func private @q_fused_3(%0: tensor<4x16xf32>) -> tensor<4x16xf32>
// CHECK-NEXT:    %1 = nn.softmax %0
// CHECK-NEXT:    %2 = nn.add %1, %0
// CHECK-NEXT:    func.return %2
// CHECK-LABEL: func.func private @q_fused_4(%0: tensor<4x16xf32>) -> tensor<16x4xf32>
// CHECK-NEXT:    %1 = nn.transpose %0
// CHECK-NEXT:    func.return %1
// CHECK-LABEL: func.func private @q_fused_5(%0: tensor<16x4xf32>) -> tensor<16x4xf32>
// CHECK-NEXT:    %1 = nn.softmax %0
// CHECK-NEXT:    func.return %1
// CHECK-LABEL: func.func @q
// CHECK-NEXT:    %0 = func.call @q_fused_0(%x)
// CHECK-NEXT:    %1 = func.call @q_fused_1(%x, %r, %g, %b)
// CHECK-NEXT:    %2 = func.call @q_fused_2(%r)
// CHECK-NEXT:    %3 = func.call @q_fused_3(%2)
// CHECK-NEXT:    %4 = func.call @q_fused_4(%x)
// CHECK-NEXT:    %5 = func.call @q_fused_5(%4)
// CHECK-NEXT:    func.return %0, %1, %3, %5

func.func @q(%x: tensor<4x16xf32>, %r: tensor<4x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>) -> (tensor<4x1xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<16x4xf32>) attributes {byoc.target = #byoc.target<"cuda">} {
  %0 = nn.multiply %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %1 = nn.reduce_mean %0 {axes = array<i64: 1>, keepdims = true} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %2 = nn.add %x, %r : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %3 = nn.layer_norm %2, %g, %b {axis = 1 : i64, epsilon = 1.0e-05 : f64} : (tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %4 = nn.relu %r : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %5 = nn.softmax %4 : (tensor<4x16xf32>) -> tensor<4x16xf32>
  %6 = nn.add %5, %4 : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %7 = nn.transpose %x {perm = array<i64: 1, 0>} : (tensor<4x16xf32>) -> tensor<16x4xf32>
  %8 = nn.softmax %7 : (tensor<16x4xf32>) -> tensor<16x4xf32>
  func.return %1, %3, %6, %8 : tensor<4x1xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<16x4xf32>
}

// -----
// Index views that read rows in order join a row anchor's prologue (BERT's embeddings: table
// rows gathered and summed in the layer norm's kernel); a head-split reshape sized by the
// sum (a shape reference) reads those dims from the norm's result, after it. A gather along
// the row (axis 1) stays a kernel of its own.

// CHECK-LABEL: func.func private @emb_fused_0(%0: tensor<50x16xf32>, %1: tensor<2x?xi64>, %2: tensor<64x16xf32>, %3: tensor<1x?xi64>, %4: tensor<16xf32>, %5: tensor<16xf32>) -> tensor<2x?x16xf32>
// CHECK-NEXT:    %6 = nn.take %0, %1
// CHECK-NEXT:    %7 = nn.take %2, %3
// CHECK-NEXT:    %8 = nn.add %6, %7
// CHECK-NEXT:    %9 = nn.layer_norm %8, %4, %5
// CHECK-NEXT:    func.return %9
// CHECK-LABEL: func.func private @emb_fused_1(%0: tensor<2x16xf32>, %1: tensor<16xi64>) -> tensor<2x16xf32>
// CHECK-NEXT:    %2 = nn.take %0, %1 {axis = 1 : i64}
// CHECK-NEXT:    func.return %2
// CHECK-LABEL: func.func private @emb_fused_2(%0: tensor<2x16xf32>, %1: tensor<16xf32>, %2: tensor<16xf32>) -> tensor<2x16xf32>
// CHECK-NEXT:    %3 = nn.layer_norm %0, %1, %2
// CHECK-NEXT:    func.return %3
// CHECK-LABEL: func.func @emb
// CHECK-NEXT:    %0 = func.call @emb_fused_0(%words, %ids, %pos, %pids, %g, %b)
// CHECK-NEXT:    %1 = nn.reshape %q, %0 {ref_axes = array<i64: 1>, targets = array<i64: 1>}
// CHECK-NEXT:    %2 = func.call @emb_fused_1(%y, %perm)
// CHECK-NEXT:    %3 = func.call @emb_fused_2(%2, %g, %b)
// CHECK-NEXT:    func.return %0, %1, %3

func.func @emb(%ids: tensor<2x?xi64>, %pids: tensor<1x?xi64>, %words: tensor<50x16xf32>, %pos: tensor<64x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>, %q: tensor<2x?x16xf32>, %y: tensor<2x16xf32>, %perm: tensor<16xi64>) -> (tensor<2x?x16xf32>, tensor<2x?x4x4xf32>, tensor<2x16xf32>) attributes {byoc.target = #byoc.target<"cuda">} {
  %0 = nn.take %words, %ids : (tensor<50x16xf32>, tensor<2x?xi64>) -> tensor<2x?x16xf32>
  %1 = nn.take %pos, %pids : (tensor<64x16xf32>, tensor<1x?xi64>) -> tensor<1x?x16xf32>
  %2 = nn.add %0, %1 : (tensor<2x?x16xf32>, tensor<1x?x16xf32>) -> tensor<2x?x16xf32>
  %3 = nn.layer_norm %2, %g, %b {axis = 2 : i64, epsilon = 1.0e-12 : f64} : (tensor<2x?x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x?x16xf32>
  %4 = nn.reshape %q, %2 {ref_axes = array<i64: 1>, targets = array<i64: 1>} : (tensor<2x?x16xf32>, tensor<2x?x16xf32>) -> tensor<2x?x4x4xf32>
  %5 = nn.take %y, %perm {axis = 1 : i64} : (tensor<2x16xf32>, tensor<16xi64>) -> tensor<2x16xf32>
  %6 = nn.layer_norm %5, %g, %b {axis = 1 : i64, epsilon = 1.0e-05 : f64} : (tensor<2x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x16xf32>
  func.return %3, %4, %6 : tensor<2x?x16xf32>, tensor<2x?x4x4xf32>, tensor<2x16xf32>
}

// -----

// An attention reads its operands through index views: the head splits of a packed QKV
// projection (a strided slice and a reshape each) join its kernel, whose data input is the
// packed tensor. A view used elsewhere too (%k4, also returned) and a group that computes
// (%q2's multiply) stay kernels of their own.

// CHECK-LABEL: func.func private @qkv_fused_0(%0: tensor<2x5x48xf16>) -> tensor<2x5x2x8xf16>
// CHECK-NEXT:    %k = nn.strided_slice %0 {begin = array<i64: 0, 0, 16>
// CHECK-NEXT:    %k4 = nn.reshape %k
// CHECK-NEXT:    func.return %k4
// CHECK-LABEL: func.func private @qkv_fused_1(%0: tensor<2x5x48xf16>, %1: tensor<2x5x2x8xf16>, %2: tensor<2x1x1x5xi1>) -> tensor<2x5x2x8xf16>
// CHECK-NEXT:    %q = nn.strided_slice %0 {begin = array<i64: 0, 0, 0>
// CHECK-NEXT:    %q4 = nn.reshape %q
// CHECK-NEXT:    %v = nn.strided_slice %0 {begin = array<i64: 0, 0, 32>
// CHECK-NEXT:    %v4 = nn.reshape %v
// CHECK-NEXT:    %a = nn.attention %q4, %1, %v4, %2
// CHECK-NEXT:    func.return %a
// CHECK-LABEL: func.func private @qkv_fused_2(%0: tensor<2x5x48xf16>) -> tensor<2x5x2x8xf16>
// CHECK-NEXT:    %t = nn.strided_slice %0
// CHECK-NEXT:    %t4 = nn.reshape %t
// CHECK-NEXT:    %q2 = nn.multiply %t4, %t4
// CHECK-NEXT:    func.return %q2
// CHECK-LABEL: func.func private @qkv_fused_3(%0: tensor<2x5x48xf16>, %1: tensor<2x5x2x8xf16>) -> tensor<2x5x2x8xf16>
// CHECK-NEXT:    %u = nn.strided_slice %0
// CHECK-NEXT:    %u4 = nn.reshape %u
// CHECK-NEXT:    %b = nn.attention %1, %u4, %1
// CHECK-NEXT:    func.return %b
// CHECK-LABEL: func.func @qkv
// CHECK-NEXT:    %k4 = func.call @qkv_fused_0(%x)
// CHECK-NEXT:    %a = func.call @qkv_fused_1(%x, %k4, %m)
// CHECK-NEXT:    %q2 = func.call @qkv_fused_2(%x)
// CHECK-NEXT:    %b = func.call @qkv_fused_3(%x, %q2)
// CHECK-NEXT:    func.return %a, %b, %k4

func.func @qkv(%x: tensor<2x5x48xf16>, %m: tensor<2x1x1x5xi1>) -> (tensor<2x5x2x8xf16>, tensor<2x5x2x8xf16>, tensor<2x5x2x8xf16>) attributes {byoc.target = #byoc.target<"cuda">} {
  %q = nn.strided_slice %x {begin = array<i64: 0, 0, 0>, end = array<i64: 2, 5, 16>, strides = array<i64: 1, 1, 1>} : (tensor<2x5x48xf16>) -> tensor<2x5x16xf16>
  %q4 = nn.reshape %q : (tensor<2x5x16xf16>) -> tensor<2x5x2x8xf16>
  %k = nn.strided_slice %x {begin = array<i64: 0, 0, 16>, end = array<i64: 2, 5, 32>, strides = array<i64: 1, 1, 1>} : (tensor<2x5x48xf16>) -> tensor<2x5x16xf16>
  %k4 = nn.reshape %k : (tensor<2x5x16xf16>) -> tensor<2x5x2x8xf16>
  %v = nn.strided_slice %x {begin = array<i64: 0, 0, 32>, end = array<i64: 2, 5, 48>, strides = array<i64: 1, 1, 1>} : (tensor<2x5x48xf16>) -> tensor<2x5x16xf16>
  %v4 = nn.reshape %v : (tensor<2x5x16xf16>) -> tensor<2x5x2x8xf16>
  %a = nn.attention %q4, %k4, %v4, %m {scale = 0.35 : f64, causal = true, layout = "BSHD"} : (tensor<2x5x2x8xf16>, tensor<2x5x2x8xf16>, tensor<2x5x2x8xf16>, tensor<2x1x1x5xi1>) -> tensor<2x5x2x8xf16>
  %t = nn.strided_slice %x {begin = array<i64: 0, 0, 0>, end = array<i64: 2, 5, 16>, strides = array<i64: 1, 1, 1>} : (tensor<2x5x48xf16>) -> tensor<2x5x16xf16>
  %t4 = nn.reshape %t : (tensor<2x5x16xf16>) -> tensor<2x5x2x8xf16>
  %q2 = nn.multiply %t4, %t4 : (tensor<2x5x2x8xf16>, tensor<2x5x2x8xf16>) -> tensor<2x5x2x8xf16>
  %u = nn.strided_slice %x {begin = array<i64: 0, 0, 16>, end = array<i64: 2, 5, 32>, strides = array<i64: 1, 1, 1>} : (tensor<2x5x48xf16>) -> tensor<2x5x16xf16>
  %u4 = nn.reshape %u : (tensor<2x5x16xf16>) -> tensor<2x5x2x8xf16>
  %b = nn.attention %q2, %u4, %q2 {scale = 0.35 : f64, layout = "BSHD"} : (tensor<2x5x2x8xf16>, tensor<2x5x2x8xf16>, tensor<2x5x2x8xf16>) -> tensor<2x5x2x8xf16>
  func.return %a, %b, %k4 : tensor<2x5x2x8xf16>, tensor<2x5x2x8xf16>, tensor<2x5x2x8xf16>
}

// -----

// The rotary embedding computes its cos / sin where it reads them (its rule's
// `computes`): each rotary gets its own copy of the table's injective producers, so the
// tables of two layers are no kernels of their own and both layers call one function.
// A table also used elsewhere (%s returned) stays a kernel for that use.

// CHECK-LABEL: func.func private @rope_fused_0(%0: tensor<1x5xi64>, %1: tensor<4xf32>) -> tensor<1x5x4xf32>
// CHECK-NEXT:    %p = nn.cast %0
// CHECK-NEXT:    %p3 = nn.reshape %p
// CHECK-NEXT:    %f = nn.multiply %p3, %1
// CHECK-NEXT:    %s = nn.sin %f
// CHECK-NEXT:    func.return %s
// CHECK-LABEL: func.func private @rope_fused_1(%0: tensor<1x5xi64>, %1: tensor<4xf32>, %2: tensor<2x2x5x8xf32>) -> tensor<2x2x5x8xf32>
// CHECK-NEXT:    %p = nn.cast %0
// CHECK-NEXT:    %p3 = nn.reshape %p
// CHECK-NEXT:    %f = nn.multiply %p3, %1
// CHECK-NEXT:    %c = nn.cos %f
// CHECK-NEXT:    %p_1 = nn.cast %0
// CHECK-NEXT:    %p3_1 = nn.reshape %p_1
// CHECK-NEXT:    %f_1 = nn.multiply %p3_1, %1
// CHECK-NEXT:    %s = nn.sin %f_1
// CHECK-NEXT:    %3 = nn.rotary_embedding %2, %c, %s
// CHECK-NEXT:    func.return %3
// CHECK-LABEL: func.func @rope
// CHECK-NEXT:    %s = func.call @rope_fused_0(%pos, %inv)
// CHECK-NEXT:    %0 = func.call @rope_fused_1(%pos, %inv, %x)
// CHECK-NEXT:    %1 = func.call @rope_fused_1(%pos, %inv, %y)
// CHECK-NEXT:    func.return %0, %1, %s

func.func @rope(%x: tensor<2x2x5x8xf32>, %y: tensor<2x2x5x8xf32>, %pos: tensor<1x5xi64>, %inv: tensor<4xf32>) -> (tensor<2x2x5x8xf32>, tensor<2x2x5x8xf32>, tensor<1x5x4xf32>) attributes {byoc.target = #byoc.target<"cuda">} {
  %p = nn.cast %pos : (tensor<1x5xi64>) -> tensor<1x5xf32>
  %p3 = nn.reshape %p : (tensor<1x5xf32>) -> tensor<1x5x1xf32>
  %f = nn.multiply %p3, %inv : (tensor<1x5x1xf32>, tensor<4xf32>) -> tensor<1x5x4xf32>
  %c = nn.cos %f : (tensor<1x5x4xf32>) -> tensor<1x5x4xf32>
  %s = nn.sin %f : (tensor<1x5x4xf32>) -> tensor<1x5x4xf32>
  %0 = nn.rotary_embedding %x, %c, %s : (tensor<2x2x5x8xf32>, tensor<1x5x4xf32>, tensor<1x5x4xf32>) -> tensor<2x2x5x8xf32>
  %1 = nn.rotary_embedding %y, %c, %s : (tensor<2x2x5x8xf32>, tensor<1x5x4xf32>, tensor<1x5x4xf32>) -> tensor<2x2x5x8xf32>
  func.return %0, %1, %s : tensor<2x2x5x8xf32>, tensor<2x2x5x8xf32>, tensor<1x5x4xf32>
}
