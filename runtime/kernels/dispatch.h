// The device dispatch (DESIGN.md, "The training engine": the stage seam): a layer reaches
// its kernels through the KernelSet of its ExecContext, never through cpu:: or cuda::
// directly, so the same layer runs on whichever device its stack was placed on.
//
//   const KernelSet<float>& k = kernels_for<float>(Device::cpu());
//   k.matmul_forward(out, inp, w, b, N, C, OC);
//
// Each member has the signature of the CPU kernel of the same name
// (runtime/kernels/cpu/<family>.h, runtime/kernels/kernels.h for the conventions).
#pragma once

#include <cstdint>

#include "runtime/device.h"

namespace etr {

template <typename Real>
struct KernelSet {
  const char* name = "";  // "cpu"

  void (*encoder_forward)(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe,
                          int64_t B, int64_t T, int64_t C, int64_t V) = nullptr;
  void (*encoder_backward)(Real* dwte, Real* dwpe, const Real* dout, const int32_t* tokens,
                           int64_t B, int64_t T, int64_t C, int64_t V) = nullptr;
  void (*layernorm_forward)(Real* out, Real* mean, Real* rstd, const Real* inp,
                            const Real* weight, const Real* bias, int64_t N, int64_t C,
                            double eps) = nullptr;
  void (*layernorm_backward)(Real* dinp, Real* dweight, Real* dbias, const Real* dout,
                             const Real* inp, const Real* weight, const Real* mean,
                             const Real* rstd, int64_t N, int64_t C) = nullptr;
  void (*matmul_forward)(Real* out, const Real* inp, const Real* weight, const Real* bias,
                         int64_t N, int64_t C, int64_t OC) = nullptr;
  void (*matmul_backward)(Real* dinp, Real* dweight, Real* dbias, const Real* dout,
                          const Real* inp, const Real* weight, int64_t N, int64_t C,
                          int64_t OC) = nullptr;
  // Elements of scratch attention_backward needs for sequences of T.
  int64_t (*attention_backward_scratch_size)(int64_t T) = nullptr;
  void (*attention_forward)(Real* out, Real* att, const Real* qkv, int64_t B, int64_t T,
                            int64_t C, int64_t NH) = nullptr;
  void (*attention_backward)(Real* dqkv, Real* scratch, int64_t scratch_size, const Real* dout,
                             const Real* qkv, const Real* att, int64_t B, int64_t T, int64_t C,
                             int64_t NH) = nullptr;
  void (*gelu_forward)(Real* out, const Real* inp, int64_t n) = nullptr;
  void (*gelu_backward)(Real* dinp, const Real* inp, const Real* dout, int64_t n) = nullptr;
  void (*residual_forward)(Real* out, const Real* inp1, const Real* inp2, int64_t n) = nullptr;
  void (*residual_backward)(Real* dinp1, Real* dinp2, const Real* dout, int64_t n) = nullptr;
  void (*softmax_xent_forward)(Real* losses, const Real* logits, const int32_t* targets,
                               int64_t N, int64_t V, int64_t Vp) = nullptr;
  void (*softmax_xent_forward_backward)(Real* losses, Real* dlogits, const Real* logits,
                                        const int32_t* targets, Real dloss, int64_t N, int64_t V,
                                        int64_t Vp) = nullptr;
  void (*fill)(Real* out, Real value, int64_t n) = nullptr;
  void (*copy)(Real* out, const Real* inp, int64_t n) = nullptr;
  void (*add_inplace)(Real* out, const Real* inp, int64_t n) = nullptr;
  double (*sum)(const Real* inp, int64_t n) = nullptr;
};

// The kernels of `device`: the CPU set, or InvalidArgument for a device that has none yet
// (the CUDA set comes with the GPU path; the layers need no change for it).
template <typename Real>
const KernelSet<Real>& kernels_for(Device device);

}  // namespace etr
