// RUN: partita-opt %s -p 'cuda-codegen{arch=sm_90 cache-dir="%t"}' | filecheck %s
// RUN: partita-opt %s -t cuda-c | filecheck %s --check-prefix=CUDA

// Fused functions become extern declarations (bodies kept as references) implemented by
// one cubin (injective, GEMM, row-wise and window kernels); a primitive cuda function no kernel computes (a transposed convolution over dynamic H and W) is left
// alone.

// CHECK-LABEL: func.func private @main_fused_0(tensor<?x64xf16>, tensor<64xf16>) -> tensor<?x64xf16> attributes {byoc.extern}
// CHECK-LABEL: func.func private @main_fused_0_reference(%0: tensor<?x64xf16>, %1: tensor<64xf16>) -> tensor<?x64xf16> attributes {byoc.reference_impl = @main_fused_0}
// CHECK-NEXT:    nn.relu
// CHECK-LABEL: func.func private @main_fused_1(tensor<2x3x4xbf16>, tensor<4xbf16>) -> tensor<4x6xbf16> attributes {byoc.extern}
// CHECK-LABEL: func.func private @main_fused_1_reference
// CHECK-LABEL: func.func private @main_gemm(tensor<?x32xf16>, tensor<48x32xf16>, tensor<48xf16>) -> tensor<?x48xf16> attributes {byoc.extern}
// CHECK-LABEL: func.func private @main_rows(tensor<?x8x20xf32>, tensor<20xf32>, tensor<20xf32>) -> tensor<?x8x20xf32> attributes {byoc.extern}
// CHECK-LABEL: func.func private @main_pool(tensor<?x4x9x9xf32>, tensor<4xf32>) -> tensor<?x4x5x5xf32> attributes {byoc.extern}
// CHECK-LABEL: func.func private @main_pad(tensor<2x3xf32>) -> tensor<3x6xf32> attributes {byoc.extern}
// CHECK-LABEL: func.func private @not_a_kernel
// CHECK-SAME:    byoc.primitive
// CHECK-NEXT:    nn.conv2d_transpose
// CHECK-LABEL: func.func @main
// CHECK:         func.call @main_fused_0(%x, %b)
// CHECK:       byoc.binary @cuda_sm90 attributes {format = "cubin", target = #byoc.target<"cuda", {arch = "sm_90"}>, arch = "sm_90", key = "{{[0-9a-f]+}}", sha256 = "{{[0-9a-f]+}}",
// CHECK-SAME:    kernels = {main_fused_0 = {kind = "fused", entry = "main_fused_0", block = 256 : i64, inputs = {{\[\[}}-1 : i64, 64 : i64], [64 : i64]], dtypes = ["f16", "f16"], output = [-1 : i64, 64 : i64], output_dtype = "f16", dims = {{\[\[}}0 : i64, 0 : i64]], params = ["in0:ptr:8", "in1:ptr:8", "out:ptr:8", "dim0:int:4"], ops = ["nn.relu", "nn.add", "nn.gelu"]},
// CHECK-SAME:    main_fused_1 = {kind = "fused", entry = "main_fused_1", {{.*}} dims = [], params = ["in0:ptr:8", "in1:ptr:8", "out:ptr:8"], ops = ["nn.reshape", "nn.add", "nn.transpose", "nn.clip"]},
// CHECK-SAME:    main_gemm = {kind = "gemm", entry = "main_gemm", block = 256 : i64, {{.*}} params = ["in0:ptr:8", "in1:ptr:8", "in2:ptr:8", "out:ptr:8", "dim0:int:4", "ws:ptr:8", "k_slices:int:4"], ops = ["nn.dense", "nn.bias_add", "nn.relu"], anchor = "nn.dense", batch = 0 : i64, tile = 128 : i64, gemv_rows = 0 : i64, split_k = 8 : i64, k_source = {{\[}}0 : i64, 1 : i64]},
// CHECK-SAME:    main_rows = {kind = "rowwise", entry = "main_rows", block = 128 : i64, {{.*}} ops = ["nn.layer_norm", "nn.sigmoid"], anchor = "nn.layer_norm", rows = 2 : i64, rows_per_block = 4 : i64, schedule = "warp-per-row"},
// CHECK-SAME:    main_pool = {kind = "window", entry = "main_pool", block = 256 : i64, {{.*}} ops = ["nn.avg_pool2d", "nn.bias_add"], anchor = "nn.avg_pool2d", threads_per_output = 1 : i64, block_rows = [], smem = 0 : i64},
// CHECK-SAME:    main_pad = {kind = "fused", {{.*}} ops = ["nn.pad"]}}}

