builtin.module {
  func.func private @tvmgen_default_cutlass_main_0(tensor<?x64xf16>, tensor<256x64xf16>, tensor<256xf16>) -> tensor<?x256xf16> attributes {byoc.extern}
  func.func private @tvmgen_default_cutlass_main_0_reference(%x: tensor<?x64xf16>, %w1: tensor<256x64xf16>, %b1: tensor<256xf16>) -> tensor<?x256xf16> attributes {byoc.reference_impl = @tvmgen_default_cutlass_main_0} {
    %0 = nn.dense %x, %w1 : (tensor<?x64xf16>, tensor<256x64xf16>) -> tensor<?x256xf16>
    %1 = nn.bias_add %0, %b1 : (tensor<?x256xf16>, tensor<256xf16>) -> tensor<?x256xf16>
    %2 = nn.gelu %1 : (tensor<?x256xf16>) -> tensor<?x256xf16>
    func.return %2 : tensor<?x256xf16>
  }
  func.func private @tvmgen_default_cutlass_main_0_shape_func(%0: index) -> index attributes {byoc.target = #byoc.target<"llvm">} {
    func.return %0 : index
  }
  func.func private @tvmgen_default_cutlass_main_1(tensor<?x256xf16>, tensor<64x256xf16>, tensor<64xf16>) -> tensor<?x64xf16> attributes {byoc.extern}
  func.func private @tvmgen_default_cutlass_main_1_reference(%0: tensor<?x256xf16>, %w2: tensor<64x256xf16>, %b2: tensor<64xf16>) -> tensor<?x64xf16> attributes {byoc.reference_impl = @tvmgen_default_cutlass_main_1} {
    %1 = nn.dense %0, %w2 : (tensor<?x256xf16>, tensor<64x256xf16>) -> tensor<?x64xf16>
    %2 = nn.bias_add %1, %b2 : (tensor<?x64xf16>, tensor<64xf16>) -> tensor<?x64xf16>
    func.return %2 : tensor<?x64xf16>
  }
  func.func private @tvmgen_default_cutlass_main_1_shape_func(%0: index) -> index attributes {byoc.target = #byoc.target<"llvm">} {
    func.return %0 : index
  }
  func.func private @main_fused_0(tensor<?x64xf16>, tensor<?x64xf16>) -> tensor<?x64xf16> attributes {byoc.extern}
  func.func private @main_fused_0_reference(%0: tensor<?x64xf16>, %1: tensor<?x64xf16>) -> tensor<?x64xf16> attributes {byoc.reference_impl = @main_fused_0} {
    %2 = nn.add %0, %1 : (tensor<?x64xf16>, tensor<?x64xf16>) -> tensor<?x64xf16>
    func.return %2 : tensor<?x64xf16>
  }
  func.func private @main_fused_0_shape_func(%0: index, %1: index) -> index attributes {byoc.target = #byoc.target<"llvm">} {
    %2 = arith.constant 1 : index
    %3 = arith.cmpi eq, %0, %2 : index
    %4 = arith.select %3, %1, %0 : index
    func.return %4 : index
  }
  func.func @main(%x: tensor<?x64xf16>, %w1: tensor<256x64xf16>, %b1: tensor<256xf16>, %w2: tensor<64x256xf16>, %b2: tensor<64xf16>) -> tensor<?x64xf16> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
    %0 = arith.constant 0 : index
    %1 = tensor.dim %x, %0 : tensor<?x64xf16>
    %2 = func.call @tvmgen_default_cutlass_main_0_shape_func(%1) : (index) -> index
    %3 = byoc.alloc_tensor(%2) : tensor<?x256xf16>
    %4 = byoc.call_extern @tvmgen_default_cutlass_main_0(%x, %w1, %b1) outs(%3) {byoc.shape_func = @tvmgen_default_cutlass_main_0_shape_func} : (tensor<?x64xf16>, tensor<256x64xf16>, tensor<256xf16>) -> tensor<?x256xf16>, tensor<?x256xf16>
    %5 = arith.constant 0 : index
    %6 = tensor.dim %4, %5 : tensor<?x256xf16>
    %7 = func.call @tvmgen_default_cutlass_main_1_shape_func(%6) : (index) -> index
    %8 = byoc.alloc_tensor(%7) : tensor<?x64xf16>
    %9 = byoc.call_extern @tvmgen_default_cutlass_main_1(%4, %w2, %b2) outs(%8) {byoc.shape_func = @tvmgen_default_cutlass_main_1_shape_func} : (tensor<?x256xf16>, tensor<64x256xf16>, tensor<64xf16>) -> tensor<?x64xf16>, tensor<?x64xf16>
    %10 = arith.constant 0 : index
    %11 = tensor.dim %9, %10 : tensor<?x64xf16>
    %12 = tensor.dim %x, %10 : tensor<?x64xf16>
    %13 = func.call @main_fused_0_shape_func(%11, %12) : (index, index) -> index
    %14 = byoc.alloc_tensor(%13) : tensor<?x64xf16>
    %15 = byoc.call_extern @main_fused_0(%9, %x) outs(%14) {byoc.shape_func = @main_fused_0_shape_func} : (tensor<?x64xf16>, tensor<?x64xf16>) -> tensor<?x64xf16>, tensor<?x64xf16>
    func.return %15 : tensor<?x64xf16>
  }
  byoc.binary @cutlass_sm90 attributes {format = "cubin", target = #byoc.target<"cutlass", {sm = 90 : i64}>, arch = "sm_90", key = "7a658ae1708bc4c416461dc9cb5054f405066c19e860df2d9c020fd0658395d4", sha256 = "eb48c7e12a8397dd2afd3c368bbcddffd4acb42356de52bd5fce771eccdc2f5d", nvrtc = "13.0", kernels = {tvmgen_default_cutlass_main_0 = {entry = "cutlass_tensorop_f16_s16816gemm_f16_128x64_32x3_tn_align8_bias_gelu_f8893f63", kernel = "cutlass_tensorop_f16_s16816gemm_f16_128x64_32x3_tn_align8_bias_gelu", inputs = ["x", "w", "bias"], block = [128 : i64, 1 : i64, 1 : i64], params = ["x:ptr:8", "w:ptr:8", "bias:ptr:8", "out:ptr:8", "M:int:4", "N:int:4", "K:int:4"], spec = {op = "dense", dtype = "float16", epilogue = "bias_gelu", M = none, N = 256 : i64, K = 64 : i64, batch = none, input_shape = none, filter_shape = none, strides = [1 : i64, 1 : i64], padding = [0 : i64, 0 : i64, 0 : i64, 0 : i64], dilation = [1 : i64, 1 : i64], layout = "tn", broadcast = ""}, config = {opcode_class = "tensorop", arch_tag = 80 : i64, instruction_shape = [16 : i64, 8 : i64, 16 : i64], threadblock = [128 : i64, 64 : i64, 32 : i64], warp_count = [2 : i64, 2 : i64, 1 : i64], stages = 3 : i64, alignment_a = 8 : i64, alignment_b = 8 : i64, alignment_c = 8 : i64, split_k = 1 : i64, swizzle = 8 : i64, iterator_algorithm = "", math = "f16", name = "cutlass_tensorop_f16_s16816gemm_f16_128x64_32x3_tn_align8_bias_gelu"}, smem = 36864 : i64}}}
  byoc.binary @cutlass_sm90_1 attributes {format = "cubin", target = #byoc.target<"cutlass", {sm = 90 : i64}>, arch = "sm_90", key = "53b178c59b0286f51aafb15eb1d04804be143acfb490635bbe05455387e01c8c", sha256 = "3dbc85b129de50bd3075c62dc1c57f1b6b5a797a9660df95ea33c6482e7ac6a7", nvrtc = "13.0", kernels = {tvmgen_default_cutlass_main_1 = {entry = "cutlass_tensorop_f16_s16816gemm_f16_128x64_32x3_tn_align8_bias_fb075235", kernel = "cutlass_tensorop_f16_s16816gemm_f16_128x64_32x3_tn_align8_bias", inputs = ["x", "w", "bias"], block = [128 : i64, 1 : i64, 1 : i64], params = ["x:ptr:8", "w:ptr:8", "bias:ptr:8", "out:ptr:8", "M:int:4", "N:int:4", "K:int:4"], spec = {op = "dense", dtype = "float16", epilogue = "bias", M = none, N = 64 : i64, K = 256 : i64, batch = none, input_shape = none, filter_shape = none, strides = [1 : i64, 1 : i64], padding = [0 : i64, 0 : i64, 0 : i64, 0 : i64], dilation = [1 : i64, 1 : i64], layout = "tn", broadcast = ""}, config = {opcode_class = "tensorop", arch_tag = 80 : i64, instruction_shape = [16 : i64, 8 : i64, 16 : i64], threadblock = [128 : i64, 64 : i64, 32 : i64], warp_count = [2 : i64, 2 : i64, 1 : i64], stages = 3 : i64, alignment_a = 8 : i64, alignment_b = 8 : i64, alignment_c = 8 : i64, split_k = 1 : i64, swizzle = 8 : i64, iterator_algorithm = "", math = "f16", name = "cutlass_tensorop_f16_s16816gemm_f16_128x64_32x3_tn_align8_bias"}, smem = 36864 : i64}}}
  byoc.binary @cuda_sm90 attributes {format = "cubin", target = #byoc.target<"cuda", {arch = "sm_90"}>, arch = "sm_90", key = "022d40bbd0e139f850c6a2508bbe6f551a99cf27af5b076835aa5c45c9f94a64", sha256 = "c7ecbc6447782d3f3fa217534631eea1dcda4b52ec7e73771f081c369db1296c", nvrtc = "13.0", kernels = {main_fused_0 = {kind = "fused", entry = "main_fused_0", block = 256 : i64, inputs = [[-1 : i64, 64 : i64], [-1 : i64, 64 : i64]], dtypes = ["f16", "f16"], output = [-1 : i64, 64 : i64], output_dtype = "f16", dims = [[0 : i64, 0 : i64], [1 : i64, 0 : i64]], params = ["in0:ptr:8", "in1:ptr:8", "out:ptr:8", "dim0:int:4", "dim1:int:4"], ops = ["nn.add"]}}}
}

