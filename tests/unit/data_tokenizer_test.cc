// Tests of examples/data/byte_tokenizer.h: lossless round trips of any bytes, and the
// display form of invalid UTF-8 (the Unicode Standard's "maximal subpart" examples).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "examples/data/byte_tokenizer.h"
#include "runtime/error.h"

namespace etr::data {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// True when s is well-formed UTF-8 (an independent check: decode code points).
bool is_valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? b : b & (0x7f >> len);
    for (int k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

TEST(ByteTokenizer, RoundTripsRandomBytes) {
  for (size_t n : {0, 1, 2, 17, 255, 256, 4096, 100003}) {
    const std::string text = random_bytes(n, static_cast<uint32_t>(n) + 7);
    const std::vector<uint16_t> tokens = ByteTokenizer::encode(text);
    ASSERT_EQ(tokens.size(), n);
    for (uint16_t t : tokens) ASSERT_LT(t, ByteTokenizer::kVocabSize);
    EXPECT_EQ(ByteTokenizer::decode(tokens), text) << n;
  }
}

TEST(ByteTokenizer, EveryByteIsItsOwnToken) {
  std::string all(256, '\0');
  for (int b = 0; b < 256; ++b) all[static_cast<size_t>(b)] = static_cast<char>(b);
  const std::vector<uint16_t> tokens = ByteTokenizer::encode(all);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tokens[static_cast<size_t>(b)], b);
  EXPECT_EQ(ByteTokenizer::decode(tokens), all);
}

TEST(ByteTokenizer, RoundTripsUtf8) {
  const std::string text = "Grüße, 世界! 🙂 naïve café — ∑x² ≤ ∞\n\ttab";
  const std::vector<uint16_t> tokens = ByteTokenizer::encode(text);
  EXPECT_EQ(tokens.size(), text.size());  // one token per byte, not per character
  EXPECT_EQ(ByteTokenizer::decode(tokens), text);
  EXPECT_EQ(ByteTokenizer::decode_for_display(tokens), text);  // valid: shown as is
}

TEST(ByteTokenizer, DecodeRejectsTokensOutsideTheVocabulary) {
  const std::vector<uint16_t> tokens = {104, 105, 256, 3};
  try {
    ByteTokenizer::decode(tokens);
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("token 256 at position 2"), std::string::npos) << e.what();
  }
}

TEST(ByteTokenizer, DisplayReplacesEachMaximalIllFormedSubpart) {
  struct Case {
    std::string in;
    std::string out;
  };
  const Case cases[] = {
      {"\xFF", kFffd},                                      // never a UTF-8 byte
      {"a\x80z", "a" + kFffd + "z"},                        // lone continuation byte
      {"\xC0\xAF", kFffd + kFffd},                          // overlong lead C0
      {"\xE2\x82", kFffd},                                  // truncated at the end
      {"\xE2\x82\x41", kFffd + "A"},                        // truncated by an ASCII byte
      {"\xE2\x82\xAC", "\xE2\x82\xAC"},                     // the euro sign, valid
      {"\xE0\x80\x80", kFffd + kFffd + kFffd},              // overlong 3-byte form
      {"\xED\xA0\x80", kFffd + kFffd + kFffd},              // UTF-16 surrogate D800
      {"\xF4\x90\x80\x80", kFffd + kFffd + kFffd + kFffd},  // above U+10FFFF
      {"\xF0\x9F\x99\x82", "\xF0\x9F\x99\x82"},             // U+1F642, valid
      {"\xF0\x9F\x99", kFffd},                              // its first three bytes
      // The Unicode Standard's example (section 3.9, "U+FFFD Substitution of Maximal
      // Subparts"): 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64.
      {"\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64",
       "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(sanitize_utf8_for_display(c.in), c.out);
    EXPECT_EQ(ByteTokenizer::decode_for_display(ByteTokenizer::encode(c.in)), c.out);
  }
}

TEST(ByteTokenizer, DisplayShowsControlBytesAsPictures) {
  EXPECT_EQ(sanitize_utf8_for_display("\x1b[31mred\x7f"), "\xE2\x90\x9B[31mred\xE2\x90\xA1");
  EXPECT_EQ(sanitize_utf8_for_display(std::string("a\0b", 3)),
            "a\xE2\x90\x80"
            "b");
  EXPECT_EQ(sanitize_utf8_for_display("line\n\ttab\r"), "line\n\ttab\xE2\x90\x8D");
}

TEST(ByteTokenizer, DisplayOfAnyBytesIsValidUtf8AndStable) {
  for (uint32_t seed = 0; seed < 50; ++seed) {
    const std::string shown = sanitize_utf8_for_display(random_bytes(1000, seed));
    ASSERT_TRUE(is_valid_utf8(shown)) << seed;
    EXPECT_EQ(sanitize_utf8_for_display(shown), shown) << seed;  // nothing left to replace
  }
}

TEST(ByteTokenizer, DisplayReplacesTokensOutsideTheVocabulary) {
  // 0xE2 0x82 | 300 | 0xAC: the out-of-vocabulary token splits the sequence.
  const std::vector<uint16_t> tokens = {'x', 0xE2, 0x82, 300, 0xAC, 'y'};
  EXPECT_EQ(ByteTokenizer::decode_for_display(tokens), "x" + kFffd + kFffd + kFffd + "y");
}

}  // namespace
}  // namespace etr::data