// CUDA:      #include <cuda_fp16.h>
// CUDA-NEXT: #include <cuda_bf16.h>
// CUDA:      static __device__ __forceinline__ void partita_mma_f16(float* c, const unsigned* a, const unsigned* b) {
// CUDA-NEXT: #if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
// CUDA:        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
// An injective kernel: each thread computes a 16-byte vector of outputs (x read as one
// too, the broadcast bias element-wise) and stores it at once; a scalar loop takes the
// tail.

// CUDA:      // @main_fused_0: nn.relu, nn.add, nn.gelu
// CUDA-NEXT: extern "C" __global__ void __launch_bounds__(256)
// CUDA-NEXT: main_fused_0(const __half* __restrict__ in0, const __half* __restrict__ in1, __half* __restrict__ out, int dim0) {
// CUDA-NEXT:   const long long d0 = dim0;
// CUDA-NEXT:   const long long n = d0 * 64;
// CUDA-NEXT:   for (long long iv = (long long)blockIdx.x * blockDim.x + threadIdx.x; iv < n / 8; iv += (long long)gridDim.x * blockDim.x) {
// CUDA-NEXT:     const partita_v16 w0 = ((const partita_v16*)in0)[iv];
// CUDA-NEXT:     const __half* e0 = (const __half*)&w0;
// CUDA-NEXT:     partita_v16 wo;
// CUDA-NEXT:     __half* eo = (__half*)&wo;
// CUDA-NEXT:     #pragma unroll
// CUDA-NEXT:     for (int u = 0; u < 8; ++u) {
// CUDA-NEXT:       const long long i = iv * 8 + u;
// CUDA-NEXT:       const long long o1 = i % 64;
// CUDA-NEXT:       const float v0 = ld_f16(e0[u]);
// CUDA:            eo[u] = st_f16(v4);
// CUDA-NEXT:     }
// CUDA-NEXT:     ((partita_v16*)out)[iv] = wo;
// CUDA-NEXT:   }
// CUDA-NEXT:   for (long long i = n / 8 * 8 + (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
// CUDA-NEXT:     const long long o1 = i % 64;
// CUDA-NEXT:     const float v0 = ld_f16(in0[i]);
// CUDA-NEXT:     const float v1 = rn_f16(v0 < 0.0f ? 0.0f : v0);
// CUDA-NEXT:     const float v2 = ld_f16(in1[o1]);
// CUDA-NEXT:     const float v3 = rn_f16(v1 + v2);
// CUDA-NEXT:     const float v4 = rn_f16(0.5f * v3 * (1.0f + erff(v3 * 0.7071067811865476f)));
// CUDA-NEXT:     out[i] = st_f16(v4);
// CUDA-NEXT:   }
// CUDA-NEXT: }

// The transpose permutes the output index, the reshape re-reads the same linear index in
// the input's shape, the bias broadcasts along the last axis; static shapes use int.

// CUDA:      // @main_fused_1: nn.reshape, nn.add, nn.transpose, nn.clip
// CUDA-NEXT: extern "C" __global__ void __launch_bounds__(256)
// CUDA-NEXT: main_fused_1(const __nv_bfloat16* __restrict__ in0, const __nv_bfloat16* __restrict__ in1, __nv_bfloat16* __restrict__ out) {
// CUDA-NEXT:   const int n = 24;
// CUDA:        for (int i = n / 8 * 8 + (int)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int)gridDim.x * blockDim.x) {
// CUDA-NEXT:     const int o0 = i / 6;
// CUDA-NEXT:     const int o1 = i % 6;
// CUDA-NEXT:     const int t0 = o1 * 4 + o0;
// CUDA-NEXT:     const float v0 = ld_bf16(in0[t0]);
// CUDA-NEXT:     const float v1 = ld_bf16(in1[o0]);
// CUDA-NEXT:     const float v2 = rn_bf16(v0 + v1);
// CUDA-NEXT:     const float t1 = v2 < -1.5f ? -1.5f : v2;
// CUDA-NEXT:     const float v3 = rn_bf16(t1 > 1e+30f ? 1e+30f : t1);
// CUDA-NEXT:     out[i] = st_bf16(v3);

// An f16 GEMM on tensor cores: 128x128 tiles of 8 warps, K steps of 32 through two
// shared-memory stages of halves (each operand staged 8 halves a vector along K: one
// 16-byte load where aligned, else element by element), the next step fetched while this
// one multiplies; each warp 4x4 mma.sync m16n8k16 products per k16 into register
// accumulators, the epilogue (bias, relu) per output element before the store.

