// RUN: partita-opt %s -p fold-constant-calls,canonicalize --split-input-file | filecheck %s
// RUN: partita-opt %s -p fold-constant-calls --split-input-file | filecheck %s --check-prefix=FOLD

// A host conditional on a flag computed by a device function folds away.

// CHECK-LABEL: func.func @main(%x: i32, %y: i32) -> (i32, tensor<2xf32>)
// CHECK-NOT:     func.call
// CHECK-NOT:     scf.if
// CHECK:         %[[N:.*]] = nn.constant dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32>
// CHECK-NEXT:    %[[A:.*]] = arith.addi %x, %y : i32
// CHECK-NEXT:    func.return %[[A]], %[[N]] : i32, tensor<2xf32>
// FOLD-LABEL:  func.func @main
// FOLD-NEXT:     %[[T:.*]] = arith.constant true
// FOLD-NEXT:     %[[N:.*]] = nn.constant
// FOLD-NEXT:     %{{.*}} = scf.if %[[T]] -> (i32) {
func.func @main(%x: i32, %y: i32) -> (i32, tensor<2xf32>) attributes {byoc.target = #byoc.target<"llvm">} {
  %c, %t = func.call @use_tensor_cores() : () -> (i1, tensor<2xf32>)
  %r = scf.if %c -> (i32) {
    %a = arith.addi %x, %y : i32
    scf.yield %a : i32
  } else {
    scf.yield %y : i32
  }
  func.return %r, %t : i32, tensor<2xf32>
}

// The callee stays (no symbol-dce).
// CHECK-LABEL: func.func private @use_tensor_cores()
// CHECK-SAME:    #byoc.target<"cuda", {arch = "sm_90"}>
func.func private @use_tensor_cores() -> (i1, tensor<2xf32>) attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>} {
  %t = arith.constant true
  %n = nn.constant dense<[1.0, 2.0]> : tensor<2xf32>
  func.return %t, %n : i1, tensor<2xf32>
}

// -----

// Not constant (returns an argument, or a value computed from one): the calls stay.

// FOLD-LABEL: func.func @not_constant(%x: i32) -> (i32, i1)
// FOLD-NEXT:    %0 = func.call @identity(%x)
// FOLD-NEXT:    %1 = func.call @from_argument(%x)
func.func @not_constant(%x: i32) -> (i32, i1) {
  %0 = func.call @identity(%x) : (i32) -> i32
  %1 = func.call @from_argument(%x) : (i32) -> i1
  func.return %0, %1 : i32, i1
}
func.func private @identity(%x: i32) -> i32 {
  func.return %x : i32
}
func.func private @from_argument(%x: i32) -> i1 {
  %0 = arith.constant 80 : i32
  %1 = arith.cmpi sge, %x, %0 : i32
  func.return %1 : i1
}

// -----

// A value computed from constants only folds too: xDSL folds the arithmetic, the pass
// evaluates the comparison and the logic; the callee keeps its body. The branch on the
// folded flag then goes away with canonicalize.

// FOLD-LABEL: func.func @computed(%x: i32) -> (i32, i32)
// FOLD-NEXT:    %[[F:.*]] = arith.constant true
// FOLD-NEXT:    %[[N:.*]] = arith.constant 155 : i32
// FOLD-NEXT:    scf.if %[[F]]
// FOLD-LABEL: func.func private @sm_at_least_75()
// FOLD:         arith.cmpi sge
// CHECK-LABEL: func.func @computed(%x: i32) -> (i32, i32)
// CHECK-NEXT:    %[[N:.*]] = arith.constant 155 : i32
// CHECK-NEXT:    %[[A:.*]] = arith.addi %x, %x : i32
// CHECK-NEXT:    func.return %[[A]], %[[N]] : i32, i32
func.func @computed(%x: i32) -> (i32, i32) {
  %flag, %n = func.call @sm_at_least_75() : () -> (i1, i32)
  %r = scf.if %flag -> (i32) {
    %a = arith.addi %x, %x : i32
    scf.yield %a : i32
  } else {
    scf.yield %x : i32
  }
  func.return %r, %n : i32, i32
}
func.func private @sm_at_least_75() -> (i1, i32) attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>} {
  %sm = arith.constant 80 : i32
  %min = arith.constant 75 : i32
  %ge = arith.cmpi sge, %sm, %min : i32
  %lt = arith.cmpi ult, %sm, %min : i32
  %t = arith.constant true
  %not_lt = arith.xori %lt, %t : i1
  %both = arith.andi %ge, %not_lt : i1
  %n = arith.addi %sm, %min : i32
  func.return %both, %n : i1, i32
}
