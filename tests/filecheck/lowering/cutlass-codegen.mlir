// RUN: partita-opt %s --split-input-file -p 'cutlass-codegen{sm=90}' | filecheck %s
// RUN: partita-opt %s --split-input-file -p outline-compiler-functions -t cutlass-cpp | filecheck %s --check-prefix=CPP

// The seed: dense + bias on f16 [1600,768] x [2304,768] + [2304] -> [1600,2304].

// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_0(tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16> attributes {byoc.extern}
// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_0_reference
// CHECK-SAME:    {byoc.reference_impl = @tvmgen_default_cutlass_main_0}
// CHECK:         nn.dense
// CHECK:         nn.bias_add
// CHECK-LABEL: func.func @main
// CHECK:         func.call @tvmgen_default_cutlass_main_0(%x, %w, %b)
// CHECK:       byoc.binary @cutlass_sm90 attributes {format = "cubin", target = #byoc.target<"cutlass", {sm = 90 : i64}>, arch = "sm_90"
// CHECK-SAME:    kernels = {tvmgen_default_cutlass_main_0 = {entry = "tvmgen_default_cutlass_main_0", kernel = "cutlass_tensorop_f16_s16816gemm_f16_128x128_32x3_tn_align8_bias", inputs = ["x", "w", "bias"]
// CHECK-SAME:    smem = 49152 : i64

// CPP:      // CUTLASS kernels for sm_80, one translation unit
// CPP-NEXT: // @tvmgen_default_cutlass_main_0: cutlass_tensorop_f16_s16816gemm_f16_128x128_32x3_tn_align8_bias (dense, float16, epilogue bias; threadblock 128x128x32, 3 stages, warps 2x2x1, align 8/8/8, split-k 1; args (x, w, bias))
// CPP:      using [[KERNEL:cutlass_tensorop_f16_s16816gemm_f16_128x128_32x3_tn_align8_bias]] = typename cutlass::gemm::kernel::DefaultGemm<
// CPP:      __device__ __noinline__ void [[KERNEL]]_run(
// CPP-NEXT:   using Kernel = [[KERNEL]];
// CPP:      extern "C" __global__ void __launch_bounds__(128)
// CPP-NEXT: tvmgen_default_cutlass_main_0(
// CPP-NEXT:   [[KERNEL]]_run(x, w, bias, out, 1600, 2304, 768);

func.func @main(%x: tensor<1600x768xf16>, %w: tensor<2304x768xf16>, %b: tensor<2304xf16>) -> tensor<1600x2304xf16> {
  %0 = byoc.partition(%x, %w, %b) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} ({
  ^bb0(%a: tensor<1600x768xf16>, %c: tensor<2304x768xf16>, %d: tensor<2304xf16>):
    %1 = nn.dense %a, %c : (tensor<1600x768xf16>, tensor<2304x768xf16>) -> tensor<1600x2304xf16>
    %2 = nn.bias_add %1, %d : (tensor<1600x2304xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
    byoc.yield %2 : tensor<1600x2304xf16>
  }) : (tensor<1600x768xf16>, tensor<2304x768xf16>, tensor<2304xf16>) -> tensor<1600x2304xf16>
  func.return %0 : tensor<1600x2304xf16>
}

// -----

// A dynamic batch is a run-time argument of the entry, and two equal partitions share
// one CUTLASS kernel type in the one translation unit.

// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_1(tensor<?x64xf16>, tensor<128x64xf16>, tensor<128xf16>) -> tensor<?x128xf16> attributes {byoc.extern}
// CHECK-LABEL: func.func private @tvmgen_default_cutlass_main_2(tensor<?x64xf16>, tensor<128x64xf16>, tensor<128xf16>) -> tensor<?x128xf16> attributes {byoc.extern}
// CHECK:       byoc.binary @cutlass_sm90
// CHECK-SAME:    params = ["x:ptr:8", "w:ptr:8", "bias:ptr:8", "out:ptr:8", "M:int:4"]

// CPP:      // @tvmgen_default_cutlass_main_1: cutlass_tensorop_f16_s16816gemm_f16_128x64_32x3_tn_align8_bias_gelu
// CPP-NEXT: // @tvmgen_default_cutlass_main_2: cutlass_tensorop_f16_s16816gemm_f16_128x64_32x3_tn_align8_bias_gelu
// CPP:      using [[K2:.*]] = typename cutlass::gemm::kernel::DefaultGemm<
// CPP-NOT:  using {{.*}} = typename cutlass::gemm::kernel::DefaultGemm<
// CPP:      tvmgen_default_cutlass_main_1(
// CPP-NEXT:   [[K2]]_run(x, w, bias, out, M, 128, 64);
// CPP:      tvmgen_default_cutlass_main_2(
// CPP-NEXT:   [[K2]]_run(x, w, bias, out, M, 128, 64);

func.func @main(%x: tensor<?x64xf16>, %w: tensor<128x64xf16>, %b: tensor<128xf16>) -> tensor<?x128xf16> {
  %0 = byoc.partition(%x, %w, %b) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_1"} ({
  ^bb0(%a: tensor<?x64xf16>, %c: tensor<128x64xf16>, %d: tensor<128xf16>):
    %1 = nn.dense %a, %c : (tensor<?x64xf16>, tensor<128x64xf16>) -> tensor<?x128xf16>
    %2 = nn.bias_add %1, %d : (tensor<?x128xf16>, tensor<128xf16>) -> tensor<?x128xf16>
    %3 = nn.gelu %2 : (tensor<?x128xf16>) -> tensor<?x128xf16>
    byoc.yield %3 : tensor<?x128xf16>
  }) : (tensor<?x64xf16>, tensor<128x64xf16>, tensor<128xf16>) -> tensor<?x128xf16>
  %4 = byoc.partition(%x, %w, %b) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_2"} ({
  ^bb0(%a: tensor<?x64xf16>, %c: tensor<128x64xf16>, %d: tensor<128xf16>):
    %1 = nn.dense %a, %c : (tensor<?x64xf16>, tensor<128x64xf16>) -> tensor<?x128xf16>
    %2 = nn.bias_add %1, %d : (tensor<?x128xf16>, tensor<128xf16>) -> tensor<?x128xf16>
    %3 = nn.gelu %2 : (tensor<?x128xf16>) -> tensor<?x128xf16>
    byoc.yield %3 : tensor<?x128xf16>
  }) : (tensor<?x64xf16>, tensor<128x64xf16>, tensor<128xf16>) -> tensor<?x128xf16>
  %5 = nn.add %0, %4 : (tensor<?x128xf16>, tensor<?x128xf16>) -> tensor<?x128xf16>
  func.return %5 : tensor<?x128xf16>
}
