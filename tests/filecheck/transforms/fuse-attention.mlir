// RUN: partita-opt %s --split-input-file -p fuse-attention | filecheck %s

// PyTorch's exported SDPA: sqrt(scale) on q and on kT = transpose(k), a boolean mask as
// where(m, 0, -inf), the NaN guard: one nn.attention with the mask, the scale 0.25 and
// zero_undefined_rows; the chain and its constants are gone.

// CHECK-LABEL: func.func @sdpa_bool_mask
// CHECK-NEXT:    [[A:%.*]] = nn.attention %q, %k, %v, %m {scale = 2.500000e-01 : f64, zero_undefined_rows = true} : (tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x1x?x?xi1>) -> tensor<?x4x?x8xf32>
// CHECK-NEXT:    func.return [[A]]
func.func @sdpa_bool_mask(%q: tensor<?x4x?x8xf32>, %k: tensor<?x4x?x8xf32>, %v: tensor<?x4x?x8xf32>, %m: tensor<?x1x?x?xi1>) -> tensor<?x4x?x8xf32> {
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<?x4x?x8xf32>) -> tensor<?x4x8x?xf32>
  %c = nn.constant dense<0.5> : tensor<f32>
  %qs = nn.multiply %q, %c : (tensor<?x4x?x8xf32>, tensor<f32>) -> tensor<?x4x?x8xf32>
  %c2 = nn.constant dense<0.5> : tensor<f32>
  %ks = nn.multiply %kt, %c2 : (tensor<?x4x8x?xf32>, tensor<f32>) -> tensor<?x4x8x?xf32>
  %s = nn.matmul %qs, %ks : (tensor<?x4x?x8xf32>, tensor<?x4x8x?xf32>) -> tensor<?x4x?x?xf32>
  %zero = nn.constant dense<0.0> : tensor<1xf32>
  %ninf = nn.constant dense<0xff800000> : tensor<1xf32>
  %bias = nn.where %m, %zero, %ninf : (tensor<?x1x?x?xi1>, tensor<1xf32>, tensor<1xf32>) -> tensor<?x1x?x?xf32>
  %sm = nn.add %s, %bias : (tensor<?x4x?x?xf32>, tensor<?x1x?x?xf32>) -> tensor<?x4x?x?xf32>
  %p = nn.softmax %sm {axis = 3 : i64} : (tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
  %nan = nn.is_nan %p : (tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xi1>
  %z = nn.constant dense<0.0> : tensor<1xf32>
  %pg = nn.where %nan, %z, %p : (tensor<?x4x?x?xi1>, tensor<1xf32>, tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
  %o = nn.matmul %pg, %v : (tensor<?x4x?x?xf32>, tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32>
  func.return %o : tensor<?x4x?x8xf32>
}

// -----

// Hugging Face's eager form: (q @ kT) / 4 + an additive mask, no guard. kT is not a
// transpose, so the key is its transpose; the mask stays additive (no NaN guard:
// zero_undefined_rows stays false).

// CHECK-LABEL: func.func @eager_additive
// CHECK-NEXT:    [[K:%.*]] = nn.transpose %kt {perm = array<i64: 0, 1, 3, 2>}
// CHECK-NEXT:    [[A:%.*]] = nn.attention %q, [[K]], %v, %mask {scale = 2.500000e-01 : f64} : (tensor<1x2x5x16xf16>, tensor<1x2x7x16xf16>, tensor<1x2x7x16xf16>, tensor<1x1x5x7xf16>) -> tensor<1x2x5x16xf16>
// CHECK-NEXT:    func.return [[A]]
func.func @eager_additive(%q: tensor<1x2x5x16xf16>, %kt: tensor<1x2x16x7xf16>, %v: tensor<1x2x7x16xf16>, %mask: tensor<1x1x5x7xf16>) -> tensor<1x2x5x16xf16> {
  %s = nn.matmul %q, %kt : (tensor<1x2x5x16xf16>, tensor<1x2x16x7xf16>) -> tensor<1x2x5x7xf16>
  %c = nn.constant dense<4.0> : tensor<f16>
  %sd = nn.divide %s, %c : (tensor<1x2x5x7xf16>, tensor<f16>) -> tensor<1x2x5x7xf16>
  %sm = nn.add %sd, %mask : (tensor<1x2x5x7xf16>, tensor<1x1x5x7xf16>) -> tensor<1x2x5x7xf16>
  %p = nn.softmax %sm {axis = -1 : i64} : (tensor<1x2x5x7xf16>) -> tensor<1x2x5x7xf16>
  %o = nn.matmul %p, %v : (tensor<1x2x5x7xf16>, tensor<1x2x7x16xf16>) -> tensor<1x2x5x16xf16>
  func.return %o : tensor<1x2x5x16xf16>
}

// -----

// LLaMA's repeat_kv (reshape -> broadcast_to -> reshape) on K and V folds into GQA:
// the op reads the two KV heads directly.

// CHECK-LABEL: func.func @gqa_repeat_kv
// CHECK-NEXT:    [[A:%.*]] = nn.attention %q, %k, %v {scale = 1.000000e+00 : f64} : (tensor<1x4x3x8xf32>, tensor<1x2x3x8xf32>, tensor<1x2x3x8xf32>) -> tensor<1x4x3x8xf32>
// CHECK-NEXT:    func.return [[A]]
func.func @gqa_repeat_kv(%q: tensor<1x4x3x8xf32>, %k: tensor<1x2x3x8xf32>, %v: tensor<1x2x3x8xf32>) -> tensor<1x4x3x8xf32> {
  %k5 = nn.reshape %k : (tensor<1x2x3x8xf32>) -> tensor<1x2x1x3x8xf32>
  %kb = nn.broadcast_to %k5 : (tensor<1x2x1x3x8xf32>) -> tensor<1x2x2x3x8xf32>
  %k4 = nn.reshape %kb : (tensor<1x2x2x3x8xf32>) -> tensor<1x4x3x8xf32>
  %v5 = nn.reshape %v : (tensor<1x2x3x8xf32>) -> tensor<1x2x1x3x8xf32>
  %vb = nn.broadcast_to %v5 : (tensor<1x2x1x3x8xf32>) -> tensor<1x2x2x3x8xf32>
  %v4 = nn.reshape %vb : (tensor<1x2x2x3x8xf32>) -> tensor<1x4x3x8xf32>
  %kt = nn.transpose %k4 {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x4x3x8xf32>) -> tensor<1x4x8x3xf32>
  %s = nn.matmul %q, %kt : (tensor<1x4x3x8xf32>, tensor<1x4x8x3xf32>) -> tensor<1x4x3x3xf32>
  %p = nn.softmax %s {axis = 3 : i64} : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  %o = nn.matmul %p, %v4 : (tensor<1x4x3x3xf32>, tensor<1x4x3x8xf32>) -> tensor<1x4x3x8xf32>
  func.return %o : tensor<1x4x3x8xf32>
}

// -----

// A partial match stays op by op: the probabilities are also returned, so nothing is
// fused (the scores would otherwise be computed twice).

// CHECK-LABEL: func.func @probabilities_used
// CHECK-NOT:     nn.attention
// CHECK:         nn.softmax
// CHECK:         func.return
func.func @probabilities_used(%q: tensor<1x1x3x8xf32>, %kt: tensor<1x1x8x3xf32>, %v: tensor<1x1x3x8xf32>) -> (tensor<1x1x3x8xf32>, tensor<1x1x3x3xf32>) {
  %s = nn.matmul %q, %kt : (tensor<1x1x3x8xf32>, tensor<1x1x8x3xf32>) -> tensor<1x1x3x3xf32>
  %p = nn.softmax %s {axis = 3 : i64} : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = nn.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x8xf32>) -> tensor<1x1x3x8xf32>
  func.return %o, %p : tensor<1x1x3x8xf32>, tensor<1x1x3x3xf32>
}

// -----

// A softmax over another axis is not attention.

// CHECK-LABEL: func.func @softmax_over_queries
// CHECK-NOT:     nn.attention
// CHECK:         nn.softmax %{{.*}} {axis = 2 : i64}
func.func @softmax_over_queries(%q: tensor<1x1x3x8xf32>, %kt: tensor<1x1x8x3xf32>, %v: tensor<1x1x3x8xf32>) -> tensor<1x1x3x8xf32> {
  %s = nn.matmul %q, %kt : (tensor<1x1x3x8xf32>, tensor<1x1x8x3xf32>) -> tensor<1x1x3x3xf32>
  %p = nn.softmax %s {axis = 2 : i64} : (tensor<1x1x3x3xf32>) -> tensor<1x1x3x3xf32>
  %o = nn.matmul %p, %v : (tensor<1x1x3x3xf32>, tensor<1x1x3x8xf32>) -> tensor<1x1x3x8xf32>
  func.return %o : tensor<1x1x3x8xf32>
}

// -----

// The TorchScript exporter's head split / merge around attention: Q and V are
// transpose(x, [0, 2, 1, 3]) of [B, S, H, D] projections, K^T a [0, 2, 3, 1] transpose,
// and the result is transposed back: the op works in BSHD and every transpose goes.

// CHECK-LABEL: func.func @head_transposes_fold
// CHECK-NEXT:    [[A:%.*]] = nn.attention %q, %k, %v {scale = 5.000000e-01 : f64, layout = "BSHD"} : (tensor<?x?x4x8xf32>, tensor<?x?x4x8xf32>, tensor<?x?x4x8xf32>) -> tensor<?x?x4x8xf32>
// CHECK-NEXT:    func.return [[A]]
func.func @head_transposes_fold(%q: tensor<?x?x4x8xf32>, %k: tensor<?x?x4x8xf32>, %v: tensor<?x?x4x8xf32>) -> tensor<?x?x4x8xf32> {
  %qh = nn.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x4x8xf32>) -> tensor<?x4x?x8xf32>
  %kt = nn.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<?x?x4x8xf32>) -> tensor<?x4x8x?xf32>
  %vh = nn.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x4x8xf32>) -> tensor<?x4x?x8xf32>
  %s = nn.matmul %qh, %kt : (tensor<?x4x?x8xf32>, tensor<?x4x8x?xf32>) -> tensor<?x4x?x?xf32>
  %c = nn.constant dense<0.5> : tensor<f32>
  %ss = nn.multiply %s, %c : (tensor<?x4x?x?xf32>, tensor<f32>) -> tensor<?x4x?x?xf32>
  %p = nn.softmax %ss {axis = 3 : i64} : (tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
  %o = nn.matmul %p, %vh : (tensor<?x4x?x?xf32>, tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32>
  %m = nn.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x4x?x8xf32>) -> tensor<?x?x4x8xf32>
  func.return %m : tensor<?x?x4x8xf32>
}

