// SubwordTokenizer: a SentencePiece model (BPE or unigram) applied to text, the subword
// alternative to ByteTokenizer. etr-tokenize trains one (subword_trainer.h) or takes an
// existing `.model` file, and writes it beside the token file it made (the sidecar,
// tokenizer_sidecar_path); etr-train decodes its sample through it; etr-ckpt export hands
// it to Hugging Face as tokenizer.model.
//
//   SubwordTokenizer t = SubwordTokenizer::load("tok.model");
//   std::vector<uint16_t> ids = t.encode("héllo\n");   // ids < t.vocab_size()
//   t.decode(ids) == "héllo\n"                          // models trained by etr: lossless
//
// The ids are SentencePiece's own (what SentencePieceProcessor::Encode and transformers
// give; the library is reached through sentencepiece_backend.h); a model of more than 65536 pieces
// is refused, since token files hold uint16. Every failure to load is one sentence naming the file:
// IoError when it cannot be read, ConfigError when its bytes are not a SentencePiece model or its
// vocabulary is too large.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace etr::data {

class SentencePieceModel;  // sentencepiece_backend.h

// The largest vocabulary a token file of uint16 tokens can hold.
inline constexpr uint32_t kSubwordMaxVocab = 65536;

class SubwordTokenizer {
 public:
  // Reads and parses a `.model` file.
  static SubwordTokenizer load(const std::filesystem::path& path);
  // Parses a serialized model; `origin` names where the bytes came from in messages.
  static SubwordTokenizer from_bytes(std::string model_bytes, const std::string& origin);

  SubwordTokenizer(SubwordTokenizer&&) noexcept;
  SubwordTokenizer& operator=(SubwordTokenizer&&) noexcept;
  ~SubwordTokenizer();

  // The number of pieces: every id is below it.
  uint32_t vocab_size() const { return vocab_size_; }
  // The serialized model, byte for byte as loaded (what a sidecar or a checkpoint holds).
  const std::string& model_bytes() const { return bytes_; }
  // "a SentencePiece model of 2000 pieces (256 of them bytes)".
  std::string describe() const;

  // The model's special pieces by Hugging Face role, for those it has:
  // {{"unk_token", "<unk>"}, {"bos_token", "<s>"}, {"eos_token", "</s>"}, {"pad_token", ...}}.
  std::vector<std::pair<std::string, std::string>> special_pieces() const;

  // The ids of `text`. Text is encoded in pieces of about 1 MiB cut after a newline (the
  // whole text when it has none), so that memory stays linear. A BPE model without a
  // dummy prefix (as etr trains them) gives exactly the ids of one call; a unigram model
  // may segment the first word after a cut otherwise (a few ids a MiB); a model with a
  // dummy prefix adds one at each cut. Texts under 1 MiB are one call.
  std::vector<uint16_t> encode(std::string_view text) const;
  // The text of `ids`; InvalidArgument naming the first id >= vocab_size().
  std::string decode(std::span<const uint16_t> ids) const;
  // decode() made safe for a terminal (sanitize_utf8_for_display).
  std::string decode_for_display(std::span<const uint16_t> ids) const;

 private:
  SubwordTokenizer() = default;

  std::unique_ptr<SentencePieceModel> sp_;
  std::string bytes_;
  uint32_t vocab_size_ = 0;
};

// Where etr-tokenize writes the model a token file was made with: "<token file>.tokenizer.model".
std::filesystem::path tokenizer_sidecar_path(const std::filesystem::path& token_file);

// SentencePiece's reason for a failed status, without its source location and checked
// expression ("Vocabulary size is smaller than required_chars. 260 vs 299. ..."); the
// expression itself when that is all it says.
std::string sentencepiece_reason(const std::string& status_text);

// The bytes of a file; IoError naming it when it cannot be read (`what` names its role).
std::string read_file_bytes(const std::filesystem::path& path, const std::string& what);

}  // namespace etr::data