// CUDA:      // @main_gemm: nn.dense, nn.bias_add, nn.relu
// CUDA-NEXT: extern "C" __global__ void __launch_bounds__(256, 2)
// CUDA-NEXT: main_gemm(const __half* __restrict__ in0, const __half* __restrict__ in1, const __half* __restrict__ in2, __half* __restrict__ out, int dim0, void* __restrict__ ws, int k_slices) {
// CUDA-NEXT:   const long long d0 = dim0;
// CUDA-NEXT:   const long long M = d0;
// CUDA-NEXT:   const int N = 48, K = 32;
// CUDA:        alignas(16) __shared__ __half As[2][128][40];
// CUDA-NEXT:   alignas(16) __shared__ __half Bs[2][128][40];
// CUDA:          const int ke = k_slices < 0 ? 0 : (kb + chunk < K ? kb + chunk : K);
// CUDA:          const bool a_vec = K % 8 == 0 && ((unsigned long long)(a) & 15) == 0;
// CUDA-NEXT:     const bool b_vec = K % 8 == 0 && ((unsigned long long)(b) & 15) == 0;
// CUDA:                if (a_vec) { const bool inside = mm0 < M && kk0 < K;
// CUDA-NEXT:               partita_cp_async16(&As[nb][r][c], a + (inside ? mm0 * K + kk0 : 0), inside ? 16 : 0); }
// CUDA:                    e[j] = mm < M && kk < K ? a[mm * K + kk] : st_f16(0.0f);
// CUDA:                if (b_vec) { const bool inside = nn0 < N && kk0 < K;
// CUDA:              { const int v = tid + i * 256, r = v >> 2, c = (v & 3) * 8; if (!a_vec) *(partita_v16*)&As[nb][r][c] = ra[i]; }
// CUDA:              partita_cp_async_wait();
// CUDA-NEXT:         __syncthreads();
// CUDA:        for (int k0 = kb; k0 < ke; k0 += 32) {
// CUDA:              partita_ldmatrix_x4(af[mi], &As[cur][wm + mi * 16 + (lane & 15)][ks + (lane >> 4) * 8]);
// CUDA:              partita_ldmatrix_x4(bf[q], &Bs[cur][wn + (2 * q + (lane >> 4)) * 8 + (lane & 7)][ks + ((lane >> 3) & 1) * 8]);
// CUDA:              for (int ni = 0; ni < 4; ++ni) partita_mma_f16(acc[mi][ni], af[mi], &bf[ni >> 1][(ni & 1) * 2]);
// CUDA:          __syncthreads();
// CUDA:          if (k_slices > 1) {
// CUDA-NEXT:       float* slot = (float*)ws + (tile * slices + z % slices) * 16640;
// CUDA:          for (int s = 0; k_slices < 0 && s < slices; ++s) {
// CUDA:            const float y = rn_f16(acc[mi][ni][ce]);
// CUDA-NEXT:       const float v0 = ld_f16(in2[o1]);
// CUDA-NEXT:       const float v1 = rn_f16(y + v0);
// CUDA-NEXT:       const float v2 = rn_f16(v1 < 0.0f ? 0.0f : v1);
// CUDA-NEXT:       out[i] = st_f16(v2);

// A row reduction: rows of 20 floats, a warp each (four rows a block, grid-stride), one
// pass over the row for Welford's statistics (merged across the warp), the normalized
// value and its epilogue per element of the row in a second pass, which reads the row and
// stores its outputs 16 bytes at a time too.

