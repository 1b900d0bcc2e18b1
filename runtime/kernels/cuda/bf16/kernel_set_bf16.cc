// The CUDA bf16 kernel set (runtime/kernels/cuda/kernel_set.h, kernel_set_bf16): each
// member calls the etr::cuda bf16 kernel of its name (runtime/kernels/cuda/bf16/*.h) on
// the stream it is given, on the calling thread's current device. The losses are fp32,
// so `sum` and `accumulate_mean` are the fp32 set's vector_ops; `sum` waits, as in the
// fp32 set, on a device double of its own (one per device and thread, kept for the
// process's life).
#include <cuda_runtime_api.h>

#include "runtime/cuda_check.h"
#include "runtime/kernels/cuda/bf16/attention_bf16.h"
#include "runtime/kernels/cuda/bf16/encoder_bf16.h"
#include "runtime/kernels/cuda/bf16/flash_attention.h"
#include "runtime/kernels/cuda/bf16/fused_bf16.h"
#include "runtime/kernels/cuda/bf16/layernorm_bf16.h"
#include "runtime/kernels/cuda/bf16/matmul_bf16.h"
#include "runtime/kernels/cuda/bf16/pointwise_bf16.h"
#include "runtime/kernels/cuda/bf16/softmax_xent_bf16.h"
#include "runtime/kernels/cuda/kernel_set.h"

namespace etr::cuda {
namespace {

cudaStream_t as_stream(void* stream) {
  return static_cast<cudaStream_t>(stream);
}

// Attention: the flash attention (flash_attention.h) for heads of 64 or 128 unless
// ETR_FLASH_ATTENTION=0, else the plain one (attention_bf16.h); the sizes follow the choice.
void set_attention_kernels(KernelSet<bf16>& k) {
  k.attention_backward_scratch_size = [](int64_t B, int64_t T, int64_t C, int64_t NH) {
    return flash_attention_enabled(C, NH) ? flash_attention_backward_scratch_size(B, T, C, NH)
                                          : attention_backward_scratch_size_bf16(B, T, C, NH);
  };
  k.attention_saved_numel = [](int64_t B, int64_t T, int64_t C, int64_t NH) {
    return flash_attention_enabled(C, NH) ? flash_attention_saved_numel(B, T, C, NH)
                                          : B * NH * T * T;
  };
  k.attention_forward = [](bf16* out, bf16* att, const bf16* qkv, int64_t B, int64_t T, int64_t C,
                           int64_t NH, void* s) {
    if (flash_attention_enabled(C, NH)) {
      flash_attention_forward(out, att, qkv, B, T, C, NH, as_stream(s));
    } else {
      attention_forward(out, att, qkv, B, T, C, NH, as_stream(s));
    }
  };
  k.attention_backward = [](bf16* dqkv, bf16* scratch, int64_t scratch_size, const bf16* dout,
                            const bf16* qkv, const bf16* att, const bf16* out, int64_t B, int64_t T,
                            int64_t C, int64_t NH, void* s) {
    if (flash_attention_enabled(C, NH)) {
      flash_attention_backward(dqkv, scratch, scratch_size, dout, qkv, att, out, B, T, C, NH,
                               as_stream(s));
    } else {
      attention_backward(dqkv, scratch, scratch_size, dout, qkv, att, B, T, C, NH, as_stream(s));
    }
  };
}

void set_layer_kernels(KernelSet<bf16>& k) {
  k.encoder_forward = [](bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe,
                         int64_t B, int64_t T, int64_t C, int64_t V, void* s) {
    encoder_forward(out, tokens, wte, wpe, B, T, C, V, as_stream(s));
  };
  k.encoder_backward = [](float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens,
                          int64_t B, int64_t T, int64_t C, int64_t V, void* s) {
    encoder_backward(dwte, dwpe, dout, tokens, B, T, C, V, as_stream(s));
  };
  k.layernorm_forward = [](bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                           const bf16* bias, int64_t N, int64_t C, double eps, void* s) {
    layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps, as_stream(s));
  };
  k.layernorm_backward = [](bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                            const bf16* inp, const bf16* weight, const float* mean,
                            const float* rstd, int64_t N, int64_t C, void* s) {
    layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, as_stream(s));
  };
  k.matmul_forward = [](bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int64_t N,
                        int64_t C, int64_t OC, void* s) {
    matmul_forward(out, inp, weight, bias, N, C, OC, as_stream(s));
  };
  k.matmul_backward = [](bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                         const bf16* inp, const bf16* weight, int64_t N, int64_t C, int64_t OC,
                         void* s) {
    matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, as_stream(s));
  };
  k.residual_layernorm_forward = [](bf16* x1, bf16* y, float* mean, float* rstd, const bf16* inp1,
                                    const bf16* inp2, const bf16* w, const bf16* b, int64_t N,
                                    int64_t C, double eps, void* s) {
    residual_layernorm_forward(x1, y, mean, rstd, inp1, inp2, w, b, N, C, eps, as_stream(s));
  };
  k.matmul_gelu_forward = [](bf16* pre, bf16* out, const bf16* inp, const bf16* w, const bf16* b,
                             int64_t N, int64_t C, int64_t OC, void* s) {
    matmul_gelu_forward(pre, out, inp, w, b, N, C, OC, as_stream(s));
  };
  k.softmax_xent_forward = [](float* losses, const bf16* logits, const int32_t* targets, int64_t N,
                              int64_t V, int64_t Vp, void* s) {
    softmax_xent_forward(losses, logits, targets, N, V, Vp, as_stream(s));
  };
  k.softmax_xent_forward_backward = [](float* losses, bf16* dlogits, const bf16* logits,
                                       const int32_t* targets, float dloss, int64_t N, int64_t V,
                                       int64_t Vp, void* s) {
    softmax_xent_forward_backward(losses, dlogits, logits, targets, dloss, N, V, Vp, as_stream(s));
  };
}

