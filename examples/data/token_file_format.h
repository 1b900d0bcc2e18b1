// The token file formats etr reads (docs/token_file_format.md): its own, and two from the
// ecosystem, read in place so that their tokens are mapped, never copied or converted.
//
//   format   recognised by              header  tokens   vocabulary
//   etr      "ETRTOKEN" (8 bytes)       64 B    uint16   its header's
//   llmc     int32 20240520, version 1  1024 B  uint16   GPT-2's 50257, or the one given
//   nanogpt  nothing: set explicitly    none    uint16   the one given (model.vocab_size)
//
// llm.c (karpathy/llm.c, dev/data/data_common.py write_datafile): 256 little-endian
// int32, header[0] = 20240520, header[1] = 1, header[2] = the token count, the rest zero;
// then the tokens. Its LLaMA-3 files (magic 20240801, version 7) hold uint32 tokens,
// which etr's uint16 tokens cannot: refused. nanoGPT (data/*/prepare.py): the tokens
// alone, np.uint16 .tofile(). A headerless file cannot be told from other bytes, so
// `auto` recognises etr and llm.c only and names data.format=nanogpt for the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace etr::data {

enum class TokenFileFormat {
  kAuto,     // etr or llm.c, by the header
  kEtr,      // etr's own (token_file.h)
  kLlmc,     // llm.c's GPT-2 token files
  kNanogpt,  // nanoGPT's raw .bin
};

// "auto", "etr", "llmc", "nanogpt" (data.format). ConfigError naming the values otherwise.
TokenFileFormat parse_token_file_format(std::string_view name);
// The name parse_token_file_format takes.
std::string_view token_file_format_name(TokenFileFormat format);
// What a message calls a file of the format: "etr token file", "llm.c token file", ...
std::string_view token_file_format_title(TokenFileFormat format);

inline constexpr int32_t kLlmcMagic = 20240520;        // GPT-2 token files
inline constexpr int32_t kLlmcLlama3Magic = 20240801;  // LLaMA-3's: uint32 tokens
inline constexpr int32_t kLlmcVersion = 1;
inline constexpr size_t kLlmcHeaderBytes = 256 * 4;
inline constexpr uint32_t kGpt2VocabSize = 50257;

// Where a file's tokens lie and what they are, as its format's reader found them.
struct TokenLayout {
  TokenFileFormat format = TokenFileFormat::kEtr;
  uint32_t version = 0;      // etr, llm.c: the header's; nanoGPT: 0 (none)
  size_t offset = 0;         // byte of the first token: 64, 1024 or 0 (2-byte aligned)
  uint64_t token_count = 0;  // the file is offset + 2 * token_count bytes
  uint32_t vocab_size = 0;   // every token is below it; 0 = not known (nanoGPT, none given)
  bool vocab_given = false;  // vocab_size is the caller's, not the file's
};

// The format of `file` (the bytes of the file at `path`) under `auto`: etr or llm.c by the
// magic (a shorter file that starts like ETRTOKEN counts as a truncated etr file).
// ConfigError, one sentence naming the file and the formats, for anything else.
TokenFileFormat detect_token_file_format(const std::filesystem::path& path,
                                         std::span<const std::byte> file);

// The layouts of the foreign formats. `vocab` is the vocabulary the caller knows
// (model.vocab_size as the user gave it): llm.c takes GPT-2's without one, nanoGPT leaves
// it unknown. ConfigError when the file is not one this build can read (wrong magic, an
// llm.c version other than 1, an etr or llm.c header given as nanoGPT), IoError when it
// is damaged (a size that disagrees with the count, an odd size). The tokens are not
// checked here (TokenFile does that).
TokenLayout read_llmc_layout(const std::filesystem::path& path, std::span<const std::byte> file,
                             std::optional<uint32_t> vocab);
TokenLayout read_nanogpt_layout(const std::filesystem::path& path, std::span<const std::byte> file,
                                std::optional<uint32_t> vocab);

// The magic an etr token file starts with (token_file.h).
inline constexpr char kTokenFileMagic[8] = {'E', 'T', 'R', 'T', 'O', 'K', 'E', 'N'};

// What a message about a file without a vocabulary (a nanoGPT .bin) tells the user.
inline constexpr const char* kSetVocabSize =
    "set model.vocab_size to its tokenizer's (50257 for GPT-2's)";

// The first `n` bytes of `file` as printable text for a message: "PK\x03\x04".
std::string printable_prefix(std::span<const std::byte> file, size_t n);

}  // namespace etr::data
