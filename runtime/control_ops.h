// Control collectives: the few small agreements a training job makes outside the
// collectives' data path (a micro-batch every rank can run, the shares, the recompute
// trial's verdict, the ranges a ZeRO-3 gather covers, a barrier before a save...), each
// waited for with the collective timeout (runtime/mpi_wait.h) so that a stopped, dead
// or stuck peer turns into a CommError naming the call site instead of a hang:
//
//   "<site> did not complete within the communicator timeout of 5 s: a peer rank is
//    stopped, dead or not calling it (ETR_COMM_TIMEOUT_S sets the limit)"
//
// Every blocking MPI call outside collectives/ goes through here or through
// checkpoint/agreement.h. Each runs on a copy of the caller's values in memory of its
// own, which a timed-out operation keeps (MPI may still write into it when a late peer
// arrives: it is leaked on purpose, as agreement.h does), so the caller's buffers are
// free to go. `site` names the caller: "the micro-batch agreement (batch_controller)".
//
// Test hook: ETR_TEST_STOP_AT=SITE_WORD:RANK stops (SIGSTOP) rank RANK on entering the
// first control collective whose site contains SITE_WORD (the timeout test).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace etr::control {

void allreduce(void* inout, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char* site);
void allgather(const void* mine, int count, MPI_Datatype type, void* all, MPI_Comm comm, const char* site);
void broadcast(void* data, int count, MPI_Datatype type, int root, MPI_Comm comm, const char* site);
void barrier(MPI_Comm comm, const char* site);
// Every rank's `mine` (any length) on `root`, in rank order (empty elsewhere).
std::vector<std::string> gather_strings(const std::string& mine, int root, MPI_Comm comm, const char* site);
// MPI_Comm_split after a barrier with the timeout (MPI has no nonblocking split): a rank
// that never comes is found in the barrier.
MPI_Comm split(MPI_Comm comm, int color, int key, const char* site);

}  // namespace etr::control