// -----

// A head split before a rotary embedding moves after it (the rotary in BSHD), so the
// attention folds it as above and no transpose is left. In @head_split_read_twice the
// split has another reader: it stays, and so does the rotary's layout.

// CHECK-LABEL: func.func @head_split_past_rotary
// CHECK-NEXT:    [[R:%.*]] = nn.rotary_embedding %q, %cos, %sin {layout = "BSHD"} : (tensor<?x?x4x8xf32>, tensor<1x?x4xf32>, tensor<1x?x4xf32>) -> tensor<?x?x4x8xf32>
// CHECK-NEXT:    [[A:%.*]] = nn.attention [[R]], %k, %v {scale = 5.000000e-01 : f64, layout = "BSHD"} : (tensor<?x?x4x8xf32>, tensor<?x?x4x8xf32>, tensor<?x?x4x8xf32>) -> tensor<?x?x4x8xf32>
// CHECK-NEXT:    func.return [[A]]
// CHECK-LABEL: func.func @head_split_read_twice
// CHECK:         [[T:%.*]] = nn.transpose %q
// CHECK-NEXT:    nn.rotary_embedding [[T]], %cos, %sin : (tensor<?x4x?x8xf32>
func.func @head_split_past_rotary(%q: tensor<?x?x4x8xf32>, %k: tensor<?x?x4x8xf32>, %v: tensor<?x?x4x8xf32>, %cos: tensor<1x?x4xf32>, %sin: tensor<1x?x4xf32>) -> tensor<?x?x4x8xf32> {
  %qh = nn.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x4x8xf32>) -> tensor<?x4x?x8xf32>
  %qr = nn.rotary_embedding %qh, %cos, %sin : (tensor<?x4x?x8xf32>, tensor<1x?x4xf32>, tensor<1x?x4xf32>) -> tensor<?x4x?x8xf32>
  %kt = nn.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<?x?x4x8xf32>) -> tensor<?x4x8x?xf32>
  %vh = nn.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x4x8xf32>) -> tensor<?x4x?x8xf32>
  %s = nn.matmul %qr, %kt : (tensor<?x4x?x8xf32>, tensor<?x4x8x?xf32>) -> tensor<?x4x?x?xf32>
  %c = nn.constant dense<0.5> : tensor<f32>
  %ss = nn.multiply %s, %c : (tensor<?x4x?x?xf32>, tensor<f32>) -> tensor<?x4x?x?xf32>
  %p = nn.softmax %ss {axis = 3 : i64} : (tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
  %o = nn.matmul %p, %vh : (tensor<?x4x?x?xf32>, tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32>
  %m = nn.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x4x?x8xf32>) -> tensor<?x?x4x8xf32>
  func.return %m : tensor<?x?x4x8xf32>
}
func.func @head_split_read_twice(%q: tensor<?x?x4x8xf32>, %cos: tensor<1x?x4xf32>, %sin: tensor<1x?x4xf32>) -> (tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>) {
  %qh = nn.transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x4x8xf32>) -> tensor<?x4x?x8xf32>
  %qr = nn.rotary_embedding %qh, %cos, %sin : (tensor<?x4x?x8xf32>, tensor<1x?x4xf32>, tensor<1x?x4xf32>) -> tensor<?x4x?x8xf32>
  func.return %qr, %qh : tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>
}

