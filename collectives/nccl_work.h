// NcclWork: the Work of one NCCL operation, and NcclCommState, the part of an
// NcclCommunicator that its Works share (the NCCL handle, the broken flag, the timeout).
//
// Protocol: the communicator enqueues the NCCL call on its stream and records `done`
// right behind it; the Work is complete when cudaEventQuery(done) says so. Each poll
// (is_completed, wait, error) also acts as the watchdog of docs/design.md, "Collectives":
//   - the communicator already aborted (by another Work)  -> this Work fails too;
//   - ncclCommGetAsyncError reports an error              -> abort, fail with it;
//   - running longer than CommOptions::timeout since it was enqueued
//                                                         -> abort, fail with a CommError
//     naming the operation, the group, the rank and the seconds elapsed.
// Aborting calls ncclCommAbort once and marks the communicator broken: later operations
// on it throw at once, and its Works that had not been seen complete fail. wait() polls
// with a short back-off (spin, then sleeps growing to 1 ms) rather than blocking in
// cudaEventSynchronize, so that it can give up.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "collectives/work.h"

namespace etr {

// Shared by an NcclCommunicator and every NcclWork it returned; outlives either.
struct NcclCommState {
  NcclCommState() = default;
  NcclCommState(const NcclCommState&) = delete;
  NcclCommState& operator=(const NcclCommState&) = delete;
  ~NcclCommState() {
    if (anchor) (void)cudaEventDestroy(anchor);
  }
  std::mutex mutex;           // guards every field below and every call on `comm`
  ncclComm_t comm = nullptr;  // null once destroyed or aborted
  bool broken = false;
  std::string broken_reason;  // why it was aborted, for the errors of later calls

  std::string group;  // group name, for messages
  int rank = 0;
  int size = 0;
  int device = 0;
  std::chrono::milliseconds timeout{0};
  // Timing: an event recorded on the communicator's stream at set-up, once the stream was
  // idle, and the host's clock then; an operation's start and done events are placed on
  // the host's clock by their elapsed time from it (WorkTiming).
  cudaEvent_t anchor = nullptr;
  std::chrono::steady_clock::time_point anchor_time{};

  // Marks the communicator broken and calls ncclCommAbort, once; later calls keep the
  // first reason. Needs `mutex` held.
  void abort_locked(const std::string& reason);
};

class NcclWork final : public Work {
 public:
  // Takes ownership of `start` and `done` (timing events recorded on the communicator's
  // stream before and after the operation).
  NcclWork(std::shared_ptr<NcclCommState> state, std::string description, cudaEvent_t start,
           cudaEvent_t done);
  ~NcclWork() override;
  NcclWork(const NcclWork&) = delete;
  NcclWork& operator=(const NcclWork&) = delete;

  bool is_completed() override;
  void wait(std::chrono::milliseconds timeout = kForever) override;
  std::exception_ptr error() override;
  const std::string& description() const override { return description_; }
  // When the operation ran on the communicator's stream (from its events), once complete;
  // zero before. The duration is exact to the events' resolution (about 0.5 us).
  WorkTiming timing() override;

  // Makes `stream` wait (on the device, without blocking the host) until this operation
  // is done: the way to consume a result on a compute stream without wait().
  void make_stream_wait(cudaStream_t stream);

 private:
  enum class Status { kRunning, kDone, kFailed };

  // One watchdog step (see the top of the file); needs mutex_ held.
  Status poll_locked();
  void fail_locked(std::exception_ptr error);

  std::shared_ptr<NcclCommState> state_;
  std::string description_;
  cudaEvent_t start_event_;
  cudaEvent_t done_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  Status status_ = Status::kRunning;
  std::exception_ptr error_;
};

}  // namespace etr
