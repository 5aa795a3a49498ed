// RUN: partita-opt %s -p verify-targets --split-input-file --verify-diagnostics | filecheck %s

// Valid: host -> device, device -> its external codegen, same target (hosts ignored),
// calls inside a byoc.on_target region run on that target, extern declarations exempt.

// CHECK-LABEL: func.func @main
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
  %0 = func.call @device(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @tvmgen_default_cutlass_main_0(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = func.call @compiled(%1) : (tensor<4xf32>) -> tensor<4xf32>
  %3 = func.call @host_helper(%2) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %3 : tensor<4xf32>
}
// CHECK-LABEL: func.func private @device
func.func private @device(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>} {
  func.return %x : tensor<4xf32>
}
func.func private @tvmgen_default_cutlass_main_0(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.compiler = "cutlass", byoc.target = #byoc.target<"cutlass">} {
  func.return %x : tensor<4xf32>
}
func.func private @compiled(tensor<4xf32>) -> tensor<4xf32> attributes {byoc.extern}
// CHECK-LABEL: func.func private @host_helper
func.func private @host_helper(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"llvm">} {
  %0 = func.call @device(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = byoc.on_target #byoc.target<"metal"> -> tensor<4xf32> {
    %2 = func.call @metal_fn(%0) : (tensor<4xf32>) -> tensor<4xf32>
    byoc.yield %2 : tensor<4xf32>
  }
  func.return %1 : tensor<4xf32>
}
func.func private @metal_fn(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"metal">} {
  func.return %x : tensor<4xf32>
}

// -----

// expected-error@+1 {{'func.func' op has no target (a 'byoc.target' attribute)}}
func.func @no_target() {
  func.return
}

// -----

// A declaration without byoc.extern needs a target too.
func.func private @declared(i32) -> i32 // expected-error {{has no target}}

// -----

// expected-error@+1 {{target kind 'cuda' differs from its compiler 'cutlass'}}
func.func private @tvmgen_default_cutlass_main_0() attributes {byoc.compiler = "cutlass", byoc.target = #byoc.target<"cuda">} {
  func.return
}

// -----

// Device -> host is rejected.
func.func private @kernel(%x: i32) -> i32 attributes {byoc.target = #byoc.target<"cuda">} {
  %0 = func.call @host_fn(%x) : (i32) -> i32 // expected-error {{calls @host_fn on target 'llvm' from target 'cuda': calls across targets must go from a host to a device}}
  func.return %0 : i32
}
func.func private @host_fn(%x: i32) -> i32 attributes {byoc.target = #byoc.target<"llvm">} {
  func.return %x : i32
}

// -----

// Device -> another device is rejected, also from inside an on_target region.
func.func @main(%x: i32) -> i32 attributes {byoc.target = #byoc.target<"llvm">} {
  %0 = byoc.on_target #byoc.target<"cuda"> -> i32 {
    // expected-error@+1 {{calls @on_metal on target 'metal' from target 'cuda'}}
    %1 = func.call @on_metal(%x) : (i32) -> i32
    byoc.yield %1 : i32
  }
  func.return %0 : i32
}
func.func private @on_metal(%x: i32) -> i32 attributes {byoc.target = #byoc.target<"metal">} {
  func.return %x : i32
}

// -----

// Same kind, different options: different targets.
func.func private @sm80(%x: i32) -> i32 attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_80"}>} {
  %0 = func.call @sm90(%x) : (i32) -> i32 // expected-error {{calls @sm90 on target 'cuda -arch=sm_90' from target 'cuda -arch=sm_80'}}
  func.return %0 : i32
}
func.func private @sm90(%x: i32) -> i32 attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>} {
  func.return %x : i32
}
