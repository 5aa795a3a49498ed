builtin.module {
  func.func @main(%x: tensor<?x64xf16>, %w1: tensor<256x64xf16>, %b1: tensor<256xf16>, %w2: tensor<64x256xf16>, %b2: tensor<64xf16>) -> tensor<?x64xf16> {
    %0 = byoc.partition(%x, %w1, %b1) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline, byoc.composite = "cutlass.dense_bias_gelu"} ({
    ^bb0(%x_1: tensor<?x64xf16>, %w1_1: tensor<256x64xf16>, %b1_1: tensor<256xf16>):
      %1 = nn.dense %x_1, %w1_1 : (tensor<?x64xf16>, tensor<256x64xf16>) -> tensor<?x256xf16>
      %2 = nn.bias_add %1, %b1_1 : (tensor<?x256xf16>, tensor<256xf16>) -> tensor<?x256xf16>
      %3 = nn.gelu %2 : (tensor<?x256xf16>) -> tensor<?x256xf16>
      byoc.yield %3 : tensor<?x256xf16>
    }) : (tensor<?x64xf16>, tensor<256x64xf16>, tensor<256xf16>) -> tensor<?x256xf16>
    %1 = byoc.partition(%0, %w2, %b2) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_1", byoc.primitive, byoc.inline, byoc.composite = "cutlass.dense_bias"} ({
    ^bb0(%2: tensor<?x256xf16>, %w2_1: tensor<64x256xf16>, %b2_1: tensor<64xf16>):
      %3 = nn.dense %2, %w2_1 : (tensor<?x256xf16>, tensor<64x256xf16>) -> tensor<?x64xf16>
      %4 = nn.bias_add %3, %b2_1 : (tensor<?x64xf16>, tensor<64xf16>) -> tensor<?x64xf16>
      byoc.yield %4 : tensor<?x64xf16>
    }) : (tensor<?x256xf16>, tensor<64x256xf16>, tensor<64xf16>) -> tensor<?x64xf16>
    %2 = nn.add %1, %x : (tensor<?x64xf16>, tensor<?x64xf16>) -> tensor<?x64xf16>
    func.return %2 : tensor<?x64xf16>
  }
}

