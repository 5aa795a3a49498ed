// RUN: partita-opt %s --split-input-file -p 'fuse-native-kernels{target=cuda},tie-in-place-updates' | filecheck %s
// RUN: partita-opt %s --split-input-file -p 'fuse-native-kernels{target=cuda},tie-in-place-updates' -t cuda-c | filecheck %s --check-prefix=CUDA

// A decode step's cache update on the cuda target: the cache is the entry's argument and
// nothing reads it after the scatter, so the kernel's result is tied to it; the kernel
// stores the update's 8 elements (the producer computed where they are read) and never
// reads the cache. A 64-bit row: a position past the cache is dropped, never wrapped.

// CHECK-LABEL: func.func private @decode_fused_0(
// CHECK-SAME:    -> (tensor<1x2x16x4xf32> {byoc.tied_operand = 2 : i64})
// CHECK-LABEL: func.func @decode
// CHECK:         func.call @decode_fused_0(%x, %{{.*}}, %cache, %pos)

// CUDA-LABEL: // @decode_fused_0: nn.multiply, nn.tensor_scatter (in place into argument 2)
// CUDA:       decode_fused_0(const float* __restrict__ in0, const float* __restrict__ in1, const float* in2, const long long* __restrict__ in3, float* __restrict__ out) {
// CUDA-NEXT:    const int n = 8;
// CUDA-NEXT:    for (int j = {{.*}}; j < n; j += {{.*}}) {
// CUDA:           long long row0 = (long long)v0 + 0;
// CUDA-NOT:       in2
// CUDA:           if (row0 >= 0 && row0 < 16) out[s1 * 64 + row0 * 4 + s3] = v3;
func.func @decode(%x: tensor<1x2x1x4xf32>, %cache: tensor<1x2x16x4xf32>, %pos: tensor<1xi64>) -> tensor<1x2x16x4xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
  %two = nn.constant dense<2.0> : tensor<f32>
  %u = nn.multiply %x, %two : (tensor<1x2x1x4xf32>, tensor<f32>) -> tensor<1x2x1x4xf32>
  %0 = nn.tensor_scatter %cache, %u, %pos : (tensor<1x2x16x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x16x4xf32>
  func.return %0 : tensor<1x2x16x4xf32>
}

// -----
// A ring buffer whose cache is another kernel's fresh result (a GEMM's, which a scatter
// cannot join as an epilogue): tied to that buffer. A circular row wraps modulo 16.

// CHECK-LABEL: func.func private @ring_fused_1(
// CHECK-SAME:    -> (tensor<2x16xf32> {byoc.tied_operand = 0 : i64})
// CUDA-LABEL: // @ring_fused_1: nn.tensor_scatter (in place into argument 0)
// CUDA:         row0 = ((row0 % 16) + 16) % 16;
func.func @ring(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>, %u: tensor<2x1xf32>, %pos: tensor<2xi64>) -> tensor<2x16xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
  %c = nn.dense %x, %w : (tensor<2x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>
  %0 = nn.tensor_scatter %c, %u, %pos {axis = 1 : i64, circular = true} : (tensor<2x16xf32>, tensor<2x1xf32>, tensor<2xi64>) -> tensor<2x16xf32>
  func.return %0 : tensor<2x16xf32>
}

// -----
// Left out of place: a cache read again after the update (returned beside it).

// CHECK-LABEL: func.func private @read_again_fused_0(
// CHECK-SAME:    -> tensor<1x2x16x4xf32> attributes
// CUDA-LABEL: // @read_again_fused_0: nn.tensor_scatter{{$}}
// CUDA:       read_again_fused_0(const float* __restrict__ in0,
// CUDA-NEXT:    const int n = 128;
func.func @read_again(%cache: tensor<1x2x16x4xf32>, %u: tensor<1x2x1x4xf32>, %pos: tensor<1xi64>) -> (tensor<1x2x16x4xf32>, tensor<1x2x16x4xf32>) attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
  %0 = nn.tensor_scatter %cache, %u, %pos : (tensor<1x2x16x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x16x4xf32>
  func.return %cache, %0 : tensor<1x2x16x4xf32>, tensor<1x2x16x4xf32>
}

// -----
// Left out of place: a cache that is a weight (a constant every run reads).

