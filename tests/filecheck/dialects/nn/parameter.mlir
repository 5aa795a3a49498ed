// RUN: partita-opt %s --split-input-file | filecheck %s
// RUN: partita-opt %s --split-input-file | partita-opt --split-input-file | filecheck %s
// RUN: partita-opt %s --split-input-file -p 'to-mixed-precision{dtype=f16}' | filecheck %s --check-prefix=F16
// RUN: partita-opt %s --split-input-file -p 'to-mixed-precision{dtype=f16}' | partita-opt --split-input-file | filecheck %s --check-prefix=F16

// A named parameter prints as its name, type and storage, never its bytes, and parses
// back to itself (the file is not opened: it does not exist here). A small constant
// stays a dense attribute beside it.

// CHECK-LABEL: func.func @linear
// CHECK-NEXT:    %w = nn.constant #nn.parameter<"fc.weight" : tensor<1024x4096xf32>, file "/models/gpt/model.onnx.data" at 8589934592>
// CHECK-NEXT:    %b = nn.constant dense<2.500000e-01> : tensor<1024xf32>
// CHECK-NEXT:    %0 = nn.dense %x, %w : (tensor<?x4096xf32>, tensor<1024x4096xf32>) -> tensor<?x1024xf32>

// to-mixed-precision retypes a parameter instead of reading it: the f16 parameter names
// the same f32 bytes (converted where they are read or saved).

// F16-LABEL: func.func @linear
// F16:         %{{.*}} = nn.constant #nn.parameter<"fc.weight" : tensor<1024x4096xf16>, file "/models/gpt/model.onnx.data" at 8589934592 as f32>
// F16:         nn.dense %{{.*}}, %{{.*}} : (tensor<?x4096xf16>, tensor<1024x4096xf16>) -> tensor<?x1024xf16>
func.func @linear(%x: tensor<?x4096xf32>) -> tensor<?x1024xf32> {
  %w = nn.constant #nn.parameter<"fc.weight" : tensor<1024x4096xf32>, file "/models/gpt/model.onnx.data" at 8589934592>
  %b = nn.constant dense<0.25> : tensor<1024xf32>
  %0 = nn.dense %x, %w : (tensor<?x4096xf32>, tensor<1024x4096xf32>) -> tensor<?x1024xf32>
  %1 = nn.add %0, %b : (tensor<?x1024xf32>, tensor<1024xf32>) -> tensor<?x1024xf32>
  func.return %1 : tensor<?x1024xf32>
}

// -----

// A parameter computed at one type and stored at another round-trips too.

// CHECK-LABEL: func.func @stored_as_f32
// CHECK-NEXT:    %w = nn.constant #nn.parameter<"w" : tensor<64x64xbf16>, file "w.bin" at 0 as f32>
// F16-LABEL: func.func @stored_as_f32
// F16-NEXT:    %w = nn.constant #nn.parameter<"w" : tensor<64x64xbf16>, file "w.bin" at 0 as f32>
func.func @stored_as_f32() -> tensor<64x64xbf16> {
  %w = nn.constant #nn.parameter<"w" : tensor<64x64xbf16>, file "w.bin" at 0 as f32>
  func.return %w : tensor<64x64xbf16>
}

// -----

// A MatMul weight [K, N] that nn.dense takes as [N, K], and an OIHW convolution weight
// used as OHWI (convert-layout): stored as they are, read as permuted views.

// CHECK-LABEL: func.func @transposed
// CHECK-NEXT:    %w = nn.constant #nn.parameter<"w" : tensor<32x64xf32>, file "w.bin" at 4096 perm [1, 0]>
// F16-LABEL: func.func @transposed
// F16:           nn.constant #nn.parameter<"w" : tensor<32x64xf16>, file "w.bin" at 4096 as f32 perm [1, 0]>
func.func @transposed(%x: tensor<2x64xf32>) -> tensor<2x32xf32> {
  %w = nn.constant #nn.parameter<"w" : tensor<32x64xf32>, file "w.bin" at 4096 perm [1, 0]>
  %0 = nn.dense %x, %w : (tensor<2x64xf32>, tensor<32x64xf32>) -> tensor<2x32xf32>
  func.return %0 : tensor<2x32xf32>
}

// -----

// CHECK-LABEL: func.func @ohwi
// CHECK-NEXT:    %w = nn.constant #nn.parameter<"conv.weight" : tensor<8x3x3x4xf32>, file "w.bin" at 0 perm [0, 2, 3, 1]>
func.func @ohwi() -> tensor<8x3x3x4xf32> {
  %w = nn.constant #nn.parameter<"conv.weight" : tensor<8x3x3x4xf32>, file "w.bin" at 0 perm [0, 2, 3, 1]>
  func.return %w : tensor<8x3x3x4xf32>
}

// -----

// A loaded compiled model's parameter records the identity of the file whose digests
// were checked (device:inode:size:mtime); it prints and parses like the rest.

// CHECK-LABEL: func.func @checked
// CHECK-NEXT:    %w = nn.constant #nn.parameter<"w" : tensor<64xf32>, file "/m.partita" at 8192 checked "2049:131:20480:1700000000000000000">
func.func @checked() -> tensor<64xf32> {
  %w = nn.constant #nn.parameter<"w" : tensor<64xf32>, file "/m.partita" at 8192 checked "2049:131:20480:1700000000000000000">
  func.return %w : tensor<64xf32>
}
