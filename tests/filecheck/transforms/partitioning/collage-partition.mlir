// RUN: partita-opt %s --split-input-file -p 'collage-partition{targets="cutlass,cublas,cudnn,cuda,llvm"}' | filecheck %s
// RUN: partita-opt %s --split-input-file -p 'collage-partition{targets="cuda,llvm" cost=mock costs="cuda=1,cuda.fused=1.5,llvm=2,cudnn=1" max-depth=1 report=true coalesce=false}' 2>&1 | filecheck %s --check-prefix=D1
// RUN: partita-opt %s --split-input-file -p 'collage-partition{targets="cuda,llvm" cost=mock costs="cuda=1,cuda.fused=1.5,llvm=2,cudnn=1" max-depth=3 report=true coalesce=false}' 2>&1 | filecheck %s --check-prefix=D3
// RUN: partita-opt %s --split-input-file -p 'collage-partition{targets="cuda,llvm" cost=mock costs="cuda=1,cuda.fused=1.5,llvm=2,cudnn=1" max-depth=1 report=true}' 2>&1 | filecheck %s --check-prefix=MAXC
// RUN: partita-opt %s --split-input-file -p 'collage-partition{targets="tensorrt,llvm" cost=mock costs="llvm=1,tensorrt=2,cudnn=1"}' | filecheck %s --check-prefix=HOST
// RUN: partita-opt %s --split-input-file -p 'collage-partition{targets="tensorrt,llvm" cost=mock costs="llvm=2,tensorrt=1,cudnn=1"}' | filecheck %s --check-prefix=BYOC

// The diamond relu0 -> tanh -> relu1 -> add, relu0 -> add. No built-in BYOC backend runs
// these ops (and lit cannot register one; tests/test_collage_partition.py does), so the
// native cuda target shows the effect of max-depth, with mock costs: a fused group costs
// 1.5, a single op 1. Native groups stay in @diamond; the report (stderr) shows them.
// max-depth=1: four single ops (4). max-depth=3: {relu0, tanh, add} is not convex (the
// path through relu1 leaves it), so the best is relu0 alone + {tanh, relu1, add} (2.5).
// D1:      collage: @diamond: {{[0-9]+}} candidates, 4 groups
// D1-NEXT: collage:   native cuda [cuda] cost=1s ops=nn.relu
// D1-NEXT: collage:   native cuda [cuda] cost=1s ops=nn.tanh
// D1-NEXT: collage:   native cuda [cuda] cost=1s ops=nn.relu
// D1-NEXT: collage:   native cuda [cuda] cost=1s ops=nn.add
// D1-NEXT: collage: @diamond: total=4s
// D3:      collage: @diamond: {{[0-9]+}} candidates, 2 groups
// D3-NEXT: collage:   native cuda [cuda] cost=1s ops=nn.relu
// D3-NEXT: collage:   native cuda [cuda.fused] cost=1.5s ops=nn.tanh, nn.relu, nn.add
// D3-NEXT: collage: @diamond: total=2.5s
// With MaxCoalesce (the default), the chosen groups merge after the search whenever the
// cuda rule allows it and it is cheaper: one group of the four ops, beyond max-depth=1.
// MAXC:      collage: @diamond: {{[0-9]+}} candidates, 1 groups
// MAXC-NEXT: collage:   native cuda [cuda.fused] cost=1.5s ops=nn.relu, nn.tanh, nn.relu, nn.add
// MAXC-NEXT: collage: @diamond: total=1.5s
// CHECK-LABEL: func.func @diamond
// CHECK-NOT:     byoc
// CHECK:         func.return
func.func @diamond(%x: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %0 = nn.relu %x : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %1 = nn.tanh %0 : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %2 = nn.relu %1 : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %3 = nn.add %0, %2 : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  func.return %3 : tensor<16x16xf32>
}

// -----

// An op alone: cutlass cannot run relu, tensorrt can run softmax (tensorrt.softmax). With
// llvm=1, tensorrt=2 it stays on the host; with the costs swapped it moves to tensorrt.
// HOST-LABEL: func.func @softmax
// HOST-NEXT:    nn.softmax
// HOST-NEXT:    func.return
// BYOC:       func.func private @collage_tensorrt_0(%x: tensor<16x16xf16>) -> tensor<16x16xf16> attributes {byoc.compiler = "tensorrt", byoc.primitive, byoc.inline, byoc.composite = "tensorrt.softmax", byoc.global_symbol = "collage_tensorrt_0"}
// BYOC-NEXT:    nn.softmax
// BYOC-LABEL: func.func @softmax
// BYOC-NEXT:    %0 = func.call @collage_tensorrt_0(%x)
// BYOC-NEXT:    func.return %0
func.func @softmax(%x: tensor<16x16xf16>) -> tensor<16x16xf16> {
  %0 = nn.softmax %x {axis = -1 : i64} : (tensor<16x16xf16>) -> tensor<16x16xf16>
  func.return %0 : tensor<16x16xf16>
}

// -----

