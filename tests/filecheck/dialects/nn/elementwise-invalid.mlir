// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @sqrt_of_integers(%a: tensor<4xi32>) {
  // expected-error@+1 {{element type must be one of f16, bf16, f32, f64, got i32}}
  %0 = nn.sqrt %a : (tensor<4xi32>) -> tensor<4xi32>
  func.return
}

// -----

func.func @neg_of_unsigned(%a: tensor<4xui8>) {
  // expected-error@+1 {{element type must be one of f16, bf16, f32, f64, i8, i16, i32, i64, got ui8}}
  %0 = nn.neg %a : (tensor<4xui8>) -> tensor<4xui8>
  func.return
}

// -----

func.func @compare_result_not_bool(%a: tensor<4xf32>) {
  // expected-error@+1 {{result element type must be one of i1, got f32}}
  %0 = nn.greater %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @compare_mixed_types(%a: tensor<4xf32>, %b: tensor<4xi32>) {
  // expected-error@+1 {{operands must share one element type, got f32, i32}}
  %0 = nn.equal %a, %b : (tensor<4xf32>, tensor<4xi32>) -> tensor<4xi1>
  func.return
}

// -----

func.func @where_condition_not_bool(%c: tensor<4xf32>, %a: tensor<4xf32>) {
  // expected-error@+1 {{condition element type must be one of i1, got f32}}
  %0 = nn.where %c, %a, %a : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @where_not_broadcastable(%c: tensor<3xi1>, %a: tensor<4xf32>) {
  // expected-error@+1 {{are not broadcastable}}
  %0 = nn.where %c, %a, %a : (tensor<3xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @prelu_slope_too_big(%x: tensor<3xf32>, %s: tensor<2x3xf32>) {
  // expected-error@+1 {{slope [2, 3] does not broadcast to input [3]}}
  %0 = nn.prelu %x, %s : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<3xf32>
  func.return
}

// -----

func.func @pow_result_type(%x: tensor<3xi32>, %y: tensor<3xf32>) {
  // expected-error@+1 {{result element type f32 must be the base's, i32}}
  %0 = nn.pow %x, %y : (tensor<3xi32>, tensor<3xf32>) -> tensor<3xf32>
  func.return
}

// -----

func.func @bit_shift_direction(%x: tensor<3xui8>) {
  // expected-error@+1 {{direction must be "left" or "right", got 'up'}}
  %0 = nn.bit_shift %x, %x {direction = "up"} : (tensor<3xui8>, tensor<3xui8>) -> tensor<3xui8>
  func.return
}

// -----

func.func @not_of_float(%x: tensor<3xf32>) {
  // expected-error@+1 {{element type must be one of i1, got f32}}
  %0 = nn.not %x : (tensor<3xf32>) -> tensor<3xf32>
  func.return
}

// -----

func.func @cast_shape(%x: tensor<3xf32>) {
  // expected-error@+1 {{result shape [4] is incompatible with inferred shape [3]}}
  %0 = nn.cast %x : (tensor<3xf32>) -> tensor<4xi32>
  func.return
}

// -----

func.func @quantize_scale_size(%x: tensor<2x3xf32>, %s: tensor<2xf32>, %z: tensor<2xui8>) {
  // expected-error@+1 {{scale size does not match input dimension 1: 3 vs 2}}
  %0 = nn.quantize %x, %s, %z : (tensor<2x3xf32>, tensor<2xf32>, tensor<2xui8>) -> tensor<2x3xui8>
  func.return
}

// -----

func.func @quantize_to_float(%x: tensor<3xf32>, %s: tensor<f32>, %z: tensor<f32>) {
  // expected-error@+1 {{zero point element type must be one of i8, ui8, i16, ui16, i4, ui4, i2, ui2, i32, f8E4M3FN, f8E4M3FNUZ, f8E5M2, f8E5M2FNUZ, f4E2M1FN, got f32}}
  %0 = nn.quantize %x, %s, %z : (tensor<3xf32>, tensor<f32>, tensor<f32>) -> tensor<3xf32>
  func.return
}

// -----

func.func @dequantize_result_type(%x: tensor<3xi8>, %s: tensor<f32>, %z: tensor<i8>) {
  // expected-error@+1 {{result and scale must share one element type}}
  %0 = nn.dequantize %x, %s, %z : (tensor<3xi8>, tensor<f32>, tensor<i8>) -> tensor<3xf16>
  func.return
}

// -----

func.func @bitwise_on_floats(%x: tensor<3xf32>) {
  // expected-error@+1 {{element type must be one of i8, i16, i32, i64, ui8, ui16, ui32, ui64, got f32}}
  %0 = nn.bitwise_and %x, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return
}

// -----

func.func @cast_round_mode(%x: tensor<3xf32>) {
  // expected-error@+1 {{round_mode must be one of up, down, nearest, not 'even'}}
  %0 = nn.cast %x {round_mode = "even"} : (tensor<3xf32>) -> tensor<3xf8E8M0FNU>
  func.return
}

// -----

func.func @add_of_int4(%a: tensor<4xi4>) {
  // expected-error@+1 {{element type must be one of}}
  %0 = nn.add %a, %a : (tensor<4xi4>, tensor<4xi4>) -> tensor<4xi4>
  func.return
}

// -----

func.func @bitcast_width(%x: tensor<3xf32>) {
  // expected-error@+1 {{f32 and i16 differ in storage width}}
  %0 = nn.bitcast %x : (tensor<3xf32>) -> tensor<3xi16>
  func.return
}
