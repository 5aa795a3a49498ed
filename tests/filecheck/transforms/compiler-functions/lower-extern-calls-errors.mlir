// RUN: partita-opt %s -p lower-extern-calls --split-input-file --verify-diagnostics

// Dynamic results need the reference body to derive a shape function.
func.func private @f(tensor<?x8xf32>) -> tensor<?x8xf32> attributes {byoc.extern}
func.func @main(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error@+1 {{has dynamic result shapes, but @f_reference, the body of @f needed to derive its shape function, is missing}}
  %0 = func.call @f(%x) : (tensor<?x8xf32>) -> tensor<?x8xf32>
  func.return %0 : tensor<?x8xf32>
}

// -----

// A dynamic dim no shape rule can express is an error naming the op: here a conv2d
// whose window (kernel) size is dynamic.
func.func private @g(tensor<1x3x8x8xf32>, tensor<4x3x?x?xf32>) -> tensor<1x4x?x?xf32> attributes {byoc.extern}
func.func private @g_reference(%i: tensor<1x3x8x8xf32>, %k: tensor<4x3x?x?xf32>) -> tensor<1x4x?x?xf32> attributes {byoc.reference_impl = @g} {
  // expected-error@+1 {{'nn.conv2d' op has a dynamic window size: its output size cannot be derived}}
  %0 = nn.conv2d %i, %k : (tensor<1x3x8x8xf32>, tensor<4x3x?x?xf32>) -> tensor<1x4x?x?xf32>
  func.return %0 : tensor<1x4x?x?xf32>
}
func.func @main(%x: tensor<1x3x8x8xf32>, %k: tensor<4x3x?x?xf32>) -> tensor<1x4x?x?xf32> {
  %0 = func.call @g(%x, %k) : (tensor<1x3x8x8xf32>, tensor<4x3x?x?xf32>) -> tensor<1x4x?x?xf32>
  func.return %0 : tensor<1x4x?x?xf32>
}

// -----

// A tied result writes its operand's buffer: an operand read again is refused.
func.func private @update(tensor<1x2x16x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> (tensor<1x2x16x4xf32> {byoc.tied_operand = 0 : i64}) attributes {byoc.extern}
func.func @step(%cache: tensor<1x2x16x4xf32>, %u: tensor<1x2x1x4xf32>, %pos: tensor<1xi64>) -> (tensor<1x2x16x4xf32>, tensor<1x2x16x4xf32>) {
  // expected-error@+1 {{passes operand #0 to @update, which writes its result into it in place ('byoc.tied_operand'), but reads it elsewhere too}}
  %0 = func.call @update(%cache, %u, %pos) : (tensor<1x2x16x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x16x4xf32>
  func.return %cache, %0 : tensor<1x2x16x4xf32>, tensor<1x2x16x4xf32>
}

// -----

// The tied operand must have the result's type.
func.func private @update(tensor<1x2x16x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> (tensor<1x2x16x4xf32> {byoc.tied_operand = 1 : i64}) attributes {byoc.extern}
func.func @step(%cache: tensor<1x2x16x4xf32>, %u: tensor<1x2x1x4xf32>, %pos: tensor<1xi64>) -> tensor<1x2x16x4xf32> {
  // expected-error@+1 {{calls @update, whose result is tied to operand #1, which is not one of its operands of the result's type tensor<1x2x16x4xf32>}}
  %0 = func.call @update(%cache, %u, %pos) : (tensor<1x2x16x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x16x4xf32>
  func.return %0 : tensor<1x2x16x4xf32>
}