// dense + bias + gelu in f16 with the roofline model: one cutlass kernel (tensor cores,
// fused epilogue) beats every split and the native targets.
// CHECK:       func.func private @collage_cutlass_0(%x: tensor<1600x768xf16>, %w: tensor<3072x768xf16>, %b: tensor<3072xf16>) -> tensor<1600x3072xf16> attributes {byoc.compiler = "cutlass", byoc.primitive, byoc.inline, byoc.composite = "cutlass.dense_bias_gelu", byoc.global_symbol = "collage_cutlass_0"}
// CHECK-NEXT:    nn.dense
// CHECK-NEXT:    nn.bias_add
// CHECK-NEXT:    nn.gelu
// CHECK-NEXT:    func.return
// CHECK-LABEL: func.func @dense_bias_gelu
// CHECK-NEXT:    %0 = func.call @collage_cutlass_0(%x, %w, %b)
// CHECK-NEXT:    func.return %0
func.func @dense_bias_gelu(%x: tensor<1600x768xf16>, %w: tensor<3072x768xf16>, %b: tensor<3072xf16>) -> tensor<1600x3072xf16> {
  %0 = nn.dense %x, %w : (tensor<1600x768xf16>, tensor<3072x768xf16>) -> tensor<1600x3072xf16>
  %1 = nn.bias_add %0, %b : (tensor<1600x3072xf16>, tensor<3072xf16>) -> tensor<1600x3072xf16>
  %2 = nn.gelu %1 : (tensor<1600x3072xf16>) -> tensor<1600x3072xf16>
  func.return %2 : tensor<1600x3072xf16>
}

// -----

// Two equal MLP blocks: equal partitions share one outlined function per kernel (the
// second dense goes to cublas under the roofline model: its bias and the residual add
// fuse into one native cuda kernel, cheaper than cutlass's bias epilogue plus an add).
// CHECK:       func.func private @collage_cutlass_0({{.*}}) -> tensor<1600x3072xf16> attributes {byoc.compiler = "cutlass", {{.*}}byoc.composite = "cutlass.dense_bias_gelu", byoc.global_symbol = "collage_cutlass_0"}
// CHECK:       func.func private @collage_cublas_0({{.*}}) -> tensor<1600x768xf16> attributes {byoc.compiler = "cublas", {{.*}}byoc.composite = "cublas.dense", byoc.global_symbol = "collage_cublas_0"}
// CHECK-NOT:   func.func private
// CHECK-LABEL: func.func @two_mlps
// CHECK-NEXT:    %0 = func.call @collage_cutlass_0(%x, %w, %b)
// CHECK-NEXT:    %1 = func.call @collage_cublas_0(%0, %w2)
// CHECK-NEXT:    %2 = nn.bias_add %1, %b2
// CHECK-NEXT:    %3 = nn.add %2, %x
// CHECK-NEXT:    %4 = func.call @collage_cutlass_0(%3, %w, %b)
// CHECK-NEXT:    %5 = func.call @collage_cublas_0(%4, %w2)
// CHECK-NEXT:    %6 = nn.bias_add %5, %b2
// CHECK-NEXT:    %7 = nn.add %6, %3
// CHECK-NEXT:    func.return %7
func.func @two_mlps(%x: tensor<1600x768xf16>, %w: tensor<3072x768xf16>, %b: tensor<3072xf16>, %w2: tensor<768x3072xf16>, %b2: tensor<768xf16>) -> tensor<1600x768xf16> {
  %0 = nn.dense %x, %w : (tensor<1600x768xf16>, tensor<3072x768xf16>) -> tensor<1600x3072xf16>
  %1 = nn.bias_add %0, %b : (tensor<1600x3072xf16>, tensor<3072xf16>) -> tensor<1600x3072xf16>
  %2 = nn.gelu %1 : (tensor<1600x3072xf16>) -> tensor<1600x3072xf16>
  %3 = nn.dense %2, %w2 : (tensor<1600x3072xf16>, tensor<768x3072xf16>) -> tensor<1600x768xf16>
  %4 = nn.bias_add %3, %b2 : (tensor<1600x768xf16>, tensor<768xf16>) -> tensor<1600x768xf16>
  %5 = nn.add %4, %x : (tensor<1600x768xf16>, tensor<1600x768xf16>) -> tensor<1600x768xf16>
  %6 = nn.dense %5, %w : (tensor<1600x768xf16>, tensor<3072x768xf16>) -> tensor<1600x3072xf16>
  %7 = nn.bias_add %6, %b : (tensor<1600x3072xf16>, tensor<3072xf16>) -> tensor<1600x3072xf16>
  %8 = nn.gelu %7 : (tensor<1600x3072xf16>) -> tensor<1600x3072xf16>
  %9 = nn.dense %8, %w2 : (tensor<1600x3072xf16>, tensor<768x3072xf16>) -> tensor<1600x768xf16>
  %10 = nn.bias_add %9, %b2 : (tensor<1600x768xf16>, tensor<768xf16>) -> tensor<1600x768xf16>
  %11 = nn.add %10, %5 : (tensor<1600x768xf16>, tensor<1600x768xf16>) -> tensor<1600x768xf16>
  func.return %11 : tensor<1600x768xf16>
}

// -----

// An existing partition is a fixed node: left alone (and outlined under its symbol),
// the rest is placed around it.
// CHECK:       func.func private @tvmgen_default_cudnn_main_0
// CHECK-LABEL: func.func @existing
// CHECK-NEXT:    %0 = func.call @tvmgen_default_cudnn_main_0(%x)
// CHECK-NEXT:    nn.relu %0
func.func @existing(%x: tensor<16x16xf16>) -> tensor<16x16xf16> {
  %0 = byoc.partition(%x) {byoc.compiler = "cudnn", byoc.global_symbol = "tvmgen_default_cudnn_main_0", byoc.composite = "cudnn.softmax"} ({
  ^bb0(%a: tensor<16x16xf16>):
    %1 = nn.softmax %a {axis = -1 : i64} : (tensor<16x16xf16>) -> tensor<16x16xf16>
    byoc.yield %1 : tensor<16x16xf16>
  }) : (tensor<16x16xf16>) -> tensor<16x16xf16>
  %2 = nn.relu %0 : (tensor<16x16xf16>) -> tensor<16x16xf16>
  func.return %2 : tensor<16x16xf16>
}
