// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @nonzero_of_a_scalar(%x: tensor<f32>) {
  // expected-error@+1 {{the input must have rank 1 or more}}
  %0 = nn.nonzero %x : (tensor<f32>) -> tensor<0x?xi64>
  func.return
}

// -----

func.func @nonzero_of_wrong_rank(%x: tensor<3x4xf32>) {
  // expected-error@+1 {{result shape [3, ?] is incompatible with inferred shape [2, ?]}}
  %0 = nn.nonzero %x : (tensor<3x4xf32>) -> tensor<3x?xi64>
  func.return
}

// -----

func.func @unique_unknown_result(%x: tensor<5xf32>) {
  // expected-error@+1 {{output must be one of values, indices, inverse, counts, got 'first'}}
  %0 = nn.unique %x {output = "first"} : (tensor<5xf32>) -> tensor<?xi64>
  func.return
}

// -----

func.func @unique_values_keep_the_type(%x: tensor<5xf32>) {
  // expected-error@+1 {{result element type must be one of f32, got i64}}
  %0 = nn.unique %x : (tensor<5xf32>) -> tensor<?xi64>
  func.return
}

// -----

func.func @nms_boxes_and_scores_disagree(%b: tensor<1x6x4xf32>, %s: tensor<1x2x5xf32>, %k: tensor<1xi64>,
                                         %iou: tensor<1xf32>, %min: tensor<1xf32>) {
  // expected-error@+1 {{boxes and scores disagree on the number of boxes (6 and 5)}}
  %0 = nn.non_max_suppression %b, %s, %k, %iou, %min : (tensor<1x6x4xf32>, tensor<1x2x5xf32>, tensor<1xi64>, tensor<1xf32>, tensor<1xf32>) -> tensor<?x3xi64>
  func.return
}

// -----

func.func @nms_limit_of_two_values(%b: tensor<1x6x4xf32>, %s: tensor<1x2x6xf32>, %k: tensor<2xi64>,
                                   %iou: tensor<1xf32>, %min: tensor<1xf32>) {
  // expected-error@+1 {{max_output_boxes_per_class must hold one value, got shape [2]}}
  %0 = nn.non_max_suppression %b, %s, %k, %iou, %min : (tensor<1x6x4xf32>, tensor<1x2x6xf32>, tensor<2xi64>, tensor<1xf32>, tensor<1xf32>) -> tensor<?x3xi64>
  func.return
}

// -----

func.func @choose_between_ranks(%c: tensor<1xi1>, %a: tensor<3x4xf32>, %b: tensor<4xf32>) {
  // expected-error@+1 {{on_true and on_false must have one rank, got [3, 4] and [4]}}
  %0 = nn.choose %c, %a, %b : (tensor<1xi1>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  func.return
}

// -----

func.func @choose_by_two_conditions(%c: tensor<2xi1>, %a: tensor<3x4xf32>, %b: tensor<1x4xf32>) {
  // expected-error@+1 {{the condition must hold one value, got shape [2]}}
  %0 = nn.choose %c, %a, %b : (tensor<2xi1>, tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<?x4xf32>
  func.return
}

// -----

func.func @choose_between_types(%c: tensor<i1>, %a: tensor<3x4xf32>, %b: tensor<1x4xf16>) {
  // expected-error@+1 {{on_true, on_false and the result must have one element type}}
  %0 = nn.choose %c, %a, %b : (tensor<i1>, tensor<3x4xf32>, tensor<1x4xf16>) -> tensor<?x4xf32>
  func.return
}
