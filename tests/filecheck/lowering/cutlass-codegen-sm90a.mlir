// RUN: partita-opt %s --split-input-file -p outline-compiler-functions -t 'cutlass-cpp{sm=90a}' | filecheck %s

// sm_90a: a K-major f16 dense with a bias, 1600 x 2304, is CUTLASS 3's persistent
// cooperative kernel (TMA + wgmma, a producer and two consumer warp groups on a 128x256
// tile), its Params passed by value, with the layout probes the runtime reads (the
// second one: the tile scheduler's fields); the unit is the configuration's: one entry
// named after it, no partition name, no shape.

// CHECK:      // CUTLASS 3 Hopper kernel [[ENTRY:cutlass3x_sm90_tensorop_gemm_f16_128x256x64_1x1x1_tn_identity_[0-9a-f]{8}]] for sm_90a, one translation unit per configuration
// CHECK-NEXT: // @tvmgen_default_cutlass_main_0: cutlass3x_sm90_tensorop_gemm_f16_f16_f32_128x256x64_1x1x1_tn_warpspecialized_cooperative_bias (tile 128x256x64, cluster 1x1x1, KernelTmaWarpSpecializedCooperative; args (x, w, bias); dims M=1600, N=2304, K=768)
// CHECK-NOT:  {{tvmgen_default_cutlass_main_0|1600|2304|768}}
// CHECK:      namespace std { using cuda::std::is_pointer_v; using cuda::std::void_t; using cuda::std::is_const_v; }
// CHECK:      namespace [[K:partita_sm90_k0]]_ns {
// CHECK:      using TileShape = Shape<_128, _256, _64>;
// CHECK:      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
// CHECK:      __device__ __forceinline__ void [[K]]_run(
// CHECK:      extern "C" __device__ const long long [[K]]_layout[] = {
// CHECK:      extern "C" __device__ const long long [[K]]_sched_layout[] = {
// CHECK-NEXT:   (long long)offsetof([[K]]_ns::Params, hw_info.sm_count),
// CHECK:        (long long)offsetof([[K]]_ns::Params, scheduler.divmod_batch_),
// CHECK:      extern "C" __global__ void __launch_bounds__([[K]]_ns::Kernel::MaxThreadsPerBlock, 1)
// CHECK-NEXT: [[ENTRY]](const __grid_constant__ [[K]]_ns::Params params) {
// CHECK:      extern "C" __device__ const unsigned char [[ENTRY]]_contract[32] =
// CHECK-NOT:  CUTLASS kernel
// CHECK:      {{^// [-]+$}}

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

// What TMA cannot take stays on the Sm80 kernels: an odd K (no 16-byte rows).

// CHECK-NEXT: // CUTLASS kernel cutlass_tensorop_f16_s16816gemm_f16_64x64_32x2_tn_align1_{{[0-9a-f]+}} for sm_90a, one translation unit per configuration
// CHECK-NEXT: // @tvmgen_default_cutlass_main_0: cutlass_tensorop_f16_s16816gemm_f16_64x64_32x2_tn_align1

func.func @main(%x: tensor<64x7xf16>, %w: tensor<32x7xf16>) -> tensor<64x32xf16> {
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} ({
  ^bb0(%a: tensor<64x7xf16>, %c: tensor<32x7xf16>):
    %1 = nn.dense %a, %c : (tensor<64x7xf16>, tensor<32x7xf16>) -> tensor<64x32xf16>
    byoc.yield %1 : tensor<64x32xf16>
  }) : (tensor<64x7xf16>, tensor<32x7xf16>) -> tensor<64x32xf16>
  func.return %0 : tensor<64x32xf16>
}

// -----

// A decode step's row pinned to split-K (tune-cutlass-kernels' choice for few tiles): the
// cooperative kernel with CUTLASS's stream-K tile scheduler, whose probe lists that
// scheduler's fields; one entry serves every split count (a run-time value of Params).

