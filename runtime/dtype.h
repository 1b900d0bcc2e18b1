// Element types of tensors and collectives, and the scalar conversions for the 16-bit
// floating formats (round to nearest even; NaN stays NaN).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace etr {

enum class DType : uint8_t { kF32, kF64, kBF16, kF16, kI32 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kI32:
      return "i32";
  }
  return "?";
}

// Parses "f32", "bf16", ...; throws ConfigError naming the accepted values.
DType parse_dtype(std::string_view name);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Written as a select rather than a branch, so that loops over it vectorise.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

// bfloat16 as a value type: its 16 bits, converted to and from float as above. The
// layers' compute type under runtime.precision bf16 (Layer<bf16>): activations and the
// parameters' low-precision copy; the CUDA kernels read the same bits as __nv_bfloat16.
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f) : bits(f32_to_bf16(f)) {}
  explicit operator float() const { return bf16_to_f32(bits); }
};
static_assert(sizeof(bf16) == 2);

// The type a compute type `Real` accumulates in: parameter gradients, LayerNorm statistics,
// per-position losses. Real itself for float and double; float for bf16 (mixed precision:
// fp32 gradients and statistics beside bf16 activations).
template <typename Real>
struct AccumOf {
  using type = Real;
};
template <>
struct AccumOf<bf16> {
  using type = float;
};
template <typename Real>
using accum_t = typename AccumOf<Real>::type;

// IEEE binary16 as the compiler holds it: _Float16, except in clang before 15, which has
// it on x86 only with AVX512-FP16; there __fp16, its storage-only half, converts the same
// way (round to nearest even; checked against GCC's _Float16 on 0.1, 65504, 70000, 1e-8
// and subnormals). The fuzz build (tests/fuzz) compiles this header with clang 14.
#if defined(__clang__) && __clang_major__ < 15
using Float16Storage = __fp16;
#else
using Float16Storage = _Float16;
#endif

inline float f16_to_f32(uint16_t h) {
  Float16Storage v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}

inline uint16_t f32_to_f16(float f) {
  Float16Storage v = static_cast<Float16Storage>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}

}  // namespace etr
