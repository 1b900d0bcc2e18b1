#include "runtime/control_ops.h"

#include <signal.h>

#include <cstring>
#include <memory>
#include <string>

#include "runtime/env.h"
#include "runtime/mpi_check.h"
#include "runtime/mpi_wait.h"

namespace etr::control {
namespace {

size_t bytes_of(int count, MPI_Datatype type) {
  int size = 0;
  MPI_CHECK(MPI_Type_size(type, &size));
  return static_cast<size_t>(count) * static_cast<size_t>(size);
}

// ETR_TEST_STOP_AT=WORD:RANK: this rank stops itself at the first site naming WORD.
void stop_here_if_asked(const char* site) {
  static bool done = false;
  const char* v = env_value("ETR_TEST_STOP_AT");
  if (done || !v || !*v) return;
  const std::string spec(v);
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos) return;
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  if (std::string(site).find(spec.substr(0, colon)) == std::string::npos) return;
  if (std::to_string(world) != spec.substr(colon + 1)) return;
  done = true;
  raise(SIGSTOP);
}

// Waits for `request` over `buffer`; on a timeout the buffer stays with the request.
void finish(MPI_Request& request, std::unique_ptr<char[]>& buffer, const char* site) {
  try {
    wait_with_timeout(request, site);
  } catch (...) {
    (void)buffer.release();  // MPI may still write into it (see the header)
    throw;
  }
}

// An in-place operation on `n` bytes at `data`, run by `start` on a copy of its own.
template <typename Start>
void in_place(void* data, size_t n, const char* site, Start start) {
  stop_here_if_asked(site);
  auto buffer = std::make_unique<char[]>(n + 1);
  std::memcpy(buffer.get(), data, n);
  MPI_Request r = MPI_REQUEST_NULL;
  start(buffer.get(), &r);
  finish(r, buffer, site);
  std::memcpy(data, buffer.get(), n);
}

}  // namespace

void allreduce(void* inout, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm, const char* site) {
  in_place(inout, bytes_of(count, type), site, [&](void* copy, MPI_Request* r) {
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, copy, count, type, op, comm, r));
  });
}

void allgather(const void* mine, int count, MPI_Datatype type, void* all, MPI_Comm comm, const char* site) {
  stop_here_if_asked(site);
  int size = 0;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  const size_t n = bytes_of(count, type);
  auto buffer = std::make_unique<char[]>(n * (static_cast<size_t>(size) + 1) + 1);
  char* in = buffer.get() + n * static_cast<size_t>(size);
  std::memcpy(in, mine, n);
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallgather(in, count, type, buffer.get(), count, type, comm, &r));
  finish(r, buffer, site);
  std::memcpy(all, buffer.get(), n * static_cast<size_t>(size));
}

void broadcast(void* data, int count, MPI_Datatype type, int root, MPI_Comm comm, const char* site) {
  in_place(data, bytes_of(count, type), site, [&](void* copy, MPI_Request* r) {
    MPI_CHECK(MPI_Ibcast(copy, count, type, root, comm, r));
  });
}

void barrier(MPI_Comm comm, const char* site) {
  stop_here_if_asked(site);
  std::unique_ptr<char[]> none;
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibarrier(comm, &r));
  finish(r, none, site);
}

std::vector<std::string> gather_strings(const std::string& mine, int root, MPI_Comm comm, const char* site) {
  int rank = 0, size = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<int> lengths(static_cast<size_t>(size), 0);
  const int length = static_cast<int>(mine.size());
  allgather(&length, 1, MPI_INT, lengths.data(), comm, site);
  std::vector<int> displs(static_cast<size_t>(size), 0);
  size_t total = 0;
  for (int r = 0; r < size; ++r) {
    displs[static_cast<size_t>(r)] = static_cast<int>(total);
    total += static_cast<size_t>(lengths[static_cast<size_t>(r)]);
  }
  stop_here_if_asked(site);
  // One block: this rank's bytes, then (on the root) everyone's.
  auto buffer = std::make_unique<char[]>(mine.size() + (rank == root ? total : 0) + 1);
  std::memcpy(buffer.get(), mine.data(), mine.size());
  char* all = buffer.get() + mine.size();
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Igatherv(buffer.get(), length, MPI_CHAR, all, lengths.data(), displs.data(), MPI_CHAR, root, comm,
                         &r));
  try {
    wait_with_timeout(r, site);
  } catch (...) {
    (void)buffer.release();
    new std::vector<int>(std::move(lengths));  // the counts stay with the request too
    new std::vector<int>(std::move(displs));
    throw;
  }
  std::vector<std::string> out;
  if (rank != root) return out;
  for (int q = 0; q < size; ++q) {
    out.emplace_back(all + displs[static_cast<size_t>(q)], static_cast<size_t>(lengths[static_cast<size_t>(q)]));
  }
  return out;
}

MPI_Comm split(MPI_Comm comm, int color, int key, const char* site) {
  barrier(comm, site);
  MPI_Comm out = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm, color, key, &out));
  return out;
}

}  // namespace etr::control
