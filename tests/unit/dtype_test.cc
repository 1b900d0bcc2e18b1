// Tests of runtime/dtype.h. The 16-bit conversions are checked against a reference
// written here from the formats' definitions in double precision (frexp/ldexp and an
// explicit ties-to-even rule), not against any other conversion routine: every bf16/f16
// value is decoded, and every rounding boundary (each value, each midpoint between
// neighbours and the floats just either side of it) is encoded.
#include "runtime/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace etr {
namespace {

// A binary floating format: `precision` significant bits (with the implicit one),
// normal exponents emin..emax, subnormals below 2^emin.
struct Format {
  int precision;
  int emin;
  int emax;
  int exp_bits;
};
constexpr Format kBF16{8, -126, 127, 8};
constexpr Format kF16{11, -14, 15, 5};

// The value of 16-bit pattern h in `f`, from the IEEE layout: sign, biased exponent,
// stored mantissa.
double decode(const Format& f, uint16_t h) {
  const int mant_bits = f.precision - 1;
  const int bias = f.emax;
  const int exp_all_ones = (1 << f.exp_bits) - 1;
  const int sign = h >> 15;
  const int exp = (h >> mant_bits) & exp_all_ones;
  const int mant = h & ((1 << mant_bits) - 1);
  double v;
  if (exp == exp_all_ones) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    v = std::ldexp(mant, f.emin - mant_bits);
  } else {
    v = std::ldexp((1 << mant_bits) + mant, exp - bias - mant_bits);
  }
  return sign ? -v : v;
}

// x rounded to the nearest value of `f`, ties to even; overflow to infinity.
double round_to(const Format& f, double x) {
  if (x == 0 || std::isinf(x) || std::isnan(x)) return x;
  double a = std::fabs(x);
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): the normal exponent is e - 1
  int exp = std::max(e - 1, f.emin);
  double ulp = std::ldexp(1.0, exp - (f.precision - 1));
  double q = a / ulp;  // exact: division by a power of two
  double lo = std::floor(q);
  double frac = q - lo;
  bool lo_even = std::fmod(lo, 2.0) == 0;
  double n = frac > 0.5 ? lo + 1 : frac < 0.5 ? lo : (lo_even ? lo : lo + 1);
  double r = n * ulp;
  if (r >= std::ldexp(1.0, f.emax + 1)) r = std::numeric_limits<double>::infinity();
  return std::copysign(r, x);
}

// Equal including the sign of zero; any NaN equals any NaN.
bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The floats at which rounding to `f` changes: each value, the midpoint to its upper
// neighbour (2^(emax+1) above the largest finite value), and the floats next to both.
std::vector<float> boundary_floats(const Format& f) {
  std::vector<float> out;
  const uint16_t inf_bits = static_cast<uint16_t>(((1 << f.exp_bits) - 1) << (f.precision - 1));
  const float kInf = std::numeric_limits<float>::infinity();
  for (uint32_t h = 0; h < inf_bits; ++h) {
    double x = decode(f, static_cast<uint16_t>(h));
    double next =
        h + 1 == inf_bits ? std::ldexp(1.0, f.emax + 1) : decode(f, static_cast<uint16_t>(h + 1));
    float xf = static_cast<float>(x);
    float mid = static_cast<float>((x + next) / 2);  // exact: fewer than 24 bits
    EXPECT_EQ(static_cast<double>(mid), (x + next) / 2);
    for (float c : {xf, std::nextafter(xf, 0.0f), std::nextafter(xf, kInf), mid,
                    std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
      out.push_back(c);
      out.push_back(-c);
    }
  }
  return out;
}

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), sizeof(float));
  EXPECT_EQ(dtype_size(DType::kF64), sizeof(double));
  EXPECT_EQ(dtype_size(DType::kI32), sizeof(int32_t));
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF16), 2u);
  const std::pair<const char*, DType> kNames[] = {{"f32", DType::kF32},
                                                  {"f64", DType::kF64},
                                                  {"bf16", DType::kBF16},
                                                  {"f16", DType::kF16},
                                                  {"i32", DType::kI32}};
  for (auto [name, t] : kNames) {
    EXPECT_EQ(dtype_name(t), name);
    EXPECT_EQ(parse_dtype(name), t);
  }
}

TEST(DType, ParseRejectsUnknownNamesListingTheAcceptedOnes) {
  for (const char* bad : {"", "F32", "float", "float32", "bf16 ", "fp16", "i64"}) {
    SCOPED_TRACE(bad);
    try {
      parse_dtype(bad);
      ADD_FAILURE() << "no exception";
    } catch (const ConfigError& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("f32, f64, bf16, f16, i32"), std::string::npos) << what;
    }
  }
}

