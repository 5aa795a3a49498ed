// RUN: partita-opt %s | partita-opt | filecheck %s

// Selection ops: a result dim known only once the op has run (`?`).

// CHECK-LABEL: func.func @nonzero
// CHECK:         nn.nonzero %{{.*}} : (tensor<3x4xf32>) -> tensor<2x?xi64>
func.func @nonzero(%x: tensor<3x4xf32>) -> tensor<2x?xi64> {
  %0 = nn.nonzero %x : (tensor<3x4xf32>) -> tensor<2x?xi64>
  func.return %0 : tensor<2x?xi64>
}

// CHECK-LABEL: func.func @unique
// CHECK:         nn.unique %{{.*}} {axis = 1 : i64, sorted = 0 : i64} : (tensor<2x5xi32>) -> tensor<2x?xi32>
// CHECK:         nn.unique %{{.*}} {axis = 1 : i64, output = "inverse"} : (tensor<2x5xi32>) -> tensor<5xi64>
// CHECK:         nn.unique %{{.*}} {output = "counts"} : (tensor<7xbf16>) -> tensor<?xi64>
func.func @unique(%x: tensor<2x5xi32>, %y: tensor<7xbf16>) -> (tensor<2x?xi32>, tensor<5xi64>, tensor<?xi64>) {
  %0 = nn.unique %x {axis = 1 : i64, sorted = 0 : i64} : (tensor<2x5xi32>) -> tensor<2x?xi32>
  %1 = nn.unique %x {axis = 1 : i64, output = "inverse"} : (tensor<2x5xi32>) -> tensor<5xi64>
  %2 = nn.unique %y {output = "counts"} : (tensor<7xbf16>) -> tensor<?xi64>
  func.return %0, %1, %2 : tensor<2x?xi32>, tensor<5xi64>, tensor<?xi64>
}

// CHECK-LABEL: func.func @nms
// CHECK:         nn.non_max_suppression %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {center_point_box = 1 : i64}
// CHECK-SAME:      -> tensor<?x3xi64>
func.func @nms(%b: tensor<1x6x4xf32>, %s: tensor<1x2x6xf32>, %k: tensor<1xi64>, %iou: tensor<1xf32>,
               %min: tensor<1xf32>) -> tensor<?x3xi64> {
  %0 = nn.non_max_suppression %b, %s, %k, %iou, %min {center_point_box = 1 : i64} : (tensor<1x6x4xf32>, tensor<1x2x6xf32>, tensor<1xi64>, tensor<1xf32>, tensor<1xf32>) -> tensor<?x3xi64>
  func.return %0 : tensor<?x3xi64>
}

// CHECK-LABEL: func.func @choose
// CHECK:         nn.choose %{{.*}}, %{{.*}}, %{{.*}} : (tensor<i1>, tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<?x4xf32>
func.func @choose(%c: tensor<i1>, %a: tensor<3x4xf32>, %b: tensor<1x4xf32>) -> tensor<?x4xf32> {
  %0 = nn.choose %c, %a, %b : (tensor<i1>, tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<?x4xf32>
  func.return %0 : tensor<?x4xf32>
}
