// Small collectives the checkpoint writer and reader use to agree on an outcome: every
// rank learns whether any rank failed, and the failing rank's sentence, so that a save
// or a load either happens on every rank or on none, and the log names the cause once.
// MPI calls on the group's communicator from the calling thread (etr runs MPI with
// MPI_THREAD_MULTIPLE; these never run concurrently on one communicator).
//
// Each one is a nonblocking MPI collective waited for with the communicator timeout
// (runtime/mpi_wait.h): a peer that is stopped or stuck makes the others throw CommError
// after ETR_COMM_TIMEOUT_S instead of waiting forever. After such a timeout the
// collective is still outstanding on the group's communicator (MPI cannot cancel one):
// its buffers are leaked on purpose, so that a late peer completes it harmlessly, and the
// next collective on the group matches that peer's next one, as MPI's ordering rules say.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/group.h"
#include "runtime/mpi_check.h"

namespace etr {

// Collective: the `local` error of the lowest rank that has one ("" on every rank when
// none has), on every rank.
std::string first_error(const Group& group, const std::string& local);

// Collective: true when `flag` is true on every rank.
bool all_true(const Group& group, bool flag);

// Collective: rank `root`'s `bytes` (any length), on every rank; sent in pieces of at
// most 64 MiB (the memory tier's manifest travels this way, checkpoint/memory_restore.h).
std::string broadcast_bytes(const Group& group, const std::string& bytes, int root);

// Collective: the element-wise minimum of every rank's `values` (all of one length).
std::vector<int64_t> all_min(const Group& group, const std::vector<int64_t>& values);

// Collective: every rank's `values` (all of one length) one after another, rank 0's first.
std::vector<uint8_t> all_gather_bytes(const Group& group, const std::vector<uint8_t>& values);

// Not collective: posts the nonblocking point-to-point messages of `size` bytes at `bytes`
// to (`send`) or from `peer` on `comm`, one a piece of at most 64 MiB (MPI counts are
// int), tag = the piece's number, at least one. Messages between two ranks match in the
// order they are posted, so both sides post their files in the same order.
void post_pieces(std::vector<MPI_Request>& requests, char* bytes, size_t size, int peer,
                 MPI_Comm comm, bool send);

namespace detail {

// Waits for `request`, the collective `op` on `group`, with the communicator timeout.
// `buffers` owns everything the request reads or writes; on a CommError it is leaked, so
// that MPI never writes into freed memory when a late peer completes the collective.
void wait_agreement(const Group& group, const char* op, MPI_Request& request,
                    std::shared_ptr<void> buffers);

}  // namespace detail

// Collective: every rank's `value` (trivially copyable), on every rank (MPI_Iallgather).
template <typename T>
std::vector<T> all_gather(const Group& group, const T& value) {
  static_assert(std::is_trivially_copyable_v<T>, "all_gather sends the bytes of T");
  struct Buffers {
    T mine;
    std::vector<T> all;  // [group.size()]
  };
  auto b =
      std::make_shared<Buffers>(Buffers{value, std::vector<T>(static_cast<size_t>(group.size()))});
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallgather(&b->mine, sizeof(T), MPI_BYTE, b->all.data(), sizeof(T), MPI_BYTE,
                           group.comm(), &request));
  detail::wait_agreement(group, "all_gather", request, b);
  return std::move(b->all);
}

// Collective: rank `root`'s `value` (trivially copyable), on every rank (MPI_Ibcast).
template <typename T>
T broadcast(const Group& group, const T& value, int root) {
  static_assert(std::is_trivially_copyable_v<T>, "broadcast sends the bytes of T");
  auto b = std::make_shared<T>(value);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibcast(b.get(), sizeof(T), MPI_BYTE, root, group.comm(), &request));
  detail::wait_agreement(group, "broadcast", request, b);
  return *b;
}

}  // namespace etr
