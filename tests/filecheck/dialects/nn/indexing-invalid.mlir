// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @float_indices(%t: tensor<10x4xf32>, %i: tensor<3xf32>) {
  // expected-error@+1 {{indices must be one of i32, i64, got f32}}
  %0 = nn.take %t, %i : (tensor<10x4xf32>, tensor<3xf32>) -> tensor<3x4xf32>
  func.return
}

// -----

func.func @take_axis(%t: tensor<10x4xf32>, %i: tensor<3xi64>) {
  // expected-error@+1 {{axis 2 out of range for rank 2}}
  %0 = nn.take %t, %i {axis = 2 : i64} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
  func.return
}

// -----

func.func @gather_nd_depth(%t: tensor<10x4xf32>, %i: tensor<2x3xi64>) {
  // expected-error@+1 {{do not fit data of rank 2}}
  %0 = nn.gather_nd %t, %i : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2xf32>
  func.return
}

// -----

func.func @scatter_reduction(%c: tensor<4x8xf32>, %i: tensor<3x1xi64>, %u: tensor<3x8xf32>) {
  // expected-error@+1 {{reduction must be one of none, add, mul, max, min, got 'sub'}}
  %0 = nn.scatter_nd %c, %i, %u {reduction = "sub"} : (tensor<4x8xf32>, tensor<3x1xi64>, tensor<3x8xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @scatter_updates_shape(%c: tensor<4x8xf32>, %i: tensor<3x1xi64>, %u: tensor<3x7xf32>) {
  // expected-error@+1 {{updates shape mismatch: 7 vs 8}}
  %0 = nn.scatter_nd %c, %i, %u : (tensor<4x8xf32>, tensor<3x1xi64>, tensor<3x7xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

func.func @slice_zero_stride(%x: tensor<4xf32>) {
  // expected-error@+1 {{strides must be non-zero}}
  %0 = nn.strided_slice %x {begin = array<i64: 0>, end = array<i64: 4>, strides = array<i64: 0>} : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// Every other element up to 8 of an axis of unknown size: a stride only runs to its end.
func.func @slice_dynamic_axis(%x: tensor<?xf32>) {
  // expected-error@+1 {{dynamic axis 0 must be sliced with stride 1 (nn.dynamic_slice's forms)}}
  %0 = nn.strided_slice %x {begin = array<i64: 0>, end = array<i64: 8>, strides = array<i64: 2>} : (tensor<?xf32>) -> tensor<?xf32>
  func.return
}

// -----

// Only a [b:e] is clamped; a tail already has the axis' own size.
func.func @clamped_tail(%x: tensor<?xf32>) {
  // expected-error@+1 {{clamped axis 0 must be sliced [b:e] with 0 <= b <= e and stride 1}}
  %0 = nn.strided_slice %x {begin = array<i64: 2>, end = array<i64: 9223372036854775807>, strides = array<i64: 1>, clamped = array<i64: 0>} : (tensor<?xf32>) -> tensor<?xf32>
  func.return
}

// -----

func.func @slice_length(%x: tensor<8xf32>) {
  // expected-error@+1 {{result shape [3] is incompatible with inferred shape [4]}}
  %0 = nn.strided_slice %x {begin = array<i64: -1>, end = array<i64: -100>, strides = array<i64: -2>} : (tensor<8xf32>) -> tensor<3xf32>
  func.return
}

// -----

func.func @broadcast_to(%x: tensor<3x2xf32>) {
  // expected-error@+1 {{cannot broadcast [3, 2] to [3, 4]}}
  %0 = nn.broadcast_to %x : (tensor<3x2xf32>) -> tensor<3x4xf32>
  func.return
}

// -----

func.func @refs_mismatch(%x: tensor<1xf32>, %r: tensor<?x?xf32>) {
  // expected-error@+1 {{refs, ref_axes and targets must have the same length}}
  %0 = nn.broadcast_to %x, %r {ref_axes = array<i64: 0, 1>, targets = array<i64: 0>} : (tensor<1xf32>, tensor<?x?xf32>) -> tensor<?xf32>
  func.return
}

// -----

func.func @trilu_rank(%x: tensor<4xf32>) {
  // expected-error@+1 {{trilu needs rank >= 2}}
  %0 = nn.trilu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

func.func @reflect_too_wide(%x: tensor<3xf32>) {
  // expected-error@+1 {{reflect padding of 3 does not fit a dimension of size 3}}
  %0 = nn.pad %x {pad_before = array<i64: 3>, pad_after = array<i64: 0>, mode = "reflect"} : (tensor<3xf32>) -> tensor<6xf32>
  func.return
}

// -----

func.func @reshape_two_inferred(%x: tensor<?x?xf32>) {
  // expected-error@+1 {{reshape result may have at most one dynamic dimension}}
  %0 = nn.reshape %x : (tensor<?x?xf32>) -> tensor<?x1x?xf32>
  func.return
}

// -----

func.func @reverse_sequence_axes(%x: tensor<3x4x5xf32>, %l: tensor<5xi64>) {
  // expected-error@+1 {{batch_axis and time_axis must be 0 and 1 in some order, got 2 and 0}}
  %0 = nn.reverse_sequence %x, %l {batch_axis = 2 : i64} : (tensor<3x4x5xf32>, tensor<5xi64>) -> tensor<3x4x5xf32>
  func.return
}

// -----

func.func @reverse_sequence_one_length_per_entry(%x: tensor<3x4xf32>, %l: tensor<3xi64>) {
  // expected-error@+1 {{sequence_lens must hold one length per batch entry: 4 vs 3}}
  %0 = nn.reverse_sequence %x, %l : (tensor<3x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
  func.return
}

// -----

func.func @reverse_sequence_float_lengths(%x: tensor<3x4xf32>, %l: tensor<4xf32>) {
  // expected-error@+1 {{sequence_lens must be one of i32, i64, got f32}}
  %0 = nn.reverse_sequence %x, %l : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  func.return
}

// -----

func.func @tensor_scatter_update_longer_than_cache(%c: tensor<2x3x4xf32>, %u: tensor<2x5x4xf32>, %w: tensor<2xi64>) {
  // expected-error@+1 {{the update holds 5 rows along axis 1, more than the cache's 3}}
  %0 = nn.tensor_scatter %c, %u, %w {axis = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x5x4xf32>, tensor<2xi64>) -> tensor<2x3x4xf32>
  func.return
}

// -----

func.func @tensor_scatter_batch_axis(%c: tensor<2x3x4xf32>, %u: tensor<1x3x4xf32>, %w: tensor<2xi64>) {
  // expected-error@+1 {{axis must not be the batch axis 0}}
  %0 = nn.tensor_scatter %c, %u, %w {axis = 0 : i64} : (tensor<2x3x4xf32>, tensor<1x3x4xf32>, tensor<2xi64>) -> tensor<2x3x4xf32>
  func.return
}

// -----

func.func @tensor_scatter_one_position_per_entry(%c: tensor<2x3x4xf32>, %u: tensor<2x1x4xf32>, %w: tensor<3xi64>) {
  // expected-error@+1 {{write_indices must hold one position per batch entry: 2 vs 3}}
  %0 = nn.tensor_scatter %c, %u, %w : (tensor<2x3x4xf32>, tensor<2x1x4xf32>, tensor<3xi64>) -> tensor<2x3x4xf32>
  func.return
}

// -----

// Refs of one target add up (3 + 5): the result must have 8 elements.
func.func @summed_refs_disagree(%w: tensor<3x5xf32>) {
  // expected-error@+1 {{result shape [7] is incompatible with inferred shape [8]}}
  %0 = nn.arange %w, %w {start = 0.0 : f64, delta = 1.0 : f64, ref_axes = array<i64: 0, 1>, targets = array<i64: 0, 0>} : (tensor<3x5xf32>, tensor<3x5xf32>) -> tensor<7xi64>
  func.return
}