// CUDA:      // @main_rows: nn.layer_norm, nn.sigmoid
// CUDA:        const long long rows = d0 * 8;
// CUDA-NEXT:   const long long cols = 20;
// CUDA-NEXT:   const int lane = threadIdx.x & 31;
// CUDA-NEXT:   for (long long r0 = (long long)blockIdx.x * 4; r0 < rows; r0 += (long long)gridDim.x * 4) {
// CUDA-NEXT:     const long long r = r0 + (threadIdx.x >> 5);
// CUDA-NEXT:     const bool live = r < rows;
// CUDA-NEXT:     const float* xr = in0 + r * cols;
// CUDA-NEXT:     float wn = 0.0f, mean = 0.0f, wq = 0.0f;
// CUDA-NEXT:     #pragma unroll 4
// CUDA-NEXT:     for (long long jv = lane; live && jv < cols / 4; jv += 32) {
// CUDA-NEXT:       const partita_v16 w = ((const partita_v16*)xr)[jv];
// CUDA-NEXT:       const float* e = (const float*)&w;
// CUDA:            for (int u = 0; u < 4; ++u) {
// CUDA-NEXT:         f[u] = e[u];
// CUDA:            const float vmean = vs * 0.25f;
// CUDA:            partita_welford_merge(wn, mean, wq, 4.0f, vmean, vq);
// CUDA-NEXT:     }
// CUDA-NEXT:     partita_warp_welford(wn, mean, wq);
// CUDA-NEXT:     const float var = wq / (float)cols;
// CUDA-NEXT:     const float sd = sqrtf(var + 1e-05f);
// CUDA-NEXT:     #pragma unroll 4
// CUDA-NEXT:     for (long long jv = lane; live && jv < cols / 4; jv += 32) {
// CUDA-NEXT:       const partita_v16 w = ((const partita_v16*)xr)[jv];
// CUDA-NEXT:       const float* e = (const float*)&w;
// CUDA-NEXT:       partita_v16 wo;
// CUDA-NEXT:       float* eo = (float*)&wo;
// CUDA:            for (int u = 0; u < 4; ++u) {
// CUDA-NEXT:         const long long j = jv * 4 + u;
// CUDA-NEXT:         const long long i = r * cols + j;
// CUDA-NEXT:         const float y = (e[u] - mean) / sd * in1[j] + in2[j];
// CUDA-NEXT:         const float v0 = 1.0f / (1.0f + expf(-y));
// CUDA-NEXT:         eo[u] = v0;
// CUDA-NEXT:       }
// CUDA-NEXT:       ((partita_v16*)(out + r * cols))[jv] = wo;

// A pool: one thread per output element loops over its window, skipping the padding
// (ceil_mode reads past it); the divisor counts the cells in the input.

// CUDA:      // @main_pool: nn.avg_pool2d, nn.bias_add
// CUDA-NEXT: extern "C" __global__ void __launch_bounds__(256)
// CUDA-NEXT: main_pool(const float* __restrict__ in0, const float* __restrict__ in1, float* __restrict__ out, int dim0) {
// CUDA:        for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
// CUDA-NEXT:     const long long o0 = i / 100;
// CUDA-NEXT:     const long long o1 = (i / 25) % 4;
// CUDA-NEXT:     const long long o2 = (i / 5) % 5;
// CUDA-NEXT:     const long long o3 = i % 5;
// CUDA-NEXT:     float acc = 0;
// CUDA-NEXT:     int count = 0;
// CUDA-NEXT:     for (int k0 = 0; k0 < 3; ++k0) {
// CUDA-NEXT:       const long long i0 = o2 * 2 - 1 + k0;
// CUDA-NEXT:       if (i0 < 0 || i0 >= 9) continue;
// CUDA-NEXT:       for (int k1 = 0; k1 < 3; ++k1) {
// CUDA-NEXT:         const long long i1 = o3 * 2 - 1 + k1;
// CUDA-NEXT:         if (i1 < 0 || i1 >= 9) continue;
// CUDA-NEXT:         acc += in0[o0 * 324 + o1 * 81 + i0 * 9 + i1];
// CUDA-NEXT:         ++count;
// CUDA-NEXT:       }
// CUDA-NEXT:     }
// CUDA-NEXT:     const float y = acc / (float)count;
// CUDA-NEXT:     const float v0 = in1[o1];
// CUDA-NEXT:     const float v1 = y + v0;
// CUDA-NEXT:     out[i] = v1;

// A pad: the index shifted and clamped into the input, the pad value outside it.

// CUDA:      // @main_pad: nn.pad
// CUDA:          const int s0 = o0 - 1;
// CUDA-NEXT:     const int c0 = s0 < 0 ? 0 : (s0 < 2 ? s0 : 2 - 1);
// CUDA-NEXT:     const int s1 = o1 - 2;
// CUDA-NEXT:     const int c1 = s1 < 0 ? 0 : (s1 < 3 ? s1 : 3 - 1);
// CUDA-NEXT:     const float v0 = in0[c0 * 3 + c1];
// CUDA-NEXT:     const float v1 = (s0 == c0 && s1 == c1) ? v0 : 0.5f;
// CUDA-NEXT:     eo[u] = v1;
// CUDA-NOT:  not_a_kernel

