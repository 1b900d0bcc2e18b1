// ShardSink: writes one shard file from pieces, durably, and checksums it on the way
// (checkpoint/checkpoint_writer.h and etr-ckpt reshard write every shard through it, so
// the same pieces give the same bytes and checksum whoever writes them).
//
//   ShardSink sink(dir / "shard-00000-of-00002.bin");   // a DurableFile underneath
//   sink.append(data, bytes);                            // any number of pieces
//   uint64_t xxh3 = sink.commit();                       // fsync + rename; the checksum
//
// Pieces are not copied: they are gathered (up to 8 MiB or 512 pieces) and written with
// one writev, so a piece's memory must stay unchanged until the next drain() or commit().
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "checkpoint/checksum.h"
#include "checkpoint/durable_file.h"

namespace etr {

// Pieces are gathered into one writev of at most this many bytes.
inline constexpr size_t kShardStagingBytes = size_t{8} << 20;

class ShardSink {
 public:
  // direct_io: every piece is written at once (no gathering), around the page cache
  // while pieces are aligned (DurableFile); for a caller whose buffer outlives nothing.
  explicit ShardSink(const std::filesystem::path& path, bool direct_io = false)
      : file_(path, direct_io), direct_(direct_io) {}
  void append(const void* data, size_t size);
  // Writes the gathered pieces: after it, their memory may change.
  void drain();
  // Returns the XXH3 of everything appended; the file is durable at its name afterwards.
  uint64_t commit();
  size_t bytes() const { return file_.bytes_written() + gathered_bytes_; }

 private:
  DurableFile file_;
  Checksum sum_;
  std::vector<iovec> gathered_;
  size_t gathered_bytes_ = 0;
  bool direct_ = false;
};

}  // namespace etr
