// TokenDataSource: the example GPT's data for the training loop (parallel/data_source.h):
// a token file (examples/data/token_file.h) or a synthetic corpus of byte tokens, split
// into training and held-out windows of seq_len + 1 tokens (window_space.h), the
// training windows visited in the Sampler's order (sampler.h).
//
//   data.synthetic, synthetic_size, seed    a synthetic corpus (seeded)
//   data.train_file, format                 a token file: etr's, llm.c's or nanoGPT's
//   data.val_fraction                       the last fraction of tokens, held out
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "examples/data/byte_tokenizer.h"
#include "examples/data/sampler.h"
#include "examples/data/token_file.h"
#include "examples/data/window_space.h"
#include "parallel/data_source.h"
#include "runtime/config/train_config.h"
#include "runtime/host_allocator.h"
#include "runtime/log.h"

namespace etr::data {

class TokenDataSource final : public DataSource {
 public:
  // Loads the data of config.data for windows of `seq_len` tokens. ConfigError when the
  // synthetic corpus does not fit what is left of `alloc`'s budget, the file's vocabulary
  // is larger than `vocab_size` (or unknown: a nanoGPT file without `given_vocab`), or
  // the training split holds no window; IoError / ConfigError for a bad file. `leader`
  // logs what was loaded. `given_vocab`: model.vocab_size when the user set it (not a
  // preset), the vocabulary of a file that records none (token_file_format.h).
  TokenDataSource(const TrainConfig& config, int64_t seq_len, int64_t vocab_size,
                  const HostAllocator& alloc, Logger& log, bool leader,
                  std::optional<uint32_t> given_vocab = std::nullopt);

  int64_t seq_len() const override { return seq_len_; }
  uint64_t train_samples() const override { return split_.train.count(); }
  uint64_t seed() const override { return seed_; }
  void gather(uint64_t first, uint64_t count, std::span<int32_t> inputs,
              std::span<int32_t> targets) const override;
  uint64_t eval_samples() const override { return split_.val.count(); }
  void gather_eval(uint64_t first, uint64_t count, std::span<int32_t> inputs,
                   std::span<int32_t> targets) const override;

  std::span<const uint16_t> tokens() const { return tokens_; }
  // The vocabulary of the data's tokens: 256 for the synthetic corpus (bytes), else the
  // token file's (its header's, or the given one).
  uint32_t vocab_size() const { return file_ ? file_->vocab_size() : ByteTokenizer::kVocabSize; }

 private:
  int64_t seq_len_;
  uint64_t seed_;
  std::vector<uint16_t> synthetic_;
  std::optional<TokenFile> file_;
  std::span<const uint16_t> tokens_;
  DataSplit split_;
  std::optional<Sampler> sampler_;
};

}  // namespace etr::data
