#include "checkpoint/snapshot_copy.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace etr {

namespace {

// dst[0, n) = src[0, n) with non-temporal stores where the CPU has them: they bypass the
// cache, so copying a snapshot does not evict the training thread's working set (the
// writer may share its core). store_fence() orders them before what follows.
void stream_copy(char* dst, const char* src, size_t n) {
#if defined(__SSE2__)
  size_t i = std::min(n, (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16);
  std::memcpy(dst, src, i);
  for (; i + 64 <= n; i += 64) {
    for (size_t k = 0; k < 64; k += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + k),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + k)));
    }
  }
  std::memcpy(dst + i, src + i, n - i);
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace

void store_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

FiniteCheck::FiniteCheck(const ShardPlan& plan, int rank)
    : states_(plan.states()),
      state_bytes_(plan.file_bytes(rank) / std::max<size_t>(1, plan.states().size())) {}

void FiniteCheck::add(const void* data, size_t bytes) {
  const auto* bits = static_cast<const uint32_t*>(data);
  const size_t n = bytes / sizeof(float);
  uint32_t bad = 0;  // one pass the compiler vectorizes; the position only when needed
  for (size_t i = 0; i < n; ++i) bad |= (bits[i] & kExponent) == kExponent;
  if (bad && error_.empty()) {
    size_t i = 0;
    while ((bits[i] & kExponent) != kExponent) ++i;
    float x;
    std::memcpy(&x, bits + i, sizeof x);
    const uint64_t at = (seen_ + i * sizeof(float)) / sizeof(float);
    const uint64_t per_state = std::max<uint64_t>(1, state_bytes_ / sizeof(float));
    const size_t s = std::min<size_t>(at / per_state, states_.size() - 1);
    error_ = "the state '" + states_[s] + "' holds " + (std::isnan(x) ? "NaN" : "an infinity") +
             " (this rank's element " + std::to_string(at % per_state) +
             " of it), and a checkpoint of non-finite state is never written";
  }
  seen_ += bytes;
}

// The copy, in pieces small enough that the checksum and the finiteness check read the
// source while it is still in the cache: one pass over memory for all three.
void copy_and_hash(char* dst, const char* src, size_t n, Checksum& sum, FiniteCheck& finite) {
  constexpr size_t kPiece = size_t{64} << 10;
  for (size_t off = 0; off < n; off += kPiece) {
    const size_t len = std::min(kPiece, n - off);
    stream_copy(dst + off, src + off, len);
    sum.update(src + off, len);
    finite.add(src + off, len);
  }
}

}  // namespace etr
