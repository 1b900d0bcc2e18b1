// CheckpointCadence: a training job's checkpoints (docs/design.md, "Checkpoints"): what one
// holds, when it is saved, and resuming from one. checkpoint/ does the writing, reading
// and verifying; this decides when, with what metadata, and into which held ranges.
//
//   checkpoint.dir, every, keep           the durable tier (always saved at the last step)
//   checkpoint.fast_dir, fast_every, ...  the fast tier (e.g. /dev/shm), between those
//   checkpoint.memory_every, memory_dir   the memory tier: each host's tmpfs, a copy on a
//                                         buddy host (checkpoint/buddy_link.h), read back
//                                         by a relaunch (checkpoint/memory_restore.h)
//   checkpoint.resume                     "latest", a checkpoint, or a directory of them
//
// The metadata (manifest) records the data position, the schedule, the batch, the whole
// configuration and the layout saved from; the states are the engine's (param, adam.m,
// adam.v), saved without duplication by the ranks that hold them and read back, for any
// world size, into exactly the ranges this rank holds (FlatState::held()).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/manifest.pb.h"
#include "parallel/data_source.h"
#include "parallel/engine.h"
#include "parallel/memory_cadence.h"
#include "parallel/process_grid.h"
#include "runtime/config/train_config.h"
#include "runtime/flat_state.h"
#include "runtime/log.h"

namespace etr {

// Where the global batch in force took effect: (0, 0), or the step and sample at which a
// resume with another batch.global_batch started. The manifest records it so that its
// data position can be checked against its step (checkpoint/manifest.h).
struct BatchOrigin {
  uint64_t step = 0;
  uint64_t samples = 0;
};

struct MemoryResume;  // checkpoint/memory_restore.h

// Where a run resumes from, and the tier that held it: "durable", "fast", "memory-local"
// (the hosts' own in-memory copies) or "memory-buddy" (one from a buddy's copy).
struct ResumePoint {
  std::filesystem::path dir;
  std::string tier;
  // The memory tier's: where each file is read from (checkpoint/peer_read.h); null for
  // the disk tiers, whose directory every rank reads.
  std::shared_ptr<const MemoryResume> memory;
};

// What a restore brought back besides the states.
struct Restored {
  ckpt::Manifest manifest;
  uint64_t bytes = 0;     // read by this rank (received ones included)
  uint64_t received = 0;  // of those, received from other hosts (a memory-tier restore)
  uint64_t moved = 0;     // received from other hosts by all ranks together
  double seconds = 0;
};

// Host RAM each rank's memory tier holds at its peak, [rank]: memory_keep + 1 saves of its
// own file of `plan` (its engine's owners, when it has them) and of the buddy copies it
// receives (checkpoint/buddy_link.h: a rank of a host with fewer ranks than the host
// before it receives more than one; `host_of` as gather_hosts gives it), in the host's
// tmpfs (copied and received there in place: no staging buffers); all 0 when
// checkpoint.memory_every is 0.
std::vector<size_t> memory_tier_bytes(const config::CheckpointConfig& c, const ShardPlan& plan,
                                      const std::vector<int>& host_of);

class CheckpointCadence {
 public:
  // Collective over grid.dp_group() when a checkpoint directory is configured. `seq_len`:
  // tokens per sample (for the manifest's token count).
  CheckpointCadence(const TrainConfig& config, const ProcessGrid& grid, Logger& log,
                    int64_t seq_len);
  ~CheckpointCadence();

  // Null unless checkpoint.dir or checkpoint.fast_dir is set.
  CheckpointWriter* writer() const { return writer_.get(); }
  // The memory tier's writer; null unless checkpoint.memory_every > 0.
  CheckpointWriter* memory_writer() const { return memory_writer_.get(); }
  // The memory tier's directory on every host ("" when off).
  const std::filesystem::path& memory_dir() const { return memory_.dir; }

