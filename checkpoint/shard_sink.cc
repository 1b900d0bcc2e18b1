#include "checkpoint/shard_sink.h"

namespace etr {

void ShardSink::append(const void* data, size_t size) {
  sum_.update(data, size);
  if (size >= kShardStagingBytes) {  // large pieces go straight through
    drain();
    file_.write(data, size);
    return;
  }
  if (staging_.size() + size > kShardStagingBytes) drain();
  const char* p = static_cast<const char*>(data);
  staging_.insert(staging_.end(), p, p + size);
}

uint64_t ShardSink::commit() {
  drain();
  file_.commit();
  return sum_.digest();
}

void ShardSink::drain() {
  if (!staging_.empty()) file_.write(staging_.data(), staging_.size());
  staging_.clear();
}

}  // namespace etr