void set_pointwise_kernels(KernelSet<bf16>& k) {
  k.gelu_forward = [](bf16* out, const bf16* inp, int64_t n, void* s) {
    gelu_forward(out, inp, n, as_stream(s));
  };
  k.gelu_backward = [](bf16* dinp, const bf16* inp, const bf16* dout, int64_t n, void* s) {
    gelu_backward(dinp, inp, dout, n, as_stream(s));
  };
  k.residual_forward = [](bf16* out, const bf16* inp1, const bf16* inp2, int64_t n, void* s) {
    residual_forward(out, inp1, inp2, n, as_stream(s));
  };
  k.residual_backward = [](bf16* dinp1, bf16* dinp2, const bf16* dout, int64_t n, void* s) {
    residual_backward(dinp1, dinp2, dout, n, as_stream(s));
  };
  k.fill = [](bf16* out, bf16 value, int64_t n, void* s) { fill(out, value, n, as_stream(s)); };
  k.copy = [](bf16* out, const bf16* inp, int64_t n, void* s) { copy(out, inp, n, as_stream(s)); };
  k.add_inplace = [](bf16* out, const bf16* inp, int64_t n, void* s) {
    add_inplace(out, inp, n, as_stream(s));
  };
  // The losses are f32: the fp32 set's sum and accumulate_mean are these.
  k.sum = kernel_set().sum;
  k.accumulate_mean = kernel_set().accumulate_mean;
}

KernelSet<bf16> make_set() {
  KernelSet<bf16> k;
  k.name = "cuda-bf16";
  set_layer_kernels(k);
  set_attention_kernels(k);
  set_pointwise_kernels(k);
  return k;
}

}  // namespace

const KernelSet<bf16>& kernel_set_bf16() {
  static const KernelSet<bf16> set = make_set();
  return set;
}

}  // namespace etr::cuda
