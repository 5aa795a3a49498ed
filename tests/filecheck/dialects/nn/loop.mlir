// RUN: partita-opt %s | partita-opt | filecheck %s

// nn.loop: a loop the host runs, calling its private body function once per iteration.
// Results: the final carried values, then the scan outputs stacked along a new `?` axis.

// CHECK-LABEL: func.func @main
// CHECK:         %{{.*}}, %{{.*}} = nn.loop @main_loop_body_0(%n, %go : tensor<i64>, tensor<i1>) carried(%acc : tensor<2xf32>) captured(%x : tensor<2xf32>) -> tensor<2xf32>, tensor<?x2xf32>
// CHECK-LABEL: func.func private @main_loop_body_0
// CHECK-SAME:    attributes {byoc.host_body}
func.func @main(%n: tensor<i64>, %go: tensor<i1>, %acc: tensor<2xf32>, %x: tensor<2xf32>) -> (tensor<2xf32>, tensor<?x2xf32>) {
  %0, %1 = nn.loop @main_loop_body_0(%n, %go : tensor<i64>, tensor<i1>) carried(%acc : tensor<2xf32>) captured(%x : tensor<2xf32>) -> tensor<2xf32>, tensor<?x2xf32>
  func.return %0, %1 : tensor<2xf32>, tensor<?x2xf32>
}
func.func private @main_loop_body_0(%i: tensor<i64>, %c: tensor<i1>, %a: tensor<2xf32>, %x: tensor<2xf32>) -> (tensor<i1>, tensor<2xf32>, tensor<2xf32>) attributes {byoc.host_body} {
  %s = nn.add %a, %x : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  func.return %c, %s, %s : tensor<i1>, tensor<2xf32>, tensor<2xf32>
}

// A carried value that grows (the body takes it as `?`), one-element [1] controls, no
// captures, no scan output.
// CHECK-LABEL: func.func @grows
// CHECK:         nn.loop @grow(%n, %go : tensor<1xi64>, tensor<1xi1>) carried(%rows : tensor<1x3xf32>) -> tensor<?x3xf32>
func.func @grows(%n: tensor<1xi64>, %go: tensor<1xi1>, %rows: tensor<1x3xf32>) -> tensor<?x3xf32> {
  %0 = nn.loop @grow(%n, %go : tensor<1xi64>, tensor<1xi1>) carried(%rows : tensor<1x3xf32>) -> tensor<?x3xf32>
  func.return %0 : tensor<?x3xf32>
}
func.func private @grow(%i: tensor<i64>, %c: tensor<i1>, %r: tensor<?x3xf32>) -> (tensor<i1>, tensor<?x3xf32>) attributes {byoc.host_body} {
  %0 = nn.concatenate %r, %r {axis = 0 : i64} : (tensor<?x3xf32>, tensor<?x3xf32>) -> tensor<?x3xf32>
  func.return %c, %0 : tensor<i1>, tensor<?x3xf32>
}
