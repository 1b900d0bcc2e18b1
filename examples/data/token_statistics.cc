// Plug-in unigram and bigram entropies (see token_statistics.h).
#include "examples/data/token_statistics.h"

#include <cmath>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/error.h"

namespace etr::data {

NgramEntropy empirical_ngram_entropy(std::span<const uint16_t> tokens, uint32_t vocab_size) {
  if (vocab_size == 0 || vocab_size > 65536) {
    throw InvalidArgument("vocabulary size " + std::to_string(vocab_size) + " is not in 1..65536");
  }
  std::vector<uint64_t> unigram(vocab_size, 0);
  std::vector<uint64_t> context(vocab_size, 0);   // how often a token is followed by another
  std::unordered_map<uint32_t, uint64_t> bigram;  // key a * vocab + b
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size) {
      throw InvalidArgument("token " + std::to_string(tokens[i]) + " at position " +
                            std::to_string(i) + " is not below the vocabulary size " +
                            std::to_string(vocab_size));
    }
    ++unigram[tokens[i]];
    if (i > 0) {
      ++context[tokens[i - 1]];
      ++bigram[static_cast<uint32_t>(tokens[i - 1]) * vocab_size + tokens[i]];
    }
  }
  NgramEntropy h;
  const auto n = static_cast<double>(tokens.size());
  for (uint64_t c : unigram) {
    if (c > 0)
      h.unigram_nats -= (static_cast<double>(c) / n) * std::log(static_cast<double>(c) / n);
  }
  if (tokens.size() >= 2) {
    const double pairs = n - 1;
    for (const auto& [key, c] : bigram) {
      const double joint = static_cast<double>(c) / pairs;
      const double conditional =
          static_cast<double>(c) / static_cast<double>(context[key / vocab_size]);
      h.bigram_nats -= joint * std::log(conditional);
    }
  }
  return h;
}

}  // namespace etr::data