// The reference itself, on cases worked out by hand, so that a wrong reference
// cannot agree with a wrong conversion.
TEST(DType, ReferenceRoundingOnHandWorkedCases) {
  EXPECT_EQ(round_to(kBF16, 1 + std::ldexp(1, -8)), 1.0);                        // tie -> even
  EXPECT_EQ(round_to(kBF16, 1 + 3 * std::ldexp(1, -8)), 1 + std::ldexp(1, -6));  // tie -> even
  EXPECT_EQ(round_to(kBF16, 1 + std::ldexp(1, -8) + std::ldexp(1, -23)), 1 + std::ldexp(1, -7));
  EXPECT_EQ(round_to(kF16, 65519), 65504);
  EXPECT_TRUE(std::isinf(round_to(kF16, 65520)));
  EXPECT_EQ(round_to(kF16, std::ldexp(1, -25)), 0.0);  // half the smallest subnormal: even
  EXPECT_EQ(round_to(kF16, std::ldexp(1.5, -25)), std::ldexp(1, -24));
  EXPECT_EQ(decode(kF16, 0x3c00), 1.0);
  EXPECT_EQ(decode(kF16, 0x7bff), 65504.0);
  EXPECT_EQ(decode(kF16, 0x0001), std::ldexp(1, -24));
  EXPECT_EQ(decode(kBF16, 0x3f80), 1.0);
  EXPECT_EQ(decode(kBF16, 0xc040), -3.0);
  EXPECT_EQ(decode(kBF16, 0x0001), std::ldexp(1, -133));
}

TEST(DType, Bf16ToF32DecodesEveryValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    double want = decode(kBF16, static_cast<uint16_t>(h));
    ASSERT_TRUE(same(bf16_to_f32(static_cast<uint16_t>(h)), want)) << std::hex << h;
  }
}

TEST(DType, F16ToF32DecodesEveryValue) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    double want = decode(kF16, static_cast<uint16_t>(h));
    ASSERT_TRUE(same(f16_to_f32(static_cast<uint16_t>(h)), want)) << std::hex << h;
  }
}

TEST(DType, F32ToBf16RoundsToNearestEvenAtEveryBoundary) {
  for (float c : boundary_floats(kBF16)) {
    double want = round_to(kBF16, c);
    uint16_t got = f32_to_bf16(c);
    ASSERT_TRUE(same(decode(kBF16, got), want))
        << std::hexfloat << c << " -> " << decode(kBF16, got) << ", want " << want;
  }
}

TEST(DType, F32ToF16RoundsToNearestEvenAtEveryBoundary) {
  for (float c : boundary_floats(kF16)) {
    double want = round_to(kF16, c);
    uint16_t got = f32_to_f16(c);
    ASSERT_TRUE(same(decode(kF16, got), want))
        << std::hexfloat << c << " -> " << decode(kF16, got) << ", want " << want;
  }
}

// Random bit patterns cover the floats far from any 16-bit value too (huge, tiny).
TEST(DType, RandomFloatsRoundLikeTheReference) {
  std::mt19937 rng(20240607);
  for (int i = 0; i < 1'000'000; ++i) {
    float c = from_bits(static_cast<uint32_t>(rng()));
    if (std::isnan(c)) continue;
    ASSERT_TRUE(same(decode(kBF16, f32_to_bf16(c)), round_to(kBF16, c))) << std::hexfloat << c;
    ASSERT_TRUE(same(decode(kF16, f32_to_f16(c)), round_to(kF16, c))) << std::hexfloat << c;
  }
}

TEST(DType, HandPickedBitPatterns) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000)), 0x3f80);  // 1 + 2^-8: tie, to even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000)), 0x3f82);  // 1 + 3*2^-8: tie, to even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001)), 0x3f81);  // just above the tie
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds up to inf
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(1e-8f), 0x0000);  // below half the smallest subnormal
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}

TEST(DType, InfinitiesStayInfinite) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_bf16(inf), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-inf), 0xff80);
  EXPECT_EQ(f32_to_f16(inf), 0x7c00);
  EXPECT_EQ(f32_to_f16(-inf), 0xfc00);
  EXPECT_EQ(bf16_to_f32(0x7f80), inf);
  EXPECT_EQ(f16_to_f32(0xfc00), -inf);
}

// Every NaN stays a NaN with its sign, including signalling NaNs whose payload lies
// only in the low bits (truncating those would give infinity).
TEST(DType, NaNsStayNaN) {
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0x7fffffffu, 0xffc00000u,
                        0xff800001u, 0x7fa00000u}) {
    SCOPED_TRACE(bits);
    float nan = from_bits(bits);
    ASSERT_TRUE(std::isnan(nan));
    bool negative = bits >> 31;
    uint16_t b = f32_to_bf16(nan);
    EXPECT_TRUE(std::isnan(decode(kBF16, b))) << std::hex << b;
    EXPECT_EQ(b >> 15, negative ? 1 : 0);
    uint16_t h = f32_to_f16(nan);
    EXPECT_TRUE(std::isnan(decode(kF16, h))) << std::hex << h;
    EXPECT_EQ(h >> 15, negative ? 1 : 0);
  }
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7fc0)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
}

// Every 16-bit value survives the trip through f32 (NaNs as NaNs).
TEST(DType, SixteenBitValuesRoundTripThroughF32) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    auto v = static_cast<uint16_t>(h);
    if (std::isnan(decode(kBF16, v))) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(bf16_to_f32(v)))));
    } else {
      ASSERT_EQ(f32_to_bf16(bf16_to_f32(v)), v) << std::hex << h;
    }
    if (!std::isnan(decode(kF16, v))) {
      ASSERT_EQ(f32_to_f16(f16_to_f32(v)), v) << std::hex << h;
    }
  }
}

}  // namespace
}  // namespace etr
