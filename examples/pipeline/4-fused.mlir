builtin.module {
  func.func private @tvmgen_default_cutlass_main_0(%x: tensor<?x64xf16>, %w1: tensor<256x64xf16>, %b1: tensor<256xf16>) -> tensor<?x256xf16> attributes {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline, byoc.composite = "cutlass.dense_bias_gelu", byoc.target = #byoc.target<"cutlass">} {
    %0 = nn.dense %x, %w1 : (tensor<?x64xf16>, tensor<256x64xf16>) -> tensor<?x256xf16>
    %1 = nn.bias_add %0, %b1 : (tensor<?x256xf16>, tensor<256xf16>) -> tensor<?x256xf16>
    %2 = nn.gelu %1 : (tensor<?x256xf16>) -> tensor<?x256xf16>
    func.return %2 : tensor<?x256xf16>
  }
  func.func private @tvmgen_default_cutlass_main_1(%0: tensor<?x256xf16>, %w2: tensor<64x256xf16>, %b2: tensor<64xf16>) -> tensor<?x64xf16> attributes {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_1", byoc.primitive, byoc.inline, byoc.composite = "cutlass.dense_bias", byoc.target = #byoc.target<"cutlass">} {
    %1 = nn.dense %0, %w2 : (tensor<?x256xf16>, tensor<64x256xf16>) -> tensor<?x64xf16>
    %2 = nn.bias_add %1, %b2 : (tensor<?x64xf16>, tensor<64xf16>) -> tensor<?x64xf16>
    func.return %2 : tensor<?x64xf16>
  }
  func.func private @main_fused_0(%0: tensor<?x64xf16>, %1: tensor<?x64xf16>) -> tensor<?x64xf16> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive} {
    %2 = nn.add %0, %1 : (tensor<?x64xf16>, tensor<?x64xf16>) -> tensor<?x64xf16>
    func.return %2 : tensor<?x64xf16>
  }
  func.func @main(%x: tensor<?x64xf16>, %w1: tensor<256x64xf16>, %b1: tensor<256xf16>, %w2: tensor<64x256xf16>, %b2: tensor<64xf16>) -> tensor<?x64xf16> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
    %0 = func.call @tvmgen_default_cutlass_main_0(%x, %w1, %b1) : (tensor<?x64xf16>, tensor<256x64xf16>, tensor<256xf16>) -> tensor<?x256xf16>
    %1 = func.call @tvmgen_default_cutlass_main_1(%0, %w2, %b2) : (tensor<?x256xf16>, tensor<64x256xf16>, tensor<64xf16>) -> tensor<?x64xf16>
    %2 = func.call @main_fused_0(%1, %x) : (tensor<?x64xf16>, tensor<?x64xf16>) -> tensor<?x64xf16>
    func.return %2 : tensor<?x64xf16>
  }
}

