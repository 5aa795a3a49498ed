// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @trip_count_of_two_elements(%n: tensor<2xi64>, %go: tensor<i1>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{the trip count must be a one-element i64 tensor, got tensor<2xi64>}}
  %0 = nn.loop @body(%n, %go : tensor<2xi64>, tensor<i1>) carried(%a : tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
func.func private @body(%i: tensor<i64>, %c: tensor<i1>, %a: tensor<2xf32>) -> (tensor<i1>, tensor<2xf32>) {
  func.return %c, %a : tensor<i1>, tensor<2xf32>
}

// -----

func.func @float_condition(%n: tensor<i64>, %go: tensor<f32>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{the condition must be a one-element i1 tensor, got tensor<f32>}}
  %0 = nn.loop @body(%n, %go : tensor<i64>, tensor<f32>) carried(%a : tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
func.func private @body(%i: tensor<i64>, %c: tensor<i1>, %a: tensor<2xf32>) -> (tensor<i1>, tensor<2xf32>) {
  func.return %c, %a : tensor<i1>, tensor<2xf32>
}

// -----

func.func @no_body(%n: tensor<i64>, %go: tensor<i1>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{body @missing must name a func.func with a body in the module}}
  %0 = nn.loop @missing(%n, %go : tensor<i64>, tensor<i1>) carried(%a : tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @argument_count(%n: tensor<i64>, %go: tensor<i1>, %a: tensor<2xf32>, %x: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{body @body takes 3 arguments, expected 4 (iteration, condition, 1 carried, 1 captured)}}
  %0 = nn.loop @body(%n, %go : tensor<i64>, tensor<i1>) carried(%a : tensor<2xf32>) captured(%x : tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
func.func private @body(%i: tensor<i64>, %c: tensor<i1>, %a: tensor<2xf32>) -> (tensor<i1>, tensor<2xf32>) {
  func.return %c, %a : tensor<i1>, tensor<2xf32>
}

// -----

func.func @result_count(%n: tensor<i64>, %go: tensor<i1>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{1 results, but body @body returns 1 carried values and 1 scan elements}}
  %0 = nn.loop @body(%n, %go : tensor<i64>, tensor<i1>) carried(%a : tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
func.func private @body(%i: tensor<i64>, %c: tensor<i1>, %a: tensor<2xf32>) -> (tensor<i1>, tensor<2xf32>, tensor<2xf32>) {
  func.return %c, %a, %a : tensor<i1>, tensor<2xf32>, tensor<2xf32>
}

// -----

func.func @body_condition_type(%n: tensor<i64>, %go: tensor<i1>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{body @body: result #0 (the condition) must be a one-element i1 tensor, got tensor<2xf32>}}
  %0 = nn.loop @body(%n, %go : tensor<i64>, tensor<i1>) carried(%a : tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
func.func private @body(%i: tensor<i64>, %c: tensor<i1>, %a: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  func.return %a, %a : tensor<2xf32>, tensor<2xf32>
}

// -----

func.func @carried_element_type(%n: tensor<i64>, %go: tensor<i1>, %a: tensor<2xf16>) -> tensor<2xf16> {
  // expected-error@+1 {{carried value #0 (tensor<2xf16>) does not match body @body argument #2 (tensor<2xf32>)}}
  %0 = nn.loop @body(%n, %go : tensor<i64>, tensor<i1>) carried(%a : tensor<2xf16>) -> tensor<2xf16>
  func.return %0 : tensor<2xf16>
}
func.func private @body(%i: tensor<i64>, %c: tensor<i1>, %a: tensor<2xf32>) -> (tensor<i1>, tensor<2xf32>) {
  func.return %c, %a : tensor<i1>, tensor<2xf32>
}

// -----

func.func @carried_shape_changes(%n: tensor<i64>, %go: tensor<i1>, %a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{body @body result #1 (tensor<4xf32>) does not match its argument #2 (tensor<2xf32>)}}
  %0 = nn.loop @body(%n, %go : tensor<i64>, tensor<i1>) carried(%a : tensor<2xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
func.func private @body(%i: tensor<i64>, %c: tensor<i1>, %a: tensor<2xf32>) -> (tensor<i1>, tensor<4xf32>) {
  %0 = nn.concatenate %a, %a {axis = 0 : i64} : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
  func.return %c, %0 : tensor<i1>, tensor<4xf32>
}

// -----

func.func @scan_without_a_leading_axis(%n: tensor<i64>, %go: tensor<i1>, %a: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  // expected-error@+1 {{scan output #0 (tensor<2xf32>) must stack body @body's element tensor<2xf32> along a new leading axis}}
  %0, %1 = nn.loop @body(%n, %go : tensor<i64>, tensor<i1>) carried(%a : tensor<2xf32>) -> tensor<2xf32>, tensor<2xf32>
  func.return %0, %1 : tensor<2xf32>, tensor<2xf32>
}
func.func private @body(%i: tensor<i64>, %c: tensor<i1>, %a: tensor<2xf32>) -> (tensor<i1>, tensor<2xf32>, tensor<2xf32>) {
  func.return %c, %a, %a : tensor<i1>, tensor<2xf32>, tensor<2xf32>
}
