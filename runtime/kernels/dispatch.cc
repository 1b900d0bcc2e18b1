#include "runtime/kernels/dispatch.h"

#include <atomic>
#include <type_traits>

#include "runtime/error.h"
#include "runtime/kernels/cpu/attention.h"
#include "runtime/kernels/cpu/bf16_reference.h"
#include "runtime/kernels/cpu/elementwise.h"
#include "runtime/kernels/cpu/encoder.h"
#include "runtime/kernels/cpu/gelu.h"
#include "runtime/kernels/cpu/layernorm.h"
#include "runtime/kernels/cpu/matmul.h"
#include "runtime/kernels/cpu/residual.h"
#include "runtime/kernels/cpu/softmax_xent.h"
#include "runtime/kernels/cpu/threads.h"
#ifdef ETR_HAVE_CUDA
#include "runtime/kernels/cuda/kernel_set.h"
#endif

namespace etr {
namespace {

int64_t cpu_attention_scratch(int64_t /*B*/, int64_t T, int64_t /*C*/, int64_t /*NH*/) {
  return cpu::attention_backward_scratch_size(T, cpu::num_threads());
}

int64_t full_attention_saved_numel(int64_t B, int64_t T, int64_t /*C*/, int64_t NH) {
  return B * NH * T * T;
}

// F with a trailing stream argument that it ignores: the CPU kernels run on the calling
// thread (and its OpenMP team) and return when done.
template <auto F>
struct IgnoreStream;
template <typename R, typename... Args, R (*F)(Args...)>
struct IgnoreStream<F> {
  static R call(Args... args, void* /*stream*/) { return F(args...); }
};

template <typename Real>
KernelSet<Real> make_cpu_set() {
  KernelSet<Real> k;
  k.name = "cpu";
  k.encoder_forward = &IgnoreStream<&cpu::encoder_forward<Real>>::call;
  k.encoder_backward = &IgnoreStream<&cpu::encoder_backward<Real>>::call;
  k.layernorm_forward = &IgnoreStream<&cpu::layernorm_forward<Real>>::call;
  k.layernorm_backward = &IgnoreStream<&cpu::layernorm_backward<Real>>::call;
  k.matmul_forward = &IgnoreStream<&cpu::matmul_forward<Real>>::call;
  k.matmul_backward = &IgnoreStream<&cpu::matmul_backward<Real>>::call;
  k.matmul_backward_rows = &IgnoreStream<&cpu::matmul_backward_rows<Real>>::call;
  k.encoder_backward_rows = &IgnoreStream<&cpu::encoder_backward_rows<Real>>::call;
  k.attention_backward_scratch_size = &cpu_attention_scratch;
  k.attention_forward = &IgnoreStream<&cpu::attention_forward<Real>>::call;
  k.attention_saved_numel = &full_attention_saved_numel;
  k.attention_backward = [](Real* dqkv, Real* scratch, int64_t scratch_size, const Real* dout,
                            const Real* qkv, const Real* att, const Real* /*out*/, int64_t B,
                            int64_t T, int64_t C, int64_t NH, void*) {
    cpu::attention_backward<Real>(dqkv, scratch, scratch_size, dout, qkv, att, B, T, C, NH);
  };
  k.gelu_forward = &IgnoreStream<&cpu::gelu_forward<Real>>::call;
  k.gelu_backward = &IgnoreStream<&cpu::gelu_backward<Real>>::call;
  k.residual_forward = &IgnoreStream<&cpu::residual_forward<Real>>::call;
  k.residual_backward = &IgnoreStream<&cpu::residual_backward<Real>>::call;
  k.softmax_xent_forward = &IgnoreStream<&cpu::softmax_xent_forward<Real>>::call;
  k.softmax_xent_forward_backward = &IgnoreStream<&cpu::softmax_xent_forward_backward<Real>>::call;
  k.residual_layernorm_forward = [](Real* x1, Real* y, Real* mean, Real* rstd, const Real* inp1,
                                    const Real* inp2, const Real* w, const Real* b, int64_t N,
                                    int64_t C, double eps, void*) {
    cpu::residual_forward<Real>(x1, inp1, inp2, N * C);
    cpu::layernorm_forward<Real>(y, mean, rstd, x1, w, b, N, C, eps);
  };
  k.matmul_gelu_forward = [](Real* pre, Real* out, const Real* inp, const Real* w, const Real* b,
                             int64_t N, int64_t C, int64_t OC, void*) {
    cpu::matmul_forward<Real>(pre, inp, w, b, N, C, OC);
    cpu::gelu_forward<Real>(out, pre, N * OC);
  };
  k.fill = &IgnoreStream<&cpu::fill<Real>>::call;
  k.copy = &IgnoreStream<&cpu::copy<Real>>::call;
  k.add_inplace = &IgnoreStream<&cpu::add_inplace<Real>>::call;
  k.sum = &IgnoreStream<&cpu::sum<Real>>::call;
  k.accumulate_mean = &IgnoreStream<&cpu::accumulate_mean<Real>>::call;
  return k;
}

template <typename Real>
std::atomic<const KernelSet<Real>*> cuda_override{nullptr};

}  // namespace

template <typename Real>
void override_cuda_kernels(const KernelSet<Real>* set) {
  cuda_override<Real>.store(set);
}

template <typename Real>
const KernelSet<Real>& kernels_for(Device device) {
  if (device.is_cuda()) {
    if (const KernelSet<Real>* o = cuda_override<Real>.load()) return *o;
  }
  if (device.is_cpu()) {
    if constexpr (std::is_same_v<Real, bf16>) {
      return cpu::bf16_reference_set();
    } else {
      static const KernelSet<Real> cpu_set = make_cpu_set<Real>();
      return cpu_set;
    }
  }
#ifdef ETR_HAVE_CUDA
  if constexpr (std::is_same_v<Real, float>) {
    if (device.is_cuda()) return cuda::kernel_set();
  } else if constexpr (std::is_same_v<Real, bf16>) {
    if (device.is_cuda()) return cuda::kernel_set_bf16();
  }
  if (device.is_cuda()) {
    throw InvalidArgument("the CUDA kernels are float and bf16 only: " + device.str() +
                          " has no kernel set for double (the CPU's checks the gradients)");
  }
#endif
  throw InvalidArgument("there is no kernel set for " + device.str() +
                        " in this build: etr's layers run on the host (device cpu)" +
                        (device.is_cuda() ? " (built without CUDA)" : ""));
}

template const KernelSet<float>& kernels_for<float>(Device);
template const KernelSet<double>& kernels_for<double>(Device);
template const KernelSet<bf16>& kernels_for<bf16>(Device);
template void override_cuda_kernels<float>(const KernelSet<float>*);
template void override_cuda_kernels<bf16>(const KernelSet<bf16>*);

}  // namespace etr
