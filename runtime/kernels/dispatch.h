// The device dispatch (docs/design.md, "The training engine": the stage seam): a layer reaches
// its kernels through the KernelSet of its ExecContext, never through cpu:: or cuda::
// directly, so the same layer runs on whichever device its stack was placed on.
//
//   const KernelSet<float>& k = kernels_for<float>(Device::cpu());
//   k.matmul_forward(out, inp, w, b, N, C, OC);
//
// Each member has the signature of the CPU kernel of the same name
// (runtime/kernels/cpu/<family>.h, runtime/kernels/kernels.h for the conventions) plus a
// trailing `void* stream`: the cudaStream_t the CUDA set enqueues on (its kernels return
// at once, except `sum`, which waits for its result), ignored by the CPU set. The flat
// state's operations (zeroing, copies to and from the host, AdamW, the gradient norm and
// clipping) are the dispatch's other half, runtime/kernels/device_ops.h. A layer calls
// them through BoundKernels (Layer::k()), which passes its ExecContext's stream:
//
//   this->k().matmul_forward(out, inp, w, b, N, C, OC);   // + context().stream
#pragma once

#include <cstdint>
#include <utility>

#include "runtime/device.h"
#include "runtime/dtype.h"

namespace etr {

// Real is the compute type (activations, the parameters the kernels read); Acc, what it
// accumulates in (runtime/dtype.h, accum_t): parameter gradients, LayerNorm's mean and
// rstd, the per-position losses. Both are Real for float and double; for bf16 (mixed
// precision) Acc is float.
template <typename Real>
struct KernelSet {
  using Acc = accum_t<Real>;
  const char* name = "";  // "cpu"

