// AdamW over flat buffers (Loshchilov & Hutter, decoupled weight decay), the optimizer of
// the example GPT, as PyTorch's torch.optim.AdamW computes it:
//
//   m = b1 m + (1 - b1) g            v = b2 v + (1 - b2) g^2
//   m_hat = m / (1 - b1^t)           v_hat = v / (1 - b2^t)
//   p -= lr (m_hat / (sqrt(v_hat) + eps) + wd_i p)
//
// with wd_i = weight_decay for the tensors the layout marks as decayed (2-D weights)
// and 0 for biases and LayerNorm parameters. State: m and v, two flat buffers with the
// parameters' layout (so a ZeRO shard of them is a range, like the parameters').
//
//   params, grads, m, v   [range]   f32; the update touches [begin, end) only
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/param_layout.h"

namespace etr {

struct AdamWOptions {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

class AdamW {
 public:
  // The decay mask comes from `layout` (TensorEntry::weight_decay).
  explicit AdamW(const ParamLayout& layout);

  // One update of elements [begin, end) at optimizer step `t` (1-based) with rate `lr`.
  void step(float* params, const float* grads, float* m, float* v, int64_t begin, int64_t end,
            int64_t t, double lr, const AdamWOptions& o) const;
  // The same update of layout elements [begin, end), given storage for that range only:
  // params[0] (and grads[0], m[0], v[0]) is element `begin` (a FlatState's held range).
  void update_range(int64_t begin, int64_t end, float* params, const float* grads, float* m,
                    float* v, int64_t t, double lr, const AdamWOptions& o) const;

 private:
  // [begin, end) ranges of the flat buffer that are decayed, sorted.
  std::vector<std::pair<int64_t, int64_t>> decayed_;
};

// Global L2 norm of grads[0, n) (accumulated in double): the square root of
// grad_norm_squared, the sum of the squares.
double grad_norm(const float* grads, int64_t n);
// Sum of x[i]^2 in double, in blocks of a fixed size added in order: the same bits whatever
// the number of threads (the ZeRO partial norms' sum).
double sum_squares(const float* x, int64_t n);
double grad_norm_squared(const float* grads, int64_t n);
// Scales grads so that their norm is at most max_norm; returns the factor (1 if none).
double clip_grad_norm(float* grads, int64_t n, double norm, double max_norm);

// Linear warm-up from 0 to lr over `warmup` steps, then cosine decay to lr x min_ratio
// at `max_steps` (and flat after: any step >= max_steps gets lr x min_ratio, up to
// INT64_MAX). `step` is 0-based; a negative step is step 0.
double learning_rate(int64_t step, double lr, int64_t warmup, int64_t max_steps,
                     double min_ratio);
// The same schedule at a real-valued step (the automatic global batch's scale-invariant
// progress, parallel/goodput.h): equal to learning_rate() at whole steps.
double learning_rate_at(double step, double lr, int64_t warmup, int64_t max_steps,
                        double min_ratio);

}  // namespace etr
