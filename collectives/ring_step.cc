#include "collectives/ring_step.h"

#include <algorithm>
#include <vector>

namespace etr {

void run_ring_step(Transport& t, OpContext& ctx, const RingStep& s) {
  const int64_t send_pieces = (s.send_count + s.chunk - 1) / s.chunk;
  const int64_t recv_pieces = (s.recv_count + s.chunk - 1) / s.chunk;
  const int depth = s.depth;
  const size_t chunk_bytes = static_cast<size_t>(s.chunk) * s.elem_size;

  // Requests in flight, indexed by piece % depth.
  Transport::Request send_req[64];
  Transport::Request recv_req[64];
  auto piece_count = [&](int64_t total, int64_t k) { return std::min(s.chunk, total - k * s.chunk); };
  auto recv_ptr = [&](int64_t k) -> char* {
    return s.recv_into ? static_cast<char*>(s.recv_into) + k * chunk_bytes
                       : static_cast<char*>(s.slots) + (k % depth) * chunk_bytes;
  };
  auto post_send = [&](int64_t k) {
    send_req[k % depth] = t.isend(static_cast<const char*>(s.send_data) + k * chunk_bytes,
                                  piece_count(s.send_count, k) * s.elem_size, s.to, s.tag);
  };
  auto post_recv = [&](int64_t k) {
    recv_req[k % depth] =
        t.irecv(recv_ptr(k), piece_count(s.recv_count, k) * s.elem_size, s.from, s.tag);
  };

  int64_t sent = 0, send_posted = 0, received = 0, recv_posted = 0;
  // Receives first, so a peer's first pieces find a posted buffer.
  while (recv_posted < recv_pieces && recv_posted < depth) post_recv(recv_posted++);
  while (send_posted < send_pieces && send_posted < depth) post_send(send_posted++);
  if (s.meanwhile) s.meanwhile();

  try {
    while (received < recv_pieces || sent < send_pieces) {
      bool progress = false;
      if (received < recv_pieces && t.test(recv_req[received % depth])) {
        if (!s.recv_into) {
          s.consume(received * s.chunk, recv_ptr(received), piece_count(s.recv_count, received));
        }
        ++received;
        if (recv_posted < recv_pieces) post_recv(recv_posted++);
        progress = true;
      }
      if (sent < send_pieces && t.test(send_req[sent % depth])) {
        ++sent;
        if (send_posted < send_pieces) post_send(send_posted++);
        progress = true;
      }
      if (progress) {
        ctx.progressed();
      } else {
        ctx.idle(received < recv_pieces ? s.from : s.to);
      }
    }
  } catch (...) {
    for (int64_t k = received; k < recv_posted; ++k) t.cancel(recv_req[k % depth]);
    for (int64_t k = sent; k < send_posted; ++k) t.cancel(send_req[k % depth]);
    throw;
  }
}

}  // namespace etr
