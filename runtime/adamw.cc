#include "runtime/adamw.h"

#include <algorithm>
#include <cmath>

#include "runtime/kernels/cpu/threads.h"

namespace etr {

AdamW::AdamW(const ParamLayout& layout) {
  for (const TensorEntry& e : layout.entries()) {
    if (!e.weight_decay) continue;
    const int64_t b = e.offset, end = e.offset + e.numel();
    if (!decayed_.empty() && decayed_.back().second == b) {
      decayed_.back().second = end;
    } else {
      decayed_.emplace_back(b, end);
    }
  }
}

namespace {

void update(float* p, const float* g, float* m, float* v, int64_t begin, int64_t end, float b1,
            float b2, float c1, float c2, float eps, float lr, float decay) {
#pragma omp parallel for simd schedule(static) if (end - begin > (int64_t{1} << 16))
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i];
    const float mi = b1 * m[i] + (1.0f - b1) * gi;
    const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const float mhat = mi / c1, vhat = vi / c2;
    p[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + decay * p[i]);
  }
}

}  // namespace

void AdamW::step(float* params, const float* grads, float* m, float* v, int64_t begin,
                 int64_t end, int64_t t, double lr, const AdamWOptions& o) const {
  update_range(begin, end, params + begin, grads + begin, m + begin, v + begin, t, lr, o);
}

void AdamW::update_range(int64_t begin, int64_t end, float* params, const float* grads, float* m,
                         float* v, int64_t t, double lr, const AdamWOptions& o) const {
  const float b1 = static_cast<float>(o.beta1), b2 = static_cast<float>(o.beta2);
  const float c1 = static_cast<float>(1.0 - std::pow(o.beta1, static_cast<double>(t)));
  const float c2 = static_cast<float>(1.0 - std::pow(o.beta2, static_cast<double>(t)));
  const float eps = static_cast<float>(o.eps), flr = static_cast<float>(lr);
  const float wd = static_cast<float>(o.weight_decay);
  // Layout elements [lo, hi) at the storage that starts with element `begin`.
  auto run = [&](int64_t lo, int64_t hi, float decay) {
    const int64_t at = lo - begin;
    update(params + at, grads + at, m + at, v + at, 0, hi - lo, b1, b2, c1, c2, eps, flr, decay);
  };
  // Walk [begin, end) as alternating undecayed / decayed runs.
  int64_t at = begin;
  for (const auto& [db, de] : decayed_) {
    if (de <= at) continue;
    if (db >= end) break;
    const int64_t s = std::max(db, at), e = std::min(de, end);
    if (s > at) run(at, s, 0.0f);
    run(s, e, wd);
    at = e;
  }
  if (at < end) run(at, end, 0.0f);
}

double grad_norm_squared(const float* grads, int64_t n) {
  double sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (n > (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(grads[i]) * grads[i];
  return sum;
}

double sum_squares(const float* x, int64_t n) {
  // Blocks of a fixed size summed in parallel, then added in block order: the same bits
  // on any number of threads.
  constexpr int64_t kBlock = int64_t{1} << 14;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static) num_threads(cpu::num_threads()) if (blocks > 4)
  for (int64_t k = 0; k < blocks; ++k) {
    const int64_t lo = k * kBlock, hi = std::min(n, lo + kBlock);
    double s = 0;
    for (int64_t i = lo; i < hi; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[static_cast<size_t>(k)] = s;
  }
  double sum = 0;
  for (double p : partial) sum += p;
  return sum;
}

double grad_norm(const float* grads, int64_t n) { return std::sqrt(grad_norm_squared(grads, n)); }

double clip_grad_norm(float* grads, int64_t n, double norm, double max_norm) {
  if (!(max_norm > 0) || norm <= max_norm) return 1.0;
  const double scale = max_norm / (norm + 1e-6);
  const float s = static_cast<float>(scale);
  for (int64_t i = 0; i < n; ++i) grads[i] *= s;
  return scale;
}

double learning_rate(int64_t step, double lr, int64_t warmup, int64_t max_steps,
                     double min_ratio) {
  step = std::max<int64_t>(step, 0);  // never a negative rate from a wrapped step
  if (step >= max_steps) return lr * min_ratio;
  if (warmup > 0 && step < warmup) {
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  }
  const double progress =
      static_cast<double>(step - warmup) / static_cast<double>(std::max<int64_t>(1, max_steps - warmup));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return lr * (min_ratio + (1.0 - min_ratio) * cosine);
}

double learning_rate_at(double step, double lr, int64_t warmup, int64_t max_steps,
                        double min_ratio) {
  step = std::max(step, 0.0);
  if (step >= static_cast<double>(max_steps)) return lr * min_ratio;
  if (warmup > 0 && step < static_cast<double>(warmup)) {
    return lr * (step + 1) / static_cast<double>(warmup);
  }
  const double progress = (step - static_cast<double>(warmup)) /
                          static_cast<double>(std::max<int64_t>(1, max_steps - warmup));
  const double cosine = 0.5 * (1.0 + std::cos(M_PI * progress));
  return lr * (min_ratio + (1.0 - min_ratio) * cosine);
}

}  // namespace etr
