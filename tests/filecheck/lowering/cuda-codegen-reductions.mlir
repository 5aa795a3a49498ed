// RUN: partita-opt %s -p 'cuda-codegen{arch=sm_90 cache-dir="%t"}' | filecheck %s
// RUN: partita-opt %s -t cuda-c | filecheck %s --check-prefix=CUDA

// Reductions over the last axes are rowwise kernels, a row per output element: a block
// per long row (256 threads for rows of 4096 halves), a warp per row of at most 256 loads
// (49 floats; 1000 floats in 250 vectors: four rows a block of 128 threads), rows = the
// kept leading axes. A reduction over a middle axis
// stays a window kernel.

// CHECK:       byoc.binary @cuda_sm90
// CHECK-SAME:    kernels = {rms_stats = {kind = "rowwise", entry = "rms_stats", block = 256 : i64, {{.*}} ops = ["nn.reduce_mean", "nn.add", "nn.sqrt"], anchor = "nn.reduce_mean", rows = 2 : i64, rows_per_block = 1 : i64, schedule = "block-per-row"},
// CHECK-SAME:    gap = {kind = "rowwise", entry = "gap", block = 128 : i64, {{.*}} ops = ["nn.reduce_mean"], anchor = "nn.reduce_mean", rows = 2 : i64, rows_per_block = 4 : i64, schedule = "warp-per-row"},
// CHECK-SAME:    pick = {kind = "rowwise", entry = "pick", block = 128 : i64, {{.*}} ops = ["nn.argmax"], anchor = "nn.argmax", rows = 1 : i64, rows_per_block = 4 : i64, schedule = "warp-per-row"},
// CHECK-SAME:    middle = {kind = "window", entry = "middle", block = 256 : i64, {{.*}} ops = ["nn.reduce_sum"], anchor = "nn.reduce_sum", threads_per_output = 1 : i64, block_rows = [], smem = 0 : i64}}

// RMSNorm's statistics: threads stride along the row (coalesced, 16 bytes per load where
// the row's length allows), one xor-shuffle / shared-memory tree per block, thread 0 runs
// the epilogue and stores.

// CUDA-LABEL: // @rms_stats: nn.reduce_mean, nn.add, nn.sqrt
// CUDA-NEXT:  extern "C" __global__ void __launch_bounds__(256)
// CUDA-NEXT:  rms_stats(const __half* __restrict__ in0, const __half* __restrict__ in1, __half* __restrict__ out, int dim0) {
// CUDA-NEXT:    const long long d0 = dim0;
// CUDA-NEXT:    const long long rows = d0 * 4;
// CUDA-NEXT:    const long long cols = 4096;
// CUDA-NEXT:    __shared__ float red_acc[32];
// CUDA-NEXT:    for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
// CUDA-NEXT:      const __half* xr = in0 + r * cols;
// CUDA-NEXT:      float acc = 0;
// CUDA-NEXT:      #pragma unroll 4
// CUDA-NEXT:      for (long long jv = threadIdx.x; jv < cols / 8; jv += 256) {
// CUDA-NEXT:        const partita_v16 w = ((const partita_v16*)xr)[jv];
// CUDA-NEXT:        const __half* e = (const __half*)&w;
// CUDA-NEXT:        for (int u = 0; u < 8; ++u) {
// CUDA-NEXT:          const long long j = jv * 8 + u;
// CUDA-NEXT:          const float v = ld_f16(e[u]);
// CUDA-NEXT:          acc += v;
// CUDA-NEXT:        }
// CUDA-NEXT:      }
// CUDA-NEXT:      acc = partita_block_reduce(acc, (float)(0), red_acc, partita_add());
// CUDA-NEXT:      if (threadIdx.x == 0) {
// CUDA-NEXT:        const long long i = r;
// CUDA-NEXT:        const float y = rn_f16((float)((float)acc / (float)((4096))));
// CUDA-NEXT:        const float v0 = ld_f16(in1[0]);
// CUDA-NEXT:        const float v1 = rn_f16(y + v0);
// CUDA-NEXT:        const float v2 = rn_f16(sqrtf(v1));
// CUDA-NEXT:        out[i] = st_f16(v2);
// CUDA-NEXT:      }
// CUDA-NEXT:    }
// CUDA-NEXT:  }

// Global average pooling over H, W of NCHW: rows of 49, a warp each (four a block), the
// warps of a block in step over their rows (a warp past the last row idles), one
// warp-wide tree, lane 0 stores.

// CUDA-LABEL: // @gap: nn.reduce_mean
// CUDA-NEXT:  extern "C" __global__ void __launch_bounds__(128)
// CUDA:         const int rows = 16;
// CUDA-NEXT:    const int cols = 49;
// CUDA-NEXT:    const int lane = threadIdx.x & 31;
// CUDA-NEXT:    for (int r0 = (int)blockIdx.x * 4; r0 < rows; r0 += (int)gridDim.x * 4) {
// CUDA-NEXT:      const int r = r0 + (threadIdx.x >> 5);
// CUDA-NEXT:      const bool live = r < rows;
// CUDA:           for (int j = lane; live && j < cols; j += 32) {
// CUDA:           acc = partita_warp_reduce(acc, partita_add());
// CUDA-NEXT:      if (live && lane == 0) {

// An arg-reduction folds (value, index) pairs: NaN first, then the first best index.

// CUDA-LABEL: // @pick: nn.argmax
// CUDA:         long long best_at = -1;
// CUDA:         partita_warp_arg(best, best_at, [](const float t, const long long k, const float b, const long long j) { return k >= 0 && (j < 0 || (t != t ? (b == b || k < j) : (b == b && (t > b || (t == b && k < j))))); });
// CUDA:           const long long y = best_at;

// CUDA-LABEL: // @middle: nn.reduce_sum
// CUDA:         for (int i = (int)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int)gridDim.x * blockDim.x) {
// CUDA-NOT:     partita_block_reduce

func.func private @rms_stats(%0: tensor<?x4x4096xf16>, %1: tensor<f16>) -> tensor<?x4x1xf16> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive} {
  %2 = nn.reduce_mean %0 {axes = array<i64: 2>} : (tensor<?x4x4096xf16>) -> tensor<?x4x1xf16>
  %3 = nn.add %2, %1 : (tensor<?x4x1xf16>, tensor<f16>) -> tensor<?x4x1xf16>
  %4 = nn.sqrt %3 : (tensor<?x4x1xf16>) -> tensor<?x4x1xf16>
  func.return %4 : tensor<?x4x1xf16>
}
func.func private @gap(%0: tensor<2x8x7x7xf32>) -> tensor<2x8xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive} {
  %1 = nn.reduce_mean %0 {axes = array<i64: 2, 3>, keepdims = false} : (tensor<2x8x7x7xf32>) -> tensor<2x8xf32>
  func.return %1 : tensor<2x8xf32>
}
func.func private @pick(%0: tensor<5x1000xf32>) -> tensor<5x1xi64> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive} {
  %1 = nn.argmax %0 {axis = 1 : i64} : (tensor<5x1000xf32>) -> tensor<5x1xi64>
  func.return %1 : tensor<5x1xi64>
}
func.func private @middle(%0: tensor<3x5x7xf32>) -> tensor<3x7xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive} {
  %1 = nn.reduce_sum %0 {axes = array<i64: 1>, keepdims = false} : (tensor<3x5x7xf32>) -> tensor<3x7xf32>
  func.return %1 : tensor<3x7xf32>
}
