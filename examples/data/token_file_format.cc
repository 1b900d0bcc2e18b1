// Token file formats: detection and the foreign readers (see token_file_format.h).
#include "examples/data/token_file_format.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <string>

#include "runtime/error.h"

namespace etr::data {

namespace {

constexpr std::array<std::string_view, 4> kNames = {"auto", "etr", "llmc", "nanogpt"};
constexpr std::array<std::string_view, 4> kTitles = {"token file", "etr token file",
                                                     "llm.c token file", "nanoGPT .bin"};

int32_t int32_at(std::span<const std::byte> file, size_t index) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v |= static_cast<uint32_t>(file[4 * index + i]) << (8 * i);
  return static_cast<int32_t>(v);
}

bool starts_with_etr_magic(std::span<const std::byte> file) {
  return file.size() >= sizeof kTokenFileMagic &&
         std::memcmp(file.data(), kTokenFileMagic, sizeof kTokenFileMagic) == 0;
}

bool starts_with_llmc_magic(std::span<const std::byte> file) {
  if (file.size() < 4) return false;
  const int32_t magic = int32_at(file, 0);
  return magic == kLlmcMagic || magic == kLlmcLlama3Magic;
}

// The vocabulary the caller gave, else `fallback` (0 = unknown).
void set_vocab(TokenLayout& layout, std::optional<uint32_t> vocab, uint32_t fallback) {
  layout.vocab_size = vocab.value_or(fallback);
  layout.vocab_given = vocab.has_value();
}

}  // namespace

TokenFileFormat parse_token_file_format(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (name == kNames[i]) return static_cast<TokenFileFormat>(i);
  }
  throw ConfigError("data.format = \"" + std::string(name) +
                    "\" is not a token file format; choose auto (etr or llm.c, by the header), "
                    "etr, llmc or nanogpt.");
}

std::string_view token_file_format_name(TokenFileFormat format) {
  return kNames[static_cast<size_t>(format)];
}

std::string_view token_file_format_title(TokenFileFormat format) {
  return kTitles[static_cast<size_t>(format)];
}

std::string printable_prefix(std::span<const std::byte> file, size_t n) {
  std::string s;
  for (size_t i = 0; i < std::min(n, file.size()); ++i) {
    auto c = static_cast<unsigned char>(file[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      s += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      s += buf;
    }
  }
  return s;
}

TokenFileFormat detect_token_file_format(const std::filesystem::path& path,
                                         std::span<const std::byte> file) {
  const size_t n = std::min(file.size(), sizeof kTokenFileMagic);
  if (n > 0 && std::memcmp(file.data(), kTokenFileMagic, n) == 0) return TokenFileFormat::kEtr;
  if (starts_with_llmc_magic(file)) return TokenFileFormat::kLlmc;
  if (file.empty()) return TokenFileFormat::kEtr;  // its reader says "0 bytes, truncated"
  throw ConfigError(in_quotes(path) + " is not an etr token file nor an llm.c one: it starts with \"" +
                    printable_prefix(file, 8) + "\", not \"ETRTOKEN\" nor llm.c's int32 magic " +
                    std::to_string(kLlmcMagic) +
                    "; for a headerless nanoGPT .bin of uint16 tokens set data.format=nanogpt "
                    "(etr-tokenize --show: --format nanogpt; raw tokens cannot be recognised "
                    "safely), for text use etr-tokenize.");
}

TokenLayout read_llmc_layout(const std::filesystem::path& path, std::span<const std::byte> file,
                             std::optional<uint32_t> vocab) {
  const std::string name = "llm.c token file " + in_quotes(path);
  if (!starts_with_llmc_magic(file)) {
    throw ConfigError(in_quotes(path) + " is not an llm.c token file: it starts with \"" +
                      printable_prefix(file, 8) + "\", not the int32 magic " +
                      std::to_string(kLlmcMagic) + "; set data.format=auto to recognise it.");
  }
  if (int32_at(file, 0) == kLlmcLlama3Magic) {
    throw ConfigError(in_quotes(path) + " is an llm.c LLaMA-3 token file (magic " +
                      std::to_string(kLlmcLlama3Magic) +
                      "), whose tokens are uint32, but etr's tokens are uint16; etr reads llm.c's "
                      "GPT-2 files (magic " +
                      std::to_string(kLlmcMagic) + ", version 1) only.");
  }
  if (file.size() < kLlmcHeaderBytes) {
    throw IoError(name + " is truncated: it has " + std::to_string(file.size()) +
                  " bytes, fewer than llm.c's " + std::to_string(kLlmcHeaderBytes) +
                  "-byte header.");
  }
  TokenLayout layout;
  layout.format = TokenFileFormat::kLlmc;
  const int32_t version = int32_at(file, 1);
  if (version != kLlmcVersion) {
    throw ConfigError(name + " has version " + std::to_string(version) +
                      ", but etr reads version 1 only (uint16 GPT-2 tokens): etr's tokens are "
                      "uint16, so llm.c's uint32 token files cannot be read.");
  }
  layout.version = static_cast<uint32_t>(version);
  const int32_t count = int32_at(file, 2);
  if (count < 0) {
    throw IoError(name + " is corrupt: its header says " + std::to_string(count) + " tokens.");
  }
  const uint64_t expected = kLlmcHeaderBytes + 2 * static_cast<uint64_t>(count);
  if (file.size() != expected) {
    throw IoError(name + " is corrupt: its header says " + std::to_string(count) +
                  " tokens, which need " + std::to_string(expected) + " bytes, but the file has " +
                  std::to_string(file.size()) + " bytes (" +
                  (file.size() < expected ? "truncated" : "more than the header says") + ").");
  }
  layout.offset = kLlmcHeaderBytes;
  layout.token_count = static_cast<uint64_t>(count);
  set_vocab(layout, vocab, kGpt2VocabSize);
  return layout;
}

TokenLayout read_nanogpt_layout(const std::filesystem::path& path, std::span<const std::byte> file,
                                std::optional<uint32_t> vocab) {
  if (starts_with_etr_magic(file) || starts_with_llmc_magic(file)) {
    throw ConfigError("data.format is nanogpt, but " + in_quotes(path) +
                      " starts with the header of " +
                      (starts_with_etr_magic(file) ? "an etr" : "an llm.c") +
                      " token file, which would be read as tokens; set data.format=auto.");
  }
  if (file.size() % 2 != 0) {
    throw IoError("nanoGPT .bin " + in_quotes(path) + " has " + std::to_string(file.size()) +
                  " bytes, an odd number, so it is not an array of uint16 tokens (truncated, "
                  "or another format).");
  }
  TokenLayout layout;
  layout.format = TokenFileFormat::kNanogpt;
  layout.token_count = file.size() / 2;
  set_vocab(layout, vocab, 0);
  return layout;
}

}  // namespace etr::data
