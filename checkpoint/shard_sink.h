// ShardSink: writes one shard file from pieces, durably, and checksums it on the way
// (checkpoint/checkpoint_writer.h and etr-ckpt reshard write every shard through it, so
// the same pieces give the same bytes and checksum whoever writes them).
//
//   ShardSink sink(dir / "shard-00000-of-00002.bin");   // a DurableFile underneath
//   sink.append(data, bytes);                            // any number of pieces
//   uint64_t xxh3 = sink.commit();                       // fsync + rename; the checksum
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "checkpoint/checksum.h"
#include "checkpoint/durable_file.h"

namespace etr {

// Pieces smaller than this are gathered into one write().
inline constexpr size_t kShardStagingBytes = size_t{8} << 20;

class ShardSink {
 public:
  explicit ShardSink(const std::filesystem::path& path) : file_(path) {}
  void append(const void* data, size_t size);
  // Returns the XXH3 of everything appended; the file is durable at its name afterwards.
  uint64_t commit();
  size_t bytes() const { return file_.bytes_written() + staging_.size(); }

 private:
  void drain();
  DurableFile file_;
  Checksum sum_;
  std::vector<char> staging_;
};

}  // namespace etr
