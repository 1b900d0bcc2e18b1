// ProgressEngine: one thread per communicator that runs its operations in issue order
// (docs/design.md, "Collectives"), so the caller can keep computing while they run.
//
// An operation is a Task. A collective's Task runs it to completion and returns an
// empty Poll. A point-to-point Task only posts its messages and returns a Poll, which
// the engine calls between and after later operations until it reports completion; so
// `send(a); recv(b)` on two ranks cannot deadlock behind each other.
//
// Small collectives may run inline on the submitting thread when the engine is idle:
// the order is unchanged (nothing is queued or running), and two thread hand-offs
// (~10 us here) are saved on an operation that takes ~1 us. The price: such a call
// returns only once its peers have joined it, so collectives on two communicators must
// then be issued in the same order on every rank (NCCL asks the same of its
// communicators). CommOptions::inline_bytes = 0 lifts that.
//
// After an operation fails with CommError (timeout, MPI error) the communicator is
// broken: every later operation fails at once with a message that names the first
// failure, instead of hanging on peers that have moved on.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/work.h"

namespace etr {

class ProgressEngine {
 public:
  using Poll = std::function<bool()>;  // true when finished; throws on failure
  using Task = std::function<Poll()>;  // runs or starts the operation

  explicit ProgressEngine(std::string name);
  ~ProgressEngine();  // finishes every submitted operation, then joins
  ProgressEngine(const ProgressEngine&) = delete;
  ProgressEngine& operator=(const ProgressEngine&) = delete;

  // Queues `task`; `work` completes when it does. With `may_inline`, a collective task
  // runs on the caller's thread if nothing is queued or running.
  void submit(std::shared_ptr<HostWork> work, Task task, bool may_inline);

 private:
  struct Item {
    std::shared_ptr<HostWork> work;
    Task task;
  };
  struct Pending {
    std::shared_ptr<HostWork> work;
    Poll poll;
  };

  void loop();
  void execute(Item& item);  // runs a task; records a CommError as the broken state
  void poll_pending();
  static void fail_as_broken(HostWork& work, const std::exception_ptr& broken);

  std::string name_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool busy_ = false;      // the engine thread is running a task
  bool inlined_ = false;   // a caller thread is running a task
  bool stop_ = false;
  std::exception_ptr broken_;
  std::vector<Pending> pending_;  // engine thread (or inline caller while inlined_) only
  std::thread thread_;
};

}  // namespace etr
