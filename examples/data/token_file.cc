// Token files (see token_file.h for the format and the errors).
#include "examples/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "checkpoint/checksum.h"
#include "checkpoint/durable_file.h"
#include "runtime/error.h"

namespace etr::data {

namespace {

// Header field offsets (token_file.h).
constexpr size_t kVersionAt = 8;
constexpr size_t kDtypeAt = 12;
constexpr size_t kReservedAAt = 14;  // 2 bytes
constexpr size_t kCountAt = 16;
constexpr size_t kVocabAt = 24;
constexpr size_t kReservedBAt = 28;  // 4 bytes
constexpr size_t kChecksumAt = 32;
constexpr size_t kReservedCAt = 40;  // 24 bytes, to the end of the header

constexpr const char* kRewrite = "write it again with etr-tokenize";

template <typename T>
void put_le(std::byte* at, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) at[i] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
}

template <typename T>
T get_le(const std::byte* at) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(static_cast<T>(at[i]) << (8 * i));
  return value;
}

// The error for a file that does not start with the magic.
ConfigError not_a_token_file(const std::filesystem::path& path, const std::byte* start, size_t n) {
  return ConfigError(in_quotes(path) + " is not an etr token file: it starts with \"" +
                     printable_prefix({start, n}, n) +
                     "\" instead of \"ETRTOKEN\"; convert text to tokens with etr-tokenize");
}

// Checks and decodes a header read from `path`; the file size is checked by the caller.
TokenFileHeader decode_header(const std::filesystem::path& path, const std::byte* h) {
  if (std::memcmp(h, kTokenFileMagic, sizeof kTokenFileMagic) != 0) {
    throw not_a_token_file(path, h, sizeof kTokenFileMagic);
  }
  TokenFileHeader header;
  header.version = get_le<uint32_t>(h + kVersionAt);
  if (header.version != kTokenFileVersion) {
    throw ConfigError("token file " + in_quotes(path) + " has format version " +
                      std::to_string(header.version) + " but this build of etr reads version " +
                      std::to_string(kTokenFileVersion) +
                      " only; use the etr that wrote it or convert the text again with this "
                      "build's etr-tokenize");
  }
  header.dtype = get_le<uint16_t>(h + kDtypeAt);
  if (header.dtype != kTokenDtypeUint16) {
    throw ConfigError("token file " + in_quotes(path) + " has token dtype code " +
                      std::to_string(header.dtype) + " but this build of etr reads code " +
                      std::to_string(kTokenDtypeUint16) + " (uint16) only; " + kRewrite);
  }
  header.token_count = get_le<uint64_t>(h + kCountAt);
  header.vocab_size = get_le<uint32_t>(h + kVocabAt);
  header.checksum = get_le<uint64_t>(h + kChecksumAt);
  if (header.vocab_size == 0 || header.vocab_size > kTokenFileMaxVocab) {
    throw ConfigError("token file " + in_quotes(path) + " has vocabulary size " +
                      std::to_string(header.vocab_size) + ", which uint16 tokens cannot have (1.." +
                      std::to_string(kTokenFileMaxVocab) + "); " + kRewrite);
  }
  bool reserved_zero =
      get_le<uint16_t>(h + kReservedAAt) == 0 && get_le<uint32_t>(h + kReservedBAt) == 0;
  for (size_t i = kReservedCAt; i < kTokenFileHeaderBytes; ++i)
    reserved_zero = reserved_zero && h[i] == std::byte{0};
  if (!reserved_zero) {
    throw ConfigError("token file " + in_quotes(path) +
                      " has non-zero reserved header bytes, so it is damaged or written by a "
                      "newer etr with the same version number; " +
                      std::string(kRewrite));
  }
  return header;
}

}  // namespace

void encode_token_file_header(const TokenFileHeader& header,
                              std::span<std::byte, kTokenFileHeaderBytes> out) {
  std::byte* h = out.data();
  std::memset(h, 0, kTokenFileHeaderBytes);
  std::memcpy(h, kTokenFileMagic, sizeof kTokenFileMagic);
  put_le(h + kVersionAt, header.version);
  put_le(h + kDtypeAt, header.dtype);
  put_le(h + kCountAt, header.token_count);
  put_le(h + kVocabAt, header.vocab_size);
  put_le(h + kChecksumAt, header.checksum);
}

