// StagedCommunicator: the collectives over device memory through the host's, for ranks
// that share a GPU (NCCL refuses two ranks on one device) or have no NCCL. Every
// operation is staged:
//
//   caller's thread   check_args; copy the input, device -> page-locked host buffer, after
//                     the work the caller enqueued so far (StagedCopier::download); queue
//   submitter thread  wait for the input's copy to land; issue the host collective on the
//                     host buffers (the host communicator keeps issue order)
//   completer thread  wait for the host collective; copy the result, host -> device, on a
//                     stream of the copier's own (StagedCopier::upload); wait for it to
//                     land; the Work is complete
//
// So the caller never waits (backward goes on while a bucket is copied and summed), the
// host collectives run in the issue order on every rank (one submitter), and a slow
// operation delays the completion of later ones, never their submission (a recv waiting
// for a peer does not hold back this rank's sends). The sums are the host communicator's,
// bit for bit: a BucketReducer over a StagedCommunicator adds exactly what it adds over
// the host communicator on host memory.
//
// The copy step is injectable (StagedCopier): CUDA's (two streams of its own, the download
// ordered after the compute stream by an event), the host's (host memory standing in for
// the device: memcpy), or a test's (tests/mpi/staged_communicator_test.cc delays every
// copy on a thread of its own, so a missing wait reads stale bytes).
//
// Timing: an operation runs from when its input landed (or the previous operation
// completed, if later) to when its result landed, so the intervals of successive
// operations do not overlap and sum to the time spent communicating (ReduceStats).
// Staging buffers are cached by size and reused; a failed copy or host collective fails
// its Work and every later one (the communicator is broken, as the host's is).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/work.h"

namespace etr {

// A copy in flight. wait() returns once its bytes have landed; CommError after `timeout`.
class CopyFence {
 public:
  virtual ~CopyFence() = default;
  virtual void wait(std::chrono::milliseconds timeout) = 0;
};
using CopyFencePtr = std::unique_ptr<CopyFence>;

// How bytes move between the device and host memory for a StagedCommunicator. download()
// is called on the caller's thread, upload() on the communicator's completer thread.
class StagedCopier {
 public:
  virtual ~StagedCopier() = default;
  virtual Device device() const = 0;
  // Host memory for staging (page-locked where the device copies from it); OutOfMemory.
  virtual void* host_alloc(size_t bytes) = 0;
  virtual void host_free(void* p) noexcept = 0;
  // device -> host, ordered after everything the caller has enqueued on its compute stream.
  virtual CopyFencePtr download(void* host_dst, const void* device_src, size_t bytes) = 0;
  // host -> device.
  virtual CopyFencePtr upload(void* device_dst, const void* host_src, size_t bytes) = 0;
};

// Host memory standing in for the device: memcpy, landed at once.
std::unique_ptr<StagedCopier> make_host_copier();
// The copier of `device`: the host's for the CPU; for a GPU (CUDA builds) copies on two
// streams of its own, each download after an event recorded on `compute_stream`.
std::unique_ptr<StagedCopier> make_staged_copier(Device device, void* compute_stream);

class StagedCommunicator final : public Communicator {
 public:
  // `host`: a host communicator of the same group, which outlives this one. Every member of
  // the group must issue the same operations in the same order, as on `host`.
  StagedCommunicator(Communicator& host, std::unique_ptr<StagedCopier> copier);
  // Waits for the operations in flight (their own deadlines bound the wait).
  ~StagedCommunicator() override;
  StagedCommunicator(const StagedCommunicator&) = delete;
  StagedCommunicator& operator=(const StagedCommunicator&) = delete;

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  const std::string& name() const override { return name_; }
  Device device() const override { return copier_->device(); }
  Communicator& host() { return host_; }

  WorkPtr allreduce(TensorView in, TensorView out, ReduceOp op) override;
  using Communicator::allreduce;
  WorkPtr reduce_scatter(TensorView in, TensorView out, ReduceOp op) override;
  WorkPtr allgather(TensorView in, TensorView out) override;
  WorkPtr broadcast(TensorView inout, int root) override;
  WorkPtr send(TensorView in, int peer, int tag = 0) override;
  WorkPtr recv(TensorView out, int peer, int tag = 0) override;
  WorkPtr barrier() override;
  void set_caller_waiting(bool waiting) override { host_.set_caller_waiting(waiting); }

  // Bytes copied each way since construction, and the staging memory held.
  size_t bytes_down() const;
  size_t bytes_up() const;
  size_t staging_bytes() const;

 private:
  struct Staging {
    void* data = nullptr;
    size_t bytes = 0;
    bool busy = false;
  };
  struct Job {
    std::shared_ptr<HostWork> work;
    CopyFencePtr input;  // the download (null: nothing to download)
    std::function<WorkPtr()> launch;  // the host collective on the staging buffers
    WorkPtr host_work;
    void* upload_dst = nullptr;       // device
    const void* upload_src = nullptr;  // staging
    size_t upload_bytes = 0;
    std::vector<Staging*> staging;     // released when the job is over
    std::chrono::steady_clock::time_point landed{};
  };

  Staging* acquire(size_t bytes);
  void release(const std::vector<Staging*>& staging);
  CopyFencePtr download(Job& job, void* host, const TensorView& v);
  WorkPtr submit(std::unique_ptr<Job> job);
  void run_submitter();
  void run_completer();
  void fail(Job& job, std::exception_ptr error);

  Communicator& host_;
  std::unique_ptr<StagedCopier> copier_;
  std::string name_;
  std::chrono::milliseconds timeout_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> to_submit_, to_complete_;
  std::vector<std::unique_ptr<Staging>> staging_;
  size_t bytes_down_ = 0, bytes_up_ = 0;
  bool stop_ = false;           // the submitter ends once its queue is empty
  bool submitted_all_ = false;  // the completer ends once its queue is empty
  std::exception_ptr broken_;  // the first failure: later operations fail with it
  std::thread submitter_, completer_;
};

}  // namespace etr
