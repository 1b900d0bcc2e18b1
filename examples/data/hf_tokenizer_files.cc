#include "examples/data/hf_tokenizer_files.h"

#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/durable_file.h"

namespace etr::data {

void write_hf_tokenizer(const std::filesystem::path& dir, const SubwordTokenizer& tokenizer,
                        int64_t max_length) {
  const std::string& model = tokenizer.model_bytes();
  write_file_durably(dir / kTokenizerModelFile, model.data(), model.size());
  nlohmann::json specials = nlohmann::json::object();
  for (const auto& [role, piece] : tokenizer.special_pieces()) specials[role] = piece;
  nlohmann::json config = {
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"add_bos_token", false},
      {"add_eos_token", false},
      // "<s>" in a text is three characters to SentencePiece, as it is here.
      {"split_special_tokens", true},
      {"clean_up_tokenization_spaces", false},
      {"legacy", true},
      {"model_max_length", max_length},
  };
  config.update(specials);
  const std::string config_text = config.dump(2) + "\n";
  write_file_durably(dir / "tokenizer_config.json", config_text.data(), config_text.size());
  const std::string map_text = specials.dump(2) + "\n";
  write_file_durably(dir / "special_tokens_map.json", map_text.data(), map_text.size());
}

}  // namespace etr::data
