#include "examples/train/training_tokenizer.h"

#include <filesystem>
#include <system_error>

#include "examples/data/byte_tokenizer.h"
#include "examples/data/token_file.h"
#include "runtime/error.h"

namespace etr::gpt {
namespace fs = std::filesystem;
namespace {

// The configured model must be the sidecar's, byte for byte, when the token file has one.
void check_against_sidecar(const std::string& model_path, const data::SubwordTokenizer& model,
                           const fs::path& sidecar, const std::string& train_file) {
  const std::string made_with = data::read_file_bytes(sidecar, "the tokenizer sidecar");
  if (made_with == model.model_bytes()) return;
  throw ConfigError("data.tokenizer_model " + in_quotes(model_path) +
                    " is not the tokenizer that made data.train_file " + in_quotes(train_file) +
                    " (its sidecar " + in_quotes(sidecar.string()) +
                    " holds another model); leave data.tokenizer_model empty to use the "
                    "sidecar, or encode the text again with etr-tokenize --tokenizer " +
                    model_path);
}

// An etr token file's vocabulary must be the model's piece count. An llm.c or nanoGPT
// file records none of its own: the data source checks its tokens against the piece count
// (model.vocab_size) when it opens it.
void check_token_file(const std::string& model_path, const data::SubwordTokenizer& model,
                      const std::string& train_file, const std::string& format) {
  data::TokenFileOptions options;
  options.verify_checksum = false;  // the data source verifies it when it loads the file
  // (before resolve(): an unset data.format is still "", which is auto)
  options.format = data::parse_token_file_format(format.empty() ? "auto" : format);
  if (options.format != data::TokenFileFormat::kAuto &&
      options.format != data::TokenFileFormat::kEtr) {
    return;
  }
  options.vocab_size = model.vocab_size();  // an llm.c file's, if auto finds one
  const data::TokenFile file(train_file, options);
  if (file.format() != data::TokenFileFormat::kEtr || file.vocab_size() == model.vocab_size()) {
    return;
  }
  throw ConfigError("data.train_file " + in_quotes(train_file) + " has a vocabulary of " +
                    std::to_string(file.vocab_size()) + " but its tokenizer " +
                    in_quotes(model_path) + " has " + std::to_string(model.vocab_size()) +
                    " pieces, so its tokens were not made with it; encode the text with "
                    "etr-tokenize --tokenizer " +
                    model_path);
}

}  // namespace

void resolve_training_tokenizer(TrainConfig& config) {
  config::DataConfig& d = *config.mutable_data();
  std::string path = d.tokenizer_model();
  std::error_code ec;
  const fs::path sidecar =
      d.train_file().empty() ? fs::path() : data::tokenizer_sidecar_path(d.train_file());
  const bool has_sidecar = !sidecar.empty() && fs::exists(sidecar, ec);
  if (d.synthetic() && !path.empty()) {
    throw ConfigError("data.tokenizer_model = " + in_quotes(path) +
                      " names a tokenizer, but data.synthetic's tokens are bytes; drop one");
  }
  if (path.empty() && has_sidecar) path = sidecar.string();
  d.set_tokenizer_model(path);
  if (path.empty()) return;  // bytes

  const data::SubwordTokenizer model = data::SubwordTokenizer::load(path);
  if (has_sidecar && path != sidecar.string()) {
    check_against_sidecar(path, model, sidecar, d.train_file());
  }
  if (!d.train_file().empty()) check_token_file(path, model, d.train_file(), d.format());
  config::ModelConfig& m = *config.mutable_model();
  const int64_t pieces = model.vocab_size();
  if (m.has_vocab_size() && m.vocab_size() != 0 && m.vocab_size() != pieces) {
    throw ConfigError("model.vocab_size = " + std::to_string(m.vocab_size()) +
                      " but the tokenizer " + in_quotes(path) + " has " + std::to_string(pieces) +
                      " pieces; leave model.vocab_size unset (or 0) to take the tokenizer's");
  }
  m.set_vocab_size(static_cast<int32_t>(pieces));
}

TrainingTokenizer TrainingTokenizer::from(const TrainConfig& config) {
  TrainingTokenizer t;
  const std::string& path = config.data().tokenizer_model();
  if (!path.empty()) t.subword_.emplace(data::SubwordTokenizer::load(path));
  return t;
}

const TrainingTokenizer& TokenizerCache::get(const TrainConfig& config) {
  const std::string& path = config.data().tokenizer_model();
  if (!tokenizer_ || path != path_) {
    tokenizer_ = TrainingTokenizer::from(config);
    path_ = path;
  }
  return *tokenizer_;
}

std::string TrainingTokenizer::model_bytes() const {
  return subword_ ? subword_->model_bytes() : std::string();
}

std::vector<uint16_t> TrainingTokenizer::encode(std::string_view text) const {
  return subword_ ? subword_->encode(text) : data::ByteTokenizer::encode(text);
}

std::string TrainingTokenizer::decode_for_display(std::span<const uint16_t> tokens) const {
  return subword_ ? subword_->decode_for_display(tokens)
                  : data::ByteTokenizer::decode_for_display(tokens);
}

}  // namespace etr::gpt
