#include "collectives/work.h"

#include "runtime/error.h"

namespace etr {

bool HostWork::is_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void HostWork::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kForever) {
    cv_.wait(lock, [&] { return done_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
    throw CommError(description_ + " is still running after " +
                    std::to_string(timeout.count()) + " ms of waiting");
  }
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr HostWork::error() {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void HostWork::mark_done() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
  }
  cv_.notify_all();
}

void HostWork::mark_failed(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(error);
    done_ = true;
  }
  cv_.notify_all();
}

}  // namespace etr
