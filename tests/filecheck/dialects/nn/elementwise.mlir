// RUN: partita-opt %s --split-input-file | partita-opt --split-input-file | filecheck %s
// RUN: partita-opt %s --split-input-file --print-op-generic | partita-opt --split-input-file | filecheck %s

// CHECK-LABEL: func.func @math
func.func @math(%x: tensor<?x4xf32>, %d: tensor<4xf64>, %i: tensor<4xi8>) -> (tensor<?x4xf32>, tensor<4xf64>, tensor<4xi8>) {
  // CHECK-NEXT: %0 = nn.sqrt %x : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %0 = nn.sqrt %x : (tensor<?x4xf32>) -> tensor<?x4xf32>
  // CHECK-NEXT: %1 = nn.round %0 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  %1 = nn.round %0 : (tensor<?x4xf32>) -> tensor<?x4xf32>
  // CHECK-NEXT: %2 = nn.erf %d : (tensor<4xf64>) -> tensor<4xf64>
  %2 = nn.erf %d : (tensor<4xf64>) -> tensor<4xf64>
  // CHECK-NEXT: %3 = nn.abs %i : (tensor<4xi8>) -> tensor<4xi8>
  %3 = nn.abs %i : (tensor<4xi8>) -> tensor<4xi8>
  // CHECK-NEXT: %4 = nn.pow %1, %i : (tensor<?x4xf32>, tensor<4xi8>) -> tensor<?x4xf32>
  %4 = nn.pow %1, %i : (tensor<?x4xf32>, tensor<4xi8>) -> tensor<?x4xf32>
  // CHECK-NEXT: %5 = nn.mod %3, %i {fmod = true} : (tensor<4xi8>, tensor<4xi8>) -> tensor<4xi8>
  %5 = nn.mod %3, %i {fmod = true} : (tensor<4xi8>, tensor<4xi8>) -> tensor<4xi8>
  // CHECK-NEXT: %6 = nn.maximum %4, %x : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %6 = nn.maximum %4, %x : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  func.return %6, %2, %5 : tensor<?x4xf32>, tensor<4xf64>, tensor<4xi8>
}

// -----

// CHECK-LABEL: func.func @activations
func.func @activations(%x: tensor<2x3xf16>, %s: tensor<3xf16>) -> tensor<2x3xf16> {
  // CHECK-NEXT: %0 = nn.leaky_relu %x {alpha = 1.000000e-01 : f64} : (tensor<2x3xf16>) -> tensor<2x3xf16>
  %0 = nn.leaky_relu %x {alpha = 0.1 : f64} : (tensor<2x3xf16>) -> tensor<2x3xf16>
  // CHECK-NEXT: %1 = nn.prelu %0, %s : (tensor<2x3xf16>, tensor<3xf16>) -> tensor<2x3xf16>
  %1 = nn.prelu %0, %s : (tensor<2x3xf16>, tensor<3xf16>) -> tensor<2x3xf16>
  // CHECK-NEXT: %2 = nn.hard_swish %1 : (tensor<2x3xf16>) -> tensor<2x3xf16>
  %2 = nn.hard_swish %1 : (tensor<2x3xf16>) -> tensor<2x3xf16>
  // CHECK-NEXT: %3 = nn.swish %2 : (tensor<2x3xf16>) -> tensor<2x3xf16>
  %3 = nn.swish %2 : (tensor<2x3xf16>) -> tensor<2x3xf16>
  // CHECK-NEXT: %4 = nn.clip %3 {max = 6.000000e+00 : f64} : (tensor<2x3xf16>) -> tensor<2x3xf16>
  %4 = nn.clip %3 {max = 6.0 : f64} : (tensor<2x3xf16>) -> tensor<2x3xf16>
  func.return %4 : tensor<2x3xf16>
}

// -----

// CHECK-LABEL: func.func @masks
func.func @masks(%a: tensor<?x8xi64>, %b: tensor<8xi64>, %x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // CHECK-NEXT: %0 = nn.less %a, %b : (tensor<?x8xi64>, tensor<8xi64>) -> tensor<?x8xi1>
  %0 = nn.less %a, %b : (tensor<?x8xi64>, tensor<8xi64>) -> tensor<?x8xi1>
  // CHECK-NEXT: %1 = nn.not %0 : (tensor<?x8xi1>) -> tensor<?x8xi1>
  %1 = nn.not %0 : (tensor<?x8xi1>) -> tensor<?x8xi1>
  // CHECK-NEXT: %2 = nn.is_inf %x {detect_negative = false} : (tensor<?x8xf32>) -> tensor<?x8xi1>
  %2 = nn.is_inf %x {detect_negative = false} : (tensor<?x8xf32>) -> tensor<?x8xi1>
  // CHECK-NEXT: %3 = nn.or %1, %2 : (tensor<?x8xi1>, tensor<?x8xi1>) -> tensor<?x8xi1>
  %3 = nn.or %1, %2 : (tensor<?x8xi1>, tensor<?x8xi1>) -> tensor<?x8xi1>
  // CHECK-NEXT: %4 = nn.cast %3 : (tensor<?x8xi1>) -> tensor<?x8xf32>
  %4 = nn.cast %3 : (tensor<?x8xi1>) -> tensor<?x8xf32>
  // CHECK-NEXT: %5 = nn.where %0, %x, %4 : (tensor<?x8xi1>, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  %5 = nn.where %0, %x, %4 : (tensor<?x8xi1>, tensor<?x8xf32>, tensor<?x8xf32>) -> tensor<?x8xf32>
  // CHECK-NEXT: %6 = nn.bit_shift %b, %b {direction = "right"} : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi64>
  %6 = nn.bit_shift %b, %b {direction = "right"} : (tensor<8xi64>, tensor<8xi64>) -> tensor<8xi64>
  func.return %5 : tensor<?x8xf32>
}


