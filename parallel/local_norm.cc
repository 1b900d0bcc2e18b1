#include "parallel/local_norm.h"

#include <cmath>

namespace etr {

LocalNormMeter::LocalNormMeter(BucketReducer& reducer, Allocator& alloc, void* stream)
    : reducer_(reducer),
      ops_(device_ops(alloc.device())),
      stream_(stream),
      slots_(alloc, reducer.buckets().size() * sizeof(double)),
      host_(alloc.device(), reducer.buckets().size() * sizeof(double)) {}

void LocalNormMeter::measure(bool on) {
  on_ = on;
  if (!on) {
    reducer_.set_before_launch(nullptr);
    return;
  }
  reducer_.set_before_launch([this](size_t b, const Bucket& range, const float* local) {
    ops_.sum_squares(static_cast<double*>(slots_.data()) + b, local, range.numel(), stream_);
  });
}

double LocalNormMeter::read() const {
  if (!on_) return std::nan("");
  const size_t n = reducer_.buckets().size();
  ops_.download(host_.data(), slots_.data(), n * sizeof(double), stream_);
  ops_.synchronize(stream_);
  double sum = 0;
  for (size_t b = 0; b < n; ++b) sum += host_.as<double>()[b];
  return sum;
}

}  // namespace etr
