// Tests of the foreign token file formats (examples/data/token_file_format.h): files
// written byte for byte as llm.c (dev/data/data_common.py write_datafile: 256 int32, then
// uint16) and nanoGPT (np.uint16 .tofile) write them give the tokens an etr token file of
// the same tokens gives, mapped in place; every kind of bad file is one sentence.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "examples/data/token_data_source.h"
#include "examples/data/token_file.h"
#include "examples/data/token_file_format.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"
#include "runtime/host_allocator.h"
#include "runtime/log.h"
#include "temp_dir.h"

namespace etr::data {
namespace {

namespace fs = std::filesystem;

std::vector<uint16_t> random_tokens(size_t n, uint32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint16_t> t(n);
  for (uint16_t& x : t) x = static_cast<uint16_t>(rng() % vocab);
  return t;
}

void append_le(std::vector<char>& out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// llm.c's write_datafile: header = np.zeros(256, int32); [0] magic, [1] version, [2] count;
// then the tokens as little-endian uint16.
std::vector<char> llmc_bytes(const std::vector<uint16_t>& tokens, int32_t magic = kLlmcMagic,
                             int32_t version = 1) {
  std::array<int32_t, 256> header{};
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(tokens.size());
  std::vector<char> out;
  for (const int32_t h : header) append_le(out, static_cast<uint32_t>(h), 4);
  for (const uint16_t t : tokens) append_le(out, t, 2);
  return out;
}

// nanoGPT's prepare.py: np.array(ids, dtype=np.uint16).tofile(path).
std::vector<char> nanogpt_bytes(const std::vector<uint16_t>& tokens) {
  std::vector<char> out;
  for (const uint16_t t : tokens) append_le(out, t, 2);
  return out;
}

class ForeignTokenFileTest : public ::testing::Test {
 protected:
  fs::path write(const std::string& name, const std::vector<char>& bytes) {
    return tmp_.write(name, std::string(bytes.begin(), bytes.end()));
  }

  // Expects opening `p` to throw E with one line containing every one of `parts`.
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
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "wrong exception type: " << e.what();
    }
  }

  etr::testing::TempDir tmp_{"etr-foreign-tokens"};
  const fs::path& dir_ = tmp_.path();
};

TokenFileOptions with(TokenFileFormat format, std::optional<uint32_t> vocab = std::nullopt) {
  TokenFileOptions o;
  o.format = format;
  o.vocab_size = vocab;
  return o;
}

TEST(TokenFileFormatTest, ParsesTheNamesOfDataFormat) {
  for (auto f : {TokenFileFormat::kAuto, TokenFileFormat::kEtr, TokenFileFormat::kLlmc,
                 TokenFileFormat::kNanogpt}) {
    EXPECT_EQ(parse_token_file_format(token_file_format_name(f)), f);
  }
  try {
    parse_token_file_format("llm.c");
    ADD_FAILURE() << "llm.c parsed";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("choose auto"), std::string::npos) << e.what();
  }
}

TEST_F(ForeignTokenFileTest, AllThreeFormatsGiveTheSameTokensInPlace) {
  for (size_t n : {0, 1, 7, 4097}) {
    const std::vector<uint16_t> tokens = random_tokens(n, 50257, static_cast<uint32_t>(n + 1));
    const fs::path etr = dir_ / "same.tok";
    write_token_file(etr, tokens, 50257);
    const fs::path llmc = write("same_llmc.bin", llmc_bytes(tokens));
    const fs::path nano = write("same_nanogpt.bin", nanogpt_bytes(tokens));
    const TokenFile a(etr);
    const TokenFile b(llmc);  // auto: llm.c by its magic
    const TokenFile c(nano, with(TokenFileFormat::kNanogpt, 50257));
    EXPECT_EQ(b.format(), TokenFileFormat::kLlmc);
    EXPECT_EQ(c.format(), TokenFileFormat::kNanogpt);
    EXPECT_EQ(b.layout().offset, kLlmcHeaderBytes);
    EXPECT_EQ(c.layout().offset, 0u);
    EXPECT_EQ(b.file_bytes(), kLlmcHeaderBytes + 2 * n);
    EXPECT_EQ(c.file_bytes(), 2 * n);
    EXPECT_EQ(b.vocab_size(), kGpt2VocabSize);
    EXPECT_EQ(b.header().version, 1u);
    for (const TokenFile* f : {&a, &b, &c}) {
      ASSERT_EQ(f->size(), n);
      EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), f->tokens().begin()));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(f->tokens().data()) % alignof(uint16_t), 0u);
      EXPECT_NO_THROW(f->verify_checksum());  // none to verify
    }
  }
}

