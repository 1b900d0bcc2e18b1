#include "runtime/kernels/cuda/adamw.h"

#include <algorithm>

namespace etr::cuda {

void adamw_step_layout(const ParamLayout& layout, float* params, const float* grads, float* m,
                       float* v, int64_t t, double lr, const AdamWOptions& o, cudaStream_t stream) {
  adamw_step_layout(layout, params, grads, m, v, nullptr, t, lr, o, stream);
}

void adamw_step_layout(const ParamLayout& layout, float* params, const float* grads, float* m,
                       float* v, uint16_t* params_bf16, int64_t t, double lr,
                       const AdamWOptions& o, cudaStream_t stream) {
  adamw_range_layout(layout, 0, layout.numel(), params, grads, m, v, params_bf16, t, lr, o, stream);
}

// The layout's runs, as etr::AdamW splits them: the tensors it decays with o.weight_decay,
// everything else (other tensors, the alignment padding) with 0; clipped to [begin, end).
void adamw_range_layout(const ParamLayout& layout, int64_t begin, int64_t end, float* params,
                        const float* grads, float* m, float* v, uint16_t* params_bf16, int64_t t,
                        double lr, const AdamWOptions& o, cudaStream_t stream) {
  auto run = [&](int64_t lo, int64_t hi, double decay) {
    lo = std::max(lo, begin);
    hi = std::min(hi, end);
    if (lo >= hi) return;
    const int64_t at = lo - begin;
    adamw_update(params + at, grads + at, m + at, v + at, params_bf16 ? params_bf16 + at : nullptr,
                 hi - lo, t, lr, o.beta1, o.beta2, o.eps, decay, stream);
  };
  int64_t at = 0;
  for (const TensorEntry& e : layout.entries()) {
    if (!e.weight_decay) continue;
    if (e.offset > at) run(at, e.offset, 0.0);
    run(e.offset, e.offset + e.numel(), o.weight_decay);
    at = e.offset + e.numel();
  }
  if (at < layout.numel()) run(at, layout.numel(), 0.0);
}

}  // namespace etr::cuda
