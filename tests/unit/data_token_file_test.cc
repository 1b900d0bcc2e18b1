// Tests of examples/data/token_file.h: round trips, the byte layout of the header, and a
// specific sentence for every kind of bad file (wrong magic, newer version, unknown dtype,
// truncated, trailing bytes, flipped bits, tokens outside the vocabulary).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checksum.h"
#include "examples/data/token_file.h"
#include "runtime/error.h"

namespace etr::data {
namespace {

namespace fs = std::filesystem;

std::vector<uint16_t> random_tokens(size_t n, uint32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> t(n);
  for (uint16_t& x : t) x = static_cast<uint16_t>(rng() % vocab);
  return t;
}

std::vector<char> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

void write_all(const fs::path& p, const std::vector<char>& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
void patch(std::vector<char>& bytes, size_t at, T value) {
  for (size_t i = 0; i < sizeof(T); ++i)
    bytes[at + i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

template <typename T>
T field(const std::vector<char>& bytes, size_t at) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i)
    v |= static_cast<T>(static_cast<T>(static_cast<unsigned char>(bytes[at + i])) << (8 * i));
  return v;
}

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "etr-token-file-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr) << std::strerror(errno);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A valid file of 1000 byte tokens; returns its bytes.
  std::vector<char> valid_file(const fs::path& p) {
    write_token_file(p, random_tokens(1000, 256, 5), 256);
    return read_all(p);
  }

  // Expects opening `p` to throw E with a message containing every one of `parts`.
  template <typename E>
  void expect_open_error(const fs::path& p, const std::vector<std::string>& parts,
                         TokenFileOptions options = {}) {
    try {
      TokenFile f(p, options);
      ADD_FAILURE() << "opening " << p << " did not throw";
    } catch (const E& e) {
      const std::string msg = e.what();
      for (const std::string& part : parts)
        EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' not in: " << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;  // one sentence, one line
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong exception type: " << e.what();
    }
  }

  fs::path dir_;
};

TEST_F(TokenFileTest, RoundTripsTokens) {
  for (uint32_t vocab : {1u, 256u, 50257u, 65536u}) {
    for (size_t n : {0, 1, 7, 4096, 100001}) {
      const fs::path p = dir_ / ("t" + std::to_string(vocab) + "_" + std::to_string(n) + ".tok");
      const std::vector<uint16_t> tokens = random_tokens(n, vocab, static_cast<uint32_t>(n));
      const TokenFileHeader written = write_token_file(p, tokens, vocab);
      EXPECT_EQ(fs::file_size(p), kTokenFileHeaderBytes + 2 * n);
      TokenFile f(p, {.verify_checksum = true, .verify_tokens = true});
      EXPECT_EQ(f.size(), n);
      EXPECT_EQ(f.vocab_size(), vocab);
      EXPECT_EQ(f.header().version, kTokenFileVersion);
      EXPECT_EQ(f.header().checksum, written.checksum);
      EXPECT_EQ(f.header().checksum, Checksum::of(tokens.data(), 2 * n));
      ASSERT_EQ(f.tokens().size(), n);
      EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), f.tokens().begin()));
    }
  }
  // Only the final files: DurableFile removed its temporary files.
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().extension(), ".tok") << entry.path();
}

TEST_F(TokenFileTest, HeaderLayoutIsTheDocumentedOne) {
  const fs::path p = dir_ / "layout.tok";
  const std::vector<uint16_t> tokens = {0x0102, 0x0304, 7};
  write_token_file(p, tokens, 1000);
  const std::vector<char> b = read_all(p);
  ASSERT_EQ(b.size(), 64u + 6u);
  EXPECT_EQ(std::string(b.data(), 8), "ETRTOKEN");
  EXPECT_EQ(field<uint32_t>(b, 8), 1u);      // version
  EXPECT_EQ(field<uint16_t>(b, 12), 1u);     // dtype uint16
  EXPECT_EQ(field<uint16_t>(b, 14), 0u);     // reserved
  EXPECT_EQ(field<uint64_t>(b, 16), 3u);     // token count
  EXPECT_EQ(field<uint32_t>(b, 24), 1000u);  // vocabulary
  EXPECT_EQ(field<uint32_t>(b, 28), 0u);     // reserved
  EXPECT_EQ(field<uint64_t>(b, 32), Checksum::of(b.data() + 64, 6));
  for (size_t i = 40; i < 64; ++i) EXPECT_EQ(b[i], 0) << i;
  // Little-endian tokens.
  EXPECT_EQ(b[64], 0x02);
  EXPECT_EQ(b[65], 0x01);
  EXPECT_EQ(b[66], 0x04);
  EXPECT_EQ(b[67], 0x03);
}

