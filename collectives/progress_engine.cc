#include "collectives/progress_engine.h"

#include <chrono>

#include "runtime/error.h"

namespace etr {

ProgressEngine::ProgressEngine(std::string name) : name_(std::move(name)) {
  thread_ = std::thread([this] { loop(); });
}

ProgressEngine::~ProgressEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ProgressEngine::fail_as_broken(HostWork& work, const std::exception_ptr& broken) {
  try {
    std::rethrow_exception(broken);
  } catch (const std::exception& e) {
    work.mark_failed(std::make_exception_ptr(CommError(
        work.description() + " cannot run: the communicator failed earlier (" + e.what() + ")")));
  }
}

void ProgressEngine::submit(std::shared_ptr<HostWork> work, Task task, bool may_inline) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (broken_) {
    std::exception_ptr broken = broken_;
    lock.unlock();
    fail_as_broken(*work, broken);
    return;
  }
  if (may_inline && queue_.empty() && !busy_ && !inlined_) {
    inlined_ = true;
    lock.unlock();
    Item item{std::move(work), std::move(task)};
    execute(item);
    lock.lock();
    inlined_ = false;
    // Wake the engine only when something queued up meanwhile: a needless wake-up
    // costs a context switch on the caller's core, several times the op itself.
    const bool wake = !queue_.empty() || !pending_.empty() || stop_;
    lock.unlock();
    if (wake) cv_.notify_all();
    return;
  }
  queue_.push_back(Item{std::move(work), std::move(task)});
  lock.unlock();
  cv_.notify_all();
}

void ProgressEngine::execute(Item& item) {
  {
    // Operations queued behind a failed one must not talk to peers that have given up.
    std::unique_lock<std::mutex> lock(mutex_);
    if (broken_) {
      std::exception_ptr broken = broken_;
      lock.unlock();
      fail_as_broken(*item.work, broken);
      return;
    }
  }
  item.work->mark_started();
  try {
    Poll poll = item.task();
    if (!poll) {
      item.work->mark_done();
    } else {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back(Pending{std::move(item.work), std::move(poll)});
    }
  } catch (const CommError&) {
    std::exception_ptr error = std::current_exception();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!broken_) broken_ = error;
    }
    item.work->mark_failed(error);
  } catch (...) {
    item.work->mark_failed(std::current_exception());
  }
}

void ProgressEngine::poll_pending() {
  std::vector<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pending.swap(pending_);
  }
  std::vector<Pending> still;
  for (Pending& p : pending) {
    try {
      if (p.poll()) {
        p.work->mark_done();
      } else {
        still.push_back(std::move(p));
      }
    } catch (const CommError&) {
      std::exception_ptr error = std::current_exception();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!broken_) broken_ = error;
      }
      p.work->mark_failed(error);
    } catch (...) {
      p.work->mark_failed(std::current_exception());
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (Pending& p : still) pending_.push_back(std::move(p));
}

void ProgressEngine::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    const bool have_pending = !pending_.empty();
    if (queue_.empty() || inlined_) {
      if (stop_ && queue_.empty() && !have_pending && !inlined_) return;
      if (!have_pending) {
        cv_.wait(lock);
        continue;
      }
      if (!inlined_) {
        lock.unlock();
        poll_pending();
        lock.lock();
      }
      // Point-to-point messages in flight: poll often, but leave the core to others.
      if (queue_.empty() || inlined_) cv_.wait_for(lock, std::chrono::microseconds(20));
      continue;
    }
    Item item = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    execute(item);
    if (have_pending) poll_pending();
    lock.lock();
    busy_ = false;
  }
}

}  // namespace etr
