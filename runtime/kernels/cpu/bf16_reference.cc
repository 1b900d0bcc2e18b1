#include "runtime/kernels/cpu/bf16_reference.h"

#include <cstring>
#include <vector>

#include "runtime/kernels/cpu/attention.h"
#include "runtime/kernels/cpu/elementwise.h"
#include "runtime/kernels/cpu/encoder.h"
#include "runtime/kernels/cpu/gelu.h"
#include "runtime/kernels/cpu/layernorm.h"
#include "runtime/kernels/cpu/matmul.h"
#include "runtime/kernels/cpu/residual.h"
#include "runtime/kernels/cpu/softmax_xent.h"
#include "runtime/kernels/cpu/threads.h"

namespace etr::cpu {
namespace {

using F = std::vector<float>;

// float copies of n bf16 values (empty for nullptr, whose data() the kernels then get as
// nullptr: an absent bias or gradient stays absent).
F widen(const bf16* p, int64_t n) {
  if (p == nullptr) return {};
  F out(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
  return out;
}

void narrow(bf16* out, const F& in) {
  if (out == nullptr) return;
  const int64_t n = static_cast<int64_t>(in.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = bf16(in[i]);
}

float* ptr(F& v) { return v.empty() ? nullptr : v.data(); }
const float* ptr(const F& v) { return v.empty() ? nullptr : v.data(); }
F zeros(int64_t n) { return F(static_cast<size_t>(n), 0.0f); }

void encoder_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe,
                     int64_t B, int64_t T, int64_t C, int64_t V, void*) {
  F o = zeros(B * T * C);
  cpu::encoder_forward<float>(o.data(), tokens, ptr(widen(wte, V * C)), ptr(widen(wpe, T * C)),
                              B, T, C, V);
  narrow(out, o);
}

void encoder_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens,
                      int64_t B, int64_t T, int64_t C, int64_t V, void*) {
  cpu::encoder_backward<float>(dwte, dwpe, ptr(widen(dout, B * T * C)), tokens, B, T, C, V);
}

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                       const bf16* bias, int64_t N, int64_t C, double eps, void*) {
  F o = zeros(N * C);
  cpu::layernorm_forward<float>(o.data(), mean, rstd, ptr(widen(inp, N * C)),
                                ptr(widen(weight, C)), ptr(widen(bias, C)), N, C, eps);
  narrow(out, o);
}

void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C, void*) {
  F d = widen(dinp, N * C);
  cpu::layernorm_backward<float>(ptr(d), dweight, dbias, ptr(widen(dout, N * C)),
                                 ptr(widen(inp, N * C)), ptr(widen(weight, C)), mean, rstd, N, C);
  narrow(dinp, d);
}

void matmul_forward(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int64_t N,
                    int64_t C, int64_t OC, void*) {
  F o = zeros(N * OC);
  cpu::matmul_forward<float>(o.data(), ptr(widen(inp, N * C)), ptr(widen(weight, OC * C)),
                             ptr(widen(bias, OC)), N, C, OC);
  narrow(out, o);
}

void matmul_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                     const bf16* weight, int64_t N, int64_t C, int64_t OC, void*) {
  F d = widen(dinp, N * C);
  cpu::matmul_backward<float>(ptr(d), dweight, dbias, ptr(widen(dout, N * OC)),
                              ptr(widen(inp, N * C)), ptr(widen(weight, OC * C)), N, C, OC);
  narrow(dinp, d);
}

int64_t attention_scratch(int64_t, int64_t, int64_t, int64_t) { return 0; }

void attention_forward(bf16* out, bf16* att, const bf16* qkv, int64_t B, int64_t T, int64_t C,
                       int64_t NH, void*) {
  F o = zeros(B * T * C), a = zeros(B * NH * T * T);
  cpu::attention_forward<float>(o.data(), a.data(), ptr(widen(qkv, B * T * 3 * C)), B, T, C, NH);
  narrow(out, o);
  narrow(att, a);
}

int64_t attention_saved(int64_t B, int64_t T, int64_t, int64_t NH) { return B * NH * T * T; }

void attention_backward(bf16* dqkv, bf16*, int64_t, const bf16* dout, const bf16* qkv,
                        const bf16* att, const bf16* /*out*/, int64_t B, int64_t T, int64_t C,
                        int64_t NH, void*) {
  F d = widen(dqkv, B * T * 3 * C);
  F scratch = zeros(cpu::attention_backward_scratch_size(T, cpu::num_threads()));
  cpu::attention_backward<float>(ptr(d), scratch.data(), static_cast<int64_t>(scratch.size()),
                                 ptr(widen(dout, B * T * C)), ptr(widen(qkv, B * T * 3 * C)),
                                 ptr(widen(att, B * NH * T * T)), B, T, C, NH);
  narrow(dqkv, d);
}

void gelu_forward(bf16* out, const bf16* inp, int64_t n, void*) {
  F o = zeros(n);
  cpu::gelu_forward<float>(o.data(), ptr(widen(inp, n)), n);
  narrow(out, o);
}

