#include "parallel/token_staging.h"

#include <cstring>

#include "runtime/error.h"

namespace etr {

TokenStaging::TokenStaging(Device device, Allocator& alloc, void* stream, int64_t max_tokens)
    : ops_(device_ops(device)), device_(device), alloc_(alloc), stream_(stream), max_tokens_(0) {
  grow(max_tokens);
}

void TokenStaging::grow(int64_t max_tokens) {
  if (device_.is_cpu()) {
    max_tokens_ = max_tokens;
    return;
  }
  const size_t bytes = 2 * static_cast<size_t>(max_tokens) * sizeof(int32_t);
  for (Slot& s : slots_) {
    if (s.in_use) ops_.event_wait(s.event);
    s.in_use = false;
    s.device.reset();  // (before the new ones: the budget need not hold both)
  }
  max_tokens_ = 0;  // an allocation that fails leaves everything to be grown again
  for (Slot& s : slots_) {
    s.host = PinnedBuffer(device_, bytes);
    s.device = Buffer(alloc_, bytes);
    if (!s.event) s.event = ops_.event_create();
  }
  max_tokens_ = max_tokens;
}

TokenStaging::~TokenStaging() {
  for (Slot& s : slots_) {
    if (!s.event) continue;
    try {
      if (s.in_use) ops_.event_wait(s.event);  // the device may still read the slot
    } catch (...) {
      // (a failed device: the error that ends the run was reported already)
    }
    ops_.event_destroy(s.event);
  }
}

Batch TokenStaging::stage(const Batch& host) {
  if (pending_) done();  // (a step interrupted by an error; its work was enqueued or not)
  const int64_t n = host.B * host.T;
  if (n > max_tokens_) grow(n);
  if (device_.is_cpu()) {
    pending_ = true;
    return host;
  }
  Slot& s = slots_[static_cast<size_t>(next_)];
  if (s.in_use) ops_.event_wait(s.event);  // its batch two micro-batches ago is done
  const size_t bytes = static_cast<size_t>(n) * sizeof(int32_t);
  int32_t* h = s.host.as<int32_t>();
  int32_t* d = static_cast<int32_t*>(s.device.data());
  std::memcpy(h, host.tokens, bytes);
  ops_.upload(d, h, bytes, stream_);
  Batch out = host;
  out.tokens = d;
  if (host.targets) {
    std::memcpy(h + max_tokens_, host.targets, bytes);
    ops_.upload(d + max_tokens_, h + max_tokens_, bytes, stream_);
    out.targets = d + max_tokens_;
  }
  pending_ = true;
  return out;
}

void TokenStaging::done() {
  if (!pending_) return;
  pending_ = false;
  if (device_.is_cpu()) return;
  Slot& s = slots_[static_cast<size_t>(next_)];
  ops_.event_record(s.event, stream_);
  s.in_use = true;
  next_ = 1 - next_;
}

std::pair<const int32_t*, const int32_t*> TokenStaging::stage_step(const int32_t* tokens,
                                                                   const int32_t* targets, int64_t n) {
  if (device_.is_cpu()) return {tokens, targets};
  if (n > step_tokens_) {
    ops_.synchronize(stream_);  // the last step's work may still read the old buffer
    step_.reset();
    step_tokens_ = 0;
    step_ = Buffer(alloc_, 2 * static_cast<size_t>(n) * sizeof(int32_t));
    step_tokens_ = n;
  }
  int32_t* d = static_cast<int32_t*>(step_.data());
  const size_t bytes = static_cast<size_t>(n) * sizeof(int32_t);
  ops_.upload(d, tokens, bytes, stream_);  // (pageable: the call returns with the bytes taken)
  ops_.upload(d + step_tokens_, targets, bytes, stream_);
  return {d, d + step_tokens_};
}

}  // namespace etr
