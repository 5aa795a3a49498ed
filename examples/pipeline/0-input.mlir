// A two-layer MLP block with a residual, f16, dynamic batch: the input of every stage below.
func.func @main(%x: tensor<?x64xf16>, %w1: tensor<256x64xf16>, %b1: tensor<256xf16>, %w2: tensor<64x256xf16>, %b2: tensor<64xf16>) -> tensor<?x64xf16> {
  %0 = nn.dense %x, %w1 : (tensor<?x64xf16>, tensor<256x64xf16>) -> tensor<?x256xf16>
  %1 = nn.bias_add %0, %b1 : (tensor<?x256xf16>, tensor<256xf16>) -> tensor<?x256xf16>
  %2 = nn.gelu %1 : (tensor<?x256xf16>) -> tensor<?x256xf16>
  %3 = nn.dense %2, %w2 : (tensor<?x256xf16>, tensor<64x256xf16>) -> tensor<?x64xf16>
  %4 = nn.bias_add %3, %b2 : (tensor<?x64xf16>, tensor<64xf16>) -> tensor<?x64xf16>
  %5 = nn.add %4, %x : (tensor<?x64xf16>, tensor<?x64xf16>) -> tensor<?x64xf16>
  func.return %5 : tensor<?x64xf16>
}
