// RUN: partita-opt %s -p 'bind-target{targets="cuda -arch=sm_90,cutlass,llvm"}' --split-input-file --verify-diagnostics | filecheck %s
// RUN: partita-opt %s -p 'bind-target{targets="cuda -arch=sm_90,cutlass,llvm"},bind-target{targets="cuda -arch=sm_90,cutlass,llvm"}' --split-input-file --verify-diagnostics | filecheck %s
// RUN: partita-opt %s -p 'bind-target{targets="cuda -arch=sm_90",cutlass,llvm}' --split-input-file --verify-diagnostics | filecheck %s
// RUN: partita-opt %s -p 'bind-target{targets="cuda -arch=sm_90,cutlass,llvm" fallback-device=cpu}' --split-input-file --verify-diagnostics | filecheck %s --check-prefix=CPU

// The entry function gets the full target with its host, an internal function the
// target without host, a partition function its compiler's target; a target that is
// already set is kept.

// CHECK-LABEL: func.func @main
// CHECK-SAME: byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>
// With fallback-device=cpu (TVM's default device for this list), the host target, which
// gets the host as every listed target does.
// CPU-LABEL: func.func @main
// CPU-SAME: byoc.target = #byoc.target<"llvm", host = #byoc.target<"llvm">>
// CPU-LABEL: func.func private @device
// CPU-SAME: byoc.target = #byoc.target<"llvm">}
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = func.call @device(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @tvmgen_default_cutlass_main_0(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = func.call @on_host(%1) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}

// CHECK-LABEL: func.func private @device
// CHECK-SAME: byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>}
func.func private @device(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_0
// CHECK-SAME: byoc.compiler = "cutlass", byoc.target = #byoc.target<"cutlass">}
func.func private @tvmgen_default_cutlass_main_0(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.compiler = "cutlass"} {
  func.return %x : tensor<4xf32>
}

// Never overwritten.
// CHECK-LABEL: func.func private @on_host
// CHECK-SAME: byoc.target = #byoc.target<"llvm">}
func.func private @on_host(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"llvm">} {
  func.return %x : tensor<4xf32>
}

// Extern declarations are left alone.
// CHECK-LABEL: func.func private @compiled_elsewhere
// CHECK-SAME: attributes {byoc.extern}
// CHECK-NOT: byoc.target
func.func private @compiled_elsewhere(tensor<4xf32>) -> tensor<4xf32> attributes {byoc.extern}

// -----

// An explicit target on an entry function is kept, even if another device is the default.

// CHECK-LABEL: func.func @host_main
// CHECK-SAME: byoc.target = #byoc.target<"llvm">}
func.func @host_main() attributes {byoc.target = #byoc.target<"llvm">} {
  func.return
}

// CHECK-LABEL: func.func @cuda_main
// CHECK-SAME: byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>}
func.func @cuda_main() {
  func.return
}

// -----

// An exposed function whose explicit target has no host gets the config's host (TVM's
// BindTarget); the target itself is never changed.

// CHECK-LABEL: func.func @exposed_kernel
// CHECK-SAME: byoc.target = #byoc.target<"cuda", {arch = "sm_80"}, host = #byoc.target<"llvm">>}
func.func @exposed_kernel() attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_80"}>} {
  func.return
}

// An explicit host is kept.
// CHECK-LABEL: func.func @own_host
// CHECK-SAME: byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"c">>}
func.func @own_host() attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"c">>} {
  func.return
}

// -----

// An explicit target the config does not name is the single source of truth (that is
// how a function is delegated to another device): kept, and private functions get no host.

// CHECK-LABEL: func.func private @wrong_arch
// CHECK-SAME: byoc.target = #byoc.target<"cuda", {arch = "sm_80"}>}
func.func private @wrong_arch() attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_80"}>} {
  func.return
}

// CHECK-LABEL: func.func private @metal_kernel
// CHECK-SAME: byoc.target = #byoc.target<"metal">}
func.func private @metal_kernel() attributes {byoc.target = #byoc.target<"metal">} {
  func.return
}

// -----

// A partition function whose compiler the config lacks.

// expected-error@+1 {{has byoc.compiler = "tensorrt" but the compilation config (cuda -arch=sm_90,cutlass,llvm) has no 'tensorrt' target}}
func.func private @tvmgen_default_tensorrt_main_0() attributes {byoc.compiler = "tensorrt"} {
  func.return
}
