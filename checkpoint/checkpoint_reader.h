// CheckpointReader: reads a checkpoint into any layout, reading only the byte ranges the
// caller needs (pread), and find_resumable(), which picks the checkpoint a job resumes
// from (docs/design.md, "Checkpoints").
//
//   CheckpointReader r(dir);                     // reads and checks the manifest
//   r.read_state("param", layout, params, 0, layout.numel());   // a replica: everything
//   r.read_state("adam.m", layout, m_shard, begin, end);        // a ZeRO shard: a range
//
// The destination is a flat buffer of the *reader's* layout; its tensors are found in the
// checkpoint by name, so the writer's world size and sharding do not matter. Padding
// between tensors is left untouched.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/manifest.pb.h"
#include "runtime/byte_progress.h"
#include "runtime/group.h"
#include "runtime/log.h"
#include "runtime/param_layout.h"

namespace etr {

// One contiguous run of bytes of a shard file, and where it lands: a step of a read plan.
struct ShardRead {
  int file = 0;         // the manifest's files(file)
  uint64_t offset = 0;  // in that file
  uint64_t bytes = 0;
  char* dest = nullptr;
};

class CheckpointReader {
 public:
  // Throws CheckpointError (read_manifest) when the manifest is missing or corrupt.
  explicit CheckpointReader(std::filesystem::path dir);
  // With a manifest checked elsewhere (parse_manifest), for a directory that may lack its
  // own (a memory-tier restore reads the other files from other hosts).
  CheckpointReader(std::filesystem::path dir, ckpt::Manifest manifest);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;

  const ckpt::Manifest& manifest() const { return manifest_; }
  const std::filesystem::path& dir() const { return dir_; }

  // Fills the elements [begin, end) of `flat` (a flat buffer of `layout`, f32) with the
  // saved state `state`. Throws CheckpointError naming the tensor when the checkpoint
  // lacks the state or a tensor of the layout, or holds it with another shape, and
  // IoError when a shard file cannot be read.
  void read_state(const std::string& state, const ParamLayout& layout, float* flat,
                  int64_t begin, int64_t end);
  // The same into storage for the range only: dest[0] is element `begin` of the layout
  // (a FlatState's held range, runtime/flat_state.h).
  void read_range(const std::string& state, const ParamLayout& layout, float* dest,
                  int64_t begin, int64_t end);
  // The reads read_range would make, checked as it checks them; no file is opened.
  std::vector<ShardRead> plan_range(const std::string& state, const ParamLayout& layout,
                                    float* dest, int64_t begin, int64_t end) const;
  // Makes `reads` from this directory's files (IoError when one cannot be read).
  void read(std::span<const ShardRead> reads);
  // True when the checkpoint holds `state`.
  bool has_state(const std::string& state) const;
  // Bytes read by read_state so far.
  uint64_t bytes_read() const { return bytes_read_; }
  // Reports the bytes read to `progress` (not owned; null: none) as they arrive.
  void set_progress(ByteProgress* progress) { progress_ = progress; }

 private:
  int fd(const std::string& file);

  std::filesystem::path dir_;
  ckpt::Manifest manifest_;
  std::map<std::pair<std::string, std::string>, const ckpt::TensorRecord*> index_;  // (state, name)
  std::map<std::string, int> fds_;
  ByteProgress* progress_ = nullptr;
  uint64_t bytes_read_ = 0;
};

// Collective over `group`: the newest of resume_candidates(paths) (checkpoint/catalog.h)
// whose manifest reads and whose shard files match their checksums (the files are split
// over the ranks for checking). Each candidate that fails is logged by rank 0 with the
// reason, and the next older one is tried. Nothing when no candidate is usable.
std::optional<std::filesystem::path> find_resumable(std::span<const std::filesystem::path> paths,
                                                    const Group& group, Logger& log);

}  // namespace etr
