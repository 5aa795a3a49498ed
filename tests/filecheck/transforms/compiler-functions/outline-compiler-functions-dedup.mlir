// RUN: partita-opt %s -p 'outline-compiler-functions{dedup=true}' --split-input-file | filecheck %s
// RUN: partita-opt %s -p 'outline-compiler-functions{dedup=true prefix="collage"}' --split-input-file | filecheck %s --check-prefix=PREFIX

// dedup=true names partitions without a global symbol: equal partitions share one
// fresh deterministic name, skipping names already taken (the existing function
// @tvmgen_default_cutlass_main_0 and the global symbol _main_1 a partition asks for).
// A partition differing only in an attribute gets a function of its own.

// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_0(%arg: tensor<8xf32>)
// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_2(
// CHECK-SAME:      attributes {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_2"}
// CHECK-NEXT:    nn.relu
// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_3(
// CHECK-SAME:      attributes {byoc.compiler = "cutlass", byoc.primitive, byoc.global_symbol = "tvmgen_default_cutlass_main_3"}
// CHECK-NEXT:    nn.relu
// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_1(
// CHECK-NEXT:    nn.tanh
// CHECK-LABEL: func.func @main(
// CHECK-NEXT:    %[[A:.*]] = func.call @tvmgen_default_cutlass_main_2(%x)
// CHECK-NEXT:    %[[B:.*]] = func.call @tvmgen_default_cutlass_main_2(%[[A]])
// CHECK-NEXT:    %[[C:.*]] = func.call @tvmgen_default_cutlass_main_3(%[[B]])
// CHECK-NEXT:    %[[D:.*]] = func.call @tvmgen_default_cutlass_main_1(%[[C]])
// CHECK-NEXT:    %[[E:.*]] = func.call @tvmgen_default_cutlass_main_0(%[[D]])
// CHECK-NEXT:    func.return %[[E]]

// PREFIX: func.func private @collage_cutlass_main_0(
// PREFIX: func.func private @collage_cutlass_main_1(
// PREFIX: func.call @collage_cutlass_main_0(%x)
// PREFIX: func.call @collage_cutlass_main_0(
func.func private @tvmgen_default_cutlass_main_0(%arg: tensor<8xf32>) -> tensor<8xf32> attributes {byoc.compiler = "cutlass"} {
  %0 = nn.sigmoid %arg : (tensor<8xf32>) -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = byoc.partition(%x) {byoc.compiler = "cutlass"} ({
  ^bb0(%a: tensor<8xf32>):
    %r = nn.relu %a : (tensor<8xf32>) -> tensor<8xf32>
    byoc.yield %r : tensor<8xf32>
  }) : (tensor<8xf32>) -> tensor<8xf32>
  %1 = byoc.partition(%0) {byoc.compiler = "cutlass"} ({
  ^bb0(%b: tensor<8xf32>):
    %s = nn.relu %b : (tensor<8xf32>) -> tensor<8xf32>
    byoc.yield %s : tensor<8xf32>
  }) : (tensor<8xf32>) -> tensor<8xf32>
  %2 = byoc.partition(%1) {byoc.compiler = "cutlass", byoc.primitive} ({
  ^bb0(%b: tensor<8xf32>):
    %s = nn.relu %b : (tensor<8xf32>) -> tensor<8xf32>
    byoc.yield %s : tensor<8xf32>
  }) : (tensor<8xf32>) -> tensor<8xf32>
  %3 = byoc.partition(%2) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_1"} ({
  ^bb0(%b: tensor<8xf32>):
    %s = nn.tanh %b : (tensor<8xf32>) -> tensor<8xf32>
    byoc.yield %s : tensor<8xf32>
  }) : (tensor<8xf32>) -> tensor<8xf32>
  %4 = func.call @tvmgen_default_cutlass_main_0(%3) : (tensor<8xf32>) -> tensor<8xf32>
  func.return %4 : tensor<8xf32>
}
