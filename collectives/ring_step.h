// One step of a ring algorithm, chunked and pipelined.
//
// Protocol: this rank sends `send_count` elements to `to` and receives `recv_count`
// elements from `from`, both cut into pieces of `chunk` elements, with up to `depth`
// pieces in flight in each direction. Pieces between a pair of ranks share one tag and
// are matched in posting order (transport.h). A received piece either lands in place
// (`recv_into`) or in one of `depth` scratch slots, after which `consume` folds it into
// its destination while the next pieces are already on the wire — so sending,
// receiving and reducing overlap. Both sides derive the same piece boundaries from the
// counts, so no sizes are exchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "collectives/op_context.h"
#include "collectives/transport.h"

namespace etr {

struct RingStep {
  int to = -1;
  int from = -1;
  int tag = 0;
  const void* send_data = nullptr;
  int64_t send_count = 0;
  void* recv_into = nullptr;  // null: receive into slots and call consume
  int64_t recv_count = 0;
  size_t elem_size = 4;
  int64_t chunk = 0;  // elements per piece (> 0)
  int depth = 1;      // pieces in flight per direction (>= 1)
  // Scratch slots: depth x chunk elements, used when recv_into is null.
  void* slots = nullptr;
  // (element offset of the piece within the received range, slot pointer, count)
  std::function<void(int64_t, const void*, int64_t)> consume;
  // Optional local work done once the first pieces are posted, while they travel.
  std::function<void()> meanwhile;
};

void run_ring_step(Transport& transport, OpContext& ctx, const RingStep& step);

}  // namespace etr
