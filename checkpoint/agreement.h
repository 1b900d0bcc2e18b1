// Small collectives the checkpoint writer and reader use to agree on an outcome: every
// rank learns whether any rank failed, and the failing rank's sentence, so that a save
// or a load either happens on every rank or on none, and the log names the cause once.
// MPI calls on the group's communicator from the calling thread (etr runs MPI with
// MPI_THREAD_MULTIPLE; these never run concurrently on one communicator).
#pragma once

#include <string>
#include <vector>

#include "runtime/group.h"
#include "runtime/mpi_check.h"

namespace etr {

// Collective: the `local` error of the lowest rank that has one ("" on every rank when
// none has), on every rank.
std::string first_error(const Group& group, const std::string& local);

// Collective: every rank's `value` (trivially copyable), on every rank (MPI_Allgather).
template <typename T>
std::vector<T> all_gather(const Group& group, const T& value) {
  std::vector<T> out(static_cast<size_t>(group.size()));
  MPI_CHECK(MPI_Allgather(&value, sizeof(T), MPI_BYTE, out.data(), sizeof(T), MPI_BYTE,
                          group.comm()));
  return out;
}

// Collective: true when `flag` is true on every rank.
bool all_true(const Group& group, bool flag);

}  // namespace etr
