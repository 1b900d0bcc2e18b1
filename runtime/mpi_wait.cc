#include "runtime/mpi_wait.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "runtime/error.h"
#include "runtime/mpi_check.h"

namespace etr {
namespace {

using Clock = std::chrono::steady_clock;

// Time spent spinning before the first sleep: a collective whose peers are already in
// it completes within a few microseconds, and a sleep would add at least ~50 us to it.
constexpr auto kSpinTime = std::chrono::microseconds(100);
constexpr auto kFirstSleep = std::chrono::microseconds(50);
constexpr auto kMaxSleep = std::chrono::microseconds(1000);

}  // namespace

std::chrono::milliseconds collective_timeout() {
  const char* v = std::getenv("ETR_COMM_TIMEOUT_S");
  if (!v || !*v) return std::chrono::milliseconds(300'000);
  char* end = nullptr;
  double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s > 0)) {
    throw ConfigError(std::string("ETR_COMM_TIMEOUT_S='") + v +
                      "' is not a positive number of seconds");
  }
  return std::chrono::milliseconds(static_cast<long long>(s * 1000));
}

void wait_with_timeout(MPI_Request& request, const char* what) {
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