  void (*encoder_forward)(Real* out, const int32_t* tokens, const Real* wte, const Real* wpe,
                          int64_t B, int64_t T, int64_t C, int64_t V, void* stream) = nullptr;
  void (*encoder_backward)(Acc* dwte, Acc* dwpe, const Real* dout, const int32_t* tokens,
                           int64_t B, int64_t T, int64_t C, int64_t V, void* stream) = nullptr;
  void (*layernorm_forward)(Real* out, Acc* mean, Acc* rstd, const Real* inp, const Real* weight,
                            const Real* bias, int64_t N, int64_t C, double eps,
                            void* stream) = nullptr;
  void (*layernorm_backward)(Real* dinp, Acc* dweight, Acc* dbias, const Real* dout,
                             const Real* inp, const Real* weight, const Acc* mean, const Acc* rstd,
                             int64_t N, int64_t C, void* stream) = nullptr;
  void (*matmul_forward)(Real* out, const Real* inp, const Real* weight, const Real* bias,
                         int64_t N, int64_t C, int64_t OC, void* stream) = nullptr;
  void (*matmul_backward)(Real* dinp, Acc* dweight, Acc* dbias, const Real* dout, const Real* inp,
                          const Real* weight, int64_t N, int64_t C, int64_t OC,
                          void* stream) = nullptr;
  // Rows [o0, o1) of matmul_backward's dweight / dbias, and of encoder_backward's dwte /
  // dwpe (cpu/matmul.h, cpu/encoder.h): ZeRO's blocked gradients (runtime/grad_sink.h),
  // host only for now — the CUDA sets leave them null (the device path refuses the
  // blocked mode, parallel/zero_engine.h).
  void (*matmul_backward_rows)(Acc* dweight, Acc* dbias, const Real* dout, const Real* inp,
                               int64_t N, int64_t C, int64_t OC, int64_t o0, int64_t o1,
                               void* stream) = nullptr;
  void (*encoder_backward_rows)(Acc* dwte, Acc* dwpe, const Real* dout, const int32_t* tokens,
                                int64_t B, int64_t T, int64_t C, int64_t V, int64_t r0, int64_t r1,
                                void* stream) = nullptr;
  // Elements of scratch attention_backward needs for micro-batches of B x T (C wide, NH
  // heads): the CPU's depends on T and its threads, the GPU's is one sequence's [NH, T, T].
  int64_t (*attention_backward_scratch_size)(int64_t B, int64_t T, int64_t C, int64_t NH) = nullptr;
  // Elements of Real attention_forward saves in `att` for its backward: the probabilities
  // [B, NH, T, T] (the CPU's, the fp32 GPU set's), or a flash attention's row statistics
  // (the bf16 GPU set's: the log-sum-exp [B, NH, T] in f32, no T x T matrix).
  int64_t (*attention_saved_numel)(int64_t B, int64_t T, int64_t C, int64_t NH) = nullptr;
  void (*attention_forward)(Real* out, Real* att, const Real* qkv, int64_t B, int64_t T, int64_t C,
                            int64_t NH, void* stream) = nullptr;
  // `out`: the forward's output (a flash attention's backward reads it; the others ignore it).
  void (*attention_backward)(Real* dqkv, Real* scratch, int64_t scratch_size, const Real* dout,
                             const Real* qkv, const Real* att, const Real* out, int64_t B,
                             int64_t T, int64_t C, int64_t NH, void* stream) = nullptr;
  void (*gelu_forward)(Real* out, const Real* inp, int64_t n, void* stream) = nullptr;
  void (*gelu_backward)(Real* dinp, const Real* inp, const Real* dout, int64_t n,
                        void* stream) = nullptr;
  void (*residual_forward)(Real* out, const Real* inp1, const Real* inp2, int64_t n,
                           void* stream) = nullptr;
  void (*residual_backward)(Real* dinp1, Real* dinp2, const Real* dout, int64_t n,
                            void* stream) = nullptr;
  // Fused forwards, each exactly its composition on the CPU (and in the fp32 GPU set):
  //   residual_layernorm_forward: residual_forward(x1, inp1, inp2, N C) then
  //     layernorm_forward(y, mean, rstd, x1, weight, bias, N, C, eps) (x1 may alias inp1 or
  //     inp2; the bf16 GPU set reads the rows once);
  //   matmul_gelu_forward: matmul_forward(pre, inp, weight, bias, N, C, OC) then
  //     gelu_forward(out, pre, N OC) (the bf16 GPU set: one cuBLASLt product with the
  //     GELU_AUX_BIAS epilogue, `pre` its auxiliary output).
  void (*residual_layernorm_forward)(Real* x1, Real* y, Acc* mean, Acc* rstd, const Real* inp1,
                                     const Real* inp2, const Real* weight, const Real* bias,
                                     int64_t N, int64_t C, double eps, void* stream) = nullptr;
  void (*matmul_gelu_forward)(Real* pre, Real* out, const Real* inp, const Real* weight,
                              const Real* bias, int64_t N, int64_t C, int64_t OC,
                              void* stream) = nullptr;
  void (*softmax_xent_forward)(Acc* losses, const Real* logits, const int32_t* targets, int64_t N,
                               int64_t V, int64_t Vp, void* stream) = nullptr;
  void (*softmax_xent_forward_backward)(Acc* losses, Real* dlogits, const Real* logits,
                                        const int32_t* targets, Acc dloss, int64_t N, int64_t V,
                                        int64_t Vp, void* stream) = nullptr;
  void (*fill)(Real* out, Real value, int64_t n, void* stream) = nullptr;
  void (*copy)(Real* out, const Real* inp, int64_t n, void* stream) = nullptr;
  void (*add_inplace)(Real* out, const Real* inp, int64_t n, void* stream) = nullptr;
  // Of the per-position losses (Acc).
  double (*sum)(const Acc* inp, int64_t n, void* stream) = nullptr;
  // *acc += sum(inp) / divisor * num / den (left to right), acc in the device's memory
  // (host on the CPU): the training loop's loss, read once per step.
  void (*accumulate_mean)(double* acc, const Acc* inp, int64_t n, double divisor, double num,
                          double den, void* stream) = nullptr;
};

// The kernels of `device`: the CPU set; on a CUDA device (ETR_HAVE_CUDA builds) the CUDA
// set for float (runtime/kernels/cuda/kernel_set.h); InvalidArgument for any other.
template <typename Real>
const KernelSet<Real>& kernels_for(Device device);

// Profiling (etr-bench's kernel times): while `set` is not null, kernels_for<Real> on a
// CUDA device returns it instead of the CUDA set; a stack placed meanwhile keeps it.
template <typename Real>
void override_cuda_kernels(const KernelSet<Real>* set);

// A KernelSet bound to one stream: every call passes `stream` as the kernel's last argument.
template <typename Real>
class BoundKernels {
 public:
  BoundKernels(const KernelSet<Real>& set, void* stream) : set_(&set), stream_(stream) {}
  const char* name() const { return set_->name; }
  int64_t attention_backward_scratch_size(int64_t B, int64_t T, int64_t C, int64_t NH) const {
    return set_->attention_backward_scratch_size(B, T, C, NH);
  }
  int64_t attention_saved_numel(int64_t B, int64_t T, int64_t C, int64_t NH) const {
    return set_->attention_saved_numel(B, T, C, NH);
  }

#define ETR_BOUND_KERNEL(fn)                               \
  template <typename... Args>                              \
  auto fn(Args&&... args) const {                          \
    return set_->fn(std::forward<Args>(args)..., stream_); \
  }
  ETR_BOUND_KERNEL(encoder_forward)
  ETR_BOUND_KERNEL(encoder_backward)
  ETR_BOUND_KERNEL(layernorm_forward)
  ETR_BOUND_KERNEL(layernorm_backward)
  ETR_BOUND_KERNEL(matmul_forward)
  ETR_BOUND_KERNEL(matmul_backward)
  ETR_BOUND_KERNEL(matmul_backward_rows)
  ETR_BOUND_KERNEL(encoder_backward_rows)
  ETR_BOUND_KERNEL(attention_forward)
  ETR_BOUND_KERNEL(attention_backward)
  ETR_BOUND_KERNEL(gelu_forward)
  ETR_BOUND_KERNEL(gelu_backward)
  ETR_BOUND_KERNEL(residual_forward)
  ETR_BOUND_KERNEL(residual_backward)
  ETR_BOUND_KERNEL(residual_layernorm_forward)
  ETR_BOUND_KERNEL(matmul_gelu_forward)
  ETR_BOUND_KERNEL(softmax_xent_forward)
  ETR_BOUND_KERNEL(softmax_xent_forward_backward)
  ETR_BOUND_KERNEL(fill)
  ETR_BOUND_KERNEL(copy)
  ETR_BOUND_KERNEL(add_inplace)
  ETR_BOUND_KERNEL(sum)
  ETR_BOUND_KERNEL(accumulate_mean)
#undef ETR_BOUND_KERNEL

 private:
  const KernelSet<Real>* set_;
  void* stream_;
};

}  // namespace etr
