#include "examples/data/subword_tokenizer.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>

#include "examples/data/byte_tokenizer.h"
#include "examples/data/sentencepiece_backend.h"
#include "runtime/error.h"

namespace etr::data {
namespace fs = std::filesystem;
namespace {

// Text is encoded in pieces of about this many bytes (cut after a newline).
constexpr size_t kEncodeChunkBytes = size_t{1} << 20;

}  // namespace

std::string sentencepiece_reason(const std::string& text) {
  // "Internal: ./src/trainer_interface.cc(580) [expression] message"
  const size_t open = text.find(" [");
  const size_t close = text.find("] ", open == std::string::npos ? 0 : open);
  if (open == std::string::npos || close == std::string::npos) {
    return text.empty() ? "no reason given" : text;
  }
  std::string message = text.substr(close + 2);
  while (!message.empty() && (message.back() == ' ' || message.back() == '\n')) message.pop_back();
  return message.empty() ? "failed check " + text.substr(open + 2, close - open - 2) : message;
}

std::string read_file_bytes(const fs::path& path, const std::string& what) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    throw IoError("cannot read " + what + " " + in_quotes(path.string()) +
                  ": it is a directory; give a file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw IoError("cannot open " + what + " " + in_quotes(path.string()) + ": " +
                  std::strerror(errno) + "; check that the file exists and is readable");
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad())
    throw IoError("cannot read " + what + " " + in_quotes(path.string()) + ": " +
                  std::strerror(errno));
  return bytes;
}

SubwordTokenizer SubwordTokenizer::load(const fs::path& path) {
  return from_bytes(read_file_bytes(path, "the tokenizer model"), path.string());
}

SubwordTokenizer SubwordTokenizer::from_bytes(std::string model_bytes, const std::string& origin) {
  SubwordTokenizer t;
  t.sp_ = sentencepiece_api().new_model();
  if (model_bytes.empty()) {
    throw ConfigError("the tokenizer model " + in_quotes(origin) +
                      " is empty, not a SentencePiece model; train one with etr-tokenize "
                      "--train-tokenizer");
  }
  const std::string status = t.sp_->load(model_bytes);
  if (!status.empty()) {
    const std::string why = status.find("ParseFromArray") != std::string::npos
                                ? "its bytes do not parse as one"
                                : sentencepiece_reason(status);
    throw ConfigError("the tokenizer model " + in_quotes(origin) +
                      " is not a SentencePiece model this build can load (" + why +
                      "); give a .model file written by etr-tokenize or SentencePiece");
  }
  const int pieces = t.sp_->piece_size();
  if (pieces <= 0 || static_cast<uint32_t>(pieces) > kSubwordMaxVocab) {
    throw ConfigError("the tokenizer model " + in_quotes(origin) + " has " +
                      std::to_string(pieces) +
                      " pieces, but token files hold uint16 tokens (at most " +
                      std::to_string(kSubwordMaxVocab) + " pieces)");
  }
  t.vocab_size_ = static_cast<uint32_t>(pieces);
  t.bytes_ = std::move(model_bytes);
  return t;
}

SubwordTokenizer::SubwordTokenizer(SubwordTokenizer&&) noexcept = default;
SubwordTokenizer& SubwordTokenizer::operator=(SubwordTokenizer&&) noexcept = default;
SubwordTokenizer::~SubwordTokenizer() = default;

std::string SubwordTokenizer::describe() const {
  int bytes = 0;
  for (uint32_t i = 0; i < vocab_size_; ++i) bytes += sp_->is_byte(static_cast<int>(i)) ? 1 : 0;
  return "a SentencePiece model of " + std::to_string(vocab_size_) + " pieces (" +
         std::to_string(bytes) + " of them bytes)";
}

std::vector<std::pair<std::string, std::string>> SubwordTokenizer::special_pieces() const {
  std::vector<std::pair<std::string, std::string>> out;
  const std::pair<const char*, int> roles[] = {{"unk_token", sp_->unk_id()},
                                               {"bos_token", sp_->bos_id()},
                                               {"eos_token", sp_->eos_id()},
                                               {"pad_token", sp_->pad_id()}};
  for (const auto& [role, id] : roles) {
    if (id >= 0 && static_cast<uint32_t>(id) < vocab_size_)
      out.emplace_back(role, sp_->id_to_piece(id));
  }
  return out;
}

std::vector<uint16_t> SubwordTokenizer::encode(std::string_view text) const {
  std::vector<uint16_t> out;
  out.reserve(text.size() / 3 + 1);
  std::vector<int> ids;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.size();
    if (end - begin > kEncodeChunkBytes) {
      // After the last newline of the chunk; without one, after the first newline past
      // it (a long line goes whole, the rest still in chunks).
      size_t nl = text.rfind('\n', begin + kEncodeChunkBytes);
      if (nl == std::string_view::npos || nl < begin) nl = text.find('\n', begin + kEncodeChunkBytes);
      if (nl != std::string_view::npos) end = nl + 1;
    }
    ids.clear();
    const std::string status = sp_->encode(text.substr(begin, end - begin), &ids);
    if (!status.empty()) {
      throw InvalidArgument("SentencePiece cannot encode the text: " +
                            sentencepiece_reason(status));
    }
    for (int id : ids) out.push_back(static_cast<uint16_t>(id));  // < vocab_size_ <= 65536
    begin = end;
  }
  return out;
}

std::string SubwordTokenizer::decode(std::span<const uint16_t> tokens) const {
  std::vector<int> ids(tokens.begin(), tokens.end());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (static_cast<uint32_t>(ids[i]) >= vocab_size_) {
      throw InvalidArgument("token " + std::to_string(ids[i]) + " at position " +
                            std::to_string(i) + " is not below the tokenizer's vocabulary of " +
                            std::to_string(vocab_size_));
    }
  }
  std::string text;
  const std::string status = sp_->decode(ids, &text);
  if (!status.empty()) {
    throw InvalidArgument("SentencePiece cannot decode the tokens: " +
                          sentencepiece_reason(status));
  }
  return text;
}

std::string SubwordTokenizer::decode_for_display(std::span<const uint16_t> tokens) const {
  return sanitize_utf8_for_display(decode(tokens));
}

fs::path tokenizer_sidecar_path(const fs::path& token_file) {
  fs::path p = token_file;
  p += ".tokenizer.model";
  return p;
}

}  // namespace etr::data
