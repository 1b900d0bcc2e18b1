#include "collectives/op_context.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "runtime/error.h"

namespace etr {

namespace {
constexpr auto kFirstSleep = IdlePolicy::kFirstSleep;
}  // namespace

OpContext::OpContext(const Work& work, int rank, int size, std::chrono::milliseconds timeout,
                     IdlePolicy policy)
    : work_(work),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      start_(Clock::now()),
      deadline_(start_ + timeout),
      policy_(policy) {}

void OpContext::idle(int peer) {
  ++idle_polls_;
  if (idle_polls_ < policy_.spin_polls) {
    if ((idle_polls_ & 255) == 0 && Clock::now() > deadline_) fail_timeout(peer);
    return;
  }
  if (Clock::now() > deadline_) fail_timeout(peer);
  const bool urgent = policy_.urgent && policy_.urgent->get();
  if (urgent || idle_polls_ < policy_.spin_polls + policy_.yield_polls) {
    sched_yield();
    sleep_ = kFirstSleep;
  } else {
    if (policy_.urgent) {
      std::unique_lock<std::mutex> lock(policy_.urgent->mutex);
      policy_.urgent->cv.wait_for(lock, sleep_, [this] { return policy_.urgent->get(); });
    } else {
      std::this_thread::sleep_for(sleep_);
    }
    sleep_ = std::min(sleep_ * 2, std::max(policy_.max_sleep, kFirstSleep));
  }
}

void OpContext::fail_timeout(int peer) const {
  double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  char times[96];
  std::snprintf(times, sizeof times, "%.3g s (%.3f s elapsed", timeout_.count() / 1000.0,
                elapsed);
  const bool known = world_ranks_ && peer >= 0 && peer < static_cast<int>(world_ranks_->size());
  const int world = known ? (*world_ranks_)[peer] : -1;
  std::string waiting = peer < 0 ? ")" : ", waiting on rank " + std::to_string(peer) +
                        (known ? " (world rank " + std::to_string(world) + "))" : ")");
  const std::string limit = learned_note_.empty()
                                ? "(ETR_COMM_TIMEOUT_S sets the limit)"
                                : "(" + learned_note_ + "; ETR_COMM_TIMEOUT_S caps it, "
                                  "ETR_COMM_LEARNED_TIMEOUT_MULTIPLE=0 turns learning off)";
  throw CommError(work_.description() + " (rank " + std::to_string(rank_) + " of " +
                      std::to_string(size_) + ") did not finish within " + times + waiting +
                      ": a peer never joined, is stuck, or cannot be reached; every rank "
                      "must issue the same collectives in the same order " + limit,
                  world);
}

}  // namespace etr
