// Checksum: XXH3-64 (seed 0) of checkpoint data, one-shot or streamed, and its text form
// (docs/design.md, "Checkpoints": a checksum per file in the manifest, verified on load).
//
//   Checksum sum;                       // streaming: any split of the bytes gives
//   sum.update(a, n); sum.update(b, m); // the same digest as one call on all of them
//   uint64_t d = sum.digest();
//   Checksum::of_file(path) == d;       // reads the file in 1 MiB pieces
//   format_checksum(d)                  // "2d06800538d394c2": 16 lower-case hex digits,
//                                       // the digit order xxhsum prints
//
// The values are XXH3_64bits of libxxhash, so any XXH3 implementation can check a
// checkpoint. xxhash.h stays out of this header (etr links xxHash privately).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

struct XXH3_state_s;  // libxxhash's streaming state

namespace etr {

class Checksum {
 public:
  Checksum();
  ~Checksum();
  Checksum(Checksum&& other) noexcept;
  Checksum& operator=(Checksum&& other) noexcept;
  Checksum(const Checksum&) = delete;
  Checksum& operator=(const Checksum&) = delete;

  // Appends bytes; `data` may be null when size is 0.
  void update(const void* data, size_t size);
  // The digest of everything appended since construction or reset(); does not consume.
  uint64_t digest() const;
  void reset();

  static uint64_t of(const void* data, size_t size);
  // Throws IoError naming the path when it cannot be opened or read.
  static uint64_t of_file(const std::filesystem::path& path);

 private:
  XXH3_state_s* state_;
};

// 16 lower-case hex digits, most significant first.
std::string format_checksum(uint64_t digest);
// The inverse of format_checksum (either case); throws CheckpointError naming the text
// when it is not 16 hex digits.
uint64_t parse_checksum(std::string_view text);

}  // namespace etr
