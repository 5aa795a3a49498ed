// RUN: partita-opt %s --split-input-file -p combine-parallel-dense | filecheck %s

// Q, K and V of one input (GQA: K and V narrower), biases on Q and V (either operand
// order), none on K: one dense of the concatenated weights, one bias add (zeros where K
// had none), and a slice of the last axis per projection.

// CHECK-LABEL: func.func @qkv
// CHECK-NEXT:    %0 = nn.constant dense<"0x{{.*}}"> : tensor<64x32xf32>
// CHECK-NEXT:    %1 = nn.dense %x, %0 : (tensor<?x5x32xf32>, tensor<64x32xf32>) -> tensor<?x5x64xf32>
// CHECK-NEXT:    %2 = nn.constant dense<[1.000000e+00, {{.*}}, 0.000000e+00, {{.*}}, 3.000000e+00]> : tensor<64xf32>
// CHECK-NEXT:    %3 = nn.add %1, %2 : (tensor<?x5x64xf32>, tensor<64xf32>) -> tensor<?x5x64xf32>
// CHECK-NEXT:    %qb = nn.strided_slice %3 {begin = array<i64: 0, 0, 0>, end = array<i64: 9223372036854775807, 9223372036854775807, 32>, strides = array<i64: 1, 1, 1>} : (tensor<?x5x64xf32>) -> tensor<?x5x32xf32>
// CHECK-NEXT:    %k = nn.strided_slice %3 {begin = array<i64: 0, 0, 32>, end = array<i64: 9223372036854775807, 9223372036854775807, 48>, strides = array<i64: 1, 1, 1>} : (tensor<?x5x64xf32>) -> tensor<?x5x16xf32>
// CHECK-NEXT:    %vb = nn.strided_slice %3 {begin = array<i64: 0, 0, 48>, end = array<i64: 9223372036854775807, 9223372036854775807, 64>, strides = array<i64: 1, 1, 1>} : (tensor<?x5x64xf32>) -> tensor<?x5x16xf32>
// CHECK-NEXT:    func.return %qb, %k, %vb
func.func @qkv(%x: tensor<?x5x32xf32>) -> (tensor<?x5x32xf32>, tensor<?x5x16xf32>, tensor<?x5x16xf32>) {
  %wq = nn.constant dense<0.5> : tensor<32x32xf32>
  %bq = nn.constant dense<1.0> : tensor<32xf32>
  %q = nn.dense %x, %wq : (tensor<?x5x32xf32>, tensor<32x32xf32>) -> tensor<?x5x32xf32>
  %qb = nn.add %q, %bq : (tensor<?x5x32xf32>, tensor<32xf32>) -> tensor<?x5x32xf32>
  %wk = nn.constant dense<0.25> : tensor<16x32xf32>
  %k = nn.dense %x, %wk : (tensor<?x5x32xf32>, tensor<16x32xf32>) -> tensor<?x5x16xf32>
  %wv = nn.constant dense<2.0> : tensor<16x32xf32>
  %bv = nn.constant dense<3.0> : tensor<16xf32>
  %v = nn.dense %x, %wv : (tensor<?x5x32xf32>, tensor<16x32xf32>) -> tensor<?x5x16xf32>
  %vb = nn.add %bv, %v : (tensor<16xf32>, tensor<?x5x16xf32>) -> tensor<?x5x16xf32>
  func.return %qb, %k, %vb : tensor<?x5x32xf32>, tensor<?x5x16xf32>, tensor<?x5x16xf32>
}

// -----

// What stays apart: another input, another K, a computed weight. The two denses of %x
// with constant [*, 32] weights still combine (no biases: no add).

// CHECK-LABEL: func.func @apart
// CHECK-NEXT:    %0 = nn.constant dense<{{.*}}> : tensor<16x32xf16>
// CHECK-NEXT:    %1 = nn.dense %x, %0 : (tensor<4x32xf16>, tensor<16x32xf16>) -> tensor<4x16xf16>
// CHECK-NEXT:    %a = nn.strided_slice %1
// CHECK-NEXT:    %b = nn.strided_slice %1
// CHECK-NEXT:    %wr = nn.relu %w
// CHECK-NEXT:    %c = nn.dense %x, %wr
// CHECK:         %e = nn.dense %y
// CHECK:         %f = nn.dense %z
// CHECK-NEXT:    func.return %a, %b, %c, %e, %f
func.func @apart(%x: tensor<4x32xf16>, %y: tensor<4x32xf16>, %z: tensor<4x16xf16>, %w: tensor<8x32xf16>) -> (tensor<4x8xf16>, tensor<4x8xf16>, tensor<4x8xf16>, tensor<4x8xf16>, tensor<4x8xf16>) {
  %w1 = nn.constant dense<1.0> : tensor<8x32xf16>
  %a = nn.dense %x, %w1 : (tensor<4x32xf16>, tensor<8x32xf16>) -> tensor<4x8xf16>
  %w2 = nn.constant dense<2.0> : tensor<8x32xf16>
  %b = nn.dense %x, %w2 : (tensor<4x32xf16>, tensor<8x32xf16>) -> tensor<4x8xf16>
  %wr = nn.relu %w : (tensor<8x32xf16>) -> tensor<8x32xf16>
  %c = nn.dense %x, %wr : (tensor<4x32xf16>, tensor<8x32xf16>) -> tensor<4x8xf16>
  %w3 = nn.constant dense<3.0> : tensor<8x32xf16>
  %e = nn.dense %y, %w3 : (tensor<4x32xf16>, tensor<8x32xf16>) -> tensor<4x8xf16>
  %w4 = nn.constant dense<4.0> : tensor<8x16xf16>
  %f = nn.dense %z, %w4 : (tensor<4x16xf16>, tensor<8x16xf16>) -> tensor<4x8xf16>
  func.return %a, %b, %c, %e, %f : tensor<4x8xf16>, tensor<4x8xf16>, tensor<4x8xf16>, tensor<4x8xf16>, tensor<4x8xf16>
}

