// PipeLink: the point-to-point transfers between pipeline stages (parallel/pipeline_executor.h),
// posted and completed on the caller's thread with nonblocking MPI over a duplicate of the
// pp group.
//
// Why not a communicator's progress thread: in 1F1B's steady state every transfer is on
// the critical path with no slack (a stage's next action waits for the message its
// neighbour has just sent), so each hand-off between threads adds to every micro-batch
// (measured with etr-bench pipeline: about 1 ms a step at m = 16 on this machine). Here
// a receiver that waits is inside MPI when the bytes arrive (shared memory with CMA: the
// receiver copies them itself), and a sender's buffer is only waited for before reuse.
//
// wait() polls MPI_Test, yielding the core between polls for 2 ms, then sleeping 50 us
// between them; after the collectives' timeout (ETR_COMM_TIMEOUT_S, runtime/mpi_wait.h)
// it throws CommError naming the transfer and the peer stage. The request then stays
// active (MPI cannot cancel it): the caller must keep the buffer alive.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/group.h"

namespace etr {

class PipeRequest {
 public:
  PipeRequest(MPI_Request request, std::string what) : request_(request), what_(std::move(what)) {}
  PipeRequest(const PipeRequest&) = delete;
  PipeRequest& operator=(const PipeRequest&) = delete;
  // An unfinished request is left to MPI (its buffer must outlive the process's use).
  ~PipeRequest() = default;
  void wait();
  bool done() const { return request_ == MPI_REQUEST_NULL; }

 private:
  MPI_Request request_;
  std::string what_;
};

using PipeRequestPtr = std::shared_ptr<PipeRequest>;

class PipeLink {
 public:
  explicit PipeLink(const Group& pp);
  // `what` names the transfer in a timeout's message ("activation of micro-batch 3").
  PipeRequestPtr send(const float* data, int64_t count, int peer, int tag, const std::string& what);
  PipeRequestPtr recv(float* data, int64_t count, int peer, int tag, const std::string& what);

 private:
  Group group_;
};

}  // namespace etr