func.func private @main_fused_0(%0: tensor<?x64xf16>, %1: tensor<64xf16>) -> tensor<?x64xf16> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive} {
  %2 = nn.relu %0 : (tensor<?x64xf16>) -> tensor<?x64xf16>
  %3 = nn.add %2, %1 : (tensor<?x64xf16>, tensor<64xf16>) -> tensor<?x64xf16>
  %4 = nn.gelu %3 : (tensor<?x64xf16>) -> tensor<?x64xf16>
  func.return %4 : tensor<?x64xf16>
}
func.func private @main_fused_1(%0: tensor<2x3x4xbf16>, %1: tensor<4xbf16>) -> tensor<4x6xbf16> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive} {
  %2 = nn.reshape %0 : (tensor<2x3x4xbf16>) -> tensor<6x4xbf16>
  %3 = nn.add %2, %1 : (tensor<6x4xbf16>, tensor<4xbf16>) -> tensor<6x4xbf16>
  %4 = nn.transpose %3 {perm = array<i64: 1, 0>} : (tensor<6x4xbf16>) -> tensor<4x6xbf16>
  %5 = nn.clip %4 {min = -1.5 : f64, max = 1.0e30 : f64} : (tensor<4x6xbf16>) -> tensor<4x6xbf16>
  func.return %5 : tensor<4x6xbf16>
}
func.func private @main_gemm(%0: tensor<?x32xf16>, %1: tensor<48x32xf16>, %2: tensor<48xf16>) -> tensor<?x48xf16> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive} {
  %3 = nn.dense %0, %1 : (tensor<?x32xf16>, tensor<48x32xf16>) -> tensor<?x48xf16>
  %4 = nn.bias_add %3, %2 : (tensor<?x48xf16>, tensor<48xf16>) -> tensor<?x48xf16>
  %5 = nn.relu %4 : (tensor<?x48xf16>) -> tensor<?x48xf16>
  func.return %5 : tensor<?x48xf16>
}
func.func private @main_rows(%0: tensor<?x8x20xf32>, %1: tensor<20xf32>, %2: tensor<20xf32>) -> tensor<?x8x20xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive} {
  %3 = nn.layer_norm %0, %1, %2 : (tensor<?x8x20xf32>, tensor<20xf32>, tensor<20xf32>) -> tensor<?x8x20xf32>
  %4 = nn.sigmoid %3 : (tensor<?x8x20xf32>) -> tensor<?x8x20xf32>
  func.return %4 : tensor<?x8x20xf32>
}
func.func private @main_pool(%0: tensor<?x4x9x9xf32>, %1: tensor<4xf32>) -> tensor<?x4x5x5xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive} {
  %2 = nn.avg_pool2d %0 {pool_size = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1, 0, 0>, ceil_mode = true} : (tensor<?x4x9x9xf32>) -> tensor<?x4x5x5xf32>
  %3 = nn.bias_add %2, %1 {axis = 1 : i64} : (tensor<?x4x5x5xf32>, tensor<4xf32>) -> tensor<?x4x5x5xf32>
  func.return %3 : tensor<?x4x5x5xf32>
}
func.func private @main_pad(%0: tensor<2x3xf32>) -> tensor<3x6xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive} {
  %1 = nn.pad %0 {pad_before = array<i64: 1, 2>, pad_after = array<i64: 0, 1>, pad_value = 0.5 : f64} : (tensor<2x3xf32>) -> tensor<3x6xf32>
  func.return %1 : tensor<3x6xf32>
}
func.func private @not_a_kernel(%0: tensor<1x4x?x?xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x3x?x?xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}>, byoc.primitive} {
  %1 = nn.conv2d_transpose %0, %w : (tensor<1x4x?x?xf32>, tensor<4x3x3x3xf32>) -> tensor<1x3x?x?xf32>
  func.return %1 : tensor<1x3x?x?xf32>
}
func.func @main(%x: tensor<?x64xf16>, %b: tensor<64xf16>, %y: tensor<2x3x4xbf16>, %c: tensor<4xbf16>) -> (tensor<?x64xf16>, tensor<4x6xbf16>) attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
  %0 = func.call @main_fused_0(%x, %b) : (tensor<?x64xf16>, tensor<64xf16>) -> tensor<?x64xf16>
  %1 = func.call @main_fused_1(%y, %c) : (tensor<2x3x4xbf16>, tensor<4xbf16>) -> tensor<4x6xbf16>
  func.return %0, %1 : tensor<?x64xf16>, tensor<4x6xbf16>
}
