// RUN: partita-opt %s --split-input-file --verify-diagnostics

// expected-error@+1 {{'byoc.extern' is only allowed on a body-less function declaration}}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.extern} {
  func.return %x : tensor<4xf32>
}

// -----

// expected-error@+1 {{'byoc.compiler' names 'tvm_magic', which is not a registered external codegen target kind}}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.compiler = "tvm_magic"} {
  func.return %x : tensor<4xf32>
}

// -----

// A native target is not an external codegen.
// expected-error@+1 {{'byoc.compiler' names 'cuda', which is not a registered external codegen target kind}}
func.func private @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.compiler = "cuda"} {
  func.return %x : tensor<4xf32>
}

// -----

func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{block argument types (tensor<4xf16>) do not match the operand types (tensor<4xf32>)}}
  %0 = byoc.partition(%x) {byoc.compiler = "cutlass"} ({
  ^bb0(%a: tensor<4xf16>):
    %1 = nn.relu %a : (tensor<4xf16>) -> tensor<4xf16>
    byoc.yield %1 : tensor<4xf16>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @main(%x: tensor<4xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'byoc.yield' types (tensor<4xf32>) do not match the results of 'byoc.partition' (tensor<8xf32>)}}
  %0 = byoc.partition(%x) {byoc.compiler = "cutlass"} ({
  ^bb0(%a: tensor<4xf32>):
    byoc.yield %a : tensor<4xf32>
  }) : (tensor<4xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}

// -----

func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'byoc.partition' region must end with 'byoc.yield'}}
  %0 = byoc.partition(%x) {byoc.compiler = "cutlass"} ({
  ^bb0(%a: tensor<4xf32>):
    func.return %a : tensor<4xf32>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// Isolated from above: the body may not use the caller's values.
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{using value defined out of its IsolatedFromAbove parent}}
  %0 = byoc.partition(%x) {byoc.compiler = "cutlass"} ({
  ^bb0(%a: tensor<4xf32>):
    %1 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
    byoc.yield %1 : tensor<4xf32>
  }) : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// expected-error@+1 {{unknown option 'arch'}}
func.func @f() attributes {byoc.target = #byoc.target<"cutlass", {arch = "sm_90"}>} {
  func.return
}

// -----

// expected-error@+1 {{'byoc.target' must be a #byoc.target attribute}}
func.func @f() attributes {byoc.target = "cuda"} {
  func.return
}

// -----

func.func @f(%n: index) -> tensor<?x?xf32> {
  // expected-error@+1 {{expected 2 dynamic size operand(s) for tensor<?x?xf32>, got 1}}
  %0 = byoc.alloc_tensor(%n) : tensor<?x?xf32>
  func.return %0 : tensor<?x?xf32>
}

// -----

func.func private @not_extern(tensor<4xf32>) -> tensor<4xf32>

func.func @f(%x: tensor<4xf32>, %o: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'@not_extern' is not marked 'byoc.extern'}}
  %0 = byoc.call_extern @not_extern(%x) outs(%o) : (tensor<4xf32>) -> tensor<4xf32>, tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// expected-error@+1 {{'byoc.binary' needs a 'format' attribute, one of cubin, ptx}}
byoc.binary @bin attributes {kernels = {}}

// -----

// expected-error@+1 {{'byoc.binary' op kernel record of @f: 'kind' must be a string, got 7 : i64}}
byoc.binary @b attributes {format = "cubin", path = "/x.cubin", kernels = {f = {kind = 7}}}

// -----

// expected-error@+1 {{'byoc.binary' op kernel record of @f: a kernel record needs a string 'entry'}}
byoc.binary @b attributes {format = "cubin", path = "/x.cubin", kernels = {f = {}}}

// -----

// expected-error@+1 {{'byoc.binary' op kernel record of @f: a KernelSpec record lacks K, M, N}}
byoc.binary @b attributes {format = "cubin", path = "/x.cubin", kernels = {f = {entry = "f", inputs = ["x"], spec = {}, config = {}}}}

// -----

// expected-error@+1 {{'byoc.binary' op kernel record of @f: a FusedRecord record lacks block}}
byoc.binary @b attributes {format = "cubin", path = "/x.cubin", kernels = {f = {kind = "fused", entry = "f"}}}

// -----

// expected-error@+1 {{'byoc.binary' attribute 'sha256' must be a sha256 hex digest}}
byoc.binary @b attributes {format = "cubin", path = "/x.cubin", sha256 = "abc", kernels = {}}

// -----

// expected-error@+1 {{'byoc.binary' attribute 'path' must be a string}}
byoc.binary @b attributes {format = "cubin", path = 3, kernels = {}}

// -----

// expected-error@+1 {{'byoc.binary' attribute 'nvrtc' must be a string}}
byoc.binary @b attributes {format = "cubin", sha256 = "0000000000000000000000000000000000000000000000000000000000000000", nvrtc = 13, kernels = {}}

// -----

// expected-error@+1 {{'byoc.binary' attribute 'cache_dir' must be a string}}
byoc.binary @b attributes {format = "cubin", sha256 = "0000000000000000000000000000000000000000000000000000000000000000", cache_dir = 1, kernels = {}}
