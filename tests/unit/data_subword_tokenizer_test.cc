// Tests of examples/data/subword_tokenizer.h and subword_trainer.h against SentencePiece's
// own processor (the reference: the ids it gives for the same model bytes), of the
// Hugging Face tokenizer files (hf_tokenizer_files.h), and of the manifest's attachments.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "examples/data/hf_tokenizer_files.h"
#include "examples/data/subword_tokenizer.h"
#include "examples/data/subword_trainer.h"
#include "runtime/error.h"

namespace etr::data {
namespace {

namespace fs = std::filesystem;

// About 60 KB of lines with words, digits, punctuation, accents and a few CJK characters.
std::string corpus(int lines, uint32_t seed) {
  const char* words[] = {"the",  "quick", "brown", "fox",  "jumps", "over", "lazy", "dog",
                         "café", "naïve", "Über",  "日本", "語",    "and",  "sat",  "mat"};
  std::mt19937 rng(seed);
  std::string text;
  for (int l = 0; l < lines; ++l) {
    const int n = 3 + static_cast<int>(rng() % 10);
    for (int w = 0; w < n; ++w) {
      text += words[rng() % std::size(words)];
      text += (rng() % 7 == 0) ? "  " : " ";
    }
    text += std::to_string(rng() % 1000) + (rng() % 3 == 0 ? ".\n" : "\n");
  }
  return text;
}

void write(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct Reference {
  int pieces = -1;
  std::vector<uint16_t> ids;
};

// The piece count and the ids SentencePiece itself gives for `model` in one Encode call
// (the independent reference: tests/unit/sentencepiece_reference.cc).
Reference reference(const std::string& model, const std::string& text) {
  const fs::path dir = fs::temp_directory_path();
  const std::string tag = std::to_string(::getpid());
  const fs::path m = dir / ("etr-ref-" + tag + ".model"), t = dir / ("etr-ref-" + tag + ".txt");
  write(m, model);
  write(t, text);
  const std::string cmd =
      std::string(SENTENCEPIECE_REFERENCE) + " " + m.string() + " " + t.string();
  Reference r;
  if (FILE* f = ::popen(cmd.c_str(), "r")) {
    if (std::fscanf(f, "%d", &r.pieces) == 1) {
      int id = 0;
      while (std::fscanf(f, "%d", &id) == 1) r.ids.push_back(static_cast<uint16_t>(id));
    }
    EXPECT_EQ(::pclose(f), 0) << cmd;
  }
  fs::remove(m);
  fs::remove(t);
  return r;
}

std::vector<uint16_t> reference_ids(const std::string& model, const std::string& text) {
  return reference(model, text).ids;
}

class Trained : public testing::TestWithParam<const char*> {
 protected:
  static const std::string& text() {
    static const std::string t = corpus(2000, 1);
    return t;
  }
  std::string train(uint32_t vocab) const {
    return train_subword_model(text(), {GetParam(), vocab, 1});
  }
};

TEST_P(Trained, IsDeterministicAndHasTheVocabularyAskedForOrFewer) {
  const std::string a = train(400), b = train(400);
  EXPECT_EQ(a, b) << "the same text and options must give the same model bytes";
  const auto t = SubwordTokenizer::from_bytes(a, "a");
  EXPECT_LE(t.vocab_size(), 400u);
  EXPECT_GT(t.vocab_size(), 259u);  // <unk>, <s>, </s>, 256 bytes, and learned pieces
  EXPECT_EQ(static_cast<int>(t.vocab_size()), reference(a, "x").pieces);
  EXPECT_EQ(t.model_bytes(), a);
}

TEST_P(Trained, EncodesAsSentencePieceAndDecodesToTheText) {
  const auto t = SubwordTokenizer::from_bytes(train(400), "m");
  const std::string samples[] = {text(),
                                 "",
                                 "x",
                                 "  two  spaces, a\ttab\nand lines\n\n",
                                 "Über café ☃ 😀 ｆｕｌｌ",
                                 "<s> </s> <unk> as text"};
  for (const std::string& s : samples) {
    const std::vector<uint16_t> ids = t.encode(s);
    EXPECT_EQ(ids, reference_ids(t.model_bytes(), s)) << s.substr(0, 40);
    EXPECT_EQ(t.decode(ids), s) << "round trip of " << s.substr(0, 40);
    for (uint16_t id : ids) ASSERT_LT(id, t.vocab_size());
  }
  // Fewer tokens than bytes: the pieces were learned from this text.
  EXPECT_LT(t.encode(text()).size(), text().size());
}

// Text is encoded in chunks of about 1 MiB cut after a newline. A BPE model gives exactly
// the ids of one call; a unigram model may segment the first word of a chunk otherwise
// (SentencePiece's lattice sees the text before it), so there only the text and about
// the count are checked.
TEST_P(Trained, EncodesATextOfSeveralChunksAsOneCall) {
  const auto t = SubwordTokenizer::from_bytes(train(400), "m");
  std::string big;
  while (big.size() < (size_t{5} << 19)) big += text();  // > 2 MiB: three chunks
  const std::vector<uint16_t> ids = t.encode(big);
  const std::vector<uint16_t> ref = reference_ids(t.model_bytes(), big);
  EXPECT_EQ(t.decode(ids), big);
  if (std::string(GetParam()) == "bpe") {
    EXPECT_EQ(ids, ref);
  } else {
    EXPECT_NEAR(static_cast<double>(ids.size()), static_cast<double>(ref.size()), 16.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, Trained, testing::Values("bpe", "unigram"));

TEST(SubwordTrainer, RefusesWhatCannotBeTrained) {
  const std::string text = corpus(200, 2);
  EXPECT_THROW(train_subword_model(text, {"wordpiece", 400, 1}), ConfigError);
  EXPECT_THROW(train_subword_model(text, {"bpe", 259, 1}), ConfigError);
  EXPECT_THROW(train_subword_model(text, {"bpe", 65537, 1}), ConfigError);
  EXPECT_THROW(train_subword_model("", {"bpe", 400, 1}), ConfigError);
  EXPECT_THROW(train_subword_model("\n\n\n", {"unigram", 400, 1}), ConfigError);
  try {
    train_subword_model(text, {"bpe", 270, 1});  // fewer pieces than the text's characters
    FAIL() << "a vocabulary smaller than the characters was trained";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("Vocabulary size is smaller"), std::string::npos)
        << e.what();
  }
}

TEST(SubwordTokenizer, RefusesFilesThatAreNotModels) {
  EXPECT_THROW(SubwordTokenizer::load("/nonexistent/tok.model"), IoError);
  EXPECT_THROW(SubwordTokenizer::load(fs::temp_directory_path()), IoError);
  EXPECT_THROW(SubwordTokenizer::from_bytes("", "empty"), ConfigError);
  EXPECT_THROW(SubwordTokenizer::from_bytes("not a model at all", "text"), ConfigError);
  try {
    SubwordTokenizer::from_bytes("garbage", "g.model");
    FAIL() << "garbage loaded as a model";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'g.model' is not a SentencePiece model"),
              std::string::npos)
        << e.what();
  }
}

TEST(SubwordTokenizer, ACorruptModelIsAnErrorNeverACrash) {
  const std::string model = train_subword_model(corpus(300, 3), {"bpe", 400, 1});
  std::mt19937 rng(5);
  int refused = 0;
  for (int i = 0; i < 200; ++i) {
    std::string bad = model;
    if (i % 2 == 0) {
      bad.resize(rng() % model.size());  // truncated
    } else {
      for (int k = 0; k < 8; ++k) bad[rng() % bad.size()] = static_cast<char>(rng());  // flipped
    }
    try {
      const auto t = SubwordTokenizer::from_bytes(bad, "bad");
      // Some damage leaves a parseable model: it must still work within its vocabulary.
      const auto ids = t.encode("the quick brown fox");
      for (uint16_t id : ids) ASSERT_LT(id, t.vocab_size());
      (void)t.decode(ids);
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 50);
}

TEST(SubwordTokenizer, DecodeRefusesIdsOutsideTheVocabulary) {
  const auto t =
      SubwordTokenizer::from_bytes(train_subword_model(corpus(300, 4), {"unigram", 400, 1}), "m");
  const std::vector<uint16_t> ids = {5, static_cast<uint16_t>(t.vocab_size())};
  EXPECT_THROW(t.decode(ids), InvalidArgument);
  EXPECT_EQ(tokenizer_sidecar_path("dir/train.tok"), fs::path("dir/train.tok.tokenizer.model"));
}

TEST(HfTokenizerFiles, WritesTheModelAndAConfigWithoutAddedTokens) {
  const std::string model = train_subword_model(corpus(300, 6), {"bpe", 400, 1});
  const auto t = SubwordTokenizer::from_bytes(model, "m");
  const fs::path dir = fs::temp_directory_path() / ("etr-hf-tok-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  write_hf_tokenizer(dir, t, 64);
  std::ifstream in(dir / "tokenizer.model", std::ios::binary);
  const std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(written, model);
  const auto config = nlohmann::json::parse(std::ifstream(dir / "tokenizer_config.json"));
  EXPECT_EQ(config["add_bos_token"], false);
  EXPECT_EQ(config["add_eos_token"], false);
  EXPECT_EQ(config["model_max_length"], 64);
  EXPECT_EQ(config["unk_token"], "<unk>");
  const auto map = nlohmann::json::parse(std::ifstream(dir / "special_tokens_map.json"));
  EXPECT_EQ(map["bos_token"], "<s>");
  EXPECT_EQ(map["eos_token"], "</s>");
  fs::remove_all(dir);
}

TEST(ManifestAttachments, NamesArePlainAndUnique) {
  ckpt::Manifest m;
  auto* a = m.add_attachments();
  a->set_name("tokenizer.model");
  a->set_data("bytes");
  EXPECT_EQ(check_manifest_sense(m), "");
  m.add_attachments()->set_name("tokenizer.model");
  EXPECT_NE(check_manifest_sense(m).find("twice"), std::string::npos);
  m.mutable_attachments()->RemoveLast();
  m.add_attachments()->set_name("../escape");
  EXPECT_NE(check_manifest_sense(m).find("not a plain file name"), std::string::npos);
}

}  // namespace
}  // namespace etr::data
