#include "checkpoint/shard_sink.h"

namespace etr {

void ShardSink::append(const void* data, size_t size) {
  if (size == 0) return;
  sum_.update(data, size);
  if (direct_) {
    drain();
    file_.write(data, size);
    return;
  }
  gathered_.push_back(iovec{const_cast<void*>(data), size});
  gathered_bytes_ += size;
  if (gathered_bytes_ >= kShardStagingBytes || gathered_.size() >= 512) drain();
}

uint64_t ShardSink::commit() {
  drain();
  file_.commit();
  return sum_.digest();
}

void ShardSink::drain() {
  if (!gathered_.empty()) file_.write(gathered_);
  gathered_.clear();
  gathered_bytes_ = 0;
}

}  // namespace etr
