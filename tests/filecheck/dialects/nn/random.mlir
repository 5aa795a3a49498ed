// RUN: partita-opt %s | partita-opt | filecheck %s
// RUN: partita-opt %s --print-op-generic | partita-opt | filecheck %s

// nn.random round-trips: a static shape, or '?' dims sized by shape references.

// CHECK-LABEL: func.func @draws
// CHECK-NEXT: %0 = nn.random {distribution = "normal", loc = 5.000000e-01 : f64, scale = 2.000000e+00 : f64, seed = 7 : i64} : () -> tensor<4x8xf32>
// CHECK-NEXT: %1 = nn.random %x {ref_axes = array<i64: 0>, targets = array<i64: 0>, loc = -1.000000e+00 : f64, scale = 4.000000e+00 : f64, seed = 1234 : i64} : (tensor<?x3xf16>) -> tensor<?x3xf16>
// CHECK-NEXT: func.return %1 : tensor<?x3xf16>
func.func @draws(%x: tensor<?x3xf16>) -> tensor<?x3xf16> {
  %0 = nn.random {distribution = "normal", loc = 0.5 : f64, scale = 2.0 : f64, seed = 7 : i64} : () -> tensor<4x8xf32>
  %1 = nn.random %x {ref_axes = array<i64: 0>, targets = array<i64: 0>, loc = -1.0 : f64, scale = 4.0 : f64, seed = 1234 : i64} : (tensor<?x3xf16>) -> tensor<?x3xf16>
  func.return %1 : tensor<?x3xf16>
}