TEST_F(ForeignTokenFileTest, TheTokensAreMappedNotCopied) {
  // The span points into the map: page-aligned base + the header's size.
  const fs::path p = write("mapped.bin", llmc_bytes(random_tokens(5000, 256, 3)));
  const TokenFile f(p);
  const auto at = reinterpret_cast<uintptr_t>(f.tokens().data());
  EXPECT_EQ((at - kLlmcHeaderBytes) % static_cast<uintptr_t>(::getpagesize()), 0u);
  const fs::path q = write("mapped_nanogpt.bin", nanogpt_bytes(random_tokens(5000, 256, 3)));
  const TokenFile g(q, with(TokenFileFormat::kNanogpt, 256));
  EXPECT_EQ(
      reinterpret_cast<uintptr_t>(g.tokens().data()) % static_cast<uintptr_t>(::getpagesize()), 0u);
}

TEST_F(ForeignTokenFileTest, VocabularyIsGpt2sOrTheGivenOne) {
  const std::vector<uint16_t> tokens = {1, 2, 255, 0};
  const fs::path llmc = write("v.bin", llmc_bytes(tokens));
  EXPECT_EQ(TokenFile(llmc).vocab_size(), 50257u);
  EXPECT_FALSE(TokenFile(llmc).layout().vocab_given);
  EXPECT_EQ(TokenFile(llmc, with(TokenFileFormat::kLlmc, 256)).vocab_size(), 256u);
  EXPECT_TRUE(TokenFile(llmc, with(TokenFileFormat::kAuto, 256)).layout().vocab_given);
  const fs::path nano = write("v_nanogpt.bin", nanogpt_bytes(tokens));
  EXPECT_EQ(TokenFile(nano, with(TokenFileFormat::kNanogpt)).vocab_size(), 0u);  // unknown
  EXPECT_EQ(TokenFile(nano, with(TokenFileFormat::kNanogpt, 300)).vocab_size(), 300u);
  // An etr file's header wins over a given vocabulary.
  const fs::path etr = dir_ / "v.tok";
  write_token_file(etr, tokens, 256);
  EXPECT_EQ(TokenFile(etr, with(TokenFileFormat::kAuto, 50257)).vocab_size(), 256u);
}

TEST_F(ForeignTokenFileTest, AutoRefusesAHeaderlessFile) {
  const fs::path p = write("train.bin", nanogpt_bytes({10, 20, 30, 40, 50}));
  expect_open_error<ConfigError>(
      p, {"train.bin", "is not an etr token file nor an llm.c one", "data.format=nanogpt"});
}

TEST_F(ForeignTokenFileTest, LlmcErrorsAreOneSentence) {
  const std::vector<uint16_t> tokens = random_tokens(100, 256, 9);
  // Named llmc, but not one.
  const fs::path etr = dir_ / "etr.tok";
  write_token_file(etr, tokens, 256);
  expect_open_error<ConfigError>(etr, {"etr.tok", "is not an llm.c token file", "20240520"},
                                 with(TokenFileFormat::kLlmc));
  // Other versions, and the LLaMA-3 files (uint32 tokens).
  expect_open_error<ConfigError>(write("v2.bin", llmc_bytes(tokens, kLlmcMagic, 2)),
                                 {"v2.bin", "version 2", "etr's tokens are uint16"});
  expect_open_error<ConfigError>(write("llama.bin", llmc_bytes(tokens, kLlmcLlama3Magic, 7)),
                                 {"llama.bin", "LLaMA-3", "uint32", "etr's tokens are uint16"});
  // Truncated: in the tokens, in the header; trailing bytes; a negative count.
  std::vector<char> b = llmc_bytes(tokens);
  b.resize(b.size() - 3);
  expect_open_error<IoError>(write("cut.bin", b),
                             {"cut.bin", "is corrupt", "100 tokens", "1224 bytes", "truncated"});
  b.resize(600);
  expect_open_error<IoError>(write("cut_header.bin", b), {"cut_header.bin", "truncated", "1024"});
  b = llmc_bytes(tokens);
  b.push_back(0);
  b.push_back(0);
  expect_open_error<IoError>(write("long.bin", b), {"long.bin", "more than the header says"});
  b = llmc_bytes(tokens);
  std::memset(b.data() + 8, 0xff, 4);
  expect_open_error<IoError>(write("negative.bin", b), {"negative.bin", "-1 tokens"});
}

