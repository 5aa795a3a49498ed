// RUN: partita-opt %s -p plan-memory --split-input-file | filecheck %s

// A chain: the first buffer is dead once the second call has read it, so the third
// buffer may share its bytes (offset 0); the second overlaps both and must not.

// CHECK-LABEL: func.func @chain(
// CHECK-SAME:    byoc.arena_size = 2048 : i64
// CHECK-NEXT:    %[[A:.*]] = byoc.alloc_tensor() {byoc.offset = 0 : i64} : tensor<4x64xf32>
// CHECK-NEXT:    %[[RA:.*]] = byoc.call_extern @f(%x) outs(%[[A]])
// CHECK-NEXT:    %[[B:.*]] = byoc.alloc_tensor() {byoc.offset = 1024 : i64} : tensor<4x64xf32>
// CHECK-NEXT:    %[[RB:.*]] = byoc.call_extern @f(%[[RA]]) outs(%[[B]])
// CHECK-NEXT:    %[[C:.*]] = byoc.alloc_tensor() {byoc.offset = 0 : i64} : tensor<4x64xf32>
// CHECK-NEXT:    byoc.call_extern @f(%[[RB]]) outs(%[[C]])
func.func private @f(tensor<4x64xf32>) -> tensor<4x64xf32> attributes {byoc.extern}
func.func @chain(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %0 = byoc.alloc_tensor() : tensor<4x64xf32>
  %1 = byoc.call_extern @f(%x) outs(%0) : (tensor<4x64xf32>) -> tensor<4x64xf32>, tensor<4x64xf32>
  %2 = byoc.alloc_tensor() : tensor<4x64xf32>
  %3 = byoc.call_extern @f(%1) outs(%2) : (tensor<4x64xf32>) -> tensor<4x64xf32>, tensor<4x64xf32>
  %4 = byoc.alloc_tensor() : tensor<4x64xf32>
  %5 = byoc.call_extern @f(%3) outs(%4) : (tensor<4x64xf32>) -> tensor<4x64xf32>, tensor<4x64xf32>
  func.return %5 : tensor<4x64xf32>
}

// -----

// A diamond: both branches are live when the join reads them, so no two of the three
// buffers may share memory. 100-byte tensors are placed at 256-byte boundaries; the
// returned buffer lives to the end.

// CHECK-LABEL: func.func @diamond(
// CHECK-SAME:    byoc.arena_size = 768 : i64
// CHECK-NEXT:    byoc.alloc_tensor() {byoc.offset = 0 : i64} : tensor<25xf32>
// CHECK-NEXT:    byoc.call_extern @u
// CHECK-NEXT:    byoc.alloc_tensor() {byoc.offset = 256 : i64} : tensor<25xf32>
// CHECK-NEXT:    byoc.call_extern @u
// CHECK-NEXT:    byoc.alloc_tensor() {byoc.offset = 512 : i64} : tensor<25xf32>
// CHECK-NEXT:    byoc.call_extern @join
func.func private @u(tensor<25xf32>) -> tensor<25xf32> attributes {byoc.extern}
func.func private @join(tensor<25xf32>, tensor<25xf32>) -> tensor<25xf32> attributes {byoc.extern}
func.func @diamond(%x: tensor<25xf32>) -> tensor<25xf32> {
  %0 = byoc.alloc_tensor() : tensor<25xf32>
  %1 = byoc.call_extern @u(%x) outs(%0) : (tensor<25xf32>) -> tensor<25xf32>, tensor<25xf32>
  %2 = byoc.alloc_tensor() : tensor<25xf32>
  %3 = byoc.call_extern @u(%x) outs(%2) : (tensor<25xf32>) -> tensor<25xf32>, tensor<25xf32>
  %4 = byoc.alloc_tensor() : tensor<25xf32>
  %5 = byoc.call_extern @join(%1, %3) outs(%4) : (tensor<25xf32>, tensor<25xf32>) -> tensor<25xf32>, tensor<25xf32>
  func.return %5 : tensor<25xf32>
}

// -----

// A returned buffer is never reused, even by a later allocation after its last read;
// the element size follows the element type (f16: 2 bytes).

// CHECK-LABEL: func.func @returned(
// CHECK-SAME:    byoc.arena_size = 768 : i64
// CHECK-NEXT:    byoc.alloc_tensor() {byoc.offset = 0 : i64} : tensor<128xf16>
// CHECK-NEXT:    byoc.call_extern @h
// CHECK-NEXT:    byoc.alloc_tensor() {byoc.offset = 256 : i64} : tensor<128xf16>
// CHECK-NEXT:    byoc.call_extern @h
// CHECK-NEXT:    byoc.alloc_tensor() {byoc.offset = 512 : i64} : tensor<128xf16>
func.func private @h(tensor<128xf16>) -> tensor<128xf16> attributes {byoc.extern}
func.func @returned(%x: tensor<128xf16>) -> (tensor<128xf16>, tensor<128xf16>) {
  %0 = byoc.alloc_tensor() : tensor<128xf16>
  %1 = byoc.call_extern @h(%x) outs(%0) : (tensor<128xf16>) -> tensor<128xf16>, tensor<128xf16>
  %2 = byoc.alloc_tensor() : tensor<128xf16>
  %3 = byoc.call_extern @h(%1) outs(%2) : (tensor<128xf16>) -> tensor<128xf16>, tensor<128xf16>
  %4 = byoc.alloc_tensor() : tensor<128xf16>
  %5 = byoc.call_extern @h(%3) outs(%4) : (tensor<128xf16>) -> tensor<128xf16>, tensor<128xf16>
  func.return %1, %5 : tensor<128xf16>, tensor<128xf16>
}

// -----

// Dynamically sized allocations are left to the runtime's per-shape plan: no offset, and
// no arena on a function with nothing static.

// CHECK-LABEL: func.func @dynamic(
// CHECK-NOT:     byoc.arena_size
// CHECK:         byoc.alloc_tensor(%{{.*}}) : tensor<?x64xf32>
// CHECK-NOT:     byoc.offset
func.func private @d(tensor<?x64xf32>) -> tensor<?x64xf32> attributes {byoc.extern}
func.func @dynamic(%x: tensor<?x64xf32>) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x64xf32>
  %0 = byoc.alloc_tensor(%n) : tensor<?x64xf32>
  %1 = byoc.call_extern @d(%x) outs(%0) : (tensor<?x64xf32>) -> tensor<?x64xf32>, tensor<?x64xf32>
  func.return %1 : tensor<?x64xf32>
}
