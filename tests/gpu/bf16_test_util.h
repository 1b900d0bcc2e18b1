// Helpers of the bf16 kernel tests (cuda_k_bf16_*_test.cc): the two sets, random bf16
// inputs, widening, and the comparison at relative L2 1e-2 (kernel_test_util.h's).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/kernel_test_util.h"
#include "runtime/dtype.h"
#include "runtime/kernels/cpu/bf16_reference.h"
#include "runtime/kernels/cuda/kernel_set.h"
#include "runtime/kernels/dispatch.h"

namespace etr::bf16_test {

using testing::DeviceArray;
using testing::expect_close;
using testing::random_floats;
using testing::random_tokens;

inline constexpr double kTol = 1e-2;

inline const KernelSet<bf16>& gpu() { return cuda::kernel_set_bf16(); }
inline const KernelSet<bf16>& ref() { return cpu::bf16_reference_set(); }
inline void* s() { return testing::stream(); }

inline std::vector<bf16> random_bf16(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> f = random_floats(n, seed, scale);
  std::vector<bf16> out(f.size());
  for (size_t i = 0; i < f.size(); ++i) out[i] = bf16(f[i]);
  return out;
}

inline std::vector<float> widen(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
  return out;
}

inline void expect_bf16(const DeviceArray<bf16>& got, const std::vector<bf16>& want,
                        const std::string& what) {
  expect_close(widen(got.download()), widen(want), kTol, what);
}

inline void expect_f32(const DeviceArray<float>& got, const std::vector<float>& want,
                       const std::string& what) {
  expect_close(got.download(), want, kTol, what);
}

inline std::vector<float> zeros(int64_t n) { return std::vector<float>(static_cast<size_t>(n), 0.0f); }

}  // namespace etr::bf16_test
