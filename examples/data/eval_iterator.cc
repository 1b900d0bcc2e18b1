// EvalIterator: contiguous per-rank blocks of held-out windows (see eval_iterator.h).
#include "examples/data/eval_iterator.h"

#include <algorithm>
#include <string>

#include "runtime/error.h"

namespace etr::data {

EvalIterator::EvalIterator(const WindowSpace& windows, uint64_t batch_size, uint64_t max_windows,
                           int rank, int world_size)
    : space_(windows), batch_size_(batch_size) {
  const EvalShare share = eval_share(windows.count(), batch_size, max_windows, rank, world_size);
  first_ = share.first;
  count_ = share.count;
  batches_ = share.batches;
}

bool EvalIterator::next(std::vector<uint64_t>& offsets) {
  offsets.clear();
  if (batch_ >= batches_) return false;
  const uint64_t begin = std::min(count_, batch_ * batch_size_);
  const uint64_t end = std::min(count_, begin + batch_size_);
  for (uint64_t i = begin; i < end; ++i) offsets.push_back(space_.offset(first_ + i));
  ++batch_;
  return true;
}

}  // namespace etr::data
