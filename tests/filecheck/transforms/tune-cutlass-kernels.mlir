// RUN: rm -rf %t && mkdir -p %t
// RUN: partita-opt %s -p 'tune-cutlass-kernels{sm=90 measure=false cache-dir=%t}' | filecheck %s
// RUN: env CUDA_VISIBLE_DEVICES= not partita-opt %s -p 'tune-cutlass-kernels{sm=90 cache-dir=%t}' 2>&1 | filecheck %s --check-prefix=NO-GPU
// RUN: not partita-opt %s -p 'tune-cutlass-kernels{sm=90 dynamic-dim=0 cache-dir=%t}' 2>&1 | filecheck %s --check-prefix=DIM

// With nothing recorded and nothing measured, the partition is outlined and left to the
// tuning table (no cutlass.kernel); timing needs a GPU (hidden from the second run).

// CHECK-LABEL: func.func private @dense_0(
// CHECK-SAME:    byoc.compiler = "cutlass"
// CHECK-NOT:     cutlass.kernel
// CHECK-LABEL: func.func @main(
// CHECK:         func.call @dense_0(%x, %w)

// NO-GPU: error: tune-cutlass-kernels: timing kernels needs a CUDA device and none is available; measure=false pins the recorded winners only
// DIM: error: tune-cutlass-kernels: dynamic-dim must be >= 1, got 0

func.func @main(%x: tensor<256x512xf16>, %w: tensor<1024x512xf16>) -> tensor<256x1024xf16> {
  %0 = byoc.partition(%x, %w) {byoc.compiler = "cutlass", byoc.global_symbol = "dense_0"} ({
  ^bb0(%a: tensor<256x512xf16>, %b: tensor<1024x512xf16>):
    %1 = nn.dense %a, %b : (tensor<256x512xf16>, tensor<1024x512xf16>) -> tensor<256x1024xf16>
    byoc.yield %1 : tensor<256x1024xf16>
  }) : (tensor<256x512xf16>, tensor<1024x512xf16>) -> tensor<256x1024xf16>
  func.return %0 : tensor<256x1024xf16>
}
