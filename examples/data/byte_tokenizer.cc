// ByteTokenizer (see byte_tokenizer.h). The UTF-8 check follows the Unicode Standard's
// table of well-formed byte sequences (chapter 3, table 3-7):
//
//   first byte  second    third     fourth
//   00..7F
//   C2..DF      80..BF
//   E0          A0..BF    80..BF
//   E1..EC      80..BF    80..BF
//   ED          80..9F    80..BF                 (no UTF-16 surrogates)
//   EE..EF      80..BF    80..BF
//   F0          90..BF    80..BF    80..BF       (no overlong forms)
//   F1..F3      80..BF    80..BF    80..BF
//   F4          80..8F    80..BF    80..BF       (nothing above U+10FFFF)
//
// A sequence that breaks the table is replaced by one U+FFFD for its longest prefix that
// could still have been the start of a well-formed sequence (at least one byte).
#include "examples/data/byte_tokenizer.h"

#include <string>

#include "runtime/error.h"

namespace etr::data {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The length of the well-formed sequence a lead byte starts (0: it starts none) and the
// range its second byte must lie in.
struct Lead {
  int length;
  unsigned char second_lo;
  unsigned char second_hi;
};

Lead classify_lead(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};  // 80..C1 (continuation or overlong lead), F5..FF
}

// Appends the UTF-8 form of a code point below U+10000.
void append_bmp(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void append_ascii_for_display(std::string& out, unsigned char b) {
  if (b == '\n' || b == '\t') {
    out += static_cast<char>(b);
  } else if (b < 0x20) {
    append_bmp(out, 0x2400 + b);  // control pictures: U+2400 SYMBOL FOR NULL, ...
  } else if (b == 0x7F) {
    append_bmp(out, 0x2421);  // SYMBOL FOR DELETE
  } else {
    out += static_cast<char>(b);
  }
}

}  // namespace

std::vector<uint16_t> ByteTokenizer::encode(std::string_view text) {
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string ByteTokenizer::decode(std::span<const uint16_t> tokens) {
  std::string text(tokens.size(), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= kVocabSize) {
      throw InvalidArgument("token " + std::to_string(tokens[i]) + " at position " +
                            std::to_string(i) + " is not a byte; the byte tokenizer's tokens are " +
                            "0.." + std::to_string(kVocabSize - 1));
    }
    text[i] = static_cast<char>(tokens[i]);
  }
  return text;
}

std::string ByteTokenizer::decode_for_display(std::span<const uint16_t> tokens) {
  // Out-of-vocabulary tokens break any sequence they fall in, like an invalid byte: decode
  // the valid runs between them separately.
  std::string out;
  std::string run;
  for (uint16_t t : tokens) {
    if (t < kVocabSize) {
      run += static_cast<char>(t);
      continue;
    }
    out += sanitize_utf8_for_display(run);
    out += kReplacement;
    run.clear();
  }
  out += sanitize_utf8_for_display(run);
  return out;
}

std::string sanitize_utf8_for_display(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    const Lead lead = classify_lead(b);
    if (lead.length == 1) {
      append_ascii_for_display(out, b);
      ++i;
      continue;
    }
    if (lead.length == 0) {
      out += kReplacement;
      ++i;
      continue;
    }
    // Count how many bytes of the sequence are well-formed so far.
    size_t good = 1;
    while (good < static_cast<size_t>(lead.length) && i + good < n) {
      const auto c = static_cast<unsigned char>(bytes[i + good]);
      const unsigned char lo = good == 1 ? lead.second_lo : 0x80;
      const unsigned char hi = good == 1 ? lead.second_hi : 0xBF;
      if (c < lo || c > hi) break;
      ++good;
    }
    if (good == static_cast<size_t>(lead.length)) {
      out.append(bytes.substr(i, good));
    } else {
      out += kReplacement;  // the maximal subpart bytes[i, i + good)
    }
    i += good;
  }
  return out;
}

}  // namespace etr::data
