// NcclWork and the abort of NcclCommState (protocol at the top of nccl_work.h).
#include "collectives/nccl_work.h"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <utility>

#include "runtime/cuda_check.h"
#include "runtime/cuda_device_guard.h"
#include "runtime/error.h"
#include "runtime/peer_wait.h"

namespace etr {

namespace {

std::string seconds_text(std::chrono::steady_clock::duration d) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", std::chrono::duration<double>(d).count());
  return text;
}

}  // namespace

void NcclCommState::abort_locked(const std::string& reason) {
  if (broken) return;
  broken = true;
  broken_reason = reason;
  if (comm) {
    // Ends the kernels of this communicator that are still running and frees it; its
    // result is of no use to anyone now, so it is not checked.
    (void)ncclCommAbort(comm);
    comm = nullptr;
  }
}

NcclWork::NcclWork(std::shared_ptr<NcclCommState> state, std::string description, cudaEvent_t start,
                   cudaEvent_t done)
    : state_(std::move(state)),
      description_(std::move(description)),
      start_event_(start),
      done_(done),
      start_(std::chrono::steady_clock::now()) {}

NcclWork::~NcclWork() {
  // Safe while the event is still pending: CUDA releases it once it completes.
  if (done_) (void)cudaEventDestroy(done_);
  if (start_event_) (void)cudaEventDestroy(start_event_);
}

WorkTiming NcclWork::timing() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (poll_locked() != Status::kDone || !state_->anchor) return {};
  CudaDeviceGuard guard(state_->device);
  float from_anchor = 0, duration = 0;
  if (cudaEventElapsedTime(&from_anchor, state_->anchor, start_event_) != cudaSuccess ||
      cudaEventElapsedTime(&duration, start_event_, done_) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  using us = std::chrono::microseconds;
  WorkTiming t;
  t.started = state_->anchor_time + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                        us(static_cast<int64_t>(from_anchor * 1000.0)));
  t.finished = t.started + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               us(static_cast<int64_t>(duration * 1000.0)));
  return t;
}

void NcclWork::fail_locked(std::exception_ptr error) {
  status_ = Status::kFailed;
  error_ = std::move(error);
}

NcclWork::Status NcclWork::poll_locked() {
  if (status_ != Status::kRunning) return status_;
  CudaDeviceGuard guard(state_->device);
  cudaError_t rc = cudaEventQuery(done_);
  std::lock_guard<std::mutex> state_lock(state_->mutex);
  // "allreduce(sum, f32 x 8) on group 'world' (rank 1 of 4)", built only for a failure.
  auto who = [&] {
    return description_ + " (rank " + std::to_string(state_->rank) + " of " +
           std::to_string(state_->size) + ")";
  };
  if (state_->broken) {
    // Once aborted, a result can no longer be trusted, even if its event has fired.
    fail_locked(std::make_exception_ptr(
        CommError(who() + " cannot complete: the NCCL communicator was aborted because " +
                  state_->broken_reason + "; restart from the last checkpoint")));
    return status_;
  }
  if (rc == cudaSuccess) {
    status_ = Status::kDone;
    return status_;
  }
  if (rc != cudaErrorNotReady) {
    (void)cudaGetLastError();
    std::string reason =
        who() + " failed on the device: " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc);
    state_->abort_locked(reason);
    fail_locked(std::make_exception_ptr(
        CommError(reason + "; the NCCL communicator was aborted, restart the job")));
    return status_;
  }
  ncclResult_t async = ncclSuccess;
  if (state_->comm) {
    ncclResult_t query = ncclCommGetAsyncError(state_->comm, &async);
    if (query != ncclSuccess) async = query;
  }
  if (async != ncclSuccess && async != ncclInProgress) {
    const char* detail = ncclGetLastError(nullptr);
    std::string reason = who() + " failed: NCCL reported " + detail::nccl_result_name(async) +
                         ": " + ncclGetErrorString(async) +
                         (detail && *detail ? std::string(" (") + detail + ")" : "");
    state_->abort_locked(reason);
    fail_locked(std::make_exception_ptr(
        CommError(reason + "; the NCCL communicator was aborted, restart the job")));
    return status_;
  }
  auto elapsed = std::chrono::steady_clock::now() - start_;
  if (elapsed > state_->timeout) {
    std::string reason = who() + " did not finish within the communicator timeout of " +
                         seconds_text(state_->timeout) + " (running for " + seconds_text(elapsed) +
                         ")";
    state_->abort_locked(reason);
    fail_locked(std::make_exception_ptr(
        CommError(reason +
                  "; the NCCL communicator was aborted: check that every rank issues the same "
                  "collectives in the same order, or raise ETR_COMM_TIMEOUT_S")));
    return status_;
  }
  return status_;
}

bool NcclWork::is_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return poll_locked() != Status::kRunning;
}

void NcclWork::wait(std::chrono::milliseconds timeout) {
  const PeerWaitScope waiting;
  using Clock = std::chrono::steady_clock;
  const auto begin = Clock::now();
  // Back-off: spin with yields first (NCCL ops often finish within microseconds), then
  // sleep, doubling up to 1 ms so that a long collective costs little CPU.
  constexpr int kSpins = 64;
  constexpr auto kMaxSleep = std::chrono::microseconds(1000);
  auto sleep = std::chrono::microseconds(10);
  for (int round = 0;; ++round) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      Status s = poll_locked();
      if (s == Status::kDone) return;
      if (s == Status::kFailed) std::rethrow_exception(error_);
    }
    if (timeout != kForever && Clock::now() - begin >= timeout) {
      throw CommError(description_ + " is still running after " + std::to_string(timeout.count()) +
                      " ms of waiting");
    }
    if (round < kSpins) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, kMaxSleep);
    }
  }
}

std::exception_ptr NcclWork::error() {
  std::lock_guard<std::mutex> lock(mutex_);
  poll_locked();
  return error_;
}

void NcclWork::make_stream_wait(cudaStream_t stream) {
  CudaDeviceGuard guard(state_->device);
  CUDA_CHECK(cudaStreamWaitEvent(stream, done_, 0));
}

}  // namespace etr
