// What the CUDA kernel tests (cuda_k_<family>_test.cc) share: device arrays that upload
// and download host vectors, random inputs, NaN poison, the comparison with the CPU
// kernel (relative L2 in double, no NaN or Inf anywhere) and the bitwise one.
//
//   ETR_REQUIRE_GPU();                                   // first line of every test
//   std::vector<float> x = random_floats(n, /*seed=*/1);
//   DeviceArray<float> d_x(x), d_out = DeviceArray<float>::poisoned(n);
//   cuda::gelu_forward(d_out.data(), d_x.data(), n, stream());
//   expect_close(d_out.download(), want, 1e-5, "gelu forward");
//
// Every upload synchronises the device: cudaMemcpy from pageable memory returns before
// the DMA lands, and the kernels run on a non-blocking stream (docs/gpu.md, run 1).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/cuda_check.h"
#include "runtime/kernels/cuda/cublas.h"

#define ETR_REQUIRE_GPU()                                             \
  do {                                                                \
    if (::etr::cuda_device_count() == 0)                              \
      GTEST_SKIP() << "no CUDA device visible; GPU tests need one";   \
    CUDA_CHECK(cudaSetDevice(0));                                     \
    ::etr::cuda::set_matmul_math(::etr::cuda::MatmulMath::kPedantic); \
  } while (0)

namespace etr::testing {

// One non-blocking stream for the whole test binary.
inline cudaStream_t stream() {
  static cudaStream_t s = [] {
    cudaStream_t created = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&created, cudaStreamNonBlocking));
    return created;
  }();
  return s;
}

inline void sync() {
  CUDA_CHECK(cudaStreamSynchronize(stream()));
}

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(int64_t n) : n_(n) {
    if (n_ > 0) CUDA_CHECK(cudaMalloc(&ptr_, bytes()));
  }
  explicit DeviceArray(const std::vector<T>& host)
      : DeviceArray(static_cast<int64_t>(host.size())) {
    upload(host);
  }
  // n elements, every byte 0xFF: NaN for floating types, so an output a kernel fails to
  // write shows up as NaN.
  static DeviceArray poisoned(int64_t n) {
    DeviceArray a(n);
    if (n > 0) {
      CUDA_CHECK(cudaMemset(a.ptr_, 0xFF, a.bytes()));
      CUDA_CHECK(cudaDeviceSynchronize());
    }
    return a;
  }
  ~DeviceArray() {
    if (ptr_) (void)cudaFree(ptr_);
  }
  DeviceArray(DeviceArray&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr; }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  int64_t size() const { return n_; }
  size_t bytes() const { return static_cast<size_t>(n_) * sizeof(T); }

  void upload(const std::vector<T>& host) {
    EXPECT_EQ(static_cast<int64_t>(host.size()), n_);
    if (n_ == 0) return;
    CUDA_CHECK(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  // Waits for the test stream, then copies back.
  std::vector<T> download() const {
    sync();
    std::vector<T> host(static_cast<size_t>(n_));
    if (n_ > 0) CUDA_CHECK(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* ptr_ = nullptr;
  int64_t n_ = 0;
};

// n floats uniform in [-scale, scale), reproducible from the seed.
inline std::vector<float> random_floats(int64_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  for (auto& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    double unit = static_cast<double>(state >> 11) * 0x1.0p-53;  // [0, 1)
    x = static_cast<float>((2 * unit - 1) * scale);
  }
  return v;
}

// n token ids in [0, V), reproducible from the seed.
inline std::vector<int32_t> random_tokens(int64_t n, int64_t V, uint64_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  uint64_t state = seed * 0xD1B54A32D192ED03ull + 1;
  for (auto& t : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(V));
  }
  return v;
}

// Neumaier-compensated long double sum of x[i] (or of x[i]^2 with `squares`): exact far
// below the 1e-12 the device sums are checked to.
inline long double compensated_sum(const std::vector<float>& x, bool squares = false) {
  long double s = 0, c = 0;
  for (float f : x) {
    const long double v = squares ? static_cast<long double>(f) * f : f, t = s + v;
    c += std::fabs(s) >= std::fabs(v) ? (s - t) + v : (v - t) + s;
    s = t;
  }
  return s + c;
}

// ||got - want|| / ||want|| in double (||got - want|| when want is all zeros).
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// Same size, no NaN or Inf in `got`, relative L2 within `tol`; names the first
// non-finite element and the worst one.
inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t worst = 0;
  double worst_err = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << " (CPU " << want[i] << ")";
      return;
    }
    double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (err > worst_err) {
      worst_err = err;
      worst = i;
    }
  }
  double r = rel_l2(got, want);
  EXPECT_LE(r, tol) << what << ": relative L2 " << r << "; worst element " << worst << " is "
                    << (got.empty() ? 0.0f : got[worst]) << ", CPU "
                    << (want.empty() ? 0.0f : want[worst]);
}

// A float's bits as 0x%08x: tells -0 from +0 and one NaN from another.
inline std::string float_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  char buf[11];
  std::snprintf(buf, sizeof(buf), "0x%08x", static_cast<unsigned>(bits));
  return buf;
}

// Same size and every element the same bits (std::memcmp, so NaN equals the same NaN and
// -0 differs from +0); names the first few elements that differ, with their bits.
inline void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) continue;
    if (bad++ < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << " (" << float_bits(got[i])
                    << "), want " << want[i] << " (" << float_bits(want[i]) << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": elements that differ";
}

}  // namespace etr::testing
