// RUN: partita-opt %s --split-input-file --verify-diagnostics | partita-opt | filecheck %s
// RUN: partita-opt %s --split-input-file --verify-diagnostics --print-op-generic | partita-opt | filecheck %s

// nn.tfidf_vectorizer round-trips: rows of i32 or i64 tokens, one f32 feature row each of
// width max(ngram_indexes) + 1; mode TF and max_skip_count 0 are defaults, weights empty.

// CHECK-LABEL: func.func @features
// CHECK-NEXT: %0 = nn.tfidf_vectorizer %tokens {min_gram_length = 2 : i64, max_gram_length = 2 : i64, pool = array<i64: 2, 3, 5, 4, 5, 6, 7, 8, 6, 7>, ngram_counts = array<i64: 0, 4>, ngram_indexes = array<i64: 0, 1, 2, 3, 4, 5, 6>} : (tensor<12xi32>) -> tensor<7xf32>
// CHECK-NEXT: %1 = nn.tfidf_vectorizer %rows {mode = "TFIDF", min_gram_length = 1 : i64, max_gram_length = 3 : i64, max_skip_count = 2 : i64, pool = array<i64: 1, 3, 1, 2, 2, 1, 1, 2, 3>, ngram_counts = array<i64: 0, 2, 6>, ngram_indexes = array<i64: 4, 0, 9, 2, 1>, weights = array<f32: 5.000000e-01, 2.000000e+00, 1.000000e+00, 2.500000e-01, 4.000000e+00>} : (tensor<?x8xi64>) -> tensor<?x10xf32>
// CHECK-NEXT: func.return %0, %1 : tensor<7xf32>, tensor<?x10xf32>
func.func @features(%tokens: tensor<12xi32>, %rows: tensor<?x8xi64>) -> (tensor<7xf32>, tensor<?x10xf32>) {
  %0 = nn.tfidf_vectorizer %tokens {mode = "TF", min_gram_length = 2 : i64, max_gram_length = 2 : i64, max_skip_count = 0 : i64, pool = array<i64: 2, 3, 5, 4, 5, 6, 7, 8, 6, 7>, ngram_counts = array<i64: 0, 4>, ngram_indexes = array<i64: 0, 1, 2, 3, 4, 5, 6>} : (tensor<12xi32>) -> tensor<7xf32>
  %1 = nn.tfidf_vectorizer %rows {mode = "TFIDF", min_gram_length = 1 : i64, max_gram_length = 3 : i64, max_skip_count = 2 : i64, pool = array<i64: 1, 3, 1, 2, 2, 1, 1, 2, 3>, ngram_counts = array<i64: 0, 2, 6>, ngram_indexes = array<i64: 4, 0, 9, 2, 1>, weights = array<f32: 0.5, 2.0, 1.0, 0.25, 4.0>} : (tensor<?x8xi64>) -> tensor<?x10xf32>
  func.return %0, %1 : tensor<7xf32>, tensor<?x10xf32>
}

// -----

// The verifier: attributes that disagree with each other or with the types.

