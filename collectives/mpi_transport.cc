#include "collectives/mpi_transport.h"

#include <algorithm>

#include "runtime/mpi_check.h"

namespace etr {

MpiTransport::MpiTransport(MPI_Comm comm) : comm_(comm) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiTransport::~MpiTransport() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (std::find(free_.begin(), free_.end(), static_cast<Request>(s)) == free_.end()) {
      cancel(static_cast<Request>(s));
    }
  }
}

Transport::Request MpiTransport::acquire() {
  if (free_.empty()) {
    slots_.emplace_back();
    return static_cast<Request>(slots_.size() - 1);
  }
  Request r = free_.back();
  free_.pop_back();
  slots_[r].clear();
  return r;
}

template <typename Post>
void MpiTransport::post_pieces(Request r, size_t bytes, Post post) {
  size_t piece = kMaxMessageBytes;
  if (bytes > kEagerPieceBytes && bytes <= kEagerSplitMax) {
    const size_t pieces = (bytes + kEagerPieceBytes - 1) / kEagerPieceBytes;
    piece = (bytes + pieces - 1) / pieces;
  }
  size_t offset = 0;
  do {
    size_t n = std::min(bytes - offset, piece);
    MPI_Request req;
    post(offset, static_cast<int>(n), &req);
    slots_[r].push_back(req);
    offset += n;
  } while (offset < bytes);
}

Transport::Request MpiTransport::isend(const void* data, size_t bytes, int peer, int tag) {
  Request r = acquire();
  const char* p = static_cast<const char*>(data);
  post_pieces(r, bytes, [&](size_t offset, int n, MPI_Request* req) {
    MPI_CHECK(MPI_Isend(p + offset, n, MPI_BYTE, peer, tag, comm_, req));
  });
  return r;
}

Transport::Request MpiTransport::irecv(void* data, size_t bytes, int peer, int tag) {
  Request r = acquire();
  char* p = static_cast<char*>(data);
  post_pieces(r, bytes, [&](size_t offset, int n, MPI_Request* req) {
    MPI_CHECK(MPI_Irecv(p + offset, n, MPI_BYTE, peer, tag, comm_, req));
  });
  return r;
}

bool MpiTransport::test(Request request) {
  auto& reqs = slots_[request];
  int done = 0;
  if (reqs.size() == 1) {
    MPI_CHECK(MPI_Test(reqs.data(), &done, MPI_STATUS_IGNORE));
  } else {
    MPI_CHECK(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done,
                          MPI_STATUSES_IGNORE));
  }
  if (done) free_.push_back(request);
  return done != 0;
}

void MpiTransport::cancel(Request request) {
  for (MPI_Request& req : slots_[request]) {
    if (req == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&req);  // receives are cancelled; a send may already be under way
    MPI_Request_free(&req);
  }
  slots_[request].clear();
  free_.push_back(request);
}

}  // namespace etr
