// Windows of a token array and the train / held-out split (the units the Sampler and the
// EvalIterator hand out).
//
// A window is seq_len + 1 consecutive tokens starting at a token offset: the model reads
// tokens [offset, offset + seq_len) and predicts [offset + 1, offset + seq_len + 1). A
// WindowSpace numbers the windows of one split of the token array:
//
//   window w (0 <= w < count()) starts at begin + w * stride, and
//   count() = the number of w with begin + w * stride + seq_len + 1 <= end,
//
// so every window lies inside [begin, end). With stride == seq_len (the default) the
// windows tile the split and neighbouring windows share one token, so each token after
// the first of the split is a prediction target of exactly one window.
//
// split_windows() divides [0, token_count) into a training split and a held-out
// (validation) split that is the LAST floor(token_count * val_fraction) tokens:
//
//   train = [0, val_begin)     val = [val_begin, token_count)
//
// No training window reads a held-out token and no held-out window reads a training one.
// The held-out windows always use stride seq_len (each target token scored once).
#pragma once

#include <cstdint>
#include <span>

namespace etr::data {

struct WindowSpace {
  uint64_t begin = 0;    // first token of the split
  uint64_t end = 0;      // one past its last token
  uint64_t seq_len = 0;  // inputs per window; a window is seq_len + 1 tokens
  uint64_t stride = 0;   // distance between neighbouring window starts (>= 1)

  uint64_t count() const;
  // begin + window * stride; InvalidArgument when window >= count().
  uint64_t offset(uint64_t window) const;
  bool operator==(const WindowSpace&) const = default;
};

struct DataSplit {
  WindowSpace train;
  WindowSpace val;  // count() == 0 when val_fraction == 0
};

// train_stride 0 means seq_len. Throws ConfigError, with the numbers and what to change,
// when seq_len is 0, val_fraction is not in [0, 1), the training split holds no window,
// or val_fraction > 0 leaves fewer held-out tokens than one window.
DataSplit split_windows(uint64_t token_count, uint64_t seq_len, double val_fraction,
                        uint64_t train_stride = 0);

// inputs[t] = tokens[offset + t] and targets[t] = tokens[offset + t + 1] for
// t < inputs.size() (= seq_len). InvalidArgument when the sizes differ or the window runs
// past the end of tokens.
void copy_window(std::span<const uint16_t> tokens, uint64_t offset, std::span<int32_t> inputs,
                 std::span<int32_t> targets);

}  // namespace etr::data
