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

std::string quoted(const std::filesystem::path& p) {
  return "'" + p.string() + "'";
}

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

// The first bytes of a file as printable text for a message: "PK\x03\x04".
std::string escape_bytes(const std::byte* data, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    auto c = static_cast<unsigned char>(data[i]);
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

// The error for a file that does not start with the magic.
ConfigError not_a_token_file(const std::filesystem::path& path, const std::byte* start, size_t n) {
  return ConfigError(quoted(path) + " is not an etr token file: it starts with \"" +
                     escape_bytes(start, n) +
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
    throw ConfigError("token file " + quoted(path) + " has format version " +
                      std::to_string(header.version) + " but this build of etr reads version " +
                      std::to_string(kTokenFileVersion) +
                      " only; use the etr that wrote it or convert the text again with this "
                      "build's etr-tokenize");
  }
  header.dtype = get_le<uint16_t>(h + kDtypeAt);
  if (header.dtype != kTokenDtypeUint16) {
    throw ConfigError("token file " + quoted(path) + " has token dtype code " +
                      std::to_string(header.dtype) + " but this build of etr reads code " +
                      std::to_string(kTokenDtypeUint16) + " (uint16) only; " + kRewrite);
  }
  header.token_count = get_le<uint64_t>(h + kCountAt);
  header.vocab_size = get_le<uint32_t>(h + kVocabAt);
  header.checksum = get_le<uint64_t>(h + kChecksumAt);
  if (header.vocab_size == 0 || header.vocab_size > kTokenFileMaxVocab) {
    throw ConfigError("token file " + quoted(path) + " has vocabulary size " +
                      std::to_string(header.vocab_size) + ", which uint16 tokens cannot have (1.." +
                      std::to_string(kTokenFileMaxVocab) + "); " + kRewrite);
  }
  bool reserved_zero =
      get_le<uint16_t>(h + kReservedAAt) == 0 && get_le<uint32_t>(h + kReservedBAt) == 0;
  for (size_t i = kReservedCAt; i < kTokenFileHeaderBytes; ++i)
    reserved_zero = reserved_zero && h[i] == std::byte{0};
  if (!reserved_zero) {
    throw ConfigError("token file " + quoted(path) +
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
    throw InvalidArgument("cannot write token file " + quoted(path) + " with vocabulary size " +
                          std::to_string(vocab_size) + "; uint16 tokens need 1.." +
                          std::to_string(kTokenFileMaxVocab));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab_size) {
      throw InvalidArgument("cannot write token file " + quoted(path) + ": token " +
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

TokenFile::TokenFile(std::filesystem::path path, TokenFileOptions options)
    : path_(std::move(path)) {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    throw IoError("cannot open token file " + quoted(path_) + ": " + std::strerror(err) +
                  "; check that the file exists and is readable");
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    throw IoError("cannot stat token file " + quoted(path_) + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    throw IoError("token file " + quoted(path_) +
                  " is not a regular file; give the path of a file written by etr-tokenize");
  }
  const auto file_bytes = static_cast<uint64_t>(st.st_size);
  if (file_bytes < kTokenFileHeaderBytes) {
    // Too short for a header: a truncated token file, or some other small file.
    std::array<std::byte, sizeof kTokenFileMagic> prefix{};
    const size_t want = std::min<size_t>(prefix.size(), static_cast<size_t>(file_bytes));
    ssize_t got;
    do {
      got = ::pread(fd, prefix.data(), want, 0);
    } while (got < 0 && errno == EINTR);
    if (got == static_cast<ssize_t>(want) && want > 0 &&
        std::memcmp(prefix.data(), kTokenFileMagic, want) != 0) {
      throw not_a_token_file(path_, prefix.data(), want);
    }
    throw IoError("token file " + quoted(path_) + " has " + std::to_string(file_bytes) +
                  " bytes, too few for the " + std::to_string(kTokenFileHeaderBytes) +
                  "-byte header, so it is truncated or not a token file; " + kRewrite);
  }
  map_bytes_ = static_cast<size_t>(file_bytes);
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  if (map_ == MAP_FAILED) {
    int err = errno;
    map_ = nullptr;
    throw IoError("cannot map token file " + quoted(path_) + " (" + std::to_string(file_bytes) +
                  " bytes) into memory: " + std::strerror(err));
  }
  try {
    const auto* base = static_cast<const std::byte*>(map_);
    header_ = decode_header(path_, base);
    const uint64_t max_count = (std::numeric_limits<uint64_t>::max() - kTokenFileHeaderBytes) / 2;
    const uint64_t count = header_.token_count;
    if (count > max_count) {
      throw IoError("token file " + quoted(path_) + " has a corrupt header: it says " +
                    std::to_string(count) + " tokens, more than any file can hold; " + kRewrite);
    }
    const uint64_t expected = kTokenFileHeaderBytes + 2 * count;
    if (file_bytes < expected) {
      throw IoError("token file " + quoted(path_) + " is truncated: its header says " +
                    std::to_string(count) + " tokens, which need " + std::to_string(expected) +
                    " bytes, but the file has " + std::to_string(file_bytes) + " bytes; " +
                    kRewrite);
    }
    if (file_bytes > expected) {
      throw IoError("token file " + quoted(path_) + " has " + std::to_string(file_bytes) +
                    " bytes but its header says " + std::to_string(count) + " tokens, which need " +
                    std::to_string(expected) + " bytes, so the header or the file is damaged; " +
                    kRewrite);
    }
    tokens_ = reinterpret_cast<const uint16_t*>(base + kTokenFileHeaderBytes);
    if (options.verify_checksum) verify_checksum();
    if (options.verify_tokens) verify_tokens();
  } catch (...) {
    unmap();
    throw;
  }
}

TokenFile::~TokenFile() {
  unmap();
}

TokenFile::TokenFile(TokenFile&& other) noexcept
    : path_(std::move(other.path_)),
      header_(other.header_),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, nullptr)) {
  other.header_.token_count = 0;
}

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    header_ = other.header_;
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
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
  const std::span<const uint16_t> t = tokens();
  const uint64_t actual = Checksum::of(t.data(), t.size_bytes());
  if (actual != header_.checksum) {
    throw IoError("token file " + quoted(path_) + " is corrupt: the checksum of its " +
                  std::to_string(t.size()) + " tokens is " + format_checksum(actual) +
                  " but its header says " + format_checksum(header_.checksum) + "; " + kRewrite);
  }
}

void TokenFile::verify_tokens() const {
  const std::span<const uint16_t> t = tokens();
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] >= header_.vocab_size) {
      throw IoError("token file " + quoted(path_) + " is corrupt: token " + std::to_string(t[i]) +
                    " at position " + std::to_string(i) + " is not below its vocabulary size " +
                    std::to_string(header_.vocab_size) + "; " + kRewrite);
    }
  }
}

}  // namespace etr::data
