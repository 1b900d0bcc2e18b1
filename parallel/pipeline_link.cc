#include "parallel/pipeline_link.h"

#include <sched.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <thread>

#include "runtime/error.h"
#include "runtime/mpi_check.h"
#include "runtime/mpi_wait.h"

namespace etr {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kYieldTime = std::chrono::milliseconds(2);
constexpr auto kSleep = std::chrono::microseconds(50);

int count_of(int64_t n) {
  if (n < 0 || n > INT_MAX) {
    throw InvalidArgument("a pipeline transfer of " + std::to_string(n) + " elements is more than MPI counts");
  }
  return static_cast<int>(n);
}

}  // namespace

void PipeRequest::wait() {
  const auto timeout = collective_timeout();
  const Clock::time_point start = Clock::now();
  for (;;) {
    int done = 0;
    MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE));
    if (done) return;
    const auto waited = Clock::now() - start;
    if (waited >= timeout) break;
    if (waited < kYieldTime) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(kSleep);
    }
  }
  char limit[32];
  std::snprintf(limit, sizeof limit, "%g s", static_cast<double>(timeout.count()) / 1000.0);
  throw CommError("pipeline: the " + what_ + " did not complete within the communicator timeout of " +
                  limit + ": that stage's rank is stopped, dead or not calling it "
                  "(ETR_COMM_TIMEOUT_S sets the limit)");
}

PipeLink::PipeLink(const Group& pp) : group_(pp.dup(pp.name() + ".p2p")) {}

PipeRequestPtr PipeLink::send(const float* data, int64_t count, int peer, int tag,
                              const std::string& what) {
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Isend(data, count_of(count), MPI_FLOAT, peer, tag, group_.comm(), &r));
  return std::make_shared<PipeRequest>(r, what + " sent to pipeline stage " + std::to_string(peer));
}

PipeRequestPtr PipeLink::recv(float* data, int64_t count, int peer, int tag, const std::string& what) {
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Irecv(data, count_of(count), MPI_FLOAT, peer, tag, group_.comm(), &r));
  return std::make_shared<PipeRequest>(r, what + " from pipeline stage " + std::to_string(peer));
}

}  // namespace etr
