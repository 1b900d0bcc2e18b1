#include "bench/test_pattern.h"

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "runtime/check.h"

namespace etr::bench {

namespace {

inline int pattern_value(int64_t i, int rank) {
  uint64_t x = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull +
               static_cast<uint64_t>(rank + 1) * 0xBF58476D1CE4E5B9ull;
  return static_cast<int>((x >> 40) % 17) - 8;
}

template <typename T, typename FromF64>
void fill_typed(T* p, int64_t n, int rank, FromF64 from) {
  for (int64_t i = 0; i < n; ++i) p[i] = from(static_cast<double>(pattern_value(i, rank)));
}

template <typename T, typename ToF64>
std::string compare_typed(const T* got, const T* want, int64_t n, int divisor, double rtol,
                          double atol, ToF64 to) {
  int64_t bad = 0, first = -1;
  double first_got = 0, first_want = 0;
  for (int64_t i = 0; i < n; ++i) {
    double g = to(got[i]), w = to(want[i]) / divisor;
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {  // NaN counts as bad
      if (bad++ == 0) {
        first = i;
        first_got = g;
        first_want = w;
      }
    }
  }
  if (bad == 0) return "";
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%lld of %lld elements differ from MPI's result; the first is element %lld: "
                "etr %.9g, MPI %.9g",
                static_cast<long long>(bad), static_cast<long long>(n),
                static_cast<long long>(first), first_got, first_want);
  return buf;
}

}  // namespace

void fill_pattern(const TensorView& view, int rank) {
  int64_t n = view.numel();
  switch (view.dtype()) {
    case DType::kF32:
      return fill_typed(view.data_as<float>(), n, rank,
                        [](double v) { return static_cast<float>(v); });
    case DType::kF64:
      return fill_typed(view.data_as<double>(), n, rank, [](double v) { return v; });
    case DType::kI32:
      return fill_typed(view.data_as<int32_t>(), n, rank,
                        [](double v) { return static_cast<int32_t>(v); });
    case DType::kBF16:
      return fill_typed(view.data_as<uint16_t>(), n, rank,
                        [](double v) { return f32_to_bf16(static_cast<float>(v)); });
    case DType::kF16:
      return fill_typed(view.data_as<uint16_t>(), n, rank,
                        [](double v) { return f32_to_f16(static_cast<float>(v)); });
  }
}

std::string compare_outputs(const TensorView& got, const TensorView& want, int divisor) {
  ETR_CHECK(got.dtype() == want.dtype() && got.numel() == want.numel())
      << "etr's and MPI's outputs must have the same dtype and size";
  int64_t n = got.numel();
  switch (got.dtype()) {
    case DType::kF32:
      return compare_typed(got.data_as<float>(), want.data_as<float>(), n, divisor, 1e-5, 1e-6,
                           [](float v) { return static_cast<double>(v); });
    case DType::kF64:
      return compare_typed(got.data_as<double>(), want.data_as<double>(), n, divisor, 1e-12, 1e-12,
                           [](double v) { return v; });
    case DType::kI32:
      // avg of integers may truncate or round: allow one unit then, nothing otherwise.
      return compare_typed(got.data_as<int32_t>(), want.data_as<int32_t>(), n, divisor, 0.0,
                           divisor > 1 ? 1.0 : 0.0,
                           [](int32_t v) { return static_cast<double>(v); });
    case DType::kBF16:
      return compare_typed(got.data_as<uint16_t>(), want.data_as<uint16_t>(), n, divisor, 1e-2,
                           1e-2, [](uint16_t v) { return static_cast<double>(bf16_to_f32(v)); });
    case DType::kF16:
      return compare_typed(got.data_as<uint16_t>(), want.data_as<uint16_t>(), n, divisor, 2e-3,
                           2e-3, [](uint16_t v) { return static_cast<double>(f16_to_f32(v)); });
  }
  return "";
}

}  // namespace etr::bench
