// MpiTransport: Transport over MPI non-blocking point-to-point on one communicator
// (not owned). Messages above 1 GiB are split into several MPI messages, so any size
// works with int counts. Not thread-safe: one thread drives it at a time (the progress
// engine guarantees that).
#pragma once

#include <mpi.h>

#include <vector>

#include "collectives/transport.h"

namespace etr {

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm);
  ~MpiTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Request isend(const void* data, size_t bytes, int peer, int tag) override;
  Request irecv(void* data, size_t bytes, int peer, int tag) override;
  bool test(Request request) override;
  void cancel(Request request) override;

  static constexpr size_t kMaxMessageBytes = size_t{1} << 30;

 private:
  Request acquire();

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 0;
  std::vector<std::vector<MPI_Request>> slots_;  // slot -> its MPI requests
  std::vector<Request> free_;
};

}  // namespace etr
