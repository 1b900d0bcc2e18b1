// CRC-32C (Castagnoli, the iSCSI polynomial 0x1EDC6F41, reflected), as TFRecord files
// use it (runtime/tensorboard_writer.h). Computed with the processor's CRC32 instruction:
// SSE4.2 on x86-64, the CRC extension on aarch64; other architectures do not build.
//
//   crc32c("123456789") == 0xE3069283
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace etr {

// The CRC-32C of `data`, continuing from `crc` (the CRC of the bytes before it; 0 to
// start). Throws Error on an x86-64 processor without SSE4.2.
uint32_t crc32c(std::span<const std::byte> data, uint32_t crc = 0);
inline uint32_t crc32c(std::string_view text, uint32_t crc = 0) {
  return crc32c(std::as_bytes(std::span(text.data(), text.size())), crc);
}

// TFRecord's masked CRC: a CRC stored beside the data it covers is rotated and offset,
// so that the CRC of bytes that themselves hold a CRC is not trivially related to it.
inline uint32_t mask_crc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace etr
