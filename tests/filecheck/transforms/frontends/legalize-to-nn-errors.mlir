// What legalize-to-nn cannot convert is a located error at compile time, never an op
// left for the launch plan to refuse at run time.

// RUN: partita-opt %s --split-input-file --verify-diagnostics -p legalize-to-nn

func.func @insert(%x: tensor<2x2xf32>, %y: tensor<4x4xf32>) -> tensor<4x4xf32> {
  // expected-error@+1 {{'tensor.insert_slice' op cannot be lowered by Partita: tensor.insert_slice converts with unit strides and a static destination only}}
  %r = tensor.insert_slice %x into %y[0, 0] [2, 2] [2, 2] : tensor<2x2xf32> into tensor<4x4xf32>
  func.return %r : tensor<4x4xf32>
}

// -----

func.func @compare(%x: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  // expected-error@+1 {{'linalg.generic' op cannot be lowered by Partita: 'arith.cmpf' in a linalg.generic body has no nn equivalent}}
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]} ins(%x : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %z = arith.constant 0.000000e+00 : f32
    %c = arith.cmpf ogt, %in, %z : f32
    %s = arith.select %c, %in, %z : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  func.return %r : tensor<4xf32>
}

// -----

func.func @dynamic_slice(%x: tensor<8xf32>, %i: index) -> tensor<4xf32> {
  // expected-error@+1 {{'tensor.extract_slice' op cannot be lowered by Partita: tensor.extract_slice converts with static offsets, sizes and strides only}}
  %s = tensor.extract_slice %x[%i] [4] [1] : tensor<8xf32> to tensor<4xf32>
  func.return %s : tensor<4xf32>
}

// -----

func.func @dynamic_reshape(%x: tensor<?x4xf32>) -> tensor<?xf32> {
  // expected-error@+1 {{'tensor.collapse_shape' op cannot be lowered by Partita: tensor.collapse_shape converts with a static result shape only}}
  %r = tensor.collapse_shape %x [[0, 1]] : tensor<?x4xf32> into tensor<?xf32>
  func.return %r : tensor<?xf32>
}

// -----

// Ops of dialects with no conversion at all are reported too (scf here).
func.func @loop(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error@+1 {{'scf.for' op cannot be lowered by Partita: it has no conversion to nn}}
  %r = scf.for %i = %c0 to %c1 step %c1 iter_args(%acc = %x) -> (tensor<4xf32>) {
    scf.yield %acc : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}