// -----

// Hugging Face's causal mask: Range positions compared (j <= i) over the query length,
// and-ed with a key padding mask, as where(m, 0, -inf): the frontier becomes causal, the
// padding mask stays; the positions and the comparison are gone.

// CHECK-LABEL: func.func @causal_and_padding
// CHECK-NOT:     nn.arange
// CHECK-NOT:     nn.less_equal
// CHECK:         [[A:%.*]] = nn.attention %q, %k, %v, %pad {scale = 1.000000e+00 : f64, causal = true} : (tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x1x1x?xi1>) -> tensor<?x4x?x8xf32>
// CHECK-NEXT:    func.return [[A]]
func.func @causal_and_padding(%q: tensor<?x4x?x8xf32>, %k: tensor<?x4x?x8xf32>, %v: tensor<?x4x?x8xf32>, %pad: tensor<?x1x1x?xi1>) -> tensor<?x4x?x8xf32> {
  %pos = nn.arange %q {start = 0.0 : f64, delta = 1.0 : f64, ref_axes = array<i64: 2>, targets = array<i64: 0>} : (tensor<?x4x?x8xf32>) -> tensor<?xi64>
  %j = nn.reshape %pos : (tensor<?xi64>) -> tensor<1x?xi64>
  %i = nn.reshape %pos : (tensor<?xi64>) -> tensor<?x1xi64>
  %keep = nn.less_equal %j, %i : (tensor<1x?xi64>, tensor<?x1xi64>) -> tensor<?x?xi1>
  %m = nn.and %keep, %pad : (tensor<?x?xi1>, tensor<?x1x1x?xi1>) -> tensor<?x1x?x?xi1>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<?x4x?x8xf32>) -> tensor<?x4x8x?xf32>
  %s = nn.matmul %q, %kt : (tensor<?x4x?x8xf32>, tensor<?x4x8x?xf32>) -> tensor<?x4x?x?xf32>
  %zero = nn.constant dense<0.0> : tensor<f32>
  %ninf = nn.constant dense<0xff800000> : tensor<f32>
  %bias = nn.where %m, %zero, %ninf : (tensor<?x1x?x?xi1>, tensor<f32>, tensor<f32>) -> tensor<?x1x?x?xf32>
  %sm = nn.add %s, %bias : (tensor<?x4x?x?xf32>, tensor<?x1x?x?xf32>) -> tensor<?x4x?x?xf32>
  %p = nn.softmax %sm {axis = 3 : i64} : (tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
  %o = nn.matmul %p, %v : (tensor<?x4x?x?xf32>, tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32>
  func.return %o : tensor<?x4x?x8xf32>
}

// -----

// The same frontier over the key length (%k's sequence axis): with Skv = 1 a [1, 1] mask
// keeps every key while causal would hide them from all but the last query, so it stays a
// mask. masked_fill(m, -inf) on the scores is a boolean mask of its complement.

// CHECK-LABEL: func.func @frontier_on_key_length
// CHECK:         [[N:%.*]] = nn.not %m : (tensor<?x?xi1>) -> tensor<?x?xi1>
// CHECK-NEXT:    [[A:%.*]] = nn.attention %q, %k, %v, [[N]] {scale = 1.000000e+00 : f64} : (tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x?xi1>) -> tensor<?x4x?x8xf32>
// CHECK-NEXT:    func.return [[A]]
func.func @frontier_on_key_length(%q: tensor<?x4x?x8xf32>, %k: tensor<?x4x?x8xf32>, %v: tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32> {
  %pos = nn.arange %k {start = 0.0 : f64, delta = 1.0 : f64, ref_axes = array<i64: 2>, targets = array<i64: 0>} : (tensor<?x4x?x8xf32>) -> tensor<?xi64>
  %j = nn.reshape %pos : (tensor<?xi64>) -> tensor<1x?xi64>
  %i = nn.reshape %pos : (tensor<?xi64>) -> tensor<?x1xi64>
  %m = nn.greater %j, %i : (tensor<1x?xi64>, tensor<?x1xi64>) -> tensor<?x?xi1>
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<?x4x?x8xf32>) -> tensor<?x4x8x?xf32>
  %s = nn.matmul %q, %kt : (tensor<?x4x?x8xf32>, tensor<?x4x8x?xf32>) -> tensor<?x4x?x?xf32>
  %ninf = nn.constant dense<0xff800000> : tensor<f32>
  %sm = nn.where %m, %ninf, %s : (tensor<?x?xi1>, tensor<f32>, tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
  %p = nn.softmax %sm {axis = 3 : i64} : (tensor<?x4x?x?xf32>) -> tensor<?x4x?x?xf32>
  %o = nn.matmul %p, %v : (tensor<?x4x?x?xf32>, tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32>
  func.return %o : tensor<?x4x?x8xf32>
}

// -----

// A static additive triangle (0 on and below the diagonal, -inf above) is the frontier.

// CHECK-LABEL: func.func @constant_triangle
// CHECK-NEXT:    [[A:%.*]] = nn.attention %q, %k, %v {scale = 1.000000e+00 : f64, causal = true} : (tensor<1x2x3x8xf16>, tensor<1x2x3x8xf16>, tensor<1x2x3x8xf16>) -> tensor<1x2x3x8xf16>
// CHECK-NEXT:    func.return [[A]]
func.func @constant_triangle(%q: tensor<1x2x3x8xf16>, %k: tensor<1x2x3x8xf16>, %v: tensor<1x2x3x8xf16>) -> tensor<1x2x3x8xf16> {
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x3x8xf16>) -> tensor<1x2x8x3xf16>
  %s = nn.matmul %q, %kt : (tensor<1x2x3x8xf16>, tensor<1x2x8x3xf16>) -> tensor<1x2x3x3xf16>
  %bias = nn.constant dense<[[0.0, 0xFC00, 0xFC00], [0.0, 0.0, 0xFC00], [0.0, 0.0, 0.0]]> : tensor<3x3xf16>
  %sm = nn.add %s, %bias : (tensor<1x2x3x3xf16>, tensor<3x3xf16>) -> tensor<1x2x3x3xf16>
  %p = nn.softmax %sm {axis = 3 : i64} : (tensor<1x2x3x3xf16>) -> tensor<1x2x3x3xf16>
  %o = nn.matmul %p, %v : (tensor<1x2x3x3xf16>, tensor<1x2x3x8xf16>) -> tensor<1x2x3x8xf16>
  func.return %o : tensor<1x2x3x8xf16>
}

// -----

// Hugging Face's rotate_half: x * C + concat(-x[.., 4:], x[.., :4]) * S, the caches
// cos / sin of concat(f, f) (equal halves): one nn.rotary_embedding on the caches' first
// halves. In @rotary_unequal_halves the cache is not built as concat(f, f): left as it is.

// CHECK-LABEL: func.func @rotary_rotate_half
// CHECK:         [[C:%.*]] = nn.strided_slice %cos {begin = array<i64: 0, 0, 0>, end = array<i64: 9223372036854775807, 9223372036854775807, 4>, strides = array<i64: 1, 1, 1>} : (tensor<1x?x8xf32>) -> tensor<1x?x4xf32>
// CHECK-NEXT:    [[S:%.*]] = nn.strided_slice %sin
// CHECK-NEXT:    [[R:%.*]] = nn.rotary_embedding %x, [[C]], [[S]] : (tensor<?x4x?x8xf32>, tensor<1x?x4xf32>, tensor<1x?x4xf32>) -> tensor<?x4x?x8xf32>
// CHECK-NEXT:    func.return [[R]]
// CHECK-LABEL: func.func @rotary_unequal_halves
// CHECK-NOT:     nn.rotary_embedding
// CHECK:         nn.neg
func.func @rotary_rotate_half(%x: tensor<?x4x?x8xf32>, %f: tensor<1x?x4xf32>) -> tensor<?x4x?x8xf32> {
  %e = nn.concatenate %f, %f {axis = -1 : i64} : (tensor<1x?x4xf32>, tensor<1x?x4xf32>) -> tensor<1x?x8xf32>
  %cos = nn.cos %e : (tensor<1x?x8xf32>) -> tensor<1x?x8xf32>
  %sin = nn.sin %e : (tensor<1x?x8xf32>) -> tensor<1x?x8xf32>
  %c4 = nn.reshape %cos : (tensor<1x?x8xf32>) -> tensor<1x1x?x8xf32>
  %s4 = nn.reshape %sin : (tensor<1x?x8xf32>) -> tensor<1x1x?x8xf32>
  %a = nn.multiply %x, %c4 : (tensor<?x4x?x8xf32>, tensor<1x1x?x8xf32>) -> tensor<?x4x?x8xf32>
  %lo = nn.strided_slice %x {begin = array<i64: 0, 0, 0, 0>, end = array<i64: 9223372036854775807, 9223372036854775807, 9223372036854775807, 4>, strides = array<i64: 1, 1, 1, 1>} : (tensor<?x4x?x8xf32>) -> tensor<?x4x?x4xf32>
  %hi = nn.strided_slice %x {begin = array<i64: 0, 0, 0, 4>, end = array<i64: 9223372036854775807, 9223372036854775807, 9223372036854775807, 9223372036854775807>, strides = array<i64: 1, 1, 1, 1>} : (tensor<?x4x?x8xf32>) -> tensor<?x4x?x4xf32>
  %n = nn.neg %hi : (tensor<?x4x?x4xf32>) -> tensor<?x4x?x4xf32>
  %t = nn.concatenate %n, %lo {axis = -1 : i64} : (tensor<?x4x?x4xf32>, tensor<?x4x?x4xf32>) -> tensor<?x4x?x8xf32>
  %b = nn.multiply %t, %s4 : (tensor<?x4x?x8xf32>, tensor<1x1x?x8xf32>) -> tensor<?x4x?x8xf32>
  %y = nn.add %a, %b : (tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32>
  func.return %y : tensor<?x4x?x8xf32>
}
func.func @rotary_unequal_halves(%x: tensor<?x4x?x8xf32>, %cos: tensor<1x?x8xf32>, %sin: tensor<1x?x8xf32>) -> tensor<?x4x?x8xf32> {
  %c4 = nn.reshape %cos : (tensor<1x?x8xf32>) -> tensor<1x1x?x8xf32>
  %s4 = nn.reshape %sin : (tensor<1x?x8xf32>) -> tensor<1x1x?x8xf32>
  %a = nn.multiply %x, %c4 : (tensor<?x4x?x8xf32>, tensor<1x1x?x8xf32>) -> tensor<?x4x?x8xf32>
  %lo = nn.strided_slice %x {begin = array<i64: 0, 0, 0, 0>, end = array<i64: 9223372036854775807, 9223372036854775807, 9223372036854775807, 4>, strides = array<i64: 1, 1, 1, 1>} : (tensor<?x4x?x8xf32>) -> tensor<?x4x?x4xf32>
  %hi = nn.strided_slice %x {begin = array<i64: 0, 0, 0, 4>, end = array<i64: 9223372036854775807, 9223372036854775807, 9223372036854775807, 9223372036854775807>, strides = array<i64: 1, 1, 1, 1>} : (tensor<?x4x?x8xf32>) -> tensor<?x4x?x4xf32>
  %n = nn.neg %hi : (tensor<?x4x?x4xf32>) -> tensor<?x4x?x4xf32>
  %t = nn.concatenate %n, %lo {axis = -1 : i64} : (tensor<?x4x?x4xf32>, tensor<?x4x?x4xf32>) -> tensor<?x4x?x8xf32>
  %b = nn.multiply %t, %s4 : (tensor<?x4x?x8xf32>, tensor<1x1x?x8xf32>) -> tensor<?x4x?x8xf32>
  %y = nn.add %a, %b : (tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32>
  func.return %y : tensor<?x4x?x8xf32>
}

// -----

// A decode step reads its cos / sin at the position from precomputed tables: rows of a
// constant whose halves are equal (take, then a reshape keeping the last axis) are a cache
// too. A table with unequal halves is not.

// CHECK-LABEL: func.func @rotary_table_at_position
// CHECK:         nn.take %tc, %pos
// CHECK:         nn.rotary_embedding %x
// CHECK-LABEL: func.func @rotary_table_unequal_halves
// CHECK-NOT:     nn.rotary_embedding
// CHECK:         nn.neg
func.func @rotary_table_at_position(%x: tensor<1x2x1x4xf32>, %pos: tensor<1xi64>) -> tensor<1x2x1x4xf32> {
  %tc = nn.constant dense<[[1.0, 0.5, 1.0, 0.5], [0.25, 2.0, 0.25, 2.0], [3.0, 1.0, 3.0, 1.0]]> : tensor<3x4xf32>
  %ts = nn.constant dense<[[0.0, 0.5, 0.0, 0.5], [0.75, 1.0, 0.75, 1.0], [2.0, 4.0, 2.0, 4.0]]> : tensor<3x4xf32>
  %c = nn.take %tc, %pos : (tensor<3x4xf32>, tensor<1xi64>) -> tensor<1x4xf32>
  %s = nn.take %ts, %pos : (tensor<3x4xf32>, tensor<1xi64>) -> tensor<1x4xf32>
  %c3 = nn.reshape %c : (tensor<1x4xf32>) -> tensor<1x1x4xf32>
  %s3 = nn.reshape %s : (tensor<1x4xf32>) -> tensor<1x1x4xf32>
  %c4 = nn.reshape %c3 : (tensor<1x1x4xf32>) -> tensor<1x1x1x4xf32>
  %s4 = nn.reshape %s3 : (tensor<1x1x4xf32>) -> tensor<1x1x1x4xf32>
  %a = nn.multiply %x, %c4 : (tensor<1x2x1x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x2x1x4xf32>
  %lo = nn.strided_slice %x {begin = array<i64: 0, 0, 0, 0>, end = array<i64: 9223372036854775807, 9223372036854775807, 9223372036854775807, 2>, strides = array<i64: 1, 1, 1, 1>} : (tensor<1x2x1x4xf32>) -> tensor<1x2x1x2xf32>
  %hi = nn.strided_slice %x {begin = array<i64: 0, 0, 0, 2>, end = array<i64: 9223372036854775807, 9223372036854775807, 9223372036854775807, 9223372036854775807>, strides = array<i64: 1, 1, 1, 1>} : (tensor<1x2x1x4xf32>) -> tensor<1x2x1x2xf32>
  %n = nn.neg %hi : (tensor<1x2x1x2xf32>) -> tensor<1x2x1x2xf32>
  %t = nn.concatenate %n, %lo {axis = -1 : i64} : (tensor<1x2x1x2xf32>, tensor<1x2x1x2xf32>) -> tensor<1x2x1x4xf32>
  %b = nn.multiply %t, %s4 : (tensor<1x2x1x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x2x1x4xf32>
  %y = nn.add %a, %b : (tensor<1x2x1x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x1x4xf32>
  func.return %y : tensor<1x2x1x4xf32>
}
func.func @rotary_table_unequal_halves(%x: tensor<1x2x1x4xf32>, %pos: tensor<1xi64>) -> tensor<1x2x1x4xf32> {
  %tc = nn.constant dense<[[1.0, 0.5, 1.0, 0.5], [0.25, 2.0, 0.25, 2.5], [3.0, 1.0, 3.0, 1.0]]> : tensor<3x4xf32>
  %c = nn.take %tc, %pos : (tensor<3x4xf32>, tensor<1xi64>) -> tensor<1x4xf32>
  %c3 = nn.reshape %c : (tensor<1x4xf32>) -> tensor<1x1x4xf32>
  %c4 = nn.reshape %c3 : (tensor<1x1x4xf32>) -> tensor<1x1x1x4xf32>
  %a = nn.multiply %x, %c4 : (tensor<1x2x1x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x2x1x4xf32>
  %lo = nn.strided_slice %x {begin = array<i64: 0, 0, 0, 0>, end = array<i64: 9223372036854775807, 9223372036854775807, 9223372036854775807, 2>, strides = array<i64: 1, 1, 1, 1>} : (tensor<1x2x1x4xf32>) -> tensor<1x2x1x2xf32>
  %hi = nn.strided_slice %x {begin = array<i64: 0, 0, 0, 2>, end = array<i64: 9223372036854775807, 9223372036854775807, 9223372036854775807, 9223372036854775807>, strides = array<i64: 1, 1, 1, 1>} : (tensor<1x2x1x4xf32>) -> tensor<1x2x1x2xf32>
  %n = nn.neg %hi : (tensor<1x2x1x2xf32>) -> tensor<1x2x1x2xf32>
  %t = nn.concatenate %n, %lo {axis = -1 : i64} : (tensor<1x2x1x2xf32>, tensor<1x2x1x2xf32>) -> tensor<1x2x1x4xf32>
  %b = nn.multiply %t, %c4 : (tensor<1x2x1x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x2x1x4xf32>
  %y = nn.add %a, %b : (tensor<1x2x1x4xf32>, tensor<1x2x1x4xf32>) -> tensor<1x2x1x4xf32>
  func.return %y : tensor<1x2x1x4xf32>
}

// -----

// masked_fill with a finite value (Hugging Face's torch.where(keep, s, finfo.min), and
// -1e9 with the condition the other way round) keeps the value as the op's mask_fill: a
// row with every key hidden averages the values, as exported, instead of being undefined.

// CHECK-LABEL: func.func @masked_fill_finite
// CHECK-NEXT:    [[A:%.*]] = nn.attention %q, %k, %v, %keep {scale = 1.250000e-01 : f64, mask_fill = -3.4028234663852886e+38 : f64} : (tensor<1x2x1x8xf32>, tensor<1x2x9x8xf32>, tensor<1x2x9x8xf32>, tensor<1x1x1x9xi1>) -> tensor<1x2x1x8xf32>
// CHECK-NEXT:    [[N:%.*]] = nn.not %hide : (tensor<1x1x1x9xi1>) -> tensor<1x1x1x9xi1>
// CHECK-NEXT:    [[B:%.*]] = nn.attention %q, %k, %v, [[N]] {scale = 1.250000e-01 : f64, mask_fill = -1.000000e+09 : f64} : (tensor<1x2x1x8xf32>, tensor<1x2x9x8xf32>, tensor<1x2x9x8xf32>, tensor<1x1x1x9xi1>) -> tensor<1x2x1x8xf32>
// CHECK-NEXT:    func.return [[A]], [[B]]
func.func @masked_fill_finite(%q: tensor<1x2x1x8xf32>, %k: tensor<1x2x9x8xf32>, %v: tensor<1x2x9x8xf32>, %keep: tensor<1x1x1x9xi1>, %hide: tensor<1x1x1x9xi1>) -> (tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>) {
  %kt = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x9x8xf32>) -> tensor<1x2x8x9xf32>
  %c = nn.constant dense<0.125> : tensor<f32>
  %min = nn.constant dense<-3.40282347e+38> : tensor<f32>
  %s = nn.matmul %q, %kt : (tensor<1x2x1x8xf32>, tensor<1x2x8x9xf32>) -> tensor<1x2x1x9xf32>
  %ss = nn.multiply %s, %c : (tensor<1x2x1x9xf32>, tensor<f32>) -> tensor<1x2x1x9xf32>
  %sm = nn.where %keep, %ss, %min : (tensor<1x1x1x9xi1>, tensor<1x2x1x9xf32>, tensor<f32>) -> tensor<1x2x1x9xf32>
  %p = nn.softmax %sm {axis = 3 : i64} : (tensor<1x2x1x9xf32>) -> tensor<1x2x1x9xf32>
  %o = nn.matmul %p, %v : (tensor<1x2x1x9xf32>, tensor<1x2x9x8xf32>) -> tensor<1x2x1x8xf32>
  %kt2 = nn.transpose %k {perm = array<i64: 0, 1, 3, 2>} : (tensor<1x2x9x8xf32>) -> tensor<1x2x8x9xf32>
  %big = nn.constant dense<-1.0e+09> : tensor<f32>
  %c2 = nn.constant dense<8.0> : tensor<f32>
  %t = nn.matmul %q, %kt2 : (tensor<1x2x1x8xf32>, tensor<1x2x8x9xf32>) -> tensor<1x2x1x9xf32>
  %ts = nn.divide %t, %c2 : (tensor<1x2x1x9xf32>, tensor<f32>) -> tensor<1x2x1x9xf32>
  %tm = nn.where %hide, %big, %ts : (tensor<1x1x1x9xi1>, tensor<f32>, tensor<1x2x1x9xf32>) -> tensor<1x2x1x9xf32>
  %r = nn.softmax %tm {axis = 3 : i64} : (tensor<1x2x1x9xf32>) -> tensor<1x2x1x9xf32>
  %o2 = nn.matmul %r, %v : (tensor<1x2x1x9xf32>, tensor<1x2x9x8xf32>) -> tensor<1x2x1x8xf32>
  func.return %o, %o2 : tensor<1x2x1x8xf32>, tensor<1x2x1x8xf32>
}