// -----

// Weight-only 4-bit products of one input and block size: the packed weights, scales and
// zero points concatenated along N (the rows), one product, a slice per projection. One of
// another block size stays apart.

// CHECK-LABEL: func.func @nbits
// CHECK-NEXT:    %w2 = nn.constant dense<51> : tensor<16x32xui8>
// CHECK-NEXT:    %s2 = nn.constant
// CHECK-NEXT:    %z2 = nn.constant
// CHECK-NEXT:    %0 = nn.constant dense<"0x{{(11)+(22)+}}"> : tensor<48x32xui8>
// CHECK-NEXT:    %1 = nn.constant dense<[{{.*}}1.000000e+00{{.*}}2.000000e+00{{.*}}]> : tensor<48x2xf16>
// CHECK-NEXT:    %2 = nn.constant dense<[{{.*}}[8, 8]{{.*}}[7, 7]{{.*}}]> : tensor<48x2xui8>
// CHECK-NEXT:    %3 = nn.matmul_nbits %x, %0, %1, %2 {block_size = 32 : i64} : (tensor<?x64xf16>, tensor<48x32xui8>, tensor<48x2xf16>, tensor<48x2xui8>) -> tensor<?x48xf16>
// CHECK-NEXT:    %q = nn.strided_slice %3 {begin = array<i64: 0, 0>, end = array<i64: 9223372036854775807, 32>, strides = array<i64: 1, 1>} : (tensor<?x48xf16>) -> tensor<?x32xf16>
// CHECK-NEXT:    %k = nn.strided_slice %3 {begin = array<i64: 0, 32>, end = array<i64: 9223372036854775807, 48>, strides = array<i64: 1, 1>} : (tensor<?x48xf16>) -> tensor<?x16xf16>
// CHECK-NEXT:    %v = nn.matmul_nbits %x, %w2, %s2, %z2 {block_size = 16 : i64}
// CHECK-NEXT:    func.return %q, %k, %v
func.func @nbits(%x: tensor<?x64xf16>) -> (tensor<?x32xf16>, tensor<?x16xf16>, tensor<?x16xf16>) {
  %w0 = nn.constant dense<17> : tensor<32x32xui8>
  %s0 = nn.constant dense<1.0> : tensor<32x2xf16>
  %z0 = nn.constant dense<8> : tensor<32x2xui8>
  %w1 = nn.constant dense<34> : tensor<16x32xui8>
  %s1 = nn.constant dense<2.0> : tensor<16x2xf16>
  %z1 = nn.constant dense<7> : tensor<16x2xui8>
  %w2 = nn.constant dense<51> : tensor<16x32xui8>
  %s2 = nn.constant dense<3.0> : tensor<16x4xf16>
  %z2 = nn.constant dense<6> : tensor<16x4xui8>
  %q = nn.matmul_nbits %x, %w0, %s0, %z0 {block_size = 32 : i64} : (tensor<?x64xf16>, tensor<32x32xui8>, tensor<32x2xf16>, tensor<32x2xui8>) -> tensor<?x32xf16>
  %k = nn.matmul_nbits %x, %w1, %s1, %z1 {block_size = 32 : i64} : (tensor<?x64xf16>, tensor<16x32xui8>, tensor<16x2xf16>, tensor<16x2xui8>) -> tensor<?x16xf16>
  %v = nn.matmul_nbits %x, %w2, %s2, %z2 {block_size = 16 : i64} : (tensor<?x64xf16>, tensor<16x32xui8>, tensor<16x4xf16>, tensor<16x4xui8>) -> tensor<?x16xf16>
  func.return %q, %k, %v : tensor<?x32xf16>, tensor<?x16xf16>, tensor<?x16xf16>
}
