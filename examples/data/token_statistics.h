// Empirical (plug-in) entropies of a token sequence: reference losses for a model trained
// on it. A model that learned only token frequencies reaches about the unigram entropy; one
// that learned which token follows which reaches about the bigram conditional entropy;
// anything lower needs longer context.
//
//   unigram  H(X)          = -sum_a p(a) ln p(a)                 p(a) = n(a) / N
//   bigram   H(X_t|X_t-1)  = -sum_ab p(ab) ln (p(ab) / p(a.))    over the N - 1 pairs
//
// Plug-in estimates are biased low by about (number of distinct contexts x symbols) /
// (2N) nats, negligible when N is much larger than vocab^2.
#pragma once

#include <cstdint>
#include <span>

namespace etr::data {

struct NgramEntropy {
  double unigram_nats = 0;  // H(X)
  double bigram_nats = 0;   // H(X_t | X_{t-1}); 0 for fewer than 2 tokens
};

// InvalidArgument when a token is >= vocab_size (at most 65536).
NgramEntropy empirical_ngram_entropy(std::span<const uint16_t> tokens, uint32_t vocab_size);

}  // namespace etr::data
