// Tests of runtime/bytes.h: byte counts parsed from and formatted to text. Expected
// values are written out by hand (powers of 1024 for the binary units, 1000 for SI).
#include "runtime/bytes.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "runtime/error.h"

namespace etr {
namespace {

constexpr size_t kKi = 1024;
constexpr size_t kMi = kKi * 1024;
constexpr size_t kGi = kMi * 1024;
constexpr size_t kTi = kGi * 1024;

TEST(ParseBytes, PlainNumbersAreBytes) {
  EXPECT_EQ(parse_bytes("0"), 0u);
  EXPECT_EQ(parse_bytes("512"), 512u);
  EXPECT_EQ(parse_bytes("17B"), 17u);
  EXPECT_EQ(parse_bytes("17 b"), 17u);
  EXPECT_EQ(parse_bytes("  4096  "), 4096u);
}

TEST(ParseBytes, BinaryUnits) {
  EXPECT_EQ(parse_bytes("64KiB"), 64 * kKi);
  EXPECT_EQ(parse_bytes("64 KiB"), 64 * kKi);
  EXPECT_EQ(parse_bytes("64k"), 64 * kKi);
  EXPECT_EQ(parse_bytes("64kib"), 64 * kKi);
  EXPECT_EQ(parse_bytes("3MiB"), 3 * kMi);
  EXPECT_EQ(parse_bytes("3M"), 3 * kMi);
  EXPECT_EQ(parse_bytes("1.5GiB"), kGi + kGi / 2);
  EXPECT_EQ(parse_bytes("2g"), 2 * kGi);
  EXPECT_EQ(parse_bytes("2TiB"), 2 * kTi);
  EXPECT_EQ(parse_bytes("0.25 MiB"), kMi / 4);
}

TEST(ParseBytes, SiUnits) {
  EXPECT_EQ(parse_bytes("2KB"), 2000u);
  EXPECT_EQ(parse_bytes("2GB"), 2000000000u);
  EXPECT_EQ(parse_bytes("1.5 mb"), 1500000u);
  EXPECT_EQ(parse_bytes("3TB"), 3000000000000u);
}

// Each bad input throws ConfigError quoting the text it was given.
TEST(ParseBytes, BadInputThrowsConfigErrorQuotingTheText) {
  for (const char* bad : {"", "   ", "abc", "KiB", "-1", "-1KiB", "12XB", "12 34", "1.5 GiBs",
                          "nan", "inf", "1e400", "4 KiB B"}) {
    SCOPED_TRACE(bad);
    try {
      parse_bytes(bad);
      ADD_FAILURE() << "no exception for '" << bad << "'";
    } catch (const ConfigError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("is not a byte count"), std::string::npos) << what;
    }
  }
}

// A value that does not fit in size_t is an error, not a wrapped-around number.
TEST(ParseBytes, TooLargeThrowsConfigError) {
  EXPECT_THROW(parse_bytes("1e30"), ConfigError);
  EXPECT_THROW(parse_bytes("16777216 TiB"), ConfigError);  // 2^64 bytes
  EXPECT_EQ(parse_bytes("1048575 TiB"), 1048575 * kTi);    // just under 2^60
}

TEST(FormatBytes, PicksTheLargestUnitBelowTheValue) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1 KiB");
  EXPECT_EQ(format_bytes(64.0 * kKi), "64 KiB");
  EXPECT_EQ(format_bytes(1.5 * kGi), "1.5 GiB");
  EXPECT_EQ(format_bytes(3.0 * kMi), "3 MiB");
  EXPECT_EQ(format_bytes(2.0 * kTi), "2 TiB");
  EXPECT_EQ(format_bytes(2048.0 * kTi), "2048 TiB");  // no unit above TiB
  EXPECT_EQ(format_bytes(-2048), "-2 KiB");
}

TEST(FormatBytes, FourSignificantDigits) {
  EXPECT_EQ(format_bytes(1000.0 * kKi), "1000 KiB");
  EXPECT_EQ(format_bytes(kMi + kMi / 3), "1.333 MiB");
}

// What format_bytes prints, parse_bytes reads back (exactly, for values it prints exactly).
TEST(FormatBytes, RoundTripsThroughParse) {
  for (size_t v : {size_t{0}, size_t{17}, 64 * kKi, 3 * kMi, kGi + kGi / 2, 2 * kTi}) {
    EXPECT_EQ(parse_bytes(format_bytes(static_cast<double>(v))), v) << v;
  }
}

}  // namespace
}  // namespace etr
