// TokenStaging: a micro-batch's tokens and targets, read from the data source into host
// memory, made available on the device its layers run on.
//
// On the host it is the identity (stage() returns the batch it is given). On a GPU it
// has two slots, each a page-locked host buffer and a device buffer for up to
// `max_tokens` tokens and as many targets: stage() copies the batch into the next slot's
// host buffer and enqueues its upload on the rank's stream, then returns the batch with
// the device pointers; done() marks the end of the work that reads it (recorded on the
// stream), and a slot is written again only once that work is over. So micro-batch k + 1
// is staged while micro-batch k still runs, and the host never waits for the device
// except to reuse a slot two micro-batches later.
//
//   TokenStaging staging(device, device_alloc, stream, micro_batch * T);
//   Batch on_device = staging.stage(host_batch);
//   stack.forward_accumulate(on_device, ...); stack.backward(on_device, ...);
//   staging.done();
#pragma once

#include <array>
#include <utility>
#include <cstdint>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/kernels/device_ops.h"
#include "runtime/layer.h"

namespace etr {

class TokenStaging {
 public:
  // `alloc` (the device's) is used only for a GPU; nothing is allocated for the host.
  TokenStaging(Device device, Allocator& alloc, void* stream, int64_t max_tokens);
  ~TokenStaging();
  TokenStaging(const TokenStaging&) = delete;
  TokenStaging& operator=(const TokenStaging&) = delete;

  // `host` on the device (a batch of more than max_tokens grows the slots, once the device
  // is done with them). A last staged batch not marked done() (an error interrupted its
  // step) is marked done first.
  Batch stage(const Batch& host);
  // The work reading the last staged batch has been enqueued.
  void done();
  // A whole step's tokens and targets at once, n of each (a pipeline's micro-batches are
  // all in flight): on a GPU uploaded on the stream into a buffer of their own (after the
  // work enqueued so far, which may read the last step's), on the host the same pointers.
  std::pair<const int32_t*, const int32_t*> stage_step(const int32_t* tokens, const int32_t* targets,
                                                       int64_t n);
  int64_t max_tokens() const { return max_tokens_; }

 private:
  struct Slot {
    PinnedBuffer host;  // tokens [max_tokens], then targets [max_tokens]
    Buffer device;      // the same on the device
    void* event = nullptr;
    bool in_use = false;  // its last batch's work was enqueued and may still run
  };
  void grow(int64_t max_tokens);
  const DeviceOps& ops_;
  Device device_;
  Allocator& alloc_;
  void* stream_;
  int64_t max_tokens_;
  std::array<Slot, 2> slots_;
  int next_ = 0;
  Buffer step_;  // stage_step's: tokens, then targets
  int64_t step_tokens_ = 0;
  bool pending_ = false;  // stage() without done() yet
};

}  // namespace etr
