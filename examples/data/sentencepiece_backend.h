// SentencePiece behind a small interface, in a shared library of its own
// (libetr_sentencepiece.so, sentencepiece_shim.cc) that etr loads with
// dlopen(RTLD_DEEPBIND).
//
// Why: Debian's libsentencepiece carries its own copy of protobuf-lite 3.14 and exports
// its symbols; etr links the system libprotobuf (3.21). Linked into one program, the
// dynamic linker binds libsentencepiece's protobuf calls to the system library and its
// version check aborts at start-up ("compiled against version 3.14.0 ... not compatible
// with the installed version"). Loaded with RTLD_DEEPBIND, the shim and libsentencepiece
// resolve their symbols among themselves first, so each protobuf stays with its own
// code. Only the shim links libsentencepiece; no other etr target may (the clash is at
// load time).
//
// The interface passes only standard-library types (one libstdc++ is shared) and never
// throws: failures come back as SentencePiece's message, which the callers
// (subword_tokenizer.cc, subword_trainer.cc) turn into etr's errors. Sanitizer runtimes
// refuse RTLD_DEEPBIND, so subword tokenizers are unavailable in sanitizer builds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace etr::data {

// One loaded SentencePiece model (a SentencePieceProcessor).
class SentencePieceModel {
 public:
  virtual ~SentencePieceModel() = default;
  // Parses a serialized model: "" on success, else SentencePiece's reason.
  virtual std::string load(const std::string& bytes) = 0;
  virtual int piece_size() const = 0;
  virtual bool is_byte(int id) const = 0;
  virtual std::string id_to_piece(int id) const = 0;
  // The ids of <unk>, <s>, </s>, <pad>; -1 for those the model lacks.
  virtual int unk_id() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual int pad_id() const = 0;
  // "" on success, else the reason.
  virtual std::string encode(std::string_view text, std::vector<int>* ids) const = 0;
  virtual std::string decode(const std::vector<int>& ids, std::string* text) const = 0;
};

// The shim's entry points (extern "C" in the library).
struct SentencePieceApi {
  // A new, empty model.
  std::unique_ptr<SentencePieceModel> (*new_model)() = nullptr;
  // Trains on the non-empty lines of `text` (a trailing '\r' dropped) with the trainer's
  // `args` (name -> value, as spm_train's flags) after seeding its random generator with
  // `seed`; the serialized model into *model. "" on success, else the reason.
  std::string (*train)(const std::unordered_map<std::string, std::string>& args,
                       std::string_view text, uint32_t seed, std::string* model) = nullptr;
};

// The loaded shim (loaded once per process). Throws ConfigError naming the library and
// dlerror() when it cannot be loaded.
const SentencePieceApi& sentencepiece_api();

}  // namespace etr::data
