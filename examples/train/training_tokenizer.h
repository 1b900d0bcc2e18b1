// The tokenizer of an etr-train run: bytes (ByteTokenizer), or the SentencePiece model
// its token file was made with (data.tokenizer_model; by default the sidecar
// TRAIN_FILE.tokenizer.model that etr-tokenize --tokenizer writes).
//
//   resolve_training_tokenizer(config);   // before resolve(): data.tokenizer_model and
//                                         // model.vocab_size from the model, checked
//   TrainingTokenizer t = TrainingTokenizer::from(resolved_config);
//   t.encode(log.sample_prompt) ... t.decode_for_display(sample)
//
// resolve_training_tokenizer throws ConfigError, one sentence, when the model cannot be
// used for this data: data.synthetic with a tokenizer (its tokens are bytes); a configured
// model that differs from the sidecar beside data.train_file (the tokens were made with
// the other one); a token file whose vocab_size is not the model's piece count;
// model.vocab_size set (not 0) to another number than the piece count. A missing or
// corrupt model is the loader's IoError / ConfigError (subword_tokenizer.h).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "examples/data/subword_tokenizer.h"
#include "runtime/config/train_config.h"

namespace etr::gpt {

// Sets data.tokenizer_model to the model in use ("" for bytes) and model.vocab_size to
// its piece count, after the checks above. Called before resolve() (ProgramInfo::
// complete_config), so an unset model.vocab_size is still unset.
void resolve_training_tokenizer(TrainConfig& config);

class TrainingTokenizer {
 public:
  // The tokenizer of a resolved config: data.tokenizer_model's model, or bytes.
  static TrainingTokenizer from(const TrainConfig& config);

  bool is_bytes() const { return !subword_.has_value(); }
  // The SentencePiece model's bytes; empty for bytes.
  std::string model_bytes() const;
  std::vector<uint16_t> encode(std::string_view text) const;
  std::string decode_for_display(std::span<const uint16_t> tokens) const;
  const data::SubwordTokenizer* subword() const { return subword_ ? &*subword_ : nullptr; }

 private:
  std::optional<data::SubwordTokenizer> subword_;
};

// A run's tokenizer, read from disk at the first use and shared by everything that needs
// it (the data's log line, the sample, the export, the checkpoints' attachment), so that
// they all use the same model. Read again only if data.tokenizer_model changes. Not
// thread-safe: the training thread uses it.
class TokenizerCache {
 public:
  const TrainingTokenizer& get(const TrainConfig& config);

 private:
  std::string path_;
  std::optional<TrainingTokenizer> tokenizer_;
};

}  // namespace etr::gpt