void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n, void*) {
  F d = widen(dinp, n);
  cpu::gelu_backward<float>(ptr(d), ptr(widen(inp, n)), ptr(widen(dout, n)), n);
  narrow(dinp, d);
}

void residual_forward(bf16* out, const bf16* inp1, const bf16* inp2, int64_t n, void*) {
  F o = zeros(n);
  cpu::residual_forward<float>(o.data(), ptr(widen(inp1, n)), ptr(widen(inp2, n)), n);
  narrow(out, o);
}

void residual_backward(bf16* dinp1, bf16* dinp2, const bf16* dout, int64_t n, void*) {
  if (dinp1 == dinp2) {  // one buffer, both gradients added into it (as the float kernel does)
    F d = widen(dinp1, n);
    cpu::residual_backward<float>(ptr(d), ptr(d), ptr(widen(dout, n)), n);
    narrow(dinp1, d);
    return;
  }
  F d1 = widen(dinp1, n), d2 = widen(dinp2, n);
  cpu::residual_backward<float>(ptr(d1), ptr(d2), ptr(widen(dout, n)), n);
  narrow(dinp1, d1);
  narrow(dinp2, d2);
}

// The fused forwards: their compositions (each part rounded once, as on its own).
void residual_layernorm_forward(bf16* x1, bf16* y, float* mean, float* rstd, const bf16* inp1,
                                const bf16* inp2, const bf16* weight, const bf16* bias, int64_t N,
                                int64_t C, double eps, void* s) {
  residual_forward(x1, inp1, inp2, N * C, s);
  layernorm_forward(y, mean, rstd, x1, weight, bias, N, C, eps, s);
}

void matmul_gelu_forward(bf16* pre, bf16* out, const bf16* inp, const bf16* weight,
                         const bf16* bias, int64_t N, int64_t C, int64_t OC, void* s) {
  matmul_forward(pre, inp, weight, bias, N, C, OC, s);
  gelu_forward(out, pre, N * OC, s);
}

void softmax_xent_forward(float* losses, const bf16* logits, const int32_t* targets, int64_t N,
                          int64_t V, int64_t Vp, void*) {
  cpu::softmax_xent_forward<float>(losses, ptr(widen(logits, N * Vp)), targets, N, V, Vp);
}

void softmax_xent_forward_backward(float* losses, bf16* dlogits, const bf16* logits,
                                   const int32_t* targets, float dloss, int64_t N, int64_t V,
                                   int64_t Vp, void*) {
  F l = widen(logits, N * Vp);  // dlogits is assigned in place over the float logits
  cpu::softmax_xent_forward_backward<float>(losses, l.data(), l.data(), targets, dloss, N, V, Vp);
  narrow(dlogits, l);
}

void fill(bf16* out, bf16 value, int64_t n, void*) {
  for (int64_t i = 0; i < n; ++i) out[i] = value;
}

void copy(bf16* out, const bf16* inp, int64_t n, void*) {
  if (n > 0) std::memmove(out, inp, static_cast<size_t>(n) * sizeof(bf16));
}

void add_inplace(bf16* out, const bf16* inp, int64_t n, void*) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = bf16(static_cast<float>(out[i]) + static_cast<float>(inp[i]));
}

double sum(const float* inp, int64_t n, void*) { return cpu::sum<float>(inp, n); }

void accumulate_mean(double* acc, const float* inp, int64_t n, double divisor, double num,
                     double den, void*) {
  cpu::accumulate_mean<float>(acc, inp, n, divisor, num, den);
}

KernelSet<bf16> make_set() {
  KernelSet<bf16> k;
  k.name = "cpu-bf16";
  k.encoder_forward = &encoder_forward;
  k.encoder_backward = &encoder_backward;
  k.layernorm_forward = &layernorm_forward;
  k.layernorm_backward = &layernorm_backward;
  k.matmul_forward = &matmul_forward;
  k.matmul_backward = &matmul_backward;
  k.attention_backward_scratch_size = &attention_scratch;
  k.attention_forward = &attention_forward;
  k.attention_saved_numel = &attention_saved;
  k.attention_backward = &attention_backward;
  k.gelu_forward = &gelu_forward;
  k.gelu_backward = &gelu_backward;
  k.residual_forward = &residual_forward;
  k.residual_backward = &residual_backward;
  k.residual_layernorm_forward = &residual_layernorm_forward;
  k.matmul_gelu_forward = &matmul_gelu_forward;
  k.softmax_xent_forward = &softmax_xent_forward;
  k.softmax_xent_forward_backward = &softmax_xent_forward_backward;
  k.fill = &fill;
  k.copy = &copy;
  k.add_inplace = &add_inplace;
  k.sum = &sum;
  k.accumulate_mean = &accumulate_mean;
  return k;
}

}  // namespace

const KernelSet<bf16>& bf16_reference_set() {
  static const KernelSet<bf16> set = make_set();
  return set;
}

}  // namespace etr::cpu
