// RUN: partita-opt %s -p mark-compiler-functions-as-extern --split-input-file | filecheck %s
// RUN: partita-opt %s -p 'mark-compiler-functions-as-extern{compiler=cublas}' --split-input-file | filecheck %s --check-prefix=CUBLAS
// RUN: partita-opt %s -p 'mark-compiler-functions-as-extern{keep-reference=false}' --split-input-file | filecheck %s --check-prefix=DROP

// The seed example, outlined form -> extern form: a body-less private declaration with
// only byoc.extern; the body moves to @..._reference, which points back at it. Calls
// stay func.calls.

// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_0(tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16> attributes {byoc.extern}
// CHECK-NEXT:  func.func private @tvmgen_default_cutlass_main_0_reference(%a: tensor<1600x768xf16>, %c: tensor<2304x768xf16>, %d: tensor<2304xf16>) -> tensor<1600x2304xf16> attributes {byoc.reference_impl = @tvmgen_default_cutlass_main_0} {
// CHECK-NEXT:    nn.dense %a, %c
// CHECK-NEXT:    nn.add
// CHECK-NEXT:    func.return
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    func.call @tvmgen_default_cutlass_main_0(%x, %w, %b)

// DROP-LABEL: func.func private @tvmgen_default_cutlass_main_0(tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16> attributes {byoc.extern}
// DROP-NOT:   _reference
// DROP-LABEL: func.func @main(
func.func private @tvmgen_default_cutlass_main_0(%a: tensor<1600x768xf16>, %c: tensor<2304x768xf16>, %d: tensor<2304xf16>) -> tensor<1600x2304xf16> attributes {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} {
  %0 = nn.dense %a, %c : (tensor<1600x768xf16>, tensor<2304x768xf16>) -> tensor<1600x2304xf16>
  %1 = nn.add %0, %d : (tensor<1600x2304xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
  func.return %1 : tensor<1600x2304xf16>
}
func.func @main(%x: tensor<1600x768xf16>, %w: tensor<2304x768xf16>, %b: tensor<2304xf16>) -> tensor<1600x2304xf16> {
  %0 = func.call @tvmgen_default_cutlass_main_0(%x, %w, %b) : (tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
  func.return %0 : tensor<1600x2304xf16>
}

// -----

// Two compilers: all by default, only cublas with compiler=cublas. Functions without
// byoc.compiler (main, helpers) are never touched.

// CHECK-LABEL: func.func private @cutlass_fn(tensor<8xf32>) -> tensor<8xf32> attributes {byoc.extern}
// CHECK-NEXT:  func.func private @cutlass_fn_reference(
// CHECK-LABEL: func.func private @cublas_fn(tensor<8xf32>) -> tensor<8xf32> attributes {byoc.extern}
// CHECK-NEXT:  func.func private @cublas_fn_reference(
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    func.call @cutlass_fn(%x)
// CHECK-NEXT:    func.call @cublas_fn(

// CUBLAS-LABEL: func.func private @cutlass_fn(%a: tensor<8xf32>) -> tensor<8xf32> attributes {byoc.compiler = "cutlass", byoc.global_symbol = "cutlass_fn"} {
// CUBLAS-NOT:   @cutlass_fn_reference
// CUBLAS-LABEL: func.func private @cublas_fn(tensor<8xf32>) -> tensor<8xf32> attributes {byoc.extern}
// CUBLAS-NEXT:  func.func private @cublas_fn_reference(%a: tensor<8xf32>) -> tensor<8xf32> attributes {byoc.reference_impl = @cublas_fn} {
func.func private @cutlass_fn(%a: tensor<8xf32>) -> tensor<8xf32> attributes {byoc.compiler = "cutlass", byoc.global_symbol = "cutlass_fn"} {
  %0 = nn.relu %a : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
func.func private @cublas_fn(%a: tensor<8xf32>) -> tensor<8xf32> attributes {byoc.compiler = "cublas", byoc.global_symbol = "cublas_fn"} {
  %0 = nn.tanh %a : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = func.call @cutlass_fn(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %1 = func.call @cublas_fn(%0) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %1 : tensor<8xf32>
}
