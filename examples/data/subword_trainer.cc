#include "examples/data/subword_trainer.h"

#include <string>
#include <unordered_map>

#include "examples/data/sentencepiece_backend.h"
#include "examples/data/subword_tokenizer.h"
#include "runtime/error.h"

namespace etr::data {
namespace {

// <unk>, <s>, </s> and the 256 byte pieces: every model etr trains has them.
constexpr uint32_t kFixedPieces = 3 + 256;

// True when `text` has a non-empty line (a trailing '\r' aside), as the trainer reads it.
bool has_a_line(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const size_t len = end - pos;
    if (len > 1 || (len == 1 && text[pos] != '\r')) return true;
    pos = end + 1;
  }
  return false;
}

}  // namespace

std::string train_subword_model(std::string_view text, const SubwordTrainOptions& o) {
  if (o.type != "bpe" && o.type != "unigram") {
    throw ConfigError("the tokenizer type '" + o.type +
                      "' is not one etr trains; use bpe or unigram");
  }
  if (!has_a_line(text)) {
    throw ConfigError("cannot train a tokenizer on a text without a non-empty line");
  }
  if (o.vocab_size <= kFixedPieces || o.vocab_size > kSubwordMaxVocab) {
    throw ConfigError("a vocabulary of " + std::to_string(o.vocab_size) +
                      " pieces cannot be trained: it must be more than the " +
                      std::to_string(kFixedPieces) +
                      " fixed pieces (<unk>, <s>, </s> and 256 "
                      "bytes) and at most " +
                      std::to_string(kSubwordMaxVocab) + " (token files hold uint16 tokens)");
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
  std::string model;
  const std::string status = sentencepiece_api().train(args, text, o.seed, &model);
  if (!status.empty()) {
    throw ConfigError("SentencePiece could not train a " + o.type + " model of " +
                      std::to_string(o.vocab_size) + " pieces on this text (" +
                      sentencepiece_reason(status) + ")");
  }
  return model;
}

}  // namespace etr::data
