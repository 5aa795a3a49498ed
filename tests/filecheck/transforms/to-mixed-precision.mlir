// RUN: partita-opt %s --split-input-file -p 'to-mixed-precision{dtype=f16}' | filecheck %s
// RUN: partita-opt %s --split-input-file -p 'to-mixed-precision{dtype=bf16}' | filecheck %s --check-prefix=BF16

// The input is cast down once, the weights become f16 constants (the f32 ones are gone),
// the GEMM and its bias add run in f16, softmax runs in f32 between two casts, and the
// result is cast back to the model's f32.

// CHECK-LABEL: func.func @mlp
// CHECK-NEXT:    %0 = nn.cast %x : (tensor<?x8xf32>) -> tensor<?x8xf16>
// CHECK-NEXT:    %1 = nn.constant dense<5.000000e-01> : tensor<16x8xf16>
// CHECK-NEXT:    %2 = nn.constant dense<2.500000e-01> : tensor<16xf16>
// CHECK-NEXT:    %3 = nn.dense %0, %1 : (tensor<?x8xf16>, tensor<16x8xf16>) -> tensor<?x16xf16>
// CHECK-NEXT:    %4 = nn.add %3, %2 : (tensor<?x16xf16>, tensor<16xf16>) -> tensor<?x16xf16>
// CHECK-NEXT:    %5 = nn.cast %4 : (tensor<?x16xf16>) -> tensor<?x16xf32>
// CHECK-NEXT:    %6 = nn.softmax %5 : (tensor<?x16xf32>) -> tensor<?x16xf32>
// CHECK-NEXT:    %7 = nn.cast %6 : (tensor<?x16xf32>) -> tensor<?x16xf16>
// CHECK-NEXT:    %8 = nn.gelu %7 : (tensor<?x16xf16>) -> tensor<?x16xf16>
// CHECK-NEXT:    %9 = nn.cast %8 : (tensor<?x16xf16>) -> tensor<?x16xf32>
// CHECK-NEXT:    func.return %9 : tensor<?x16xf32>
// BF16-LABEL: func.func @mlp
// BF16:         nn.dense %0, %1 : (tensor<?x8xbf16>, tensor<16x8xbf16>) -> tensor<?x16xbf16>
func.func @mlp(%x: tensor<?x8xf32>) -> tensor<?x16xf32> {
  %w = nn.constant dense<0.5> : tensor<16x8xf32>
  %b = nn.constant dense<0.25> : tensor<16xf32>
  %0 = nn.dense %x, %w : (tensor<?x8xf32>, tensor<16x8xf32>) -> tensor<?x16xf32>
  %1 = nn.add %0, %b : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  %2 = nn.softmax %1 {axis = -1 : i64} : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %3 = nn.gelu %2 : (tensor<?x16xf32>) -> tensor<?x16xf32>
  func.return %3 : tensor<?x16xf32>
}

// -----

// Integer and boolean values are untouched; a comparison of f32 values runs in f16 and
// still gives i1; an f32 made from integers (arange) stays f32 and is cast where a
// lowered op needs it; a reduction stays f32 and its f32 argument is never cast.

// CHECK-LABEL: func.func @mixed
// CHECK-NEXT:    %0 = nn.cast %x : (tensor<4xf32>) -> tensor<4xf16>
// CHECK-NEXT:    %a = nn.arange
// CHECK-SAME:      -> tensor<4xf32>
// CHECK-NEXT:    %1 = nn.cast %a : (tensor<4xf32>) -> tensor<4xf16>
// CHECK-NEXT:    %2 = nn.greater %0, %1 : (tensor<4xf16>, tensor<4xf16>) -> tensor<4xi1>
// CHECK-NEXT:    %3 = nn.reduce_sum %y {{.*}} : (tensor<4xf32>) -> tensor<f32>
// CHECK-NEXT:    func.return %2, %3, %i : tensor<4xi1>, tensor<f32>, tensor<4xi64>
func.func @mixed(%x: tensor<4xf32>, %y: tensor<4xf32>, %i: tensor<4xi64>) -> (tensor<4xi1>, tensor<f32>, tensor<4xi64>) {
  %a = nn.arange {start = 0.0 : f64, limit = 4.0 : f64, delta = 1.0 : f64} : () -> tensor<4xf32>
  %0 = nn.greater %x, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %1 = nn.reduce_sum %y {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  func.return %0, %1, %i : tensor<4xi1>, tensor<f32>, tensor<4xi64>
}

// -----

// A constant past f16's range saturates at its largest finite value (as TensorRT clamps
// fp16 weights): Funnel's mask, score - (1 - mask) * 1e6, stays finite where the mask is 1
// (0 * 65504, not 0 * inf = NaN); an infinity is kept. bf16 has f32's range.

// CHECK-LABEL: func.func @mask
// CHECK:         nn.constant dense<[6.550400e+04, -6.550400e+04, 0xfc00, 1.000000e+00]> : tensor<4xf16>
// BF16-LABEL: func.func @mask
// BF16:         nn.constant dense<[9.{{[0-9]+}}e+05, -9.{{[0-9]+}}e+05, 0xff80, 1.000000e+00]> : tensor<4xbf16>
func.func @mask(%s: tensor<2x4xf32>, %m: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %big = nn.constant dense<[1.0e6, -1.0e6, 0xFF800000, 1.0]> : tensor<4xf32>
  %0 = nn.multiply %m, %big : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %1 = nn.subtract %s, %0 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  func.return %1 : tensor<2x4xf32>
}