  // Collective: the checkpoint to resume from per checkpoint.resume (verified by
  // find_resumable), or nothing for a fresh start. Throws ConfigError / CheckpointError
  // when an explicitly named checkpoint is missing or unusable. `relaunch` (etr-run's
  // relaunch of this job): "latest" takes the memory tier's newest complete copy when it
  // is not older than the disk's; otherwise the memory tier is emptied (a fresh start
  // never resumes from an earlier run's copy).
  std::optional<ResumePoint> find_resume(bool relaunch) const;
  // Collective: reads each state into the ranges its holder holds (from the memory tier:
  // what this rank's host lacks comes from the hosts that hold it, read_with_peers).
  // Throws CheckpointError naming the directory when any rank fails, or when the
  // checkpoint's attachments are not this run's (set_attachments), name for name and byte
  // for byte.
  Restored restore(const ResumePoint& point, std::span<const HeldState> states) const;

  // The manifest of a checkpoint after `position` (everything but tensors and files).
  ckpt::Manifest manifest(const DataPosition& position, const BatchOrigin& origin) const;
  // The batch policy's state the next manifests record (the session's, kept current).
  void set_batch_policy(const ckpt::BatchPolicy& b) { batch_policy_ = b; }
  // The program's files every manifest carries from now on (TrainProgram::attachments).
  void set_attachments(std::vector<ckpt::Attachment> a) { attachments_ = std::move(a); }
  // Collective: saves `states` (of `layout`) to the "durable", "fast" or "memory" tier,
  // async per checkpoint.async (the memory tier: always). Returns false when the save
  // failed (logged; training may go on).
  // `staged_seconds`: the time `states` took to produce (CheckpointWriter::save).
  bool save(const std::string& tier, const ckpt::Manifest& meta, const ParamLayout& layout,
            std::span<const NamedState> states, double staged_seconds = 0);
  // The same with the states produced now (after the last save's snapshot), the time that
  // takes charged to the save.
  bool save(const std::string& tier, const ckpt::Manifest& meta, const ParamLayout& layout,
            const std::function<std::vector<NamedState>()>& states);
  // Collective, at every step boundary: commits a finished async save, and saves when
  // `step` is due for a tier (`last`: the run's last step, always saved durably).
  // `states` is called (collectively) only when a save is due, after the snapshot of
  // the previous save is taken.
  void at_step(int64_t step, bool last, const DataPosition& position, const BatchOrigin& origin,
               const ParamLayout& layout, const std::function<std::vector<NamedState>()>& states);
  // Collective: waits for a background save and commits it.
  void flush();
  // Before the states change: an async save may still be copying them.
  void wait_for_snapshot();
  // The tier a resize saves to: the fast one when there is one.
  std::string resize_tier() const;
  // The tier a stop saves to: the durable one, else the fast one; "" when neither is set.
  std::string stop_tier() const;
  // The last completed save was of `step` and succeeded.
  bool saved(int64_t step) const;
  // Collective, at the end of a finished or stopped run (after flush()): when its last
  // step is saved on disk, each host's leader empties and removes the memory tier's
  // directory (its tmpfs pages are the host's RAM); otherwise the copies stay for a
  // relaunch.
  void release_memory_tier(int64_t last_step);

 private:
  void check_attachments(const ckpt::Manifest& m) const;
  std::optional<ResumePoint> find_in_memory(uint64_t disk_step) const;
  void clear_memory_tier_on_hosts(bool remove_dir = false) const;
  void observe_memory_saves();

  ckpt::BatchPolicy batch_policy_;
  std::vector<ckpt::Attachment> attachments_;
  const TrainConfig& config_;
  const ProcessGrid& grid_;
  Logger& log_;
  int64_t seq_len_;
  std::unique_ptr<CheckpointWriter> writer_;
  std::unique_ptr<CheckpointWriter> memory_writer_;  // its own thread and snapshot
  CheckpointTier durable_, fast_, memory_;
  std::unique_ptr<MemoryCadence> memory_cadence_;  // with memory_writer_
  size_t memory_saves_seen_ = 0;
  std::chrono::steady_clock::time_point last_step_end_;  // {}: no step boundary yet
};

// Collective over `group`, for a program's fresh start (checkpoint.resume ""), before its
// session is built: ConfigError when checkpoint.dir or checkpoint.fast_dir holds complete
// checkpoints (an earlier run's, whose steps the new run's would interleave with; a later
// --resume latest would take whichever is newest). Rank 0's listing decides for every rank.
// (Not the session's own check: a trainer of its own may build a session and restore a
// named checkpoint into it.)
void refuse_earlier_checkpoints(const config::CheckpointConfig& c, const Group& group);

}  // namespace etr
