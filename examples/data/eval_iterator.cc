// EvalIterator: contiguous per-rank blocks of held-out windows (see eval_iterator.h).
#include "examples/data/eval_iterator.h"

#include <algorithm>
#include <string>

#include "runtime/error.h"

namespace etr::data {

namespace {

// n * r / w without overflow for any n < 2^64.
uint64_t block_start(uint64_t n, uint64_t r, uint64_t w) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(n) * r / w);
}

}  // namespace

EvalIterator::EvalIterator(const WindowSpace& windows, uint64_t batch_size, uint64_t max_windows,
                           int rank, int world_size)
    : space_(windows), batch_size_(batch_size) {
  if (batch_size == 0) throw InvalidArgument("the evaluation batch size must be at least 1");
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    throw InvalidArgument("rank " + std::to_string(rank) + " is not in a world of " +
                          std::to_string(world_size) + " ranks");
  }
  uint64_t n = windows.count();
  if (max_windows != 0) n = std::min(n, max_windows);
  const auto w = static_cast<uint64_t>(world_size);
  const auto r = static_cast<uint64_t>(rank);
  first_ = block_start(n, r, w);
  count_ = block_start(n, r + 1, w) - first_;
  const uint64_t largest_block = (n + w - 1) / w;
  batches_ = (largest_block + batch_size - 1) / batch_size;
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
