// Sampler: per-epoch keyed permutations of the training windows (see sampler.h).
#include "examples/data/sampler.h"

#include <string>

#include "examples/data/index_permutation.h"
#include "runtime/error.h"

namespace etr::data {

Sampler::Sampler(WindowSpace windows, uint64_t seed)
    : windows_(windows), seed_(seed), windows_per_epoch_(windows.count()) {
  if (windows_per_epoch_ == 0) {
    throw ConfigError("the training split [" + std::to_string(windows.begin) + ", " +
                      std::to_string(windows.end) + ") holds no window of " +
                      std::to_string(windows.seq_len + 1) +
                      " tokens; use more data or a shorter sequence length");
  }
}

uint64_t Sampler::window(uint64_t sample_index) const {
  const uint64_t e = epoch(sample_index);
  const IndexPermutation permutation(windows_per_epoch_, mix64(seed_) + e);
  return permutation(sample_index % windows_per_epoch_);
}

void Sampler::samples(uint64_t first, std::span<uint64_t> offsets) const {
  for (size_t i = 0; i < offsets.size(); ++i) offsets[i] = sample(first + i);
}

void Sampler::gather(std::span<const uint16_t> tokens, uint64_t first, uint64_t count,
                     std::span<int32_t> inputs, std::span<int32_t> targets) const {
  const uint64_t seq_len = windows_.seq_len;
  if (inputs.size() != count * seq_len || targets.size() != count * seq_len) {
    throw InvalidArgument("gathering " + std::to_string(count) + " windows of " +
                          std::to_string(seq_len) + " tokens needs inputs and targets of " +
                          std::to_string(count * seq_len) + " tokens each, not " +
                          std::to_string(inputs.size()) + " and " + std::to_string(targets.size()));
  }
  for (uint64_t i = 0; i < count; ++i) {
    copy_window(tokens, sample(first + i), inputs.subspan(i * seq_len, seq_len),
                targets.subspan(i * seq_len, seq_len));
  }
}

}  // namespace etr::data
