#include "examples/data/subword_trainer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <string>
#include <unordered_map>

#include "examples/data/subword_tokenizer.h"
#include "runtime/error.h"

namespace etr::data {
namespace {

// <unk>, <s>, </s> and the 256 byte pieces: every model etr trains has them.
constexpr uint32_t kFixedPieces = 3 + 256;

// The corpus's non-empty lines, without their newline, one sentence each.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::string_view text) : text_(text) { advance(); }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    while (pos_ < text_.size()) {
      size_t end = text_.find('\n', pos_);
      if (end == std::string_view::npos) end = text_.size();
      std::string_view line = text_.substr(pos_, end - pos_);
      pos_ = end + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      line_.assign(line);
      return;
    }
    done_ = true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string line_;
  bool done_ = false;
};

}  // namespace

std::string train_subword_model(std::string_view text, const SubwordTrainOptions& o) {
  if (o.type != "bpe" && o.type != "unigram") {
    throw ConfigError("the tokenizer type '" + o.type + "' is not one etr trains; use bpe or unigram");
  }
  if (LineIterator(text).done()) {
    throw ConfigError("cannot train a tokenizer on a text without a non-empty line");
  }
  if (o.vocab_size <= kFixedPieces || o.vocab_size > kSubwordMaxVocab) {
    throw ConfigError("a vocabulary of " + std::to_string(o.vocab_size) +
                      " pieces cannot be trained: it must be more than the " +
                      std::to_string(kFixedPieces) + " fixed pieces (<unk>, <s>, </s> and 256 "
                      "bytes) and at most " + std::to_string(kSubwordMaxVocab) +
                      " (token files hold uint16 tokens)");
  }
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", o.type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"hard_vocab_limit", "false"},
      {"max_sentence_length", "65536"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
  };
  sentencepiece::SetRandomGeneratorSeed(o.seed);
  LineIterator lines(text);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  if (!status.ok()) {
    throw ConfigError("SentencePiece could not train a " + o.type + " model of " +
                      std::to_string(o.vocab_size) + " pieces on this text (" +
                      sentencepiece_reason(status.ToString()) + ")");
  }
  return model;
}

}  // namespace etr::data
