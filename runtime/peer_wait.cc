#include "runtime/peer_wait.h"

#include <atomic>
#include <thread>

namespace etr {

namespace {

using Clock = std::chrono::steady_clock;

// The reporting thread's id, and when its outermost current wait began (0: not waiting;
// else the time since the clock's epoch in ns, at least 1).
std::atomic<std::thread::id> reporting_thread{};
std::atomic<int64_t> waiting_since_ns{0};
thread_local int depth = 0;

int64_t ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

void report_peer_waits_of_this_thread() {
  reporting_thread.store(std::this_thread::get_id(), std::memory_order_relaxed);
}

int64_t peer_wait_ms(Clock::time_point now) {
  const int64_t since = waiting_since_ns.load(std::memory_order_relaxed);
  if (since == 0) return 0;
  const int64_t waited = ns(now) - since;
  return waited > 0 ? waited / 1000000 : 0;
}

PeerWaitScope::PeerWaitScope()
    : counts_(reporting_thread.load(std::memory_order_relaxed) == std::this_thread::get_id()) {
  if (counts_ && depth++ == 0) {
    const int64_t now = ns(Clock::now());
    waiting_since_ns.store(now > 0 ? now : 1, std::memory_order_relaxed);
  }
}

PeerWaitScope::~PeerWaitScope() {
  if (counts_ && --depth == 0) waiting_since_ns.store(0, std::memory_order_relaxed);
}

}  // namespace etr
