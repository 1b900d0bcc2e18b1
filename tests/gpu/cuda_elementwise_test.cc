// cuda_cast and cuda_scale against the CPU reference of runtime/dtype.h, bit for bit, for
// element counts 0, 1, 7 and 1000003 (a prime beyond one launch's worth of threads, so
// the grid-stride loop runs more than once). Inputs cover many magnitudes, signed zeros,
// infinities, f16 overflow and subnormals. Skipped when no CUDA device is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "runtime/cuda_allocator.h"
#include "runtime/cuda_check.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/kernels/cuda/elementwise.h"

namespace etr {
namespace {

CudaCachingAllocator& allocator() {
  static CudaCachingAllocator alloc(0);
  return alloc;
}

std::vector<float> make_floats(int64_t n) {
  static const float kSpecials[] = {0.0f,
                                    -0.0f,
                                    1.0f,
                                    -1.0f,
                                    3.14159265f,
                                    std::numeric_limits<float>::infinity(),
                                    -std::numeric_limits<float>::infinity(),
                                    65504.0f,
                                    65520.0f,
                                    70000.0f,
                                    1e-8f,
                                    -6e-5f,
                                    1e-40f,
                                    3.4e38f,
                                    1.00390625f /* bf16 tie */,
                                    1.0009765625f};
  constexpr int64_t kNumSpecials = sizeof(kSpecials) / sizeof(kSpecials[0]);
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    double unit = static_cast<double>(state >> 11) * 0x1.0p-53;  // [0, 1)
    int exponent = static_cast<int>((state >> 3) % 61) - 30;     // 2^-30 .. 2^30
    v[static_cast<size_t>(i)] =
        i < kNumSpecials ? kSpecials[i] : static_cast<float>(std::ldexp(2 * unit - 1, exponent));
  }
  return v;
}

std::vector<double> make_doubles(int64_t n) {
  std::vector<float> f = make_floats(n);
  std::vector<double> d(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    // Bits below f32 precision, so the f64 -> f32 cast has to round; some beyond f32 range.
    d[i] =
        i % 13 == 5 ? (i % 2 ? -1e300 : 1e-300) : f[i] * (1.0 + 3e-9 * static_cast<double>(i % 7));
  }
  return d;
}

template <typename T>
Buffer upload(const std::vector<T>& host) {
  Buffer b(allocator(), host.size() * sizeof(T));
  if (!host.empty()) {
    CUDA_CHECK(cudaMemcpy(b.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    // From pageable memory cudaMemcpy returns once the data is staged, before the DMA has
    // landed; the kernels run on a non-blocking stream, which does not wait for it (seen
    // on an H200: the tail of a 1000003-element input read stale).
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  return b;
}

template <typename T>
std::vector<T> download(const Buffer& b, int64_t n) {
  std::vector<T> host(static_cast<size_t>(n));
  if (n > 0) {
    CUDA_CHECK(cudaMemcpy(host.data(), b.data(), host.size() * sizeof(T), cudaMemcpyDeviceToHost));
  }
  return host;
}

template <typename T>
std::string hex_bits(const T& v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(bits));
  return text;
}

// Bitwise comparison; reports the first few differences.
template <typename T>
void expect_same_bits(const std::vector<T>& got, const std::vector<T>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) continue;
    if (bad < 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << hex_bits(got[i])
                    << ", the CPU reference " << hex_bits(want[i]);
    }
    ++bad;
  }
  EXPECT_EQ(bad, 0u) << what << ": elements differing from the CPU reference";
}

class CudaElementwise : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) return;
    CUDA_CHECK(cudaSetDevice(0));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void TearDown() override {
    if (stream_) (void)cudaStreamDestroy(stream_);
  }
  void sync() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  cudaStream_t stream_ = nullptr;
};

// f32 -> 16-bit -> f32 through the device, checked against `to16` / `from16` on the CPU.
void check_16bit_round_trip(DType t, uint16_t (*to16)(float), float (*from16)(uint16_t), int64_t n,
                            cudaStream_t stream) {
  std::string name(dtype_name(t));
  std::vector<float> in = make_floats(n);
  std::vector<uint16_t> want16(in.size());
  std::vector<float> want32(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    want16[i] = to16(in[i]);
    want32[i] = from16(want16[i]);
  }
  Buffer d_in = upload(in);
  Buffer d_16(allocator(), in.size() * 2);
  Buffer d_32(allocator(), in.size() * 4);
  cuda_cast(d_in.data(), DType::kF32, d_16.data(), t, n, stream);
  cuda_cast(d_16.data(), t, d_32.data(), DType::kF32, n, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  expect_same_bits(download<uint16_t>(d_16, n), want16, "f32 -> " + name);
  expect_same_bits(download<float>(d_32, n), want32, name + " -> f32");
}

TEST_P(CudaElementwise, CastsF32ToAndFromBF16) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  check_16bit_round_trip(DType::kBF16, f32_to_bf16, bf16_to_f32, GetParam(), stream_);
}

TEST_P(CudaElementwise, CastsF32ToAndFromF16) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  check_16bit_round_trip(DType::kF16, f32_to_f16, f16_to_f32, GetParam(), stream_);
}

