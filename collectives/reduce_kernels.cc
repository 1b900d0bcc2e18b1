#include "collectives/reduce_kernels.h"

#include <cstdint>
#include <cstring>

#include "runtime/error.h"

namespace etr {
namespace {

// NaN-propagating and symmetric in its operands (std::max is neither).
template <typename T>
inline T max_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a > b ? a : b;
}
template <typename T>
inline T min_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return a;
    if (b != b) return b;
  }
  return a < b ? a : b;
}

struct Sum {
  template <typename T>
  T operator()(T a, T b) const { return a + b; }
};
struct Max {
  template <typename T>
  T operator()(T a, T b) const { return max_of(a, b); }
};
struct Min {
  template <typename T>
  T operator()(T a, T b) const { return min_of(a, b); }
};

template <typename T, typename Op>
void combine_native(T* dst, const T* a, const T* b, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) dst[i] = op(a[i], b[i]);
}

template <bool kBf16, typename Op>
void combine_half(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t n, Op op) {
  for (size_t i = 0; i < n; ++i) {
    float x = kBf16 ? bf16_to_f32(a[i]) : f16_to_f32(a[i]);
    float y = kBf16 ? bf16_to_f32(b[i]) : f16_to_f32(b[i]);
    float r = op(x, y);
    dst[i] = kBf16 ? f32_to_bf16(r) : f32_to_f16(r);
  }
}

template <typename Op>
void combine(DType dtype, void* dst, const void* a, const void* b, size_t n, Op op) {
  switch (dtype) {
    case DType::kF32:
      return combine_native(static_cast<float*>(dst), static_cast<const float*>(a),
                            static_cast<const float*>(b), n, op);
    case DType::kF64:
      return combine_native(static_cast<double*>(dst), static_cast<const double*>(a),
                            static_cast<const double*>(b), n, op);
    case DType::kI32:
      // Wrap-around on overflow, like NCCL and MPI implementations in practice.
      if constexpr (std::is_same_v<Op, Sum>) {
        auto* d = static_cast<uint32_t*>(dst);
        auto* x = static_cast<const uint32_t*>(a);
        auto* y = static_cast<const uint32_t*>(b);
        for (size_t i = 0; i < n; ++i) d[i] = x[i] + y[i];
        return;
      } else {
        return combine_native(static_cast<int32_t*>(dst), static_cast<const int32_t*>(a),
                              static_cast<const int32_t*>(b), n, op);
      }
    case DType::kBF16:
      return combine_half<true>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a),
                                static_cast<const uint16_t*>(b), n, op);
    case DType::kF16:
      return combine_half<false>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(a),
                                 static_cast<const uint16_t*>(b), n, op);
  }
}

// Sum then divide, rounding once for the 16-bit types.
struct SumDiv {
  double divisor;
  template <typename T>
  T operator()(T a, T b) const {
    return static_cast<T>((a + b) / static_cast<T>(divisor));
  }
};

}  // namespace

void reduce(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return combine(dtype, dst, a, b, n, Sum{});
    case ReduceOp::kMax:
      return combine(dtype, dst, a, b, n, Max{});
    case ReduceOp::kMin:
      return combine(dtype, dst, a, b, n, Min{});
  }
}

void reduce_avg_last(DType dtype, void* dst, const void* a, const void* b, size_t n,
                     int divisor) {
  if (dtype == DType::kI32) throw InvalidArgument("avg is not defined for i32");
  combine(dtype, dst, a, b, n, SumDiv{static_cast<double>(divisor)});
}

void reduce_hop(DType dtype, ReduceOp op, void* dst, const void* a, const void* b, size_t n,
                int avg_divisor) {
  if (op == ReduceOp::kAvg && avg_divisor > 0) {
    return reduce_avg_last(dtype, dst, a, b, n, avg_divisor);
  }
  reduce(dtype, op, dst, a, b, n);
}

void divide(DType dtype, void* data, size_t n, int divisor) {
  switch (dtype) {
    case DType::kF32: {
      auto* d = static_cast<float*>(data);
      for (size_t i = 0; i < n; ++i) d[i] /= static_cast<float>(divisor);
      return;
    }
    case DType::kF64: {
      auto* d = static_cast<double*>(data);
      for (size_t i = 0; i < n; ++i) d[i] /= divisor;
      return;
    }
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(bf16_to_f32(d[i]) / divisor);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(f16_to_f32(d[i]) / divisor);
      return;
    }
    case DType::kI32:
      throw InvalidArgument("avg is not defined for i32");
  }
}

}  // namespace etr
