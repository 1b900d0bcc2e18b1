// StagedReducer: data-parallel gradient sums for gradients that live on a device, through
// the host's collectives (the staged device communicator: any number of ranks per GPU,
// no NCCL). It wraps the BucketReducer (parallel/bucket_reducer.h) around a page-locked
// host mirror of the gradient buffer:
//
//   begin_step()      arms the host reducer (the last micro-batch of a step)
//   layer_ready(L)    layer L's gradients are final on the rank's stream: their copy to
//                     the mirror is enqueued on that stream, with an event after it; a
//                     helper thread waits for the event and hands L to the host reducer,
//                     whose buckets then run on its communicator's progress thread while
//                     the stream goes on with backward (the caller never waits here)
//   finish()          waits for the helper and every bucket, then enqueues the summed
//                     mirror's copy back into the device's gradients on the stream
//
// So the sums are the host reducer's, bucket for bucket (the same plan, ring and order as
// DataParallelEngine on the host), and the step's ReduceStats and hidden fraction mean
// what they mean there. The copies go through DeviceOps (runtime/kernels/device_ops.h):
// on the host (Device::cpu()) they are memcpy and the events are no-ops, which is how the
// protocol is tested under mpirun without a GPU.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel/bucket_reducer.h"
#include "runtime/kernels/device_ops.h"

namespace etr {

class StagedReducer {
 public:
  // Reduces `device_grads` (layout.numel() floats on `device`) over `comm`; `stream` is
  // the rank's compute stream (nullptr on the host).
  StagedReducer(const ParamLayout& layout, float* device_grads, Device device, void* stream,
                Communicator& comm, BucketOptions options, Tracer* tracer = nullptr);
  ~StagedReducer();
  StagedReducer(const StagedReducer&) = delete;
  StagedReducer& operator=(const StagedReducer&) = delete;

  void begin_step();
  bool armed() const { return armed_; }
  void layer_ready(int layer);
  // Rethrows a communication error (CommError) from any bucket.
  ReduceStats finish();
  // The host side: its buckets, options and local-norm measurement.
  BucketReducer& host() { return reducer_; }
  const BucketReducer& host() const { return reducer_; }

 private:
  void work();  // the helper thread
  const ParamLayout& layout_;
  const DeviceOps& ops_;
  float* device_grads_;
  void* stream_;
  PinnedBuffer mirror_;
  BucketReducer reducer_;
  std::vector<void*> events_;  // one per layer
  bool armed_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int> queue_;  // layers copied (or being copied), for the helper
  int pending_ = 0;        // handed to the helper and not yet passed on
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace etr
