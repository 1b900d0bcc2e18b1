// What the host algorithms share: their parameters, scratch memory, ring segment
// arithmetic and a deadline-aware wait.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/op_context.h"
#include "collectives/transport.h"
#include "runtime/allocator.h"
#include "runtime/host_allocator.h"

namespace etr {

// Scratch owned by one communicator and reused by every operation (only one runs at a
// time). Buffers grow on demand and are touched once when they grow, so first-touch
// page faults stay out of the steady state (docs/machine_notes.md).
struct RingScratch {
  HostAllocator alloc;
  Buffer slots;   // depth x chunk bytes: received pieces before they are reduced
  Buffer stage;   // 2 x block bytes: partial sums of reduce_scatter at >= 3 ranks
  Buffer whole;   // message bytes: the receive buffer of recursive doubling

  // At least `bytes` of `buf`, growing (and touching) it when needed.
  void* get(Buffer& buf, size_t bytes);
};

struct AlgoParams {
  Transport& transport;
  OpContext& ctx;
  RingScratch& scratch;
  DType dtype;
  int64_t chunk;  // elements per pipelined piece
  int depth;      // pieces in flight per direction
  // The ring's neighbours are on other hosts (TCP): a reduce-scatter step posts all its
  // pieces at once (chunk raised to a segment / depth). Over TCP every message larger
  // than Open MPI's eager limit is a rendezvous, whose handshake waits behind the bulk
  // data queued the other way; pieces posted later than the sender could send them each
  // pay that wait (measured: a 2-host ring at 55 % of the link with 256 KiB pieces, 92 %
  // with the segment in 4 pieces). The kernel's socket buffers pipeline the bytes anyway.
  bool across_hosts = false;
};

// The piece size of a ring step over segments of at most `max_segment` elements.
inline int64_t step_chunk(const AlgoParams& p, int64_t max_segment) {
  if (!p.across_hosts) return p.chunk;
  return std::max(p.chunk, (max_segment + p.depth - 1) / p.depth);
}

// Tags of the algorithms' messages (one per algorithm; matching is by order).
enum AlgoTag : int {
  kTagRing = 1,
  kTagRecursiveDoubling = 2,
  kTagBroadcast = 3,
  kTagBarrier = 4,
};

// Offsets of n ring segments covering [0, count): n + 1 entries, boundaries rounded to
// 64 bytes so that each segment's reduction starts aligned.
std::vector<int64_t> ring_segments(int64_t count, int n, size_t elem_size);

// Waits for `count` requests, throwing CommError past the deadline.
void wait_requests(Transport& t, OpContext& ctx, Transport::Request* reqs, int count, int peer);

inline int ring_mod(int x, int n) { return ((x % n) + n) % n; }

}  // namespace etr
