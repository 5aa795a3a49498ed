// RUN: partita-opt %s | partita-opt | filecheck %s
// RUN: partita-opt %s --print-op-generic | partita-opt | filecheck %s

// The seed's partition in its inline form: every attribute survives a round trip.

// CHECK-LABEL: func.func @main
func.func @main(%x: tensor<1600x768xf16>, %w: tensor<2304x768xf16>, %b: tensor<2304xf16>) -> tensor<1600x2304xf16> {
  // CHECK:      byoc.partition(%{{.*}}, %{{.*}}, %{{.*}}) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} ({
  // CHECK-NEXT: ^bb0(%{{.*}}: tensor<1600x768xf16>, %{{.*}}: tensor<2304x768xf16>, %{{.*}}: tensor<2304xf16>):
  // CHECK:        byoc.yield %{{.*}} : tensor<1600x2304xf16>
  // CHECK-NEXT: }) : (tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
  %0 = byoc.partition(%x, %w, %b) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} ({
  ^bb0(%a: tensor<1600x768xf16>, %c: tensor<2304x768xf16>, %d: tensor<2304xf16>):
    %1 = nn.dense %a, %c : (tensor<1600x768xf16>, tensor<2304x768xf16>) -> tensor<1600x2304xf16>
    %2 = nn.bias_add %1, %d : (tensor<1600x2304xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
    byoc.yield %2 : tensor<1600x2304xf16>
  }) : (tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
  func.return %0 : tensor<1600x2304xf16>
}

// Outlined form: a module-level function keeping all partition attributes.

// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_1
// CHECK-SAME:  attributes {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_1", byoc.primitive, byoc.inline, byoc.composite = "cutlass.dense", byoc.target = #byoc.target<"cutlass", {sm = 90 : i64}, host = #byoc.target<"llvm">>}
func.func private @tvmgen_default_cutlass_main_1(%a: tensor<?x768xf16>, %c: tensor<2304x768xf16>) -> tensor<?x2304xf16> attributes {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_1", byoc.primitive, byoc.inline, byoc.composite = "cutlass.dense", byoc.target = #byoc.target<"cutlass", {sm = 90 : i64}, host = #byoc.target<"llvm">>} {
  %0 = nn.dense %a, %c : (tensor<?x768xf16>, tensor<2304x768xf16>) -> tensor<?x2304xf16>
  func.return %0 : tensor<?x2304xf16>
}

// Extern form and its lowered call: a declaration, an allocation, an explicit call.

// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_2(tensor<?x768xf16>) -> tensor<?x2304xf16> attributes {byoc.extern}
func.func private @tvmgen_default_cutlass_main_2(tensor<?x768xf16>) -> tensor<?x2304xf16> attributes {byoc.extern}

// CHECK-LABEL: func.func @lowered
func.func @lowered(%x: tensor<?x768xf16>, %n: index) -> tensor<?x2304xf16> {
  // CHECK:      %[[OUT:.*]] = byoc.alloc_tensor(%{{.*}}) : tensor<?x2304xf16>
  // CHECK-NEXT: byoc.call_extern @tvmgen_default_cutlass_main_2(%{{.*}}) outs(%[[OUT]]) : (tensor<?x768xf16>) -> tensor<?x2304xf16>, tensor<?x2304xf16>
  %o = byoc.alloc_tensor(%n) : tensor<?x2304xf16>
  %r = byoc.call_extern @tvmgen_default_cutlass_main_2(%x) outs(%o) : (tensor<?x768xf16>) -> tensor<?x2304xf16>, tensor<?x2304xf16>
  func.return %r : tensor<?x2304xf16>
}

// Delegation to another target inside a function.

// CHECK-LABEL: func.func @delegate
func.func @delegate(%x: tensor<4xf32>) -> tensor<4xf32> attributes {byoc.target = #byoc.target<"llvm">} {
  // CHECK:      byoc.on_target #byoc.target<"cuda", {arch = "sm_90"}> -> tensor<4xf32> {
  // CHECK-NEXT:   nn.relu
  // CHECK-NEXT:   byoc.yield
  %0 = byoc.on_target #byoc.target<"cuda", {arch = "sm_90"}> -> tensor<4xf32> {
    %1 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
    byoc.yield %1 : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}

// A compiled artifact beside the declarations.

// CHECK: byoc.binary @cuda_sm90 attributes {format = "cubin", kernels = {main_fused_0 = {kind = "fused", entry = "main_fused_0", block = 256 : i64, inputs = {{\[\[}}4 : i64]], dtypes = ["f32"], output = [4 : i64], output_dtype = "f32", dims = [], params = ["in0:ptr:8", "out:ptr:8"], ops = ["nn.relu"]}}}
byoc.binary @cuda_sm90 attributes {format = "cubin", kernels = {main_fused_0 = {kind = "fused", entry = "main_fused_0", block = 256 : i64, inputs = [[4 : i64]], dtypes = ["f32"], output = [4 : i64], output_dtype = "f32", dims = [], params = ["in0:ptr:8", "out:ptr:8"], ops = ["nn.relu"]}}}
