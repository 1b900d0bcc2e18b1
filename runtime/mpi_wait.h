// Waiting for a nonblocking MPI operation with the communicator timeout, so that a peer
// rank that is stopped (SIGSTOP), dead or stuck turns into a CommError on the ranks that
// wait for it instead of an endless wait. For MPI collectives that etr issues directly
// (checkpoint/agreement.h); HostCommunicator's own algorithms time out in OpContext with
// the same limit.
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>

namespace etr {

// The limit on one collective: the process's resolved comm.timeout_s once a program has
// set it (set_collective_timeout, at start, from its config: the config file, then
// ETR_COMM_TIMEOUT_S, then --set); before that, ETR_COMM_TIMEOUT_S seconds (a positive
// number, fractions allowed; 300 s when unset or empty) through the settings registry
// (runtime/config/settings.h), re-read on each call; ConfigError on a bad value.
std::chrono::milliseconds collective_timeout();
// Fixes the process's collective timeout (a program's resolved setting).
void set_collective_timeout(std::chrono::milliseconds timeout);

// Waits for `request` (set to MPI_REQUEST_NULL once complete) by polling MPI_Test: it
// spins for a short while, then sleeps between polls (50 us doubling to 1 ms) so that a
// waiting rank leaves the core to the peers it waits for. MPI errors throw CommError
// (MPI_CHECK). After collective_timeout() it throws CommError:
//   "<what> did not complete within the communicator timeout of 5 s: a peer rank is
//    stopped, dead or not calling it (ETR_COMM_TIMEOUT_S sets the limit)"
// The request is then still active: MPI cannot cancel a collective, and a late peer can
// still complete it, writing into its buffers. The caller must keep those buffers alive
// (checkpoint/agreement.h leaks them on purpose) and never free the request.
void wait_with_timeout(MPI_Request& request, const char* what);

// While one lives, this thread's wait_with_timeout() calls also end, with a CommError
// ("... was abandoned: ..."), once `*flag` is true: the checkpoint writer's background
// thread, whose owner is being destroyed, must not wait out the timeout for peers that
// are elsewhere. The request stays active, as after a timeout. One at a time a thread.
class WaitCancellation {
 public:
  explicit WaitCancellation(const std::atomic<bool>* flag);
  ~WaitCancellation();
  WaitCancellation(const WaitCancellation&) = delete;
  WaitCancellation& operator=(const WaitCancellation&) = delete;
};

}  // namespace etr
