// OpContext: what a running collective knows about itself, for its deadline and its
// error messages. Algorithms call idle() whenever a poll made no progress; idle()
// backs off from spinning to yielding to short sleeps (so a rank waiting for a slow
// peer leaves the core to compute), and throws CommError once the deadline passes:
//
//   "allreduce(f32 x 16, sum) on group 'world' (rank 0 of 2) did not finish within
//    2 s (2.001 s elapsed, waiting on rank 1): ..."
#pragma once

#include <atomic>
#include <chrono>
#include <vector>
#include <condition_variable>
#include <mutex>
#include <string>

#include "collectives/learned_deadline.h"
#include "collectives/work.h"
#include "runtime/peer_wait.h"

namespace etr {

// Set while the caller is blocked on a communicator's work (Communicator::
// set_caller_waiting): a sleeping operation wakes at once when it is raised.
struct CallerWaiting {
  std::atomic<bool> flag{false};
  std::mutex mutex;
  std::condition_variable cv;
  void set(bool waiting) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      flag.store(waiting, std::memory_order_relaxed);
    }
    if (waiting) cv.notify_all();
  }
  bool get() const { return flag.load(std::memory_order_relaxed); }
};

// How a waiting operation spends its idle polls: spin_polls spinning (fewer when ranks
// outnumber cores, where a spinning rank only delays the peer it waits for), then
// yield_polls yielding, then sleeping, from 50 us doubling up to max_sleep. While
// urgent->get() is true (the caller is blocked on this communicator's work and its core is
// free) it spins and yields only: latency matters more than the core then.
struct IdlePolicy {
  // A poll is one MPI_Test, about 0.1-0.3 us here: ~1 ms of spinning.
  static constexpr unsigned kDefaultSpinPolls = 4096;
  // Then it yields for ~8192 polls (~10 ms) before it starts to sleep between polls.
  static constexpr unsigned kDefaultYieldPolls = 8192;
  // The first sleep; later ones double up to max_sleep.
  static constexpr std::chrono::microseconds kFirstSleep{50};
  unsigned spin_polls = kDefaultSpinPolls;
  unsigned yield_polls = kDefaultYieldPolls;
  std::chrono::microseconds max_sleep = kFirstSleep;
  CallerWaiting* urgent = nullptr;
};

class OpContext {
 public:
  using Clock = std::chrono::steady_clock;

  static constexpr unsigned kDefaultSpinPolls = IdlePolicy::kDefaultSpinPolls;
  static constexpr unsigned kDefaultYieldPolls = IdlePolicy::kDefaultYieldPolls;

  OpContext(const Work& work, int rank, int size, std::chrono::milliseconds timeout,
            IdlePolicy policy = IdlePolicy());

  // A poll made progress: spin again.
  void progressed() {
    idle_polls_ = 0;
    sleep_ = IdlePolicy::kFirstSleep;
  }
  // A poll made no progress while waiting on `peer` (-1: unknown). May throw CommError.
  void idle(int peer);
  // Throws CommError when the deadline has passed.
  void check_deadline(int peer) const {
    if (Clock::now() > deadline_) fail_timeout(peer);
  }
  [[noreturn]] void fail_timeout(int peer) const;

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  Clock::time_point start() const { return start_; }
  // The deadline was learned (collectives/learned_deadline.h): a timeout says how.
  void set_learned(std::string note) { learned_note_ = std::move(note); }
  const std::string& learned_note() const { return learned_note_; }
  // The world ranks of the peers the next waits name (a transport's rank -> its rank in
  // MPI_COMM_WORLD), so that a timeout tells etr-run whom it waited on; null: unknown.
  void set_world_ranks(const std::vector<int>* world_ranks) { world_ranks_ = world_ranks; }

 private:
  const Work& work_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  Clock::time_point start_;
  Clock::time_point deadline_;
  IdlePolicy policy_;
  std::chrono::microseconds sleep_ = IdlePolicy::kFirstSleep;
  unsigned idle_polls_ = 0;
  const std::vector<int>* world_ranks_ = nullptr;
  std::string learned_note_;
  // A collective run on the training thread (a small one inline in the call, not on the
  // progress engine's thread) is a wait on its peers for the heartbeat (runtime/peer_wait.h).
  PeerWaitScope waiting_;
};

}  // namespace etr
