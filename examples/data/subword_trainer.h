// Trains a SentencePiece model (subword_tokenizer.h) on a text, for etr-tokenize
// --train-tokenizer. The options are chosen for a language model's training data:
//
//   byte_fallback = true             any text encodes: a character the model has no piece
//                                    for becomes its UTF-8 bytes (256 byte pieces)
//   character_coverage = 1.0         every character of the corpus is kept
//   normalization identity,          no NFKC, no squeezing of whitespace, no dummy prefix
//   remove_extra_whitespaces false,  space: decode(encode(text)) == text for every text,
//   add_dummy_prefix false           and text cut into pieces encodes like the whole
//   hard_vocab_limit = false         a small corpus gives fewer pieces rather than an
//                                    error (unigram); the model says how many it has
//   num_threads = 1, a fixed seed    the same text and options give the same model bytes
//
// The corpus is read line by line (a sentence a line; empty lines skipped, lines longer
// than 64 KiB ignored by SentencePiece). Pieces never contain a newline: it encodes as
// its byte piece.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace etr::data {

struct SubwordTrainOptions {
  std::string type = "bpe";  // "bpe" or "unigram"
  uint32_t vocab_size = 0;   // pieces asked for: more than the 259 fixed ones, <= 65536
  uint32_t seed = 1;         // SentencePiece's random generator (sentence sampling)
};

// The serialized model (the bytes of a `.model` file). ConfigError, one sentence, for a
// type other than bpe/unigram, a vocabulary outside (259, 65536], or whatever
// SentencePiece refuses (an empty corpus, a vocabulary too large for a BPE corpus or too
// small for its characters), in SentencePiece's words.
std::string train_subword_model(std::string_view text, const SubwordTrainOptions& options);

}  // namespace etr::data
