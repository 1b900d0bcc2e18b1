// Tests of examples/train/training_tokenizer.h: which tokenizer etr-train takes (the
// configured model, the sidecar beside the token file, or bytes), the vocabulary it gives
// the model, and the one-sentence refusals when model, data and config disagree.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/durable_file.h"
#include "examples/data/subword_tokenizer.h"
#include "examples/data/subword_trainer.h"
#include "examples/data/token_file.h"
#include "examples/train/training_tokenizer.h"
#include "runtime/error.h"

namespace etr::gpt {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;

std::string text(int salt) {
  std::string t;
  for (int i = 0; i < 400; ++i) {
    t += "line " + std::to_string(i * salt) + ": the quick brown fox jumps over the lazy dog\n";
  }
  return t;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  write_file_durably(p, bytes.data(), bytes.size());
}

class TrainingTokenizerTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("etr-train-tok-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    model_a_ = data::train_subword_model(text(1), {"bpe", 360, 1});
    model_b_ = data::train_subword_model(text(3), {"unigram", 340, 1});
    write_bytes(dir_ / "a.model", model_a_);
    write_bytes(dir_ / "b.model", model_b_);
    // train.tok: subword tokens of model A with its sidecar; bytes.tok: byte tokens.
    const auto a = data::SubwordTokenizer::from_bytes(model_a_, "a");
    data::write_token_file(dir_ / "train.tok", a.encode(text(1)), a.vocab_size());
    write_bytes(data::tokenizer_sidecar_path(dir_ / "train.tok"), model_a_);
    const std::string t = text(1);
    data::write_token_file(dir_ / "bytes.tok", std::vector<uint16_t>(t.begin(), t.end()), 256);
    pieces_a_ = static_cast<int>(a.vocab_size());
  }
  void TearDown() override { fs::remove_all(dir_); }

  TrainConfig config(const std::string& train_file, const std::string& model = "") const {
    TrainConfig c;
    c.mutable_data()->set_train_file((dir_ / train_file).string());
    if (!model.empty()) c.mutable_data()->set_tokenizer_model((dir_ / model).string());
    return c;
  }
  // The ConfigError message of resolving `c`, or "" when it resolved.
  static std::string refusal(TrainConfig c) {
    try {
      resolve_training_tokenizer(c);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  std::string model_a_, model_b_;
  int pieces_a_ = 0;
};

TEST_F(TrainingTokenizerTest, TakesTheSidecarAndItsVocabulary) {
  TrainConfig c = config("train.tok");
  resolve_training_tokenizer(c);
  EXPECT_EQ(c.data().tokenizer_model(), data::tokenizer_sidecar_path(dir_ / "train.tok").string());
  EXPECT_EQ(c.model().vocab_size(), pieces_a_);
  const TrainingTokenizer t = TrainingTokenizer::from(c);
  ASSERT_FALSE(t.is_bytes());
  EXPECT_EQ(t.model_bytes(), model_a_);
  const std::vector<uint16_t> ids = t.encode("the quick brown fox");
  EXPECT_LT(ids.size(), 19u);
  EXPECT_EQ(t.decode_for_display(ids), "the quick brown fox");
}

TEST_F(TrainingTokenizerTest, AcceptsTheSameModelConfiguredAndAMatchingOrZeroVocabulary) {
  for (int vocab : {-1, 0, pieces_a_}) {
    TrainConfig c = config("train.tok", "a.model");
    if (vocab >= 0) c.mutable_model()->set_vocab_size(vocab);
    resolve_training_tokenizer(c);
    EXPECT_EQ(c.model().vocab_size(), pieces_a_);
  }
}

TEST_F(TrainingTokenizerTest, BytesWithoutATokenizer) {
  TrainConfig c = config("bytes.tok");
  resolve_training_tokenizer(c);
  EXPECT_EQ(c.data().tokenizer_model(), "");
  EXPECT_FALSE(c.model().has_vocab_size());  // the preset's 256 follows in resolve()
  EXPECT_TRUE(TrainingTokenizer::from(c).is_bytes());
  EXPECT_EQ(TrainingTokenizer::from(c).decode_for_display(std::vector<uint16_t>{104, 105}), "hi");
}

TEST_F(TrainingTokenizerTest, RefusesDisagreements) {
  TrainConfig c = config("train.tok");
  c.mutable_model()->set_vocab_size(256);
  EXPECT_THAT(refusal(c), HasSubstr("model.vocab_size = 256 but the tokenizer"));
  EXPECT_THAT(refusal(config("train.tok", "b.model")),
              HasSubstr("is not the tokenizer that made data.train_file"));
  EXPECT_THAT(refusal(config("bytes.tok", "a.model")), HasSubstr("has a vocabulary of 256"));
  TrainConfig synthetic;
  synthetic.mutable_data()->set_synthetic(true);
  synthetic.mutable_data()->set_tokenizer_model((dir_ / "a.model").string());
  EXPECT_THAT(refusal(synthetic), HasSubstr("data.synthetic's tokens are bytes"));
}

TEST_F(TrainingTokenizerTest, AMissingOrCorruptModelIsAnError) {
  TrainConfig missing = config("train.tok", "none.model");
  EXPECT_THROW(resolve_training_tokenizer(missing), IoError);
  write_bytes(data::tokenizer_sidecar_path(dir_ / "train.tok"), model_a_.substr(0, 50));
  EXPECT_THAT(refusal(config("train.tok")), HasSubstr("is not a SentencePiece model"));
}

}  // namespace
}  // namespace etr::gpt
