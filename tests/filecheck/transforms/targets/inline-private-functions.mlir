// RUN: partita-opt %s -p inline-private-functions --split-input-file | filecheck %s
// RUN: partita-opt %s -p 'inline-private-functions{all=true}' --split-input-file | filecheck %s --check-prefix=ALL

// metal cannot call subroutines: its private callees are inlined (transitively) and
// erased; cuda callees only with all=true; never across targets, never recursive ones.

// CHECK-LABEL: func.func @main(%x: tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %[[R:.*]] = nn.relu %x
// CHECK-NEXT:    %[[T:.*]] = nn.tanh %[[R]]
// CHECK-NEXT:    %[[C:.*]] = func.call @on_cuda(%[[T]])
// CHECK-NEXT:    %[[E:.*]] = func.call @even(%[[C]])
// CHECK-NEXT:    func.return %[[E]]
// CHECK-NOT:   func.func private @metal_outer
// CHECK-NOT:   func.func private @metal_inner
// ALL-LABEL:   func.func @main
// ALL:           func.call @on_cuda
// ALL:           func.call @even
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"metal", host = #byoc.target<"llvm">>} {
  %0 = func.call @metal_outer(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @on_cuda(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = func.call @even(%1) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}

func.func private @metal_outer(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"metal">} {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @metal_inner(%0) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %1 : tensor<4xf32>
}

func.func private @metal_inner(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"metal">} {
  %0 = nn.tanh %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// Across targets: refused, with or without all=true.
// CHECK-LABEL: func.func private @on_cuda
// CHECK-NEXT:    nn.sigmoid
// ALL-LABEL:   func.func private @on_cuda
func.func private @on_cuda(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"cuda">} {
  %0 = nn.sigmoid %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// Mutual recursion: never inlined.
// CHECK-LABEL: func.func private @even
// CHECK-NEXT:    func.call @odd
// CHECK-LABEL: func.func private @odd
// CHECK-NEXT:    func.call @even
// ALL-LABEL:   func.func private @even
// ALL-NEXT:      func.call @odd
// ALL-LABEL:   func.func private @odd
// ALL-NEXT:      func.call @even
func.func private @even(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"metal">} {
  %0 = func.call @odd(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
func.func private @odd(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"metal">} {
  %0 = func.call @even(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// cuda can call subroutines: kept by default, inlined with all=true (a callee without
// a target is inlined into any caller). @helper is also called across targets (from
// @host): inlined into @gpu but not erased; @twice, whose only call was inlined, is.

// CHECK-LABEL: func.func @gpu(%x: tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    func.call @helper(%x)
// ALL-LABEL:   func.func @gpu(%x: tensor<4xf32>) -> tensor<4xf32>
// ALL-NEXT:      %[[A:.*]] = nn.relu %x
// ALL-NEXT:      func.return %[[A]]
func.func @gpu(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"cuda", host = #byoc.target<"llvm">>} {
  %0 = func.call @helper(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @host
// CHECK-NEXT:    func.call @helper
// ALL-LABEL:   func.func @host
// ALL-NEXT:      func.call @helper
func.func @host(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"llvm">} {
  %0 = func.call @helper(%x) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func private @helper
// CHECK-NEXT:    nn.relu
// CHECK-NEXT:    func.call @twice
// ALL-LABEL:   func.func private @helper
// ALL-NEXT:      %[[H:.*]] = nn.relu %x
// ALL-NEXT:      func.return %[[H]]
func.func private @helper(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"cuda">} {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @twice(%0) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %1 : tensor<4xf32>
}

// CHECK-LABEL: func.func private @twice
// ALL-NOT:     @twice
func.func private @twice(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
}