// CHECK:      // CUTLASS 3 Hopper kernel [[ENTRY:cutlass3x_sm90_tensorop_gemm_f16_128x128x64_1x1x1_tn_identity_streamk_[0-9a-f]{8}]] for sm_90a, one translation unit per configuration
// CHECK-NEXT: // @tvmgen_default_cutlass_main_0: cutlass3x_sm90_tensorop_gemm_f16_f16_f32_128x128x64_1x1x1_tn_warpspecialized_cooperative_splitk4_bias
// CHECK:      using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue, cutlass::gemm::StreamKScheduler>;
// CHECK-NOT:  _sched_layout
// CHECK:      extern "C" __device__ const long long [[K:partita_sm90_k0]]_stream_k_layout[] = {
// CHECK:        (long long)offsetof([[K]]_ns::Params, scheduler.divmod_splits_),
// CHECK:        (long long)offsetof([[K]]_ns::Params, workspace),
// CHECK:      [[ENTRY]](const __grid_constant__ [[K]]_ns::Params params) {

func.func @main(%x: tensor<1x4096xf16>, %w: tensor<1024x4096xf16>, %b: tensor<1024xf16>) -> tensor<1x1024xf16> {
  %0 = byoc.partition(%x, %w, %b) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline, cutlass.kernel = "128x128x64_1x1x1_cooperative_k4"} ({
  ^bb0(%a: tensor<1x4096xf16>, %c: tensor<1024x4096xf16>, %d: tensor<1024xf16>):
    %1 = nn.dense %a, %c : (tensor<1x4096xf16>, tensor<1024x4096xf16>) -> tensor<1x1024xf16>
    %2 = nn.bias_add %1, %d : (tensor<1x1024xf16>, tensor<1024xf16>) -> tensor<1x1024xf16>
    byoc.yield %2 : tensor<1x1024xf16>
  }) : (tensor<1x4096xf16>, tensor<1024x4096xf16>, tensor<1024xf16>) -> tensor<1x1024xf16>
  func.return %0 : tensor<1x1024xf16>
}

// -----

// An f32 dense multiplies as TF32 (the cutlass target's default use_tf32): the Hopper
// kernel over f32 operands, whose collective builder runs wgmma on TF32, on K tiles of 32
// floats (one 128-byte swizzle row).

// CHECK:      // CUTLASS 3 Hopper kernel [[ENTRY:cutlass3x_sm90_tensorop_gemm_tf32_128x256x32_1x1x1_tn_relu_[0-9a-f]{8}]] for sm_90a, one translation unit per configuration
// CHECK-NEXT: // @tvmgen_default_cutlass_main_0: cutlass3x_sm90_tensorop_gemm_tf32_tf32_f32_128x256x32_1x1x1_tn_warpspecialized_cooperative_bias_relu (tile 128x256x32, cluster 1x1x1, KernelTmaWarpSpecializedCooperative; args (x, w, bias); dims M=300, N=1024, K=768)
// CHECK:      using T = float;
// CHECK:      using TileShape = Shape<_128, _256, _32>;
// CHECK:      T, cutlass::layout::RowMajor, 4, TB, cutlass::layout::ColumnMajor, 4, float,
// CHECK:      static_assert(32 * sizeof(T) == 128, "one K tile is one 128-byte swizzle row");
// CHECK:      {{^// [-]+$}}

func.func @main(%x: tensor<300x768xf32>, %w: tensor<1024x768xf32>, %b: tensor<1024xf32>) -> tensor<300x1024xf32> {
  %0 = byoc.partition(%x, %w, %b) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} ({
  ^bb0(%a: tensor<300x768xf32>, %c: tensor<1024x768xf32>, %d: tensor<1024xf32>):
    %1 = nn.dense %a, %c : (tensor<300x768xf32>, tensor<1024x768xf32>) -> tensor<300x1024xf32>
    %2 = nn.bias_add %1, %d : (tensor<300x1024xf32>, tensor<1024xf32>) -> tensor<300x1024xf32>
    %3 = nn.relu %2 : (tensor<300x1024xf32>) -> tensor<300x1024xf32>
    byoc.yield %3 : tensor<300x1024xf32>
  }) : (tensor<300x768xf32>, tensor<1024x768xf32>, tensor<1024xf32>) -> tensor<300x1024xf32>
  func.return %0 : tensor<300x1024xf32>
}

// -----

// TF32 wgmma reads K-major operands only: an f32 x @ w[K,N] (B N-major) stays on the Sm80
// TF32 kernels.

