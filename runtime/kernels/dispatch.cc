#include "runtime/kernels/dispatch.h"

#include "runtime/error.h"
#include "runtime/kernels/cpu/attention.h"
#include "runtime/kernels/cpu/elementwise.h"
#include "runtime/kernels/cpu/encoder.h"
#include "runtime/kernels/cpu/gelu.h"
#include "runtime/kernels/cpu/layernorm.h"
#include "runtime/kernels/cpu/matmul.h"
#include "runtime/kernels/cpu/residual.h"
#include "runtime/kernels/cpu/softmax_xent.h"
#include "runtime/kernels/cpu/threads.h"

namespace etr {
namespace {

int64_t cpu_attention_scratch(int64_t T) {
  return cpu::attention_backward_scratch_size(T, cpu::num_threads());
}

template <typename Real>
KernelSet<Real> make_cpu_set() {
  KernelSet<Real> k;
  k.name = "cpu";
  k.encoder_forward = &cpu::encoder_forward<Real>;
  k.encoder_backward = &cpu::encoder_backward<Real>;
  k.layernorm_forward = &cpu::layernorm_forward<Real>;
  k.layernorm_backward = &cpu::layernorm_backward<Real>;
  k.matmul_forward = &cpu::matmul_forward<Real>;
  k.matmul_backward = &cpu::matmul_backward<Real>;
  k.attention_backward_scratch_size = &cpu_attention_scratch;
  k.attention_forward = &cpu::attention_forward<Real>;
  k.attention_backward = &cpu::attention_backward<Real>;
  k.gelu_forward = &cpu::gelu_forward<Real>;
  k.gelu_backward = &cpu::gelu_backward<Real>;
  k.residual_forward = &cpu::residual_forward<Real>;
  k.residual_backward = &cpu::residual_backward<Real>;
  k.softmax_xent_forward = &cpu::softmax_xent_forward<Real>;
  k.softmax_xent_forward_backward = &cpu::softmax_xent_forward_backward<Real>;
  k.fill = &cpu::fill<Real>;
  k.copy = &cpu::copy<Real>;
  k.add_inplace = &cpu::add_inplace<Real>;
  k.sum = &cpu::sum<Real>;
  return k;
}

}  // namespace

template <typename Real>
const KernelSet<Real>& kernels_for(Device device) {
  static const KernelSet<Real> cpu_set = make_cpu_set<Real>();
  if (device.is_cpu()) return cpu_set;
  throw InvalidArgument("there is no kernel set for " + device.str() +
                        " yet: etr's layers run on the host (device cpu)");
}

template const KernelSet<float>& kernels_for<float>(Device);
template const KernelSet<double>& kernels_for<double>(Device);

}  // namespace etr
