// Work: the handle every asynchronous operation returns (STYLE.md, 2).
//
//   WorkPtr w = comm.allreduce(grads, ReduceOp::kAvg);
//   ... compute ...
//   w->wait();            // rethrows the operation's error, if it failed
//
// wait(timeout) throws CommError when the operation is still running after `timeout`;
// the operation itself keeps going (its own deadline is the communicator's timeout).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

namespace etr {

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
};

using WorkPtr = std::shared_ptr<Work>;

// Work completed by a host thread (the progress engine, or the caller for inline ops).
class HostWork final : public Work {
 public:
  explicit HostWork(std::string description) : description_(std::move(description)) {}

  bool is_completed() override;
  void wait(std::chrono::milliseconds timeout = kForever) override;
  std::exception_ptr error() override;
  const std::string& description() const override { return description_; }

  void mark_done();
  void mark_failed(std::exception_ptr error);

 private:
  std::string description_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace etr
