#include "runtime/crc32c.h"

#include <cstring>

#include "runtime/error.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#elif defined(__aarch64__)
#include <arm_acle.h>
#include <asm/hwcap.h>
#include <sys/auxv.h>
#else
#error "crc32c needs the CRC32 instruction of x86-64 (SSE4.2) or aarch64 (the CRC extension)"
#endif

namespace etr {
namespace {

// The raw (unconditioned) CRC over `n` bytes: 8 at a time, then the tail byte by byte.
#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_raw(uint32_t crc, const unsigned char* p,
                                                      size_t n) {
  uint64_t c = crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);  // (little-endian: the bytes in stream order)
    c = _mm_crc32_u64(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return c32;
}

bool have_crc_instruction() {
  return __builtin_cpu_supports("sse4.2");
}
#else
__attribute__((target("+crc"))) uint32_t crc32c_raw(uint32_t crc, const unsigned char* p,
                                                    size_t n) {
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    crc = __crc32cd(crc, word);
  }
  for (; n > 0; --n, ++p) crc = __crc32cb(crc, *p);
  return crc;
}

// (optional on ARMv8.0 cores, in every ARMv8.1 and later one: the kernel says)
bool have_crc_instruction() {
  return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
}
#endif

}  // namespace

uint32_t crc32c(std::span<const std::byte> data, uint32_t crc) {
  static const bool have = have_crc_instruction();
  if (!have) {
    throw Error("crc32c: this processor has no CRC32 instruction (x86-64: SSE4.2; aarch64: "
                "the CRC extension), which TensorBoard's event files need");
  }
  // The standard conditioning: start from all ones, invert at the end (so continuing
  // from a finished CRC inverts it back first).
  return ~crc32c_raw(~crc, reinterpret_cast<const unsigned char*>(data.data()), data.size());
}

}  // namespace etr