TEST_F(TokenFileTest, OverwritesAnExistingFile) {
  const fs::path p = dir_ / "again.tok";
  write_token_file(p, random_tokens(100, 256, 1), 256);
  const std::vector<uint16_t> second = random_tokens(50, 256, 2);
  write_token_file(p, second, 256);
  TokenFile f(p);
  EXPECT_TRUE(std::equal(second.begin(), second.end(), f.tokens().begin(), f.tokens().end()));
}

TEST_F(TokenFileTest, MovedFileKeepsItsMapping) {
  const fs::path p = dir_ / "move.tok";
  const std::vector<uint16_t> tokens = random_tokens(10, 256, 3);
  write_token_file(p, tokens, 256);
  TokenFile a(p);
  TokenFile b(std::move(a));
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), b.tokens().begin(), b.tokens().end()));
  TokenFile c(p);
  c = std::move(b);
  EXPECT_EQ(c.size(), 10u);
  EXPECT_EQ(c.tokens()[9], tokens[9]);
}

TEST_F(TokenFileTest, WriterRejectsTokensOutsideTheVocabulary) {
  const fs::path p = dir_ / "bad.tok";
  std::vector<uint16_t> tokens = {1, 2, 300, 4};
  try {
    write_token_file(p, tokens, 256);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("token 300 at position 2"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(p));
  EXPECT_THROW(write_token_file(p, tokens, 0), InvalidArgument);
  EXPECT_THROW(write_token_file(p, tokens, 65537), InvalidArgument);
}

TEST_F(TokenFileTest, MissingFileNamesThePath) {
  expect_open_error<IoError>(dir_ / "nope.tok",
                             {"cannot open token file", "nope.tok", "No such file"});
  expect_open_error<IoError>(dir_, {"not a regular file", dir_.string()});
}

TEST_F(TokenFileTest, WrongMagicSaysItIsNotATokenFile) {
  const fs::path p = dir_ / "text.tok";
  std::vector<char> b = valid_file(p);
  std::memcpy(b.data(), "PK\x03\x04zip!", 8);
  write_all(p, b);
  expect_open_error<ConfigError>(p, {"text.tok", "is not an etr token file",
                                     "starts with \"PK\\x03\\x04zip!\"", "etr-tokenize"});
  // A small text file, shorter than a header, is named for what it is too.
  write_all(p, {'h', 'i', '\n'});
  expect_open_error<ConfigError>(
      p, {"text.tok", "is not an etr token file", "starts with \"hi\\x0a\""});
}

TEST_F(TokenFileTest, NewerVersionSaysWhichVersionThisBuildReads) {
  const fs::path p = dir_ / "future.tok";
  std::vector<char> b = valid_file(p);
  patch<uint32_t>(b, 8, 2);
  write_all(p, b);
  expect_open_error<ConfigError>(
      p, {"future.tok", "format version 2", "this build of etr reads version 1 only"});
}

TEST_F(TokenFileTest, UnknownDtypeIsRefused) {
  const fs::path p = dir_ / "dtype.tok";
  std::vector<char> b = valid_file(p);
  patch<uint16_t>(b, 12, 2);
  write_all(p, b);
  expect_open_error<ConfigError>(p, {"dtype.tok", "dtype code 2", "uint16"});
}

TEST_F(TokenFileTest, ImpossibleVocabularyIsRefused) {
  const fs::path p = dir_ / "vocab.tok";
  std::vector<char> b = valid_file(p);
  patch<uint32_t>(b, 24, 0);
  write_all(p, b);
  expect_open_error<ConfigError>(p, {"vocab.tok", "vocabulary size 0"});
  patch<uint32_t>(b, 24, 70000);
  write_all(p, b);
  expect_open_error<ConfigError>(p, {"vocab.tok", "vocabulary size 70000"});
}

TEST_F(TokenFileTest, NonZeroReservedBytesAreRefused) {
  for (size_t at : {14, 28, 40, 63}) {
    const fs::path p = dir_ / "reserved.tok";
    std::vector<char> b = valid_file(p);
    b[at] = 1;
    write_all(p, b);
    expect_open_error<ConfigError>(p, {"reserved.tok", "non-zero reserved header bytes"});
  }
}

TEST_F(TokenFileTest, TruncatedFileNamesThePathAndTheSizes) {
  const fs::path p = dir_ / "cut.tok";
  std::vector<char> b = valid_file(p);  // 64 + 2000 bytes
  b.resize(1500);
  write_all(p, b);
  expect_open_error<IoError>(
      p, {"cut.tok", "is truncated", "1000 tokens", "need 2064 bytes", "has 1500 bytes"});
  b.resize(10);
  write_all(p, b);
  expect_open_error<IoError>(p, {"cut.tok", "has 10 bytes", "64-byte header"});
  write_all(p, {});
  expect_open_error<IoError>(p, {"cut.tok", "has 0 bytes"});
}

TEST_F(TokenFileTest, TrailingBytesAreRefused) {
  const fs::path p = dir_ / "long.tok";
  std::vector<char> b = valid_file(p);
  b.push_back(0);
  b.push_back(0);
  write_all(p, b);
  expect_open_error<IoError>(p, {"long.tok", "has 2066 bytes", "1000 tokens", "2064 bytes"});
}

TEST_F(TokenFileTest, AbsurdTokenCountIsRefused) {
  const fs::path p = dir_ / "count.tok";
  std::vector<char> b = valid_file(p);
  patch<uint64_t>(b, 16, ~uint64_t{0});
  write_all(p, b);
  expect_open_error<IoError>(p, {"count.tok", "corrupt header"});
}

TEST_F(TokenFileTest, FlippedBitFailsTheChecksum) {
  const fs::path p = dir_ / "flip.tok";
  std::vector<char> b = valid_file(p);
  b[64 + 777] ^= 0x10;
  write_all(p, b);
  expect_open_error<IoError>(p, {"flip.tok", "is corrupt", "checksum", "1000 tokens",
                                 "header says " + format_checksum(field<uint64_t>(b, 32))});
  // Without the check the file opens, and the check can still be run later.
  TokenFile f(p, {.verify_checksum = false});
  EXPECT_EQ(f.size(), 1000u);
  EXPECT_THROW(f.verify_checksum(), IoError);
  // A flipped bit in the stored checksum is found the same way.
  std::vector<char> c = valid_file(p);
  c[33] ^= 0x01;
  write_all(p, c);
  expect_open_error<IoError>(p, {"flip.tok", "checksum"});
}

TEST_F(TokenFileTest, TokensOutsideTheVocabularyAreFoundOnRequest) {
  // A file whose checksum is right but whose header claims a smaller vocabulary.
  const fs::path p = dir_ / "oov.tok";
  std::vector<uint16_t> tokens(100, 3);
  tokens[42] = 200;
  write_token_file(p, tokens, 256);
  std::vector<char> b = read_all(p);
  patch<uint32_t>(b, 24, 10);
  write_all(p, b);
  EXPECT_NO_THROW({ TokenFile f(p); });  // the O(n) token check is off by default
  expect_open_error<IoError>(p, {"oov.tok", "token 200 at position 42", "vocabulary size 10"},
                             {.verify_checksum = true, .verify_tokens = true});
  TokenFile f(p);
  EXPECT_THROW(f.verify_tokens(), IoError);
}

}  // namespace
}  // namespace etr::data
