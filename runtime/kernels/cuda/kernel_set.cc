#include "runtime/kernels/cuda/kernel_set.h"

#include <cuda_runtime_api.h>

#include <unordered_map>

#include "runtime/cuda_check.h"
#include "runtime/kernels/cuda/attention.h"
#include "runtime/kernels/cuda/encoder.h"
#include "runtime/kernels/cuda/gelu.h"
#include "runtime/kernels/cuda/layernorm.h"
#include "runtime/kernels/cuda/matmul.h"
#include "runtime/kernels/cuda/residual.h"
#include "runtime/kernels/cuda/softmax_xent.h"
#include "runtime/kernels/cuda/vector_ops.h"

namespace etr::cuda {

namespace {

cudaStream_t as_stream(void* stream) {
  return static_cast<cudaStream_t>(stream);
}

// The calling thread's device scratch for `sum` on the current device (never freed: one
// double per device and thread for the life of the process).
double* sum_scratch() {
  thread_local std::unordered_map<int, double*> by_device;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  double*& p = by_device[device];
  if (p == nullptr) CUDA_CHECK(cudaMalloc(&p, sizeof(double)));
  return p;
}

double sum_and_wait(const float* inp, int64_t n, void* stream) {
  double* d = sum_scratch();
  double host = 0;
  sum(d, inp, n, as_stream(stream));
  CUDA_CHECK(cudaMemcpyAsync(&host, d, sizeof(double), cudaMemcpyDeviceToHost, as_stream(stream)));
  CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
  return host;
}

KernelSet<float> make_set() {
  KernelSet<float> k;
  k.name = "cuda";
  k.encoder_forward = [](float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t B, int64_t T, int64_t C, int64_t V, void* s) {
    encoder_forward(out, tokens, wte, wpe, B, T, C, V, as_stream(s));
  };
  k.encoder_backward = [](float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int64_t B, int64_t T, int64_t C, int64_t V, void* s) {
    encoder_backward(dwte, dwpe, dout, tokens, B, T, C, V, as_stream(s));
  };
  k.layernorm_forward = [](float* out, float* mean, float* rstd, const float* inp,
                           const float* weight, const float* bias, int64_t N, int64_t C, double eps,
                           void* s) {
    layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps, as_stream(s));
  };
  k.layernorm_backward = [](float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, const float* mean,
                            const float* rstd, int64_t N, int64_t C, void* s) {
    layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, as_stream(s));
  };
  k.matmul_forward = [](float* out, const float* inp, const float* weight, const float* bias,
                        int64_t N, int64_t C, int64_t OC, void* s) {
    matmul_forward(out, inp, weight, bias, N, C, OC, as_stream(s));
  };
  k.matmul_backward = [](float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC,
                         void* s) {
    matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, as_stream(s));
  };
  k.attention_backward_scratch_size = &attention_backward_scratch_size;
  k.attention_forward = [](float* out, float* att, const float* qkv, int64_t B, int64_t T,
                           int64_t C, int64_t NH, void* s) {
    attention_forward(out, att, qkv, B, T, C, NH, as_stream(s));
  };
  k.attention_saved_numel = [](int64_t B, int64_t T, int64_t, int64_t NH) { return B * NH * T * T; };
  k.attention_backward = [](float* dqkv, float* scratch, int64_t scratch_size, const float* dout,
                            const float* qkv, const float* att, const float* /*out*/, int64_t B,
                            int64_t T, int64_t C, int64_t NH, void* s) {
    attention_backward(dqkv, scratch, scratch_size, dout, qkv, att, B, T, C, NH, as_stream(s));
  };
  k.gelu_forward = [](float* out, const float* inp, int64_t n, void* s) {
    gelu_forward(out, inp, n, as_stream(s));
  };
  k.gelu_backward = [](float* dinp, const float* inp, const float* dout, int64_t n, void* s) {
    gelu_backward(dinp, inp, dout, n, as_stream(s));
  };
  k.residual_forward = [](float* out, const float* inp1, const float* inp2, int64_t n, void* s) {
    residual_forward(out, inp1, inp2, n, as_stream(s));
  };
  k.residual_backward = [](float* dinp1, float* dinp2, const float* dout, int64_t n, void* s) {
    residual_backward(dinp1, dinp2, dout, n, as_stream(s));
  };
  k.residual_layernorm_forward = [](float* x1, float* y, float* mean, float* rstd,
                                    const float* inp1, const float* inp2, const float* w,
                                    const float* b, int64_t N, int64_t C, double eps, void* s) {
    residual_forward(x1, inp1, inp2, N * C, as_stream(s));
    layernorm_forward(y, mean, rstd, x1, w, b, N, C, eps, as_stream(s));
  };
  k.matmul_gelu_forward = [](float* pre, float* out, const float* inp, const float* w,
                             const float* b, int64_t N, int64_t C, int64_t OC, void* s) {
    matmul_forward(pre, inp, w, b, N, C, OC, as_stream(s));
    gelu_forward(out, pre, N * OC, as_stream(s));
  };
  k.softmax_xent_forward = [](float* losses, const float* logits, const int32_t* targets, int64_t N,
                              int64_t V, int64_t Vp, void* s) {
    softmax_xent_forward(losses, logits, targets, N, V, Vp, as_stream(s));
  };
  k.softmax_xent_forward_backward = [](float* losses, float* dlogits, const float* logits,
                                       const int32_t* targets, float dloss, int64_t N, int64_t V,
                                       int64_t Vp, void* s) {
    softmax_xent_forward_backward(losses, dlogits, logits, targets, dloss, N, V, Vp, as_stream(s));
  };
  k.fill = [](float* out, float value, int64_t n, void* s) { fill(out, value, n, as_stream(s)); };
  k.copy = [](float* out, const float* inp, int64_t n, void* s) {
    copy(out, inp, n, as_stream(s));
  };
  k.add_inplace = [](float* out, const float* inp, int64_t n, void* s) {
    add_inplace(out, inp, n, as_stream(s));
  };
  k.sum = &sum_and_wait;
  k.accumulate_mean = [](double* acc, const float* inp, int64_t n, double divisor, double num,
                         double den, void* s) {
    accumulate_mean(acc, inp, n, divisor, num, den, as_stream(s));
  };
  return k;
}

}  // namespace

const KernelSet<float>& kernel_set() {
  static const KernelSet<float> set = make_set();
  return set;
}

}  // namespace etr::cuda
