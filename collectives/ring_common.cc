#include "collectives/ring_common.h"

#include <algorithm>
#include <cstring>

#include "runtime/check.h"

namespace etr {

void* RingScratch::get(Buffer& buf, size_t bytes) {
  if (buf.size() < bytes) {
    buf.reset();
    buf = Buffer(alloc, bytes);
    std::memset(buf.data(), 0, bytes);
  }
  return buf.data();
}

std::vector<int64_t> ring_segments(int64_t count, int n, size_t elem_size) {
  const int64_t align = std::max<int64_t>(1, 64 / static_cast<int64_t>(elem_size));
  int64_t per = (count + n - 1) / n;
  per = (per + align - 1) / align * align;
  std::vector<int64_t> off(n + 1);
  for (int i = 0; i <= n; ++i) off[i] = std::min(count, per * i);
  return off;
}

void wait_requests(Transport& t, OpContext& ctx, Transport::Request* reqs, int count, int peer) {
  constexpr int kMaxRequests = 8;
  ETR_CHECK_LE(count, kMaxRequests) << "wait_requests waits on at most " << kMaxRequests;
  bool done[kMaxRequests] = {};
  int remaining = count;
  try {
    while (remaining > 0) {
      bool progress = false;
      for (int i = 0; i < count; ++i) {
        if (!done[i] && t.test(reqs[i])) {
          done[i] = true;
          --remaining;
          progress = true;
        }
      }
      if (progress) ctx.progressed(); else if (remaining > 0) ctx.idle(peer);
    }
  } catch (...) {
    for (int i = 0; i < count; ++i)
      if (!done[i]) t.cancel(reqs[i]);
    throw;
  }
}

}  // namespace etr