TEST_F(ForeignTokenFileTest, NanogptErrorsAreOneSentence) {
  std::vector<char> b = nanogpt_bytes(random_tokens(100, 256, 4));
  b.pop_back();
  expect_open_error<IoError>(write("odd.bin", b), {"odd.bin", "199 bytes", "odd"},
                             with(TokenFileFormat::kNanogpt, 256));
  // A file with a header, named nanogpt: its header would be read as tokens.
  const fs::path etr = dir_ / "etr.tok";
  write_token_file(etr, random_tokens(10, 256, 1), 256);
  expect_open_error<ConfigError>(etr,
                                 {"etr.tok", "header of an etr token file", "data.format=auto"},
                                 with(TokenFileFormat::kNanogpt, 256));
  expect_open_error<ConfigError>(write("l.bin", llmc_bytes({1, 2})),
                                 {"l.bin", "header of an llm.c token file"},
                                 with(TokenFileFormat::kNanogpt, 256));
  // An empty .bin holds no tokens (the data source then finds no window).
  EXPECT_EQ(TokenFile(write("empty.bin", {}), with(TokenFileFormat::kNanogpt, 256)).size(), 0u);
}

TEST_F(ForeignTokenFileTest, ATokenOutsideTheVocabularyIsNamedByItsPosition) {
  std::vector<uint16_t> tokens = random_tokens(100, 256, 2);
  tokens[41] = 300;
  expect_open_error<ConfigError>(write("oov.bin", llmc_bytes(tokens)),
                                 {"llm.c token file", "oov.bin", "token 300 at position 41",
                                  "vocabulary size 256", "model.vocab_size"},
                                 with(TokenFileFormat::kAuto, 256));
  expect_open_error<ConfigError>(write("oov_nanogpt.bin", nanogpt_bytes(tokens)),
                                 {"nanoGPT .bin", "token 300 at position 41"},
                                 with(TokenFileFormat::kNanogpt, 256));
  tokens[7] = 60000;  // above GPT-2's vocabulary
  expect_open_error<ConfigError>(write("oov_gpt2.bin", llmc_bytes(tokens)),
                                 {"token 60000 at position 7", "vocabulary size 50257", "GPT-2"});
}

// The data source of etr-train on each format: the vocabulary flows into the check
// against model.vocab_size as an etr header's does.
TEST_F(ForeignTokenFileTest, DataSourceChecksTheFilesVocabularyAgainstTheModels) {
  const std::vector<uint16_t> tokens = random_tokens(3000, 256, 8);
  const fs::path llmc = write("ds.bin", llmc_bytes(tokens));
  const fs::path nano = write("ds_nanogpt.bin", nanogpt_bytes(tokens));
  HostAllocator alloc(size_t{1} << 30);
  Logger log("test", stderr);
  log.set_level(LogLevel::kOff);
  auto source = [&](const fs::path& p, const std::string& format, std::optional<uint32_t> given) {
    TrainConfig c;
    c.mutable_data()->set_train_file(p.string());
    c.mutable_data()->set_format(format);
    c.mutable_data()->set_val_fraction(0.1);
    return TokenDataSource(c, 64, 256, alloc, log, true, given);
  };
  const TokenDataSource a = source(llmc, "auto", 256);
  ASSERT_EQ(a.tokens().size(), tokens.size());
  EXPECT_TRUE(std::equal(tokens.begin(), tokens.end(), a.tokens().begin()));
  const TokenDataSource b = source(nano, "nanogpt", 256);
  EXPECT_EQ(b.train_samples(), a.train_samples());
  auto expect_error = [&](const fs::path& p, const std::string& format, const std::string& part) {
    try {
      source(p, format, std::nullopt);
      ADD_FAILURE() << p << " loaded";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error(llmc, "llmc", "vocabulary (50257, GPT-2's");
  expect_error(nano, "nanogpt", "records no vocabulary; set model.vocab_size");
}

}  // namespace
}  // namespace etr::data
