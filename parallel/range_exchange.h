// exchange_pieces: moves ranges of a flat buffer between the ranks of a group, for
// checkpoints and gathers that cross pipeline stages (parallel/pipeline_engine.h).
//
// Every rank contributes pieces (ranges of the flat buffer with their data; each element
// is contributed by at most one rank of the group) and asks for one range. One
// MPI_Allgather of the asked ranges, one MPI_Alltoall of header counts, one MPI_Alltoallv
// of the (offset, count) headers of what is sent, then the elements point to point,
// straight from the pieces into `out` (no staging copy on either side; a rank's own
// elements are copied). The exchange's point-to-point messages use a duplicate-free tag
// of the group's communicator: no other traffic with that tag may be in flight.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "runtime/group.h"

namespace etr {

struct FlatPiece {
  int64_t begin = 0;  // [begin, end) elements of the flat buffer
  int64_t end = 0;
  const float* data = nullptr;  // data[0] is element begin
};

// Collective over `group`. Writes into out[0 .. out_end - out_begin) every contributed
// element of [out_begin, out_end) (out[0] is element out_begin); elements nobody
// contributes are left as they are. An MPI failure, or a rank that does not take part
// within the collectives' timeout (runtime/mpi_wait.h), throws CommError; the job must
// then end (etr's programs abort it): MPI may still use the exchange's freed buffers.
void exchange_pieces(const Group& group, std::span<const FlatPiece> pieces, float* out,
                     int64_t out_begin, int64_t out_end);

// Collective over `group`: every rank's `mine` (ranges [first, second) of a flat buffer), on
// every rank, out[r] being rank r's as it passed them. Two control all-gathers (the
// counts, then the lists padded to the longest; runtime/control_ops.h: within the
// collectives' timeout, else CommError).
std::vector<std::vector<std::pair<int64_t, int64_t>>> gather_ranges(
    const Group& group, std::span<const std::pair<int64_t, int64_t>> mine);

}  // namespace etr
