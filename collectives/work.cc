#include "collectives/work.h"

#include <sched.h>

#include "runtime/error.h"
#include "runtime/peer_wait.h"

namespace etr {

std::string OpDescription::str() const {
  std::string s = std::string(op) + "(" + dtype + " x " + std::to_string(count);
  if (detail) s += std::string(", ") + detail;
  if (peer_label) s += std::string(", ") + peer_label + " " + std::to_string(peer);
  if (tag >= 0) s += ", tag " + std::to_string(tag);
  s += ")";
  if (group) s += " on group '" + *group + "'";
  return s;
}

const std::string& HostWork::description() const {
  std::call_once(described_, [this] { description_ = op_.str(); });
  return description_;
}

bool HostWork::is_completed() {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void HostWork::wait(std::chrono::milliseconds timeout) {
  const PeerWaitScope waiting;
  // Yield for a short while before sleeping: when the progress thread shares this
  // core, yielding hands it the core at once, and a sleep/wake-up pair (two system
  // calls and a context switch each) is saved on operations that take microseconds.
  const auto spin_until = std::chrono::steady_clock::now() +
                          (timeout.count() >= 1 ? kYieldBeforeSleep : std::chrono::microseconds(0));
  while (!finished_.load(std::memory_order_acquire) &&
         std::chrono::steady_clock::now() < spin_until) {
    sched_yield();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == kForever) {
    cv_.wait(lock, [&] { return done_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
    throw CommError(description() + " is still running after " +
                    std::to_string(timeout.count()) + " ms of waiting");
  }
  if (error_) std::rethrow_exception(error_);
}

std::exception_ptr HostWork::error() {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

WorkTiming HostWork::timing() {
  std::lock_guard<std::mutex> lock(mutex_);
  return timing_;
}

void HostWork::mark_started() { mark_started(std::chrono::steady_clock::now()); }

void HostWork::mark_started(std::chrono::steady_clock::time_point at) {
  std::lock_guard<std::mutex> lock(mutex_);
  timing_.started = at;
}

void HostWork::mark_done() {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    timing_.finished = now;
    done_ = true;
    finished_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void HostWork::mark_failed(std::exception_ptr error) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    timing_.finished = now;
    error_ = std::move(error);
    done_ = true;
    finished_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

}  // namespace etr
