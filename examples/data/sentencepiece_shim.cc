// libetr_sentencepiece.so: SentencePiece behind SentencePieceModel and the training entry
// point (sentencepiece_backend.h explains why it is a library of its own). It includes no
// etr header that could bring protobuf in, and throws nothing across its boundary.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <exception>
#include <memory>
#include <string>

#include "examples/data/sentencepiece_backend.h"

namespace {

using etr::data::SentencePieceModel;

std::string message(const sentencepiece::util::Status& status) {
  return status.ok() ? std::string() : status.ToString();
}

class Model final : public SentencePieceModel {
 public:
  std::string load(const std::string& bytes) override {
    try {
      return message(sp_.LoadFromSerializedProto(bytes));
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  int piece_size() const override { return sp_.GetPieceSize(); }
  bool is_byte(int id) const override { return sp_.IsByte(id); }
  std::string id_to_piece(int id) const override { return sp_.IdToPiece(id); }
  int unk_id() const override { return sp_.unk_id(); }
  int bos_id() const override { return sp_.bos_id(); }
  int eos_id() const override { return sp_.eos_id(); }
  int pad_id() const override { return sp_.pad_id(); }
  std::string encode(std::string_view text, std::vector<int>* ids) const override {
    try {
      return message(sp_.Encode(text, ids));
    } catch (const std::exception& e) {
      return e.what();
    }
  }
  std::string decode(const std::vector<int>& ids, std::string* text) const override {
    try {
      return message(sp_.Decode(ids, text));
    } catch (const std::exception& e) {
      return e.what();
    }
  }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

// The corpus's non-empty lines, without their newline (or a trailing '\r').
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::string_view text) : text_(text) { advance(); }
  bool done() const override { return done_; }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    while (pos_ < text_.size()) {
      size_t end = text_.find('\n', pos_);
      if (end == std::string_view::npos) end = text_.size();
      std::string_view line = text_.substr(pos_, end - pos_);
      pos_ = end + 1;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      line_.assign(line);
      return;
    }
    done_ = true;
  }

  std::string_view text_;
  size_t pos_ = 0;
  std::string line_;
  bool done_ = false;
};

}  // namespace

extern "C" __attribute__((visibility("default"))) std::unique_ptr<SentencePieceModel>
etr_sentencepiece_new_model() {
  return std::make_unique<Model>();
}

extern "C" __attribute__((visibility("default"))) std::string etr_sentencepiece_train(
    const std::unordered_map<std::string, std::string>& args, std::string_view text, uint32_t seed,
    std::string* model) {
  try {
    sentencepiece::SetRandomGeneratorSeed(seed);
    LineIterator lines(text);
    return message(sentencepiece::SentencePieceTrainer::Train(args, &lines, model));
  } catch (const std::exception& e) {
    return e.what();
  }
}
