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