TokenFileHeader write_token_file(const std::filesystem::path& path,
                                 std::span<const uint16_t> tokens, uint32_t vocab_size) {
  if (vocab_size == 0 || vocab_size > kTokenFileMaxVocab) {
    throw InvalidArgument("cannot write token file " + in_quotes(path) + " with vocabulary size " +
                          std::to_string(vocab_size) + "; uint16 tokens need 1.." +
                          std::to_string(kTokenFileMaxVocab));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size) {
      throw InvalidArgument("cannot write token file " + in_quotes(path) + ": token " +
                            std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                            " is not below the vocabulary size " + std::to_string(vocab_size));
    }
  }
  TokenFileHeader header;
  header.token_count = tokens.size();
  header.vocab_size = vocab_size;
  header.checksum = Checksum::of(tokens.data(), tokens.size_bytes());
  std::array<std::byte, kTokenFileHeaderBytes> bytes;
  encode_token_file_header(header, bytes);

  DurableFile file(path);
  file.write(bytes.data(), bytes.size());
  file.write(tokens.data(), tokens.size_bytes());  // little-endian host (static_assert)
  file.commit();
  return header;
}

namespace {

// The layout of an etr token file (`file`: all its bytes), its header checked and decoded
// into `header`.
TokenLayout read_etr_layout(const std::filesystem::path& path, std::span<const std::byte> file,
                            TokenFileHeader& header) {
  const uint64_t file_bytes = file.size();
  if (file_bytes < kTokenFileHeaderBytes) {
    // Too short for a header: a truncated token file, or some other small file.
    const size_t n = std::min(file.size(), sizeof kTokenFileMagic);
    if (n > 0 && std::memcmp(file.data(), kTokenFileMagic, n) != 0) {
      throw not_a_token_file(path, file.data(), n);
    }
    throw IoError("token file " + in_quotes(path) + " has " + std::to_string(file_bytes) +
                  " bytes, too few for the " + std::to_string(kTokenFileHeaderBytes) +
                  "-byte header, so it is truncated or not a token file; " + kRewrite);
  }
  header = decode_header(path, file.data());
  const uint64_t max_count = (std::numeric_limits<uint64_t>::max() - kTokenFileHeaderBytes) / 2;
  const uint64_t count = header.token_count;
  if (count > max_count) {
    throw IoError("token file " + in_quotes(path) + " has a corrupt header: it says " +
                  std::to_string(count) + " tokens, more than any file can hold; " + kRewrite);
  }
  const uint64_t expected = kTokenFileHeaderBytes + 2 * count;
  if (file_bytes < expected) {
    throw IoError("token file " + in_quotes(path) + " is truncated: its header says " +
                  std::to_string(count) + " tokens, which need " + std::to_string(expected) +
                  " bytes, but the file has " + std::to_string(file_bytes) + " bytes; " + kRewrite);
  }
  if (file_bytes > expected) {
    throw IoError("token file " + in_quotes(path) + " has " + std::to_string(file_bytes) +
                  " bytes but its header says " + std::to_string(count) + " tokens, which need " +
                  std::to_string(expected) + " bytes, so the header or the file is damaged; " +
                  kRewrite);
  }
  TokenLayout layout;
  layout.format = TokenFileFormat::kEtr;
  layout.version = header.version;
  layout.offset = kTokenFileHeaderBytes;
  layout.token_count = count;
  layout.vocab_size = header.vocab_size;
  return layout;
}

}  // namespace

TokenFile::TokenFile(std::filesystem::path path, TokenFileOptions options)
    : path_(std::move(path)) {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw IoError("cannot open token file " + in_quotes(path_) + ": " + std::strerror(err) +
                  "; check that the file exists and is readable");
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  map(fd);
  try {
    read_layout(options);
  } catch (...) {
    unmap();
    throw;
  }
}

