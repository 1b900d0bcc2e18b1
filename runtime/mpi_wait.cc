#include "runtime/mpi_wait.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "runtime/config/config_fields.h"
#include "runtime/config/settings.h"
#include "runtime/error.h"
#include "runtime/mpi_check.h"
#include "runtime/peer_wait.h"

namespace etr {
namespace {

using Clock = std::chrono::steady_clock;

// Time spent spinning before the first sleep: a collective whose peers are already in
// it completes within a few microseconds, and a sleep would add at least ~50 us to it.
constexpr auto kSpinTime = std::chrono::microseconds(100);
constexpr auto kFirstSleep = std::chrono::microseconds(50);
constexpr auto kMaxSleep = std::chrono::microseconds(1000);

}  // namespace

// The resolved timeout in ms, -1 until a program sets it: the one setting kept process-wide
// (every waiting MPI call and communicator of the process uses it).
namespace {
std::atomic<int64_t> resolved_timeout_ms{-1};
thread_local const std::atomic<bool>* wait_cancelled = nullptr;  // WaitCancellation's flag
}  // namespace

WaitCancellation::WaitCancellation(const std::atomic<bool>* flag) { wait_cancelled = flag; }
WaitCancellation::~WaitCancellation() { wait_cancelled = nullptr; }

std::chrono::milliseconds collective_timeout() {
  const int64_t set = resolved_timeout_ms.load(std::memory_order_relaxed);
  if (set >= 0) return std::chrono::milliseconds(set);
  config::TrainConfig config;
  apply_env_settings(config, "comm.timeout_s");
  apply_field_defaults(*config.mutable_comm());
  return std::chrono::milliseconds(static_cast<int64_t>(config.comm().timeout_s() * 1000));
}

void set_collective_timeout(std::chrono::milliseconds timeout) {
  resolved_timeout_ms.store(timeout.count(), std::memory_order_relaxed);
}

void wait_with_timeout(MPI_Request& request, const char* what) {
  const PeerWaitScope waiting;
  const std::chrono::milliseconds timeout = collective_timeout();
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + timeout;
  auto sleep = kFirstSleep;
  for (;;) {
    int done = 0;
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) break;
    if (wait_cancelled != nullptr && wait_cancelled->load(std::memory_order_relaxed)) {
      throw CommError(std::string(what) + " was abandoned: its process is ending");
    }
    if (now - start < kSpinTime) continue;
    std::this_thread::sleep_for(std::min<Clock::duration>(sleep, deadline - now));
    sleep = std::min(sleep * 2, kMaxSleep);
  }
  char limit[32];
  std::snprintf(limit, sizeof limit, "%g s", timeout.count() / 1000.0);
  throw CommError(std::string(what) + " did not complete within the communicator timeout of " +
                  limit +
                  ": a peer rank is stopped, dead or not calling it (ETR_COMM_TIMEOUT_S sets "
                  "the limit)");
}

}  // namespace etr
