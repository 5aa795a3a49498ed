// RUN: partita-opt %s -p split-host-device --split-input-file | filecheck %s

// Two delegated regions on another target, with an existing @main_kernel: the kernels
// are @main_kernel_0 and @main_kernel_1, placed after @main, their free values as
// parameters in first-use order. The region on the caller's own target is inlined.

// CHECK-LABEL: func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %a = nn.add %x, %y
// CHECK-NEXT:    %0 = func.call @main_kernel_0(%y, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %1 = nn.tanh %0
// CHECK-NEXT:    %2 = func.call @main_kernel_1(%1) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    func.return %2 : tensor<4xf32>
// CHECK-NEXT:  }
// CHECK-NOT:   byoc.on_target
func.func @main(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"llvm">} {
  %a = nn.add %x, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %0 = byoc.on_target #byoc.target<"cuda", {arch = "sm_90"}> -> tensor<4xf32> {
    %1 = nn.relu %y : (tensor<4xf32>) -> tensor<4xf32>
    %2 = nn.add %1, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    byoc.yield %2 : tensor<4xf32>
  }
  %3 = byoc.on_target #byoc.target<"llvm"> -> tensor<4xf32> {
    %4 = nn.tanh %0 : (tensor<4xf32>) -> tensor<4xf32>
    byoc.yield %4 : tensor<4xf32>
  }
  %5 = byoc.on_target #byoc.target<"cuda", {arch = "sm_90"}> -> tensor<4xf32> {
    %6 = nn.sigmoid %3 : (tensor<4xf32>) -> tensor<4xf32>
    byoc.yield %6 : tensor<4xf32>
  }
  func.return %5 : tensor<4xf32>
}

// CHECK-LABEL: func.func private @main_kernel_0(%y: tensor<4xf32>, %a: tensor<4xf32>) -> tensor<4xf32>
// CHECK-SAME:    attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>} {
// CHECK-NEXT:    %0 = nn.relu %y
// CHECK-NEXT:    %1 = nn.add %0, %a
// CHECK-NEXT:    func.return %1 : tensor<4xf32>

// CHECK-LABEL: func.func private @main_kernel_1(%0: tensor<4xf32>) -> tensor<4xf32>
// CHECK-SAME:    attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>} {
// CHECK-NEXT:    %1 = nn.sigmoid %0
// CHECK-NEXT:    func.return %1 : tensor<4xf32>

// The existing function is untouched.
// CHECK-LABEL: func.func private @main_kernel()
// CHECK-SAME:    attributes {byoc.target = #byoc.target<"llvm">} {
// CHECK-NEXT:    func.return
func.func private @main_kernel() attributes {byoc.target = #byoc.target<"llvm">} {
  func.return
}

// -----

// A region on the caller's target (hosts ignored) is inlined, even inside scf.if;
// a region without results, and one using no outer value, is outlined as well.

// CHECK-LABEL: func.func @same(%x: tensor<4xf32>, %c: i1) -> tensor<4xf32>
// CHECK-NEXT:    %r = scf.if %c -> (tensor<4xf32>) {
// CHECK-NEXT:      %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:      scf.yield %0 : tensor<4xf32>
// CHECK-NEXT:    } else {
// CHECK-NEXT:      scf.yield %x : tensor<4xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    func.call @same_kernel() : () -> ()
// CHECK-NEXT:    func.return %r : tensor<4xf32>
func.func @same(%x: tensor<4xf32>, %c: i1) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
  %r = scf.if %c -> (tensor<4xf32>) {
    %0 = byoc.on_target #byoc.target<"cuda", {arch = "sm_90"}> -> tensor<4xf32> {
      %1 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
      byoc.yield %1 : tensor<4xf32>
    }
    scf.yield %0 : tensor<4xf32>
  } else {
    scf.yield %x : tensor<4xf32>
  }
  byoc.on_target #byoc.target<"metal"> {
    byoc.yield
  }
  func.return %r : tensor<4xf32>
}

// CHECK-LABEL: func.func private @same_kernel()
// CHECK-SAME:    attributes {byoc.target = #byoc.target<"metal">} {
// CHECK-NEXT:    func.return

// -----

// A nested region is outlined from the kernel its parent became.

// CHECK-LABEL: func.func @nested(%x: tensor<4xf32>) -> tensor<4xf32>
// CHECK-NEXT:    %0 = func.call @nested_kernel(%x)
// CHECK-LABEL: func.func private @nested_kernel(%x: tensor<4xf32>) -> tensor<4xf32>
// CHECK-SAME:    #byoc.target<"cuda">
// CHECK:         func.call @nested_kernel_kernel(%{{.*}}) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK-LABEL: func.func private @nested_kernel_kernel(%0: tensor<4xf32>) -> tensor<4xf32>
// CHECK-SAME:    #byoc.target<"cutlass">
// CHECK-NEXT:    nn.gelu
func.func @nested(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"llvm">} {
  %0 = byoc.on_target #byoc.target<"cuda"> -> tensor<4xf32> {
    %1 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
    %2 = byoc.on_target #byoc.target<"cutlass"> -> tensor<4xf32> {
      %3 = nn.gelu %1 : (tensor<4xf32>) -> tensor<4xf32>
      byoc.yield %3 : tensor<4xf32>
    }
    byoc.yield %2 : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}
