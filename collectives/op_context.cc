#include "collectives/op_context.h"

#include <sched.h>

#include <cstdio>
#include <thread>

#include "runtime/error.h"

namespace etr {

namespace {
// After spinning, a rank yields for ~8192 polls (~10 ms) before it starts to sleep
// between polls.
constexpr unsigned kYieldPolls = 8192;
constexpr auto kSleep = std::chrono::microseconds(50);
}  // namespace

OpContext::OpContext(const Work& work, int rank, int size, std::chrono::milliseconds timeout,
                     unsigned spin_polls)
    : work_(work),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      start_(Clock::now()),
      deadline_(start_ + timeout),
      spin_polls_(spin_polls) {}

void OpContext::idle(int peer) {
  ++idle_polls_;
  if (idle_polls_ < spin_polls_) {
    if ((idle_polls_ & 255) == 0 && Clock::now() > deadline_) fail_timeout(peer);
    return;
  }
  if (Clock::now() > deadline_) fail_timeout(peer);
  if (idle_polls_ < spin_polls_ + kYieldPolls) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(kSleep);
  }
}

void OpContext::fail_timeout(int peer) const {
  double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
  char times[96];
  std::snprintf(times, sizeof times, "%.3g s (%.3f s elapsed", timeout_.count() / 1000.0,
                elapsed);
  std::string waiting = peer >= 0 ? ", waiting on rank " + std::to_string(peer) + ")" : ")";
  throw CommError(work_.description() + " (rank " + std::to_string(rank_) + " of " +
                  std::to_string(size_) + ") did not finish within " + times + waiting +
                  ": a peer never joined or is stuck; every rank must issue the same "
                  "collectives in the same order (ETR_COMM_TIMEOUT_S sets the limit)");
}

}  // namespace etr
