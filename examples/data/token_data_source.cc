#include "examples/data/token_data_source.h"

#include <algorithm>

#include "examples/data/byte_tokenizer.h"
#include "examples/data/synthetic_corpus.h"
#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr::data {

namespace {

// The training file of `d`, opened as its format says (auto: by the header).
TokenFile open_train_file(const config::DataConfig& d, std::optional<uint32_t> given_vocab) {
  TokenFileOptions options;
  options.format = parse_token_file_format(d.format());
  options.vocab_size = given_vocab;
  return TokenFile(d.train_file(), options);
}

// Checks that the model's vocabulary holds the file's, as the file knows it (etr: its
// header; llm.c: GPT-2's unless given; nanoGPT: only when given).
void check_vocabulary(const TokenFile& file, int64_t vocab_size) {
  const std::string title(token_file_format_title(file.format()));
  if (file.vocab_size() == 0) {
    throw ConfigError(in_quotes(file.path()) + " is a " + title + ", which records no vocabulary; " +
                      kSetVocabSize + ".");
  }
  if (file.vocab_size() > static_cast<uint32_t>(vocab_size)) {
    const bool gpt2 = file.format() == TokenFileFormat::kLlmc && !file.layout().vocab_given;
    throw ConfigError("the " + title + "'s vocabulary (" + std::to_string(file.vocab_size()) +
                      (gpt2 ? ", GPT-2's, llm.c's version 1" : "") +
                      ") is larger than model.vocab_size (" + std::to_string(vocab_size) + ")" +
                      (gpt2 ? "; set model.vocab_size=50257 or a gpt2 preset, or the smaller "
                              "vocabulary its tokens were made with"
                            : ""));
  }
}

}  // namespace

TokenDataSource::TokenDataSource(const TrainConfig& config, int64_t seq_len, int64_t vocab_size,
                                 const HostAllocator& alloc, Logger& log, bool leader,
                                 std::optional<uint32_t> given_vocab)
    : seq_len_(seq_len), seed_(config.data().seed()) {
  const auto& d = config.data();
  if (d.synthetic()) {
    const size_t bytes = parse_bytes(d.synthetic_size());
    // Outside the allocator (a std::string and its tokens), but under the same budget.
    const MemoryStats m = alloc.stats();
    const double left = static_cast<double>(m.budget - std::min(m.budget, m.in_use));
    if (synthetic_corpus_bytes(bytes) > left) {
      throw ConfigError("data.synthetic_size = " + d.synthetic_size() + " needs " +
                        format_bytes(synthetic_corpus_bytes(bytes)) +
                        " for the synthetic corpus and its tokens, more than the " +
                        format_bytes(left) +
                        " left of the host memory budget after the model; make it smaller or "
                        "raise runtime.memory_budget.");
    }
    synthetic_ = ByteTokenizer::encode(SyntheticCorpus(d.seed()).generate(bytes));
    tokens_ = synthetic_;
    if (leader) log.info("data: synthetic corpus, ", synthetic_.size(), " tokens (seed ", d.seed(), ")");
  } else {
    file_.emplace(open_train_file(d, given_vocab));
    check_vocabulary(*file_, vocab_size);
    tokens_ = file_->tokens();
    if (leader) {
      log.info("data: ", d.train_file(), " (", token_file_format_title(file_->format()), "), ",
               tokens_.size(), " tokens, vocabulary ", file_->vocab_size());
    }
  }
  split_ = split_windows(tokens_.size(), static_cast<uint64_t>(seq_len), d.val_fraction());
  if (split_.train.count() == 0) {
    throw ConfigError("the training data (" + std::to_string(tokens_.size()) +
                      " tokens) holds no window of seq_len + 1 = " + std::to_string(seq_len + 1) +
                      " tokens");
  }
  sampler_.emplace(split_.train, d.seed());
}

void TokenDataSource::gather(uint64_t first, uint64_t count, std::span<int32_t> inputs,
                             std::span<int32_t> targets) const {
  sampler_->gather(tokens_, first, count, inputs, targets);
}

void TokenDataSource::gather_eval(uint64_t first, uint64_t count, std::span<int32_t> inputs,
                                  std::span<int32_t> targets) const {
  const auto T = static_cast<size_t>(seq_len_);
  for (uint64_t i = 0; i < count; ++i) {
    copy_window(tokens_, split_.val.offset(first + i), inputs.subspan(i * T, T),
                targets.subspan(i * T, T));
  }
}

}  // namespace etr::data
