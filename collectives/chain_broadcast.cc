#include "collectives/chain_broadcast.h"

#include <algorithm>

#include "collectives/ring_step.h"

namespace etr {

void chain_broadcast(const AlgoParams& p, void* data, int64_t count, int root) {
  const int n = p.ctx.size(), r = p.ctx.rank();
  if (n == 1 || count == 0) return;
  const int pos = ring_mod(r - root, n);
  const int next = ring_mod(r + 1, n), prev = ring_mod(r - 1, n);
  const size_t es = dtype_size(p.dtype);
  RingStep step;
  step.tag = kTagBroadcast;
  step.elem_size = es;
  step.chunk = p.chunk;
  step.depth = p.depth;
  if (pos == 0 || pos == n - 1) {  // the ends only send or only receive
    step.to = next;
    step.from = prev;
    step.send_data = data;
    step.send_count = pos == 0 ? count : 0;
    step.recv_into = data;
    step.recv_count = pos == 0 ? 0 : count;
    run_ring_step(p.transport, p.ctx, step);
    return;
  }

  // Middle of the chain: receive piece k in place, then forward it.
  Transport& t = p.transport;
  const int64_t pieces = (count + p.chunk - 1) / p.chunk;
  const int depth = p.depth;
  Transport::Request recv_req[64], send_req[64];
  char* base = static_cast<char*>(data);
  auto piece_bytes = [&](int64_t k) { return std::min(p.chunk, count - k * p.chunk) * es; };
  int64_t recv_posted = 0, received = 0, sent = 0;
  while (recv_posted < pieces && recv_posted < depth) {
    recv_req[recv_posted % depth] =
        t.irecv(base + recv_posted * p.chunk * es, piece_bytes(recv_posted), prev, kTagBroadcast);
    ++recv_posted;
  }
  try {
    while (sent < pieces) {
      bool progress = false;
      if (received < pieces && received - sent < depth && t.test(recv_req[received % depth])) {
        send_req[received % depth] =
            t.isend(base + received * p.chunk * es, piece_bytes(received), next, kTagBroadcast);
        ++received;
        if (recv_posted < pieces) {
          recv_req[recv_posted % depth] = t.irecv(base + recv_posted * p.chunk * es,
                                                  piece_bytes(recv_posted), prev, kTagBroadcast);
          ++recv_posted;
        }
        progress = true;
      }
      if (sent < received && t.test(send_req[sent % depth])) {
        ++sent;
        progress = true;
      }
      if (progress) p.ctx.progressed(); else p.ctx.idle(received < pieces ? prev : next);
    }
  } catch (...) {
    for (int64_t k = received; k < recv_posted; ++k) t.cancel(recv_req[k % depth]);
    for (int64_t k = sent; k < received; ++k) t.cancel(send_req[k % depth]);
    throw;
  }
}

void dissemination_barrier(Transport& t, OpContext& ctx) {
  const int n = ctx.size(), r = ctx.rank();
  char token = 0, sink = 0;
  for (int k = 1; k < n; k <<= 1) {
    Transport::Request reqs[2] = {t.irecv(&sink, 0, ring_mod(r - k, n), kTagBarrier),
                                  t.isend(&token, 0, ring_mod(r + k, n), kTagBarrier)};
    wait_requests(t, ctx, reqs, 2, ring_mod(r - k, n));
  }
}

}  // namespace etr
