// RUN: partita-opt %s -p tensorrt-codegen | filecheck %s
// RUN: partita-opt %s -p tensorrt-codegen -t library-records | filecheck %s --check-prefix=REC

// A TensorRT partition becomes an ONNX sub-model embedded in the module (base64), keyed
// by its SHA-256; constants inside the partition become initializers, and so do arguments
// every call passes the same constant (weights: "folded", built into the engine).

func.func private @block(%x: tensor<?x16xf32>, %g: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<?x16xf32> attributes {byoc.compiler = "tensorrt", byoc.primitive} {
  %c = nn.constant dense<2.0> : tensor<16xf32>
  %0 = nn.multiply %x, %c : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  %1 = nn.layer_norm %0, %g, %b : (tensor<?x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  %2 = nn.gelu %1 : (tensor<?x16xf32>) -> tensor<?x16xf32>
  func.return %2 : tensor<?x16xf32>
}

// CHECK-LABEL: func.func private @block(tensor<?x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<?x16xf32> attributes {byoc.extern}
// CHECK:       byoc.binary @tensorrt attributes {format = "onnx", target = #byoc.target<"tensorrt">,
// CHECK-SAME:    kernels = {block = {kind = "tensorrt", digest = "{{[0-9a-f]+}}", inputs = {{\[\[}}-1 : i64, 16 : i64], [16 : i64], [16 : i64]], input_dtypes = ["f32", "f32", "f32"], folded = [], outputs = {{\[\[}}-1 : i64, 16 : i64]], output_dtypes = ["f32"], ops = ["nn.multiply", "nn.layer_norm", "nn.gelu"], fp16 = 0 : i64, workspace_limit = 1073741824 : i64, model = "{{[A-Za-z0-9+/=]+}}"},

// REC:      // @block (byoc.binary @tensorrt, tensorrt)
// REC-NEXT: tensorrt engine from ONNX sub-model (sha256 {{[0-9a-f]+}}), inputs {{\[\[}}-1, 16], [16], [16]], outputs {{\[\[}}-1, 16]]
// REC:      block (float[arg0_d0,16] arg0, float[16] arg1, float[16] arg2) => (float[out0_d0,16] out0)
// REC:        = Mul (arg0, const1)
// REC:        = LayerNormalization <axis: int = -1, epsilon: float = 1e-05>
// REC:        = Gelu <approximate: string = "none">

func.func private @weights(%x: tensor<?x4xf32>, %w: tensor<8x4xf32>) -> tensor<?x8xf32> attributes {byoc.compiler = "tensorrt", byoc.primitive} {
  %0 = nn.dense %x, %w : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  %1 = nn.relu %0 : (tensor<?x8xf32>) -> tensor<?x8xf32>
  func.return %1 : tensor<?x8xf32>
}

func.func @main(%x: tensor<?x4xf32>) -> tensor<?x8xf32> {
  %w = nn.constant dense<0.5> : tensor<8x4xf32>
  %0 = func.call @weights(%x, %w) : (tensor<?x4xf32>, tensor<8x4xf32>) -> tensor<?x8xf32>
  func.return %0 : tensor<?x8xf32>
}

// CHECK-SAME:    weights = {kind = "tensorrt", {{.*}} folded = [1 : i64],

// REC:      // @weights (byoc.binary @tensorrt, tensorrt)
// REC-NEXT: tensorrt engine from ONNX sub-model (sha256 {{[0-9a-f]+}}), inputs {{\[\[}}-1, 4], [8, 4]], outputs {{\[\[}}-1, 8]], arguments [1] built in
// REC:      weights (float[arg0_d0,4] arg0) => (float[out0_d0,8] out0)