// -----

// CHECK-LABEL: func.func @quantization
func.func @quantization(%x: tensor<?x3xf32>, %s: tensor<3xf32>, %z: tensor<3xi8>) -> tensor<?x3xf32> {
  // CHECK-NEXT: %0 = nn.quantize %x, %s, %z : (tensor<?x3xf32>, tensor<3xf32>, tensor<3xi8>) -> tensor<?x3xi8>
  %0 = nn.quantize %x, %s, %z {axis = 1 : i64} : (tensor<?x3xf32>, tensor<3xf32>, tensor<3xi8>) -> tensor<?x3xi8>
  // CHECK-NEXT: %1 = nn.dequantize %0, %s, %z {axis = -1 : i64} : (tensor<?x3xi8>, tensor<3xf32>, tensor<3xi8>) -> tensor<?x3xf32>
  %1 = nn.dequantize %0, %s, %z {axis = -1 : i64} : (tensor<?x3xi8>, tensor<3xf32>, tensor<3xi8>) -> tensor<?x3xf32>
  func.return %1 : tensor<?x3xf32>
}

// -----

// CHECK-LABEL: func.func @trig_and_bits
func.func @trig_and_bits(%x: tensor<4xf32>, %i: tensor<4xui16>) -> (tensor<4xf32>, tensor<4xui16>) {
  // CHECK-NEXT: %0 = nn.atanh %x : (tensor<4xf32>) -> tensor<4xf32>
  %0 = nn.atanh %x : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %1 = nn.shrink %0 {lambd = 2.500000e-01 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  %1 = nn.shrink %0 {lambd = 0.25 : f64} : (tensor<4xf32>) -> tensor<4xf32>
  // CHECK-NEXT: %2 = nn.bitwise_not %i : (tensor<4xui16>) -> tensor<4xui16>
  %2 = nn.bitwise_not %i : (tensor<4xui16>) -> tensor<4xui16>
  // CHECK-NEXT: %3 = nn.bitwise_xor %2, %i : (tensor<4xui16>, tensor<4xui16>) -> tensor<4xui16>
  %3 = nn.bitwise_xor %2, %i : (tensor<4xui16>, tensor<4xui16>) -> tensor<4xui16>
  // CHECK-NEXT: %4 = nn.bitcast %1 : (tensor<4xf32>) -> tensor<4xi32>
  %4 = nn.bitcast %1 : (tensor<4xf32>) -> tensor<4xi32>
  func.return %1, %3 : tensor<4xf32>, tensor<4xui16>
}

// -----

// Narrow storage types (ONNX INT4 / UINT4 / INT2 / UINT2 / FLOAT4E2M1 / FLOAT8E8M0): casts
// and (de)quantization take them, with round_mode for the MX scale type.
// CHECK-LABEL: func.func @narrow_types
func.func @narrow_types(%x: tensor<8xf32>, %s: tensor<f32>, %z: tensor<i4>) -> (tensor<8xf4E2M1FN>, tensor<8xf8E8M0FNU>, tensor<8xf32>) {
  // CHECK-NEXT: %0 = nn.cast %x : (tensor<8xf32>) -> tensor<8xf4E2M1FN>
  %0 = nn.cast %x : (tensor<8xf32>) -> tensor<8xf4E2M1FN>
  // CHECK-NEXT: %1 = nn.cast %x {round_mode = "nearest"} : (tensor<8xf32>) -> tensor<8xf8E8M0FNU>
  %1 = nn.cast %x {round_mode = "nearest"} : (tensor<8xf32>) -> tensor<8xf8E8M0FNU>
  // CHECK-NEXT: %2 = nn.quantize %x, %s, %z : (tensor<8xf32>, tensor<f32>, tensor<i4>) -> tensor<8xi4>
  %2 = nn.quantize %x, %s, %z : (tensor<8xf32>, tensor<f32>, tensor<i4>) -> tensor<8xi4>
  // CHECK-NEXT: %3 = nn.dequantize %2, %s, %z : (tensor<8xi4>, tensor<f32>, tensor<i4>) -> tensor<8xf32>
  %3 = nn.dequantize %2, %s, %z : (tensor<8xi4>, tensor<f32>, tensor<i4>) -> tensor<8xf32>
  func.return %0, %1, %3 : tensor<8xf4E2M1FN>, tensor<8xf8E8M0FNU>, tensor<8xf32>
}
