// ByteTokenizer: the example GPT's tokenizer. Every byte is one token, so the vocabulary
// is the 256 byte values and any text (any bytes, valid UTF-8 or not) round-trips:
//
//   std::vector<uint16_t> t = ByteTokenizer::encode("héllo\n");  // 7 tokens, 0..255
//   ByteTokenizer::decode(t) == "héllo\n"                          // lossless
//   ByteTokenizer::decode_for_display(model_output)                // always valid UTF-8
//
// decode() is the exact inverse of encode(). decode_for_display() is for printing what a
// model generated, which need not be valid UTF-8: each maximal ill-formed subsequence
// becomes one U+FFFD (the Unicode "maximal subpart" practice, as browsers and Python's
// errors="replace" do), and control bytes other than tab and newline become the visible
// control pictures U+2400..U+241F (U+2421 for DEL), so that a sample cannot move the
// terminal's cursor or change its colours.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace etr::data {

class ByteTokenizer {
 public:
  static constexpr uint32_t kVocabSize = 256;

  // Token i is the byte text[i].
  static std::vector<uint16_t> encode(std::string_view text);
  // The bytes the tokens stand for; throws InvalidArgument naming the first token >= 256
  // and its position.
  static std::string decode(std::span<const uint16_t> tokens);
  // Valid UTF-8 for a terminal (see the top of this file); tokens >= 256 also become U+FFFD.
  static std::string decode_for_display(std::span<const uint16_t> tokens);
};

// The display form of raw bytes (decode_for_display without the tokens).
std::string sanitize_utf8_for_display(std::string_view bytes);

}  // namespace etr::data
