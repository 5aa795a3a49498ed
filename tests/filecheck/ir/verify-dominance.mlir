// RUN: partita-opt %s --split-input-file --verify-diagnostics

func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'nn.relu' op operand #0 (of type tensor<4xf32>) is used before it is defined}}
  %0 = nn.relu %0 : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'nn.add' op operand #1 (of type tensor<4xf32>) is used before it is defined}}
  %0 = nn.add %x, %1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// -----

// Operands defined before the use, in the block or around it, are fine.
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  %1 = nn.add %0, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %1 : tensor<4xf32>
}

// -----

// Multi-block regions use the CFG's dominator tree: the entry block dominates every
// block, so its values reach the successors (and the join block through either path).
func.func @main(%x: tensor<4xf32>, %c: i1) -> tensor<4xf32> {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  cf.cond_br %c, ^then, ^else
^then:
  %1 = nn.add %0, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  cf.br ^join(%1 : tensor<4xf32>)
^else:
  cf.br ^join(%0 : tensor<4xf32>)
^join(%2: tensor<4xf32>):
  %3 = nn.add %2, %0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %3 : tensor<4xf32>
}

// -----

// A value of one branch does not dominate the join block: the other path skips it.
func.func @main(%x: tensor<4xf32>, %c: i1) -> tensor<4xf32> {
  cf.cond_br %c, ^then, ^else
^then:
  %1 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  cf.br ^join
^else:
  cf.br ^join
^join:
  // expected-error@+1 {{'func.return' op operand #0 (of type tensor<4xf32>) does not dominate this use}}
  func.return %1 : tensor<4xf32>
}

// -----

// A block listed before its use's block but not on every path to it does not dominate it.
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  cf.br ^b2
^b1:
  %1 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  cf.br ^b2
^b2:
  // expected-error@+1 {{'nn.add' op operand #0 (of type tensor<4xf32>) does not dominate this use}}
  %2 = nn.add %1, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}

// -----

// A loop: the header dominates the body, a value defined later in the body reaches the
// back edge's operands only through the header's block argument.
func.func @main(%x: tensor<4xf32>, %c: i1) -> tensor<4xf32> {
  cf.br ^header(%x : tensor<4xf32>)
^header(%acc: tensor<4xf32>):
  cf.cond_br %c, ^body, ^exit
^body:
  %next = nn.relu %acc : (tensor<4xf32>) -> tensor<4xf32>
  cf.br ^header(%next : tensor<4xf32>)
^exit:
  func.return %acc : tensor<4xf32>
}

// -----

// Values of enclosing regions dominate a nested region only when their block dominates
// the block of the op holding it: here the scf.if sits in a block the definition's
// branch does not dominate.
func.func @main(%x: tensor<4xf32>, %c: i1) -> tensor<4xf32> {
  cf.cond_br %c, ^then, ^join
^then:
  %1 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  cf.br ^join
^join:
  %2 = scf.if %c -> (tensor<4xf32>) {
    // expected-error@+1 {{'scf.yield' op operand #0 (of type tensor<4xf32>) does not dominate this use}}
    scf.yield %1 : tensor<4xf32>
  } else {
    scf.yield %x : tensor<4xf32>
  }
  func.return %2 : tensor<4xf32>
}

// -----

// ... and do dominate it when defined in a dominating block or earlier in the same one.
func.func @main(%x: tensor<4xf32>, %c: i1) -> tensor<4xf32> {
  %0 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  cf.br ^next
^next:
  %1 = nn.tanh %x : (tensor<4xf32>) -> tensor<4xf32>
  %2 = scf.if %c -> (tensor<4xf32>) {
    scf.yield %0 : tensor<4xf32>
  } else {
    scf.yield %1 : tensor<4xf32>
  }
  func.return %2 : tensor<4xf32>
}

// -----

// A use in a block the entry cannot reach is not checked against order (as in MLIR).
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  func.return %x : tensor<4xf32>
^dead:
  %1 = nn.add %2, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = nn.relu %x : (tensor<4xf32>) -> tensor<4xf32>
  func.return %1 : tensor<4xf32>
}
