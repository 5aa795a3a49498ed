// RUN: partita-opt %s -p lower-extern-calls --split-input-file | filecheck %s

// The seed example, static shapes: allocate the output, then call the extern function
// in destination-passing style. No shape function is needed.

// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    %[[OUT:.*]] = byoc.alloc_tensor() : tensor<1600x2304xf16>
// CHECK-NEXT:    %[[R:.*]] = byoc.call_extern @tvmgen_default_cutlass_main_0(%x, %w, %b) outs(%[[OUT]]) : (tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>, tensor<1600x2304xf16>
// CHECK-NEXT:    func.return %[[R]] : tensor<1600x2304xf16>
// CHECK-NOT:   shape_func
func.func private @tvmgen_default_cutlass_main_0(tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16> attributes {byoc.extern}
func.func private @tvmgen_default_cutlass_main_0_reference(%a: tensor<1600x768xf16>, %c: tensor<2304x768xf16>, %d: tensor<2304xf16>) -> tensor<1600x2304xf16> attributes {byoc.reference_impl = @tvmgen_default_cutlass_main_0} {
  %0 = nn.dense %a, %c : (tensor<1600x768xf16>, tensor<2304x768xf16>) -> tensor<1600x2304xf16>
  %1 = nn.add %0, %d : (tensor<1600x2304xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
  func.return %1 : tensor<1600x2304xf16>
}
func.func @main(%x: tensor<1600x768xf16>, %w: tensor<2304x768xf16>, %b: tensor<2304xf16>) -> tensor<1600x2304xf16> {
  %0 = func.call @tvmgen_default_cutlass_main_0(%x, %w, %b) : (tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
  func.return %0 : tensor<1600x2304xf16>
}

// -----

// The seed example with a dynamic batch: a shape function derived from the reference
// body maps the input's '?' to the output's (dense copies the batch dim), and the
// caller reads the dim, calls it, and allocates with the result. Called twice, the
// shape function is generated once.

// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_0_shape_func(%{{.*}}: index) -> index attributes {byoc.target = #byoc.target<"llvm">} {
// CHECK-NEXT:    func.return %{{.*}} : index
// CHECK-NEXT:  }
// CHECK-LABEL: func.func @main(%x: tensor<?x768xf16>, %w: tensor<2304x768xf16>, %b: tensor<2304xf16>) -> tensor<?x2304xf16> {
// CHECK-NEXT:    %[[C0:.*]] = arith.constant 0 : index
// CHECK-NEXT:    %[[N:.*]] = tensor.dim %x, %[[C0]] : tensor<?x768xf16>
// CHECK-NEXT:    %[[M:.*]] = func.call @tvmgen_default_cutlass_main_0_shape_func(%[[N]]) : (index) -> index
// CHECK-NEXT:    %[[OUT:.*]] = byoc.alloc_tensor(%[[M]]) : tensor<?x2304xf16>
// CHECK-NEXT:    %[[R:.*]] = byoc.call_extern @tvmgen_default_cutlass_main_0(%x, %w, %b) outs(%[[OUT]]) {byoc.shape_func = @tvmgen_default_cutlass_main_0_shape_func} : (tensor<?x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<?x2304xf16>, tensor<?x2304xf16>
// CHECK:         func.call @tvmgen_default_cutlass_main_0_shape_func(
// CHECK:         byoc.call_extern @tvmgen_default_cutlass_main_0(
// CHECK-NOT:   func.func private @tvmgen_default_cutlass_main_0_shape_func
func.func private @tvmgen_default_cutlass_main_0(tensor<?x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<?x2304xf16> attributes {byoc.extern}
func.func private @tvmgen_default_cutlass_main_0_reference(%a: tensor<?x768xf16>, %c: tensor<2304x768xf16>, %d: tensor<2304xf16>) -> tensor<?x2304xf16> attributes {byoc.reference_impl = @tvmgen_default_cutlass_main_0} {
  %0 = nn.dense %a, %c : (tensor<?x768xf16>, tensor<2304x768xf16>) -> tensor<?x2304xf16>
  %1 = nn.add %0, %d : (tensor<?x2304xf16>, tensor<2304xf16>) -> tensor<?x2304xf16>
  func.return %1 : tensor<?x2304xf16>
}
func.func @main(%x: tensor<?x768xf16>, %w: tensor<2304x768xf16>, %b: tensor<2304xf16>) -> tensor<?x2304xf16> {
  %0 = func.call @tvmgen_default_cutlass_main_0(%x, %w, %b) : (tensor<?x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<?x2304xf16>
  %1 = func.call @tvmgen_default_cutlass_main_0(%x, %w, %b) : (tensor<?x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<?x2304xf16>
  func.return %1 : tensor<?x2304xf16>
}

// -----

// Broadcast of two dynamic dims picks the non-1 one at run time; a strided, padded
// conv2d with dynamic N, H, W computes H and W with the window formula
// (H + 2 - 3) floordiv 2 + 1; a reshape with one '?' divides the element count.

// CHECK-LABEL: func.func private @bcast_shape_func(
// CHECK-SAME:      %[[A:.*]]: index, %[[B:.*]]: index) -> index attributes {byoc.target = #byoc.target<"llvm">} {
// CHECK-NEXT:    %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT:    %[[IS1:.*]] = arith.cmpi eq, %[[A]], %[[ONE]] : index
// CHECK-NEXT:    %[[D:.*]] = arith.select %[[IS1]], %[[B]], %[[A]] : index
// CHECK-NEXT:    func.return %[[D]] : index
// CHECK-LABEL: func.func private @conv_shape_func(
// CHECK-SAME:      %[[N:.*]]: index, %[[H:.*]]: index, %[[W:.*]]: index) -> (index, index, index, index) attributes {byoc.target = #byoc.target<"llvm">} {
// CHECK-NEXT:    %[[M1:.*]] = arith.constant -1 : index
// CHECK-NEXT:    %[[H1:.*]] = arith.addi %[[H]], %[[M1]] : index
// CHECK-NEXT:    %[[TWO:.*]] = arith.constant 2 : index
// CHECK-NEXT:    %[[H2:.*]] = arith.floordivsi %[[H1]], %[[TWO]] : index
// CHECK-NEXT:    %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT:    %[[OH:.*]] = arith.addi %[[H2]], %[[ONE]] : index
// CHECK-NEXT:    %[[W1:.*]] = arith.addi %[[W]], %[[M1]] : index
// CHECK-NEXT:    %[[W2:.*]] = arith.floordivsi %[[W1]], %[[TWO]] : index
// CHECK-NEXT:    %[[OW:.*]] = arith.addi %[[W2]], %[[ONE]] : index
// CHECK-NEXT:    %[[C4:.*]] = arith.constant 4 : index
// CHECK-NEXT:    %[[E0:.*]] = arith.muli %[[N]], %[[C4]] : index
// CHECK-NEXT:    %[[E1:.*]] = arith.muli %[[E0]], %[[OH]] : index
// CHECK-NEXT:    %[[E2:.*]] = arith.muli %[[E1]], %[[OW]] : index
// CHECK-NEXT:    %[[C16:.*]] = arith.constant 16 : index
// CHECK-NEXT:    %[[R:.*]] = arith.floordivsi %[[E2]], %[[C16]] : index
// CHECK-NEXT:    func.return %[[N]], %[[OH]], %[[OW]], %[[R]] : index, index, index, index
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    %[[C0:.*]] = arith.constant 0 : index
// CHECK-NEXT:    %[[XA:.*]] = tensor.dim %x, %[[C0]] : tensor<?x8xf32>
// CHECK-NEXT:    %[[XB:.*]] = tensor.dim %y, %[[C0]] : tensor<?x8xf32>
// CHECK-NEXT:    %[[S:.*]] = func.call @bcast_shape_func(%[[XA]], %[[XB]]) : (index, index) -> index
// CHECK-NEXT:    %[[O:.*]] = byoc.alloc_tensor(%[[S]]) : tensor<?x8xf32>
// CHECK-NEXT:    byoc.call_extern @bcast(%x, %y) outs(%[[O]]) {byoc.shape_func = @bcast_shape_func}
// CHECK-NEXT:    %[[K0:.*]] = arith.constant 0 : index
// CHECK-NEXT:    %[[IN:.*]] = tensor.dim %img, %[[K0]] : tensor<?x3x?x?xf32>
// CHECK-NEXT:    %[[K2:.*]] = arith.constant 2 : index
// CHECK-NEXT:    %[[IH:.*]] = tensor.dim %img, %[[K2]] : tensor<?x3x?x?xf32>
// CHECK-NEXT:    %[[K3:.*]] = arith.constant 3 : index
// CHECK-NEXT:    %[[IW:.*]] = tensor.dim %img, %[[K3]] : tensor<?x3x?x?xf32>
// CHECK-NEXT:    %[[D0:[^,]*]], %[[D1:[^,]*]], %[[D2:[^,]*]], %[[D3:[^ ]*]] = func.call @conv_shape_func(%[[IN]], %[[IH]], %[[IW]]) : (index, index, index) -> (index, index, index, index)
// CHECK-NEXT:    %[[O1:.*]] = byoc.alloc_tensor(%[[D0]], %[[D1]], %[[D2]]) : tensor<?x4x?x?xf32>
// CHECK-NEXT:    %[[O2:.*]] = byoc.alloc_tensor(%[[D3]]) : tensor<?x16xf32>
// CHECK-NEXT:    byoc.call_extern @conv(%img, %k) outs(%[[O1]], %[[O2]]) {byoc.shape_func = @conv_shape_func}
func.func private @bcast(tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32> attributes {byoc.extern}
func.func private @bcast_reference(%a: tensor<?x8xf32>, %b: tensor<?x8xf32>) -> tensor<?x8xf32> attributes {byoc.reference_impl = @bcast} {
  %0 = nn.add %a, %b : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  func.return %0 : tensor<?x8xf32>
}
func.func private @conv(tensor<?x3x?x?xf32>, tensor<4x3x3x3xf32>) -> (tensor<?x4x?x?xf32>, tensor<?x16xf32>) attributes {byoc.extern}
func.func private @conv_reference(%i: tensor<?x3x?x?xf32>, %k: tensor<4x3x3x3xf32>) -> (tensor<?x4x?x?xf32>, tensor<?x16xf32>) attributes {byoc.reference_impl = @conv} {
  %0 = nn.conv2d %i, %k {strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 1, 1>} : (tensor<?x3x?x?xf32>, tensor<4x3x3x3xf32>) -> tensor<?x4x?x?xf32>
  %1 = nn.relu %0 : (tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
  %2 = nn.reshape %1 : (tensor<?x4x?x?xf32>) -> tensor<?x16xf32>
  func.return %1, %2 : tensor<?x4x?x?xf32>, tensor<?x16xf32>
}
func.func @main(%x: tensor<?x8xf32>, %y: tensor<?x8xf32>, %img: tensor<?x3x?x?xf32>, %k: tensor<4x3x3x3xf32>) -> (tensor<?x8xf32>, tensor<?x4x?x?xf32>, tensor<?x16xf32>) {
  %0 = func.call @bcast(%x, %y) : (tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %1, %2 = func.call @conv(%img, %k) : (tensor<?x3x?x?xf32>, tensor<4x3x3x3xf32>) -> (tensor<?x4x?x?xf32>, tensor<?x16xf32>)
  func.return %0, %1, %2 : tensor<?x8xf32>, tensor<?x4x?x?xf32>, tensor<?x16xf32>
}

// -----

// A shape function runs on the host: it gets the host of its caller's target (here `c`),
// so verify-targets accepts the lowered module (tests/test_target_passes.py runs it).

// CHECK-LABEL: func.func private @k_shape_func(%{{.*}}: index) -> index attributes {byoc.target = #byoc.target<"c">} {
func.func private @k(tensor<?x4xf32>) -> tensor<?x4xf32> attributes {byoc.extern, byoc.target = #byoc.target<"cutlass">}
func.func private @k_reference(%a: tensor<?x4xf32>) -> tensor<?x4xf32> attributes {byoc.reference_impl = @k, byoc.target = #byoc.target<"cutlass">} {
  %0 = nn.relu %a : (tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %0 : tensor<?x4xf32>
}
func.func @host_main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> attributes {byoc.target = #byoc.target<"cuda", {}, host = #byoc.target<"c">>} {
  %0 = func.call @k(%x) : (tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %0 : tensor<?x4xf32>
}

// -----

// A result tied to an operand (an in-place KV-cache update) gets no allocation: the
// operand is its outs, and the result aliases it.

// CHECK-LABEL: func.func @step(
// CHECK-NEXT:    %[[R:.*]] = byoc.call_extern @update(%cache, %u, %pos) outs(%cache) : (tensor<1x2x16x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x16x4xf32>, tensor<1x2x16x4xf32>
// CHECK-NEXT:    func.return %[[R]] : tensor<1x2x16x4xf32>
func.func private @update(tensor<1x2x16x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> (tensor<1x2x16x4xf32> {byoc.tied_operand = 0 : i64}) attributes {byoc.extern}
func.func @step(%cache: tensor<1x2x16x4xf32>, %u: tensor<1x2x1x4xf32>, %pos: tensor<1xi64>) -> tensor<1x2x16x4xf32> {
  %0 = func.call @update(%cache, %u, %pos) : (tensor<1x2x16x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x16x4xf32>
  func.return %0 : tensor<1x2x16x4xf32>
}

// -----

// A tied result of dynamic shape (the pooled features of however many boxes a run
// kept, scattered in place): its shape function reads the operand's dims with tensor.dim,
// which reads no contents, so the operand still dies at the call and is its outs.

// CHECK-LABEL: func.func @pool(
// CHECK-NEXT:    %[[K0:.*]] = arith.constant 0 : index
// CHECK-NEXT:    %[[N:.*]] = tensor.dim %d, %[[K0]] : tensor<?x4xf32>
// CHECK:         %[[R:.*]] = byoc.call_extern @scatter(%d, %i, %u) outs(%d)
// CHECK-NEXT:    func.return %[[R]] : tensor<?x4xf32>
func.func private @scatter(tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> (tensor<?x4xf32> {byoc.tied_operand = 0 : i64}) attributes {byoc.extern}
func.func private @scatter_reference(%d: tensor<?x4xf32>, %i: tensor<?x4xi64>, %u: tensor<?x4xf32>) -> tensor<?x4xf32> attributes {byoc.reference_impl = @scatter} {
  %0 = nn.scatter_elements %d, %i, %u {axis = 0 : i64} : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %0 : tensor<?x4xf32>
}
func.func @pool(%d: tensor<?x4xf32>, %i: tensor<?x4xi64>, %u: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %0 = func.call @scatter(%d, %i, %u) : (tensor<?x4xf32>, tensor<?x4xi64>, tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %0 : tensor<?x4xf32>
}
