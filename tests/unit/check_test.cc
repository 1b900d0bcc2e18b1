// Tests of runtime/check.h: ETR_CHECK and ETR_CHECK_<op> throw etr::Error naming the
// condition, both values and file:line (relative to the repository root), evaluate their
// arguments once, and compare mixed signed/unsigned integers by value.
#include "runtime/check.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "runtime/error.h"

namespace etr {
namespace {

// The message of the etr::Error that `f` throws; fails the test when it throws nothing.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an etr::Error";
  return "";
}

std::string here(int line) {
  return "tests/unit/check_test.cc:" + std::to_string(line);
}

TEST(Check, PassingCheckDoesNothingAndSkipsTheMessage) {
  int streamed = 0;
  auto count = [&] { return ++streamed; };
  ETR_CHECK(1 + 1 == 2) << "never built " << count();
  ETR_CHECK_EQ(2, 2) << count();
  ETR_CHECK_LT(1, 2) << count();
  EXPECT_EQ(streamed, 0);
}

TEST(Check, FailureNamesConditionFileAndLine) {
  int line = 0;
  std::string msg = error_of([&] {
    int n = 0;
    line = __LINE__ + 1;
    ETR_CHECK(n > 0);
  });
  EXPECT_EQ(msg, "check n > 0 failed at " + here(line));
}

TEST(Check, FailureAppendsTheStreamedMessage) {
  int line = 0;
  std::string msg = error_of([&] {
    line = __LINE__ + 1;
    ETR_CHECK(false) << "need " << 3 << " ranks";
  });
  EXPECT_EQ(msg, "check false failed at " + here(line) + ": need 3 ranks");
}

TEST(Check, ThrowsThePlainErrorType) {
  EXPECT_THROW(ETR_CHECK(false), Error);
  try {
    ETR_CHECK_EQ(1, 2);
  } catch (const ConfigError&) {
    ADD_FAILURE() << "a failed check is an invariant violation, not a ConfigError";
  } catch (const Error&) {
  }
}

TEST(CheckEq, FailureShowsBothValuesAndExpressions) {
  int line = 0;
  std::string msg = error_of([&] {
    size_t have = 3;
    int want = 4;
    line = __LINE__ + 1;
    ETR_CHECK_EQ(have, want) << "sizes differ";
  });
  EXPECT_EQ(msg, "check have == want (3 vs 4) failed at " + here(line) + ": sizes differ");
}

TEST(CheckOps, EachOperatorFailsExactlyWhenItShould) {
  EXPECT_NO_THROW(ETR_CHECK_NE(1, 2));
  EXPECT_THROW(ETR_CHECK_NE(2, 2), Error);
  EXPECT_NO_THROW(ETR_CHECK_LE(2, 2));
  EXPECT_THROW(ETR_CHECK_LE(3, 2), Error);
  EXPECT_NO_THROW(ETR_CHECK_LT(1, 2));
  EXPECT_THROW(ETR_CHECK_LT(2, 2), Error);
  EXPECT_NO_THROW(ETR_CHECK_GE(2, 2));
  EXPECT_THROW(ETR_CHECK_GE(1, 2), Error);
  EXPECT_NO_THROW(ETR_CHECK_GT(3, 2));
  EXPECT_THROW(ETR_CHECK_GT(2, 2), Error);
  EXPECT_NE(error_of([] { ETR_CHECK_LE(1.5, 0.5); }).find("check 1.5 <= 0.5 (1.5 vs 0.5)"),
            std::string::npos);
  EXPECT_NE(error_of([] { ETR_CHECK_GT(1, 2); }).find("check 1 > 2 (1 vs 2)"), std::string::npos);
}

TEST(CheckOps, NonIntegerOperands) {
  std::string a = "bf16", b = "f32";
  EXPECT_NE(error_of([&] { ETR_CHECK_EQ(a, b); }).find("(bf16 vs f32)"), std::string::npos);
  EXPECT_NO_THROW(ETR_CHECK_LT(0.25, 0.5));
}

// Plain C++ would convert -1 to unsigned: SIZE_MAX == -1 would hold and -1 < 1u would
// not. The checks compare the mathematical values.
TEST(CheckOps, MixedSignednessComparesValues) {
  const size_t max = std::numeric_limits<size_t>::max();
  EXPECT_THROW(ETR_CHECK_EQ(max, -1), Error);
  EXPECT_NO_THROW(ETR_CHECK_NE(max, -1));
  EXPECT_NO_THROW(ETR_CHECK_LT(-1, 1u));
  EXPECT_THROW(ETR_CHECK_GE(-1, 1u), Error);
  EXPECT_NO_THROW(ETR_CHECK_GT(0u, -1));
  EXPECT_NO_THROW(ETR_CHECK_EQ(size_t{5}, 5));
  EXPECT_NO_THROW(ETR_CHECK_LE(int64_t{-3}, uint8_t{0}));
  std::string msg = error_of([&] { ETR_CHECK_EQ(max, -1); });
  EXPECT_NE(msg.find("(" + std::to_string(max) + " vs -1)"), std::string::npos) << msg;
}

TEST(CheckOps, ArgumentsAreEvaluatedOnce) {
  int a = 0, b = 10;
  ETR_CHECK_EQ(a++, 0);
  ETR_CHECK_LT(a++, b--);
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 9);
  int c = 0;
  EXPECT_THROW(ETR_CHECK_EQ(++c, 5), Error);
  EXPECT_EQ(c, 1);
}

// The macros are single statements: an unbraced if/else around them keeps its meaning.
TEST(Check, SafeInUnbracedIfElse) {
  bool took_else = false;
  if (false)
    ETR_CHECK(false);
  else
    took_else = true;
  EXPECT_TRUE(took_else);
  took_else = false;
  if (true)
    ETR_CHECK_EQ(1, 1);
  else
    took_else = true;
  EXPECT_FALSE(took_else);
}

}  // namespace
}  // namespace etr
