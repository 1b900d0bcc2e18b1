#include "bench/gpu_kernel_profile.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <type_traits>

#include "runtime/cuda_check.h"
#include "runtime/kernels/dispatch.h"

namespace etr::bench {
namespace {

struct Call {
  const char* name;
  cudaEvent_t begin, end;
};

// The recording state of the one profile of each type (its wrappers are plain functions).
template <typename Real>
struct Recorder {
  const KernelSet<Real>* inner = nullptr;
  KernelSet<Real> timed;
  bool on = false;
  std::vector<cudaEvent_t> pool;  // events, reused between profiles
  size_t used = 0;
  std::vector<Call> calls;

  cudaEvent_t event() {
    if (used == pool.size()) {
      cudaEvent_t e = nullptr;
      CUDA_CHECK(cudaEventCreate(&e));
      pool.push_back(e);
    }
    return pool[used++];
  }
};

template <typename Real>
Recorder<Real>& recorder() {
  static Recorder<Real> r;
  return r;
}

template <typename Real, auto Member, const char* Name, typename Fn>
struct Timed;
template <typename Real, auto Member, const char* Name, typename R, typename... Args>
struct Timed<Real, Member, Name, R (*)(Args...)> {
  static R call(Args... args) {
    Recorder<Real>& rec = recorder<Real>();
    auto inner = rec.inner->*Member;
    if (!rec.on) return inner(args...);
    auto stream = static_cast<cudaStream_t>(std::get<sizeof...(Args) - 1>(std::tie(args...)));
    Call c{Name, rec.event(), rec.event()};
    CUDA_CHECK(cudaEventRecord(c.begin, stream));
    if constexpr (std::is_void_v<R>) {
      inner(args...);
      CUDA_CHECK(cudaEventRecord(c.end, stream));
      rec.calls.push_back(c);
    } else {
      R r = inner(args...);
      CUDA_CHECK(cudaEventRecord(c.end, stream));
      rec.calls.push_back(c);
      return r;
    }
  }
};

#define ETR_KERNEL_NAME(m) constexpr char k_##m[] = #m;
ETR_KERNEL_NAME(encoder_forward)
ETR_KERNEL_NAME(encoder_backward)
ETR_KERNEL_NAME(layernorm_forward)
ETR_KERNEL_NAME(layernorm_backward)
ETR_KERNEL_NAME(matmul_forward)
ETR_KERNEL_NAME(matmul_backward)
ETR_KERNEL_NAME(attention_forward)
ETR_KERNEL_NAME(attention_backward)
ETR_KERNEL_NAME(gelu_forward)
ETR_KERNEL_NAME(gelu_backward)
ETR_KERNEL_NAME(residual_forward)
ETR_KERNEL_NAME(residual_backward)
ETR_KERNEL_NAME(residual_layernorm_forward)
ETR_KERNEL_NAME(matmul_gelu_forward)
ETR_KERNEL_NAME(softmax_xent_forward)
ETR_KERNEL_NAME(softmax_xent_forward_backward)
ETR_KERNEL_NAME(fill)
ETR_KERNEL_NAME(copy)
ETR_KERNEL_NAME(add_inplace)
ETR_KERNEL_NAME(accumulate_mean)
#undef ETR_KERNEL_NAME

template <typename Real>
KernelSet<Real> timed_set(const KernelSet<Real>& inner) {
  KernelSet<Real> k = inner;  // name, the size functions and `sum` as they are
#define ETR_TIME(m) k.m = &Timed<Real, &KernelSet<Real>::m, k_##m, decltype(k.m)>::call;
  ETR_TIME(encoder_forward)
  ETR_TIME(encoder_backward)
  ETR_TIME(layernorm_forward)
  ETR_TIME(layernorm_backward)
  ETR_TIME(matmul_forward)
  ETR_TIME(matmul_backward)
  ETR_TIME(attention_forward)
  ETR_TIME(attention_backward)
  ETR_TIME(gelu_forward)
  ETR_TIME(gelu_backward)
  ETR_TIME(residual_forward)
  ETR_TIME(residual_backward)
  ETR_TIME(residual_layernorm_forward)
  ETR_TIME(matmul_gelu_forward)
  ETR_TIME(softmax_xent_forward)
  ETR_TIME(softmax_xent_forward_backward)
  ETR_TIME(fill)
  ETR_TIME(copy)
  ETR_TIME(add_inplace)
  ETR_TIME(accumulate_mean)
#undef ETR_TIME
  return k;
}

}  // namespace

template <typename Real>
KernelProfile<Real>::KernelProfile() {
  Recorder<Real>& rec = recorder<Real>();
  override_cuda_kernels<Real>(nullptr);
  rec.inner = &kernels_for<Real>(Device::cuda(0));  // the CUDA set (the same for every GPU)
  rec.timed = timed_set(*rec.inner);
  rec.on = false;
  rec.used = 0;
  rec.calls.clear();
  override_cuda_kernels<Real>(&rec.timed);
}

template <typename Real>
KernelProfile<Real>::~KernelProfile() {
  override_cuda_kernels<Real>(nullptr);
  recorder<Real>().on = false;
}

template <typename Real>
void KernelProfile<Real>::record(bool on) {
  recorder<Real>().on = on;
}

template <typename Real>
std::vector<std::pair<std::string, double>> KernelProfile<Real>::totals() const {
  const Recorder<Real>& rec = recorder<Real>();
  std::map<std::string, double> ms;
  for (const Call& c : rec.calls) {
    CUDA_CHECK(cudaEventSynchronize(c.end));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, c.begin, c.end));
    ms[c.name] += t;
  }
  std::vector<std::pair<std::string, double>> out(ms.begin(), ms.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return out;
}

template class KernelProfile<float>;
template class KernelProfile<bf16>;

}  // namespace etr::bench
