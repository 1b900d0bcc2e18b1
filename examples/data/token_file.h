// Token files: the training data of the example GPT, one flat array of tokens behind a
// fixed 64-byte header (docs/token_file_format.md). Written durably, read through a
// read-only memory map, so that every rank of a job maps the same pages and a sampler
// can jump to any window without reading the rest.
//
//   write_token_file("train.tok", tokens, ByteTokenizer::kVocabSize);
//   TokenFile file("train.tok");            // checks the header and the checksum
//   std::span<const uint16_t> t = file.tokens();
//
// Format, version 1 (all integers little-endian):
//
//   offset size  field
//        0    8  magic          "ETRTOKEN" (ASCII, no terminator)
//        8    4  version        u32, 1
//       12    2  dtype          u16, 1 = uint16 little-endian tokens (the only one)
//       14    2  reserved       zero
//       16    8  token_count    u64, number of tokens after the header
//       24    4  vocab_size     u32, every token is < vocab_size (1..65536)
//       28    4  reserved       zero
//       32    8  checksum       u64, XXH3-64 (seed 0) of the token bytes [64, 64 + 2 * count)
//       40   24  reserved       zero
//       64  2n   tokens         n = token_count values of the dtype
//
// The file is exactly 64 + 2 * token_count bytes. A reader refuses a version it does not
// know (a newer etr may lay out the header differently) and any non-zero reserved byte.
//
// Errors: ConfigError when the file is not one this build can use (wrong magic, a newer
// version, an unknown dtype, vocab_size 0 or above 65536, reserved bytes set); IoError
// when it cannot be opened or mapped or its content is damaged (too short for the header,
// truncated or with trailing bytes, checksum mismatch, a token >= vocab_size). Every
// message is one sentence naming the file.
//
// The same class reads llm.c's token files and nanoGPT's raw .bin in place
// (token_file_format.h): TokenFileOptions::format chooses, auto tells etr from llm.c.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>

#include "examples/data/token_file_format.h"

namespace etr::data {

// The memory map hands out the stored bytes as uint16_t: a big-endian host would need a
// byte-swapping copy, which this build does not have.
static_assert(std::endian::native == std::endian::little,
              "token files are mapped in place and need a little-endian host");

inline constexpr uint32_t kTokenFileVersion = 1;  // the version this build writes and reads
inline constexpr uint16_t kTokenDtypeUint16 = 1;  // the dtype code of uint16 tokens
inline constexpr size_t kTokenFileHeaderBytes = 64;
inline constexpr uint32_t kTokenFileMaxVocab = 65536;

// The header fields of a token file, as read or written.
struct TokenFileHeader {
  uint32_t version = kTokenFileVersion;
  uint16_t dtype = kTokenDtypeUint16;
  uint64_t token_count = 0;
  uint32_t vocab_size = 0;
  uint64_t checksum = 0;  // XXH3-64 of the token bytes
};

// The 64 header bytes of `header` (reserved bytes zero).
void encode_token_file_header(const TokenFileHeader& header,
                              std::span<std::byte, kTokenFileHeaderBytes> out);

// Writes tokens to `path` durably (DurableFile: temporary file, fsync, rename): the path
// names the old file or the complete new one, never a partial one. Throws InvalidArgument
// when vocab_size is 0 or above 65536 or a token is >= vocab_size (naming the first),
// IoError when the file cannot be written. Returns the header it wrote.
TokenFileHeader write_token_file(const std::filesystem::path& path,
                                 std::span<const uint16_t> tokens, uint32_t vocab_size);

struct TokenFileOptions {
  bool verify_checksum = true;  // O(n): hash every token byte on open (etr files)
  bool verify_tokens = false;   // O(n): check every token < vocab_size on open (etr files)
  // The format to read (token_file_format.h): auto recognises etr and llm.c files by their
  // header; a nanoGPT .bin has none and must be named.
  TokenFileFormat format = TokenFileFormat::kAuto;
  // The vocabulary of a file that does not record one (llm.c: GPT-2's 50257 without it;
  // nanoGPT: unknown without it). The tokens of such a file are always checked against
  // it on open (O(n)). An etr file's header wins.
  std::optional<uint32_t> vocab_size = std::nullopt;
};

// A token file (etr's, llm.c's or nanoGPT's) mapped read-only: tokens() points into the
// map, whatever the format (its tokens start at byte 64, 1024 or 0). Move-only; the mapping lives
// as long as the object. Replacing the file (write_token_file renames a new one over it) leaves the
// mapping on the old contents; truncating the file in place while it is mapped makes reads of the
// lost pages fault (SIGBUS), as with any memory map.
class TokenFile {
 public:
  explicit TokenFile(std::filesystem::path path, TokenFileOptions options = {});
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  std::span<const uint16_t> tokens() const { return {tokens_, layout_.token_count}; }
  uint64_t size() const { return layout_.token_count; }
  // Every token is below it; 0 for a nanoGPT file opened without options.vocab_size.
  uint32_t vocab_size() const { return layout_.vocab_size; }
  TokenFileFormat format() const { return layout_.format; }
  const TokenLayout& layout() const { return layout_; }
  // An etr file's header (other formats: their count and vocabulary, checksum 0).
  const TokenFileHeader& header() const { return header_; }
  const std::filesystem::path& path() const { return path_; }
  uint64_t file_bytes() const { return map_bytes_; }

  // The checks TokenFileOptions can run on open, for a file opened without them. Each
  // throws IoError naming the file on failure (a foreign file's token out of its given
  // vocabulary: ConfigError). A file without a checksum (llm.c, nanoGPT) passes the
  // first; a file without a known vocabulary passes the second.
  void verify_checksum() const;
  void verify_tokens() const;

 private:
  void map(int fd);
  void read_layout(const TokenFileOptions& options);
  void unmap() noexcept;

  std::filesystem::path path_;
  TokenLayout layout_;
  TokenFileHeader header_;
  void* map_ = nullptr;  // the whole file, PROT_READ
  size_t map_bytes_ = 0;
  const uint16_t* tokens_ = nullptr;  // [token_count], inside map_
};

}  // namespace etr::data
