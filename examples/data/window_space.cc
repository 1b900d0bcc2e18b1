// Window spaces and the train / held-out split (see window_space.h).
#include "examples/data/window_space.h"

#include <cmath>
#include <string>

#include "runtime/error.h"

namespace etr::data {

uint64_t WindowSpace::count() const {
  const uint64_t window = seq_len + 1;
  if (stride == 0 || end < begin || end - begin < window) return 0;
  return (end - begin - window) / stride + 1;
}

uint64_t WindowSpace::offset(uint64_t window) const {
  if (window >= count()) {
    throw InvalidArgument("window " + std::to_string(window) + " does not exist; the split [" +
                          std::to_string(begin) + ", " + std::to_string(end) + ") has " +
                          std::to_string(count()) + " windows");
  }
  return begin + window * stride;
}

DataSplit split_windows(uint64_t token_count, uint64_t seq_len, double val_fraction,
                        uint64_t train_stride) {
  if (seq_len == 0) throw ConfigError("the sequence length must be at least 1, not 0");
  if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
    throw ConfigError("the held-out fraction " + std::to_string(val_fraction) +
                      " is not in [0, 1); give 0 for no held-out split or e.g. 0.05");
  }
  const uint64_t window = seq_len + 1;
  const auto val_tokens = static_cast<uint64_t>(
      std::floor(static_cast<long double>(token_count) * static_cast<long double>(val_fraction)));
  const uint64_t val_begin = token_count - val_tokens;

  DataSplit split;
  split.train = {0, val_begin, seq_len, train_stride == 0 ? seq_len : train_stride};
  split.val = {val_begin, token_count, seq_len, seq_len};
  if (split.train.count() == 0) {
    throw ConfigError("the training split has " + std::to_string(val_begin) + " of the " +
                      std::to_string(token_count) + " tokens, fewer than one window of " +
                      std::to_string(window) +
                      " (sequence length + 1); use more data, a shorter sequence length or a "
                      "smaller held-out fraction");
  }
  if (val_fraction > 0.0 && split.val.count() == 0) {
    throw ConfigError("the held-out split (fraction " + std::to_string(val_fraction) + ") has " +
                      std::to_string(val_tokens) + " tokens, fewer than one window of " +
                      std::to_string(window) +
                      " (sequence length + 1); use more data, a larger held-out fraction, or 0 "
                      "for none");
  }
  return split;
}

void copy_window(std::span<const uint16_t> tokens, uint64_t offset, std::span<int32_t> inputs,
                 std::span<int32_t> targets) {
  const uint64_t seq_len = inputs.size();
  if (targets.size() != seq_len) {
    throw InvalidArgument("a window needs as many targets as inputs, not " +
                          std::to_string(targets.size()) + " and " + std::to_string(seq_len));
  }
  if (offset > tokens.size() || tokens.size() - offset < seq_len + 1) {
    throw InvalidArgument("the window of " + std::to_string(seq_len + 1) + " tokens at offset " +
                          std::to_string(offset) + " runs past the " +
                          std::to_string(tokens.size()) + " tokens of the data");
  }
  const uint16_t* src = tokens.data() + offset;
  for (uint64_t t = 0; t < seq_len; ++t) {
    inputs[t] = src[t];
    targets[t] = src[t + 1];
  }
}

}  // namespace etr::data