// CHECK-NEXT: // CUTLASS kernel cutlass_tensorop_s1688tf32gemm_batched_128x128_16x3_tt_align4_{{[0-9a-f]+}} for sm_90a, one translation unit per configuration

func.func @main(%x: tensor<300x768xf32>, %w: tensor<768x1024xf32>) -> tensor<300x1024xf32> {
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} ({
  ^bb0(%a: tensor<300x768xf32>, %c: tensor<768x1024xf32>):
    %1 = nn.matmul %a, %c : (tensor<300x768xf32>, tensor<768x1024xf32>) -> tensor<300x1024xf32>
    byoc.yield %1 : tensor<300x1024xf32>
  }) : (tensor<300x768xf32>, tensor<768x1024xf32>) -> tensor<300x1024xf32>
  func.return %0 : tensor<300x1024xf32>
}

// -----

// A pointwise convolution (1x1, unit strides, no padding) is the GEMM of its pixels by its
// filter, [N*H*W, C] x [K, C]^T over the same NHWC / OHWI bytes: the Hopper dense kernel, its
// partition and epilogue the convolution's.

// CHECK:      // CUTLASS 3 Hopper kernel [[ENTRY:cutlass3x_sm90_tensorop_gemm_f16_128x128x64_1x1x1_tn_relu_[0-9a-f]{8}]] for sm_90a, one translation unit per configuration
// CHECK-NEXT: // @tvmgen_default_cutlass_main_0: cutlass3x_sm90_tensorop_gemm_f16_f16_f32_128x128x64_1x1x1_tn_warpspecialized_bias_relu (tile 128x128x64, cluster 1x1x1, KernelTmaWarpSpecialized; args (x, w, bias); dims N=2, H=14, W=14, C=256, K=64, R=1, S=1, P=14, Q=14,
// CHECK:      {{^// [-]+$}}

func.func @main(%x: tensor<2x14x14x256xf16>, %w: tensor<64x1x1x256xf16>, %b: tensor<64xf16>) -> tensor<2x14x14x64xf16> {
  %0 = byoc.partition(%x, %w, %b) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} ({
  ^bb0(%a: tensor<2x14x14x256xf16>, %c: tensor<64x1x1x256xf16>, %d: tensor<64xf16>):
    %1 = nn.conv2d %a, %c {data_layout = "NHWC", kernel_layout = "OHWI"} : (tensor<2x14x14x256xf16>, tensor<64x1x1x256xf16>) -> tensor<2x14x14x64xf16>
    %2 = nn.bias_add %1, %d {axis = 3 : i64} : (tensor<2x14x14x64xf16>, tensor<64xf16>) -> tensor<2x14x14x64xf16>
    %3 = nn.relu %2 : (tensor<2x14x14x64xf16>) -> tensor<2x14x14x64xf16>
    byoc.yield %3 : tensor<2x14x14x64xf16>
  }) : (tensor<2x14x14x256xf16>, tensor<64x1x1x256xf16>, tensor<64xf16>) -> tensor<2x14x14x64xf16>
  func.return %0 : tensor<2x14x14x64xf16>
}

// -----

// A 3x3 convolution has no CUTLASS 3 kernel here: the Sm80 implicit GEMM.

// CHECK-NEXT: // CUTLASS kernel cutlass_tensorop_f16_s16816fprop_optimized_f16_{{[0-9a-z_]+}} for sm_90a, one translation unit per configuration

func.func @main(%x: tensor<2x14x14x256xf16>, %w: tensor<64x3x3x256xf16>) -> tensor<2x14x14x64xf16> {
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "tvmgen_default_cutlass_main_0", byoc.primitive, byoc.inline} ({
  ^bb0(%a: tensor<2x14x14x256xf16>, %c: tensor<64x3x3x256xf16>):
    %1 = nn.conv2d %a, %c {data_layout = "NHWC", kernel_layout = "OHWI", padding = array<i64: 1, 1, 1, 1>} : (tensor<2x14x14x256xf16>, tensor<64x3x3x256xf16>) -> tensor<2x14x14x64xf16>
    byoc.yield %1 : tensor<2x14x14x64xf16>
  }) : (tensor<2x14x14x256xf16>, tensor<64x3x3x256xf16>) -> tensor<2x14x14x64xf16>
  func.return %0 : tensor<2x14x14x64xf16>
}