// CHECK-LABEL: func.func private @weight_fused_0(
// CHECK-SAME:    -> tensor<1x2x16x4xf32> attributes
func.func @weight(%u: tensor<1x2x1x4xf32>, %pos: tensor<1xi64>) -> tensor<1x2x16x4xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
  %w = nn.constant dense<0.5> : tensor<1x2x16x4xf32>
  %0 = nn.tensor_scatter %w, %u, %pos : (tensor<1x2x16x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x16x4xf32>
  func.return %0 : tensor<1x2x16x4xf32>
}

// -----
// Left out of place: a kernel that computes more than the update (an epilogue after it).

// CHECK-LABEL: func.func private @epilogue_fused_0(
// CHECK-SAME:    -> tensor<1x2x16x4xf32> attributes
func.func @epilogue(%cache: tensor<1x2x16x4xf32>, %u: tensor<1x2x1x4xf32>, %pos: tensor<1xi64>) -> tensor<1x2x16x4xf32> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
  %0 = nn.tensor_scatter %cache, %u, %pos : (tensor<1x2x16x4xf32>, tensor<1x2x1x4xf32>, tensor<1xi64>) -> tensor<1x2x16x4xf32>
  %1 = nn.relu %0 : (tensor<1x2x16x4xf32>) -> tensor<1x2x16x4xf32>
  func.return %1 : tensor<1x2x16x4xf32>
}

// -----
// ScatterND (a static cache's update as index_copy_ exports it) is tied too: one thread
// per update element stores it at its index tuple; with a reduction it is not (its
// updates combine with what is there).

// CHECK-LABEL: func.func private @index_copy_fused_0(
// CHECK-SAME:    -> (tensor<1x2x16x4xf16> {byoc.tied_operand = 0 : i64})
// CHECK-LABEL: func.func private @index_copy_fused_1(
// CHECK-SAME:    -> tensor<1x2x16x4xf16> attributes
// CUDA-LABEL: // @index_copy_fused_0: nn.scatter_nd (in place into argument 0)
// CUDA:         long long k2 = (long long)in1[s1 * 3 + 2];
// CUDA-NEXT:    if (k2 < 0) k2 += 16;
// CUDA:         if (k0 >= 0 && k0 < 1 && k1 >= 0 && k1 < 2 && k2 >= 0 && k2 < 16) out[k0 * 128 + k1 * 64 + k2 * 4 + s3] = st_f16(v0);
func.func @index_copy(%cache: tensor<1x2x16x4xf16>, %u: tensor<1x2x1x4xf16>, %idx: tensor<1x2x1x3xi64>, %acc: tensor<1x2x16x4xf16>) -> (tensor<1x2x16x4xf16>, tensor<1x2x16x4xf16>) attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
  %0 = nn.scatter_nd %cache, %idx, %u : (tensor<1x2x16x4xf16>, tensor<1x2x1x3xi64>, tensor<1x2x1x4xf16>) -> tensor<1x2x16x4xf16>
  %1 = nn.scatter_nd %acc, %idx, %u {reduction = "add"} : (tensor<1x2x16x4xf16>, tensor<1x2x1x3xi64>, tensor<1x2x1x4xf16>) -> tensor<1x2x16x4xf16>
  func.return %0, %1 : tensor<1x2x16x4xf16>, tensor<1x2x16x4xf16>
}

// -----
// ScatterElements (index_copy as the TorchScript exporter writes it: the position
// broadcast to the update) is tied too: each update element lands at its index along the
// axis, the other indices its own.

// CHECK-LABEL: func.func private @index_copy_elements_fused_0(
// CHECK-SAME:    -> (tensor<1x2x16x4xf16> {byoc.tied_operand = 0 : i64})
// CUDA-LABEL: // @index_copy_elements_fused_0: nn.scatter_elements (in place into argument 0)
// CUDA:         if (k0 < 0) k0 += 16;
// CUDA:         if (k0 >= 0 && k0 < 16) out[s1 * 64 + k0 * 4 + s3] = st_f16(v0);
func.func @index_copy_elements(%cache: tensor<1x2x16x4xf16>, %u: tensor<1x2x1x4xf16>, %idx: tensor<1x2x1x4xi64>) -> tensor<1x2x16x4xf16> attributes {byoc.target = #byoc.target<"cuda", {arch = "sm_90"}, host = #byoc.target<"llvm">>} {
  %0 = nn.scatter_elements %cache, %idx, %u {axis = 2 : i64} : (tensor<1x2x16x4xf16>, tensor<1x2x1x4xi64>, tensor<1x2x1x4xf16>) -> tensor<1x2x16x4xf16>
  func.return %0 : tensor<1x2x16x4xf16>
}
