// Work: the handle every asynchronous operation returns (CONTRIBUTING.md, style 2).
//
//   WorkPtr w = comm.allreduce(grads, ReduceOp::kAvg);
//   ... compute ...
//   w->wait();            // rethrows the operation's error, if it failed
//
// wait(timeout) throws CommError when the operation is still running after `timeout`;
// the operation itself keeps going (its own deadline is the communicator's timeout).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

namespace etr {

// When an operation ran: from the moment its backend began executing it (not when it
// was issued: it may wait behind earlier operations) to its completion. Zero time points
// while unknown; a backend that cannot tell (NCCL without events) leaves them zero.
struct WorkTiming {
  std::chrono::steady_clock::time_point started{};
  std::chrono::steady_clock::time_point finished{};
  double seconds() const { return std::chrono::duration<double>(finished - started).count(); }
};

class Work {
 public:
  static constexpr std::chrono::milliseconds kForever = std::chrono::milliseconds::max();

  virtual ~Work() = default;
  // True once the operation has finished, successfully or not. Never blocks.
  virtual bool is_completed() = 0;
  // Blocks until completion; rethrows the stored error; throws CommError on timeout.
  virtual void wait(std::chrono::milliseconds timeout = kForever) = 0;
  // The stored error (null while running or after success).
  virtual std::exception_ptr error() = 0;
  // "allreduce(f32 x 1048576) on group 'world'", for messages.
  virtual const std::string& description() const = 0;
  // When it ran (see WorkTiming); meaningful once is_completed().
  virtual WorkTiming timing() { return {}; }
};

using WorkPtr = std::shared_ptr<Work>;

// What an operation is, kept as plain fields and formatted only when a message needs
// it: "allreduce(f32 x 1024, sum) on group 'world'". Formatting eagerly would cost
// more than a small allreduce itself.
struct OpDescription {
  const char* op = "";
  const char* dtype = "";       // dtype_name()
  int64_t count = 0;
  const char* detail = nullptr;  // static text, e.g. the reduce op
  const char* peer_label = nullptr;  // "root", "to rank", "from rank"
  int peer = -1;
  int tag = -1;
  const std::string* group = nullptr;
  std::string str() const;
};

// Work completed by a host thread (the progress engine, or the caller for inline ops).
class HostWork final : public Work {
 public:
  explicit HostWork(OpDescription op) : op_(op) {}

  bool is_completed() override;
  void wait(std::chrono::milliseconds timeout = kForever) override;
  std::exception_ptr error() override;
  const std::string& description() const override;
  WorkTiming timing() override;

  // Called by the thread that starts executing the operation (at `at`: a backend whose
  // operations pass through several threads says when its own part began).
  void mark_started();
  void mark_started(std::chrono::steady_clock::time_point at);
  void mark_done();
  void mark_failed(std::exception_ptr error);

  static constexpr std::chrono::microseconds kYieldBeforeSleep{50};

 private:
  OpDescription op_;
  mutable std::once_flag described_;
  mutable std::string description_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool> finished_{false};  // mirrors done_ for the lock-free first look
  bool done_ = false;
  std::exception_ptr error_;
  WorkTiming timing_;
};

}  // namespace etr