// Maps the whole file read-only (an empty file: no map, map_bytes_ 0).
void TokenFile::map(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    throw IoError("cannot stat token file " + in_quotes(path_) + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    throw IoError("token file " + in_quotes(path_) +
                  " is not a regular file; give the path of a file written by etr-tokenize");
  }
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes == 0) return;
  map_bytes_ = static_cast<size_t>(file_bytes);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  if (map_ == MAP_FAILED) {
    int err = errno;
    map_ = nullptr;
    map_bytes_ = 0;
    throw IoError("cannot map token file " + in_quotes(path_) + " (" + std::to_string(file_bytes) +
                  " bytes) into memory: " + std::strerror(err));
  }
}

// Detects the format (auto), reads the layout and points tokens_ into the map; runs the
// checks `options` asks for, and for a foreign format always checks the tokens.
void TokenFile::read_layout(const TokenFileOptions& options) {
  const std::span<const std::byte> file(static_cast<const std::byte*>(map_), map_bytes_);
  TokenFileFormat format = options.format;
  if (format == TokenFileFormat::kAuto) format = detect_token_file_format(path_, file);
  switch (format) {
    case TokenFileFormat::kLlmc:
      layout_ = read_llmc_layout(path_, file, options.vocab_size);
      break;
    case TokenFileFormat::kNanogpt:
      layout_ = read_nanogpt_layout(path_, file, options.vocab_size);
      break;
    default:
      layout_ = read_etr_layout(path_, file, header_);
  }
  if (format != TokenFileFormat::kEtr) {
    header_.version = layout_.version;
    header_.token_count = layout_.token_count;
    header_.vocab_size = layout_.vocab_size;
  }
  tokens_ = reinterpret_cast<const uint16_t*>(file.data() + layout_.offset);
  if (format == TokenFileFormat::kEtr) {
    if (options.verify_checksum) verify_checksum();
    if (options.verify_tokens) verify_tokens();
  } else {
    verify_tokens();  // nothing else vouches for a foreign file's tokens
  }
}

TokenFile::~TokenFile() {
  unmap();
}

TokenFile::TokenFile(TokenFile&& other) noexcept
    : path_(std::move(other.path_)),
      layout_(other.layout_),
      header_(other.header_),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)) {
  other.layout_.token_count = 0;
  other.header_.token_count = 0;
}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    layout_ = other.layout_;
    header_ = other.header_;
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    other.layout_.token_count = 0;
    other.header_.token_count = 0;
  }
  return *this;
}

void TokenFile::unmap() noexcept {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
  tokens_ = nullptr;
}

void TokenFile::verify_checksum() const {
  if (layout_.format != TokenFileFormat::kEtr) return;  // llm.c and nanoGPT have none
  const std::span<const uint16_t> t = tokens();
  const uint64_t actual = Checksum::of(t.data(), t.size_bytes());
  if (actual != header_.checksum) {
    throw IoError("token file " + in_quotes(path_) + " is corrupt: the checksum of its " +
                  std::to_string(t.size()) + " tokens is " + format_checksum(actual) +
                  " but its header says " + format_checksum(header_.checksum) + "; " + kRewrite);
  }
}

void TokenFile::verify_tokens() const {
  const std::span<const uint16_t> t = tokens();
  const uint32_t vocab = layout_.vocab_size;
  if (vocab == 0) return;  // a nanoGPT file of unknown vocabulary
  const auto bad = std::find_if(t.begin(), t.end(), [vocab](uint16_t x) { return x >= vocab; });
  if (bad == t.end()) return;
  const std::string where = " token " + std::to_string(*bad) + " at position " +
                            std::to_string(bad - t.begin()) + " is not below ";
  if (layout_.format == TokenFileFormat::kEtr) {
    throw IoError("token file " + in_quotes(path_) + " is corrupt:" + where + "its vocabulary size " +
                  std::to_string(vocab) + "; " + kRewrite);
  }
  const std::string title(token_file_format_title(layout_.format));
  throw ConfigError(
      title + " " + in_quotes(path_) + ":" + where + "the vocabulary size " + std::to_string(vocab) +
      (layout_.vocab_given ? " (model.vocab_size); set model.vocab_size to its tokenizer's"
                           : " (GPT-2's, llm.c's version 1); set model.vocab_size to its "
                             "tokenizer's") +
      ".");
}

}  // namespace etr::data
