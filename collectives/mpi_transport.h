// MpiTransport: Transport over MPI non-blocking point-to-point on one communicator
// (not owned). Not thread-safe: one thread drives it at a time (the progress engine
// guarantees that).
//
// A message may travel as several MPI messages (same peer and tag, so they match in
// order; both sides derive the split from the byte count alone):
//  - just above the shared-memory eager limit (Open MPI's vader: 4 KiB including its
//    header) a message would switch to the rendezvous protocol, ~3 us slower here for
//    a 4 KiB payload; up to kEagerSplitMax bytes it is sent as (up to 4) eager pieces.
//  - above 1 GiB it is split so that counts fit in an int.
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
  static constexpr size_t kEagerPieceBytes = 4096 - 128;  // payload that stays eager
  static constexpr size_t kEagerSplitMax = 4 * kEagerPieceBytes;

 private:
  Request acquire();
  // Posts `bytes` as one or more MPI messages into slot `r`.
  template <typename Post>
  void post_pieces(Request r, size_t bytes, Post post);

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 0;
  std::vector<std::vector<MPI_Request>> slots_;  // slot -> its MPI requests
  std::vector<Request> free_;
};

}  // namespace etr