func.func @float_tokens(%x: tensor<6xf32>) -> tensor<2xf32> {
  // expected-error@+1 {{input element type must be one of i32, i64, got f32}}
  %0 = nn.tfidf_vectorizer %x {min_gram_length = 1 : i64, max_gram_length = 1 : i64, pool = array<i64: 1, 2>, ngram_counts = array<i64: 0>, ngram_indexes = array<i64: 0, 1>} : (tensor<6xf32>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @integer_features(%x: tensor<6xi64>) -> tensor<2xi64> {
  // expected-error@+1 {{result element type must be f32, got i64}}
  %0 = nn.tfidf_vectorizer %x {min_gram_length = 1 : i64, max_gram_length = 1 : i64, pool = array<i64: 1, 2>, ngram_counts = array<i64: 0>, ngram_indexes = array<i64: 0, 1>} : (tensor<6xi64>) -> tensor<2xi64>
  func.return %0 : tensor<2xi64>
}

// -----

func.func @unknown_mode(%x: tensor<6xi64>) -> tensor<2xf32> {
  // expected-error@+1 {{mode must be one of TF, IDF, TFIDF, got 'BM25'}}
  %0 = nn.tfidf_vectorizer %x {mode = "BM25", min_gram_length = 1 : i64, max_gram_length = 1 : i64, pool = array<i64: 1, 2>, ngram_counts = array<i64: 0>, ngram_indexes = array<i64: 0, 1>} : (tensor<6xi64>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @gram_lengths_reversed(%x: tensor<6xi64>) -> tensor<2xf32> {
  // expected-error@+1 {{gram lengths must satisfy 1 <= min_gram_length <= max_gram_length, got 2 and 1}}
  %0 = nn.tfidf_vectorizer %x {min_gram_length = 2 : i64, max_gram_length = 1 : i64, pool = array<i64: 1, 2>, ngram_counts = array<i64: 0, 2>, ngram_indexes = array<i64: 0, 1>} : (tensor<6xi64>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @grams_longer_than_the_pool(%x: tensor<6xi64>) -> tensor<2xf32> {
  // expected-error@+1 {{max_gram_length 2 exceeds the 1 n-gram lengths ngram_counts gives the pool}}
  %0 = nn.tfidf_vectorizer %x {min_gram_length = 1 : i64, max_gram_length = 2 : i64, pool = array<i64: 1, 2>, ngram_counts = array<i64: 0>, ngram_indexes = array<i64: 0, 1>} : (tensor<6xi64>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @negative_skip(%x: tensor<6xi64>) -> tensor<2xf32> {
  // expected-error@+1 {{max_skip_count must be >= 0, got -1}}
  %0 = nn.tfidf_vectorizer %x {min_gram_length = 1 : i64, max_gram_length = 1 : i64, max_skip_count = -1 : i64, pool = array<i64: 1, 2>, ngram_counts = array<i64: 0>, ngram_indexes = array<i64: 0, 1>} : (tensor<6xi64>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @counts_past_the_pool(%x: tensor<6xi64>) -> tensor<2xf32> {
  // expected-error@+1 {{ngram_counts [0, 3] must be non-decreasing starts in the pool of 2 values}}
  %0 = nn.tfidf_vectorizer %x {min_gram_length = 1 : i64, max_gram_length = 1 : i64, pool = array<i64: 1, 2>, ngram_counts = array<i64: 0, 3>, ngram_indexes = array<i64: 0, 1>} : (tensor<6xi64>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @ragged_bigrams(%x: tensor<6xi64>) -> tensor<2xf32> {
  // expected-error@+1 {{the pool's 2-gram section [1, 4) holds 3 values, not a multiple of 2}}
  %0 = nn.tfidf_vectorizer %x {min_gram_length = 1 : i64, max_gram_length = 2 : i64, pool = array<i64: 1, 2, 3, 4>, ngram_counts = array<i64: 0, 1>, ngram_indexes = array<i64: 0, 1>} : (tensor<6xi64>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @empty_pool(%x: tensor<6xi64>) -> tensor<1xf32> {
  // expected-error@+1 {{the pool holds no n-gram}}
  %0 = nn.tfidf_vectorizer %x {min_gram_length = 1 : i64, max_gram_length = 1 : i64, pool = array<i64>, ngram_counts = array<i64: 0>, ngram_indexes = array<i64>} : (tensor<6xi64>) -> tensor<1xf32>
  func.return %0 : tensor<1xf32>
}

// -----

func.func @one_index_short(%x: tensor<6xi64>) -> tensor<1xf32> {
  // expected-error@+1 {{ngram_indexes must give one coordinate per pool n-gram (2), got 1}}
  %0 = nn.tfidf_vectorizer %x {min_gram_length = 1 : i64, max_gram_length = 1 : i64, pool = array<i64: 1, 2>, ngram_counts = array<i64: 0>, ngram_indexes = array<i64: 0>} : (tensor<6xi64>) -> tensor<1xf32>
  func.return %0 : tensor<1xf32>
}

// -----

func.func @negative_index(%x: tensor<6xi64>) -> tensor<2xf32> {
  // expected-error@+1 {{ngram_indexes must be >= 0, got -1}}
  %0 = nn.tfidf_vectorizer %x {min_gram_length = 1 : i64, max_gram_length = 1 : i64, pool = array<i64: 1, 2>, ngram_counts = array<i64: 0>, ngram_indexes = array<i64: 1, -1>} : (tensor<6xi64>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @weights_short(%x: tensor<6xi64>) -> tensor<2xf32> {
  // expected-error@+1 {{weights must give one weight per pool n-gram (2), got 1}}
  %0 = nn.tfidf_vectorizer %x {mode = "IDF", min_gram_length = 1 : i64, max_gram_length = 1 : i64, pool = array<i64: 1, 2>, ngram_counts = array<i64: 0>, ngram_indexes = array<i64: 0, 1>, weights = array<f32: 2.0>} : (tensor<6xi64>) -> tensor<2xf32>
  func.return %0 : tensor<2xf32>
}

// -----

func.func @repeated_bigram(%x: tensor<6xi64>) -> tensor<3xf32> {
  // expected-error@+1 {{n-gram (1, 2) appears more than once in the pool}}
  %0 = nn.tfidf_vectorizer %x {min_gram_length = 2 : i64, max_gram_length = 2 : i64, pool = array<i64: 1, 2, 2, 1, 1, 2>, ngram_counts = array<i64: 0, 0>, ngram_indexes = array<i64: 0, 1, 2>} : (tensor<6xi64>) -> tensor<3xf32>
  func.return %0 : tensor<3xf32>
}

// -----

func.func @wrong_width(%x: tensor<6xi64>) -> tensor<3xf32> {
  // expected-error@+1 {{result shape [3] is incompatible with inferred shape [2]}}
  %0 = nn.tfidf_vectorizer %x {min_gram_length = 1 : i64, max_gram_length = 1 : i64, pool = array<i64: 1, 2>, ngram_counts = array<i64: 0>, ngram_indexes = array<i64: 1, 0>} : (tensor<6xi64>) -> tensor<3xf32>
  func.return %0 : tensor<3xf32>
}

// -----

func.func @rank_3(%x: tensor<2x2x3xi64>) -> tensor<2x2x2xf32> {
  // expected-error@+1 {{input must have rank 1 or 2, got rank 3}}
  %0 = nn.tfidf_vectorizer %x {min_gram_length = 1 : i64, max_gram_length = 1 : i64, pool = array<i64: 1, 2>, ngram_counts = array<i64: 0>, ngram_indexes = array<i64: 0, 1>} : (tensor<2x2x3xi64>) -> tensor<2x2x2xf32>
  func.return %0 : tensor<2x2x2xf32>
}
