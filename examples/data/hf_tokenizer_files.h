// A SentencePiece tokenizer as Hugging Face transformers loads it, written beside an
// exported GPT-2 (examples/gpt/hf_weights.h) by etr-ckpt export and etr-train's
// output.export_safetensors:
//
//   tokenizer.model          the SentencePiece model, byte for byte
//   tokenizer_config.json    tokenizer_class PreTrainedTokenizerFast (transformers 5 builds
//                            it from tokenizer.model following the model's own normaliser
//                            settings), no BOS/EOS added, special tokens split like text
//   special_tokens_map.json  the model's <unk>, <s>, </s> pieces
//
// AutoTokenizer.from_pretrained(dir).encode(text) then gives the ids etr-tokenize
// --tokenizer gives (tests/compat/sentencepiece_compat.py checks it, with generation).
// Known difference: a unigram model's literal "<s>"/"</s>"/"<unk>" text encodes as those
// pieces in transformers and as its characters in SentencePiece.
#pragma once

#include <cstdint>
#include <filesystem>

#include "examples/data/subword_tokenizer.h"

namespace etr::data {

// The model's file name in a Hugging Face directory, and the name of the attachment that
// carries its bytes in an etr-train checkpoint (docs/checkpoint_format.md).
inline constexpr const char* kTokenizerModelFile = "tokenizer.model";

// Writes the three files into the existing directory `dir` (each durably); IoError
// naming the file on failure. `max_length`: the model's context (model_max_length).
void write_hf_tokenizer(const std::filesystem::path& dir, const SubwordTokenizer& tokenizer,
                        int64_t max_length);

}  // namespace etr::data