TEST_P(CudaElementwise, CastsF32ToAndFromF64) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  int64_t n = GetParam();
  std::vector<float> f = make_floats(n);
  std::vector<double> d = make_doubles(n);
  std::vector<double> want64(f.size());
  std::vector<float> want32(d.size());
  for (size_t i = 0; i < f.size(); ++i) {
    want64[i] = static_cast<double>(f[i]);
    want32[i] = static_cast<float>(d[i]);
  }
  Buffer d_f = upload(f), d_d = upload(d);
  Buffer out64(allocator(), f.size() * 8), out32(allocator(), d.size() * 4);
  cuda_cast(d_f.data(), DType::kF32, out64.data(), DType::kF64, n, stream_);
  cuda_cast(d_d.data(), DType::kF64, out32.data(), DType::kF32, n, stream_);
  sync();
  expect_same_bits(download<double>(out64, n), want64, "f32 -> f64");
  expect_same_bits(download<float>(out32, n), want32, "f64 -> f32");
}

TEST_P(CudaElementwise, CastToTheSameDtypeCopies) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  int64_t n = GetParam();
  std::vector<int32_t> in(static_cast<size_t>(n));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(i * 2654435761u);
  Buffer d_in = upload(in);
  Buffer d_out(allocator(), in.size() * 4);
  cuda_cast(d_in.data(), DType::kI32, d_out.data(), DType::kI32, n, stream_);
  cuda_cast(d_in.data(), DType::kI32, d_in.data(), DType::kI32, n, stream_);  // in place: no-op
  sync();
  expect_same_bits(download<int32_t>(d_out, n), in, "i32 copy");
  expect_same_bits(download<int32_t>(d_in, n), in, "i32 in-place copy");
}

// Scales on the device and on the CPU; T is the storage type of `t`.
template <typename T, typename Ref>
void check_scale(DType t, const std::vector<T>& in, double factor, Ref ref, cudaStream_t stream) {
  std::vector<T> want(in.size());
  for (size_t i = 0; i < in.size(); ++i) want[i] = ref(in[i], factor);
  Buffer d = upload(in);
  cuda_scale(d.data(), t, static_cast<int64_t>(in.size()), factor, stream);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  expect_same_bits(download<T>(d, static_cast<int64_t>(in.size())), want,
                   "scale " + std::string(dtype_name(t)) + " by " + std::to_string(factor));
}

TEST_P(CudaElementwise, ScalesEveryFloatingDtype) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  int64_t n = GetParam();
  std::vector<float> f = make_floats(n);
  std::vector<double> d = make_doubles(n);
  std::vector<uint16_t> bf(f.size()), hf(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    bf[i] = f32_to_bf16(f[i]);
    hf[i] = f32_to_f16(f[i]);
  }
  for (double factor : {0.37, -2.5}) {
    check_scale(
        DType::kF32, f, factor, [](float x, double s) { return x * static_cast<float>(s); },
        stream_);
    check_scale(
        DType::kF64, d, factor, [](double x, double s) { return x * s; }, stream_);
    check_scale(
        DType::kBF16, bf, factor,
        [](uint16_t x, double s) { return f32_to_bf16(bf16_to_f32(x) * static_cast<float>(s)); },
        stream_);
    check_scale(
        DType::kF16, hf, factor,
        [](uint16_t x, double s) { return f32_to_f16(f16_to_f32(x) * static_cast<float>(s)); },
        stream_);
  }
}

INSTANTIATE_TEST_SUITE_P(Counts, CudaElementwise, ::testing::Values(0, 1, 7, 1000003));

TEST(CudaElementwiseErrors, NanStaysNan) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  std::vector<float> in = {std::numeric_limits<float>::quiet_NaN(),
                           -std::numeric_limits<float>::quiet_NaN()};
  Buffer d_in = upload(in);
  Buffer d_bf(allocator(), 4), d_hf(allocator(), 4);
  cuda_cast(d_in.data(), DType::kF32, d_bf.data(), DType::kBF16, 2, 0);
  cuda_cast(d_in.data(), DType::kF32, d_hf.data(), DType::kF16, 2, 0);
  CUDA_CHECK(cudaStreamSynchronize(0));
  for (uint16_t h : download<uint16_t>(d_bf, 2)) EXPECT_TRUE(std::isnan(bf16_to_f32(h)));
  for (uint16_t h : download<uint16_t>(d_hf, 2)) EXPECT_TRUE(std::isnan(f16_to_f32(h)));
}

TEST(CudaElementwiseErrors, UnsupportedPairsAndCountsThrowInvalidArgument) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible; GPU tests need one";
  EXPECT_THROW(cuda_cast(nullptr, DType::kBF16, nullptr, DType::kF16, 4, 0), InvalidArgument);
  EXPECT_THROW(cuda_cast(nullptr, DType::kI32, nullptr, DType::kF32, 4, 0), InvalidArgument);
  EXPECT_THROW(cuda_cast(nullptr, DType::kF32, nullptr, DType::kBF16, -1, 0), InvalidArgument);
  EXPECT_THROW(cuda_scale(nullptr, DType::kI32, 4, 2.0, 0), InvalidArgument);
  EXPECT_THROW(cuda_scale(nullptr, DType::kF32, -3, 2.0, 0), InvalidArgument);
  EXPECT_NO_THROW(cuda_scale(nullptr, DType::kF32, 0, 2.0, 0));
  try {
    cuda_cast(nullptr, DType::kBF16, nullptr, DType::kF16, 4, 0);
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("bf16 to f16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace etr
