// CheckpointWriter: saves a job's state as a sharded checkpoint, synchronously or in the
// background, into tiers with retention (docs/design.md, "Checkpoints").
//
// A save, collective over the group (world N, rank r):
//   1. rank 0 creates TIER/.step-NNNNNNNNN.partial/ (a stale one from a crash is removed)
//   2. rank r writes its shard file (ShardPlan: range r of every state, or the ranges its
//      engine owns, so replicated state is split and no byte is written twice):
//      DurableFile = write, fsync, rename.
//      async: save() returns at once; a background thread first copies the range into a
//      host buffer kept between saves (the snapshot), then writes it while training goes
//      on. The caller must not change the states until wait_for_snapshot() has returned
//      (the trainer calls it just before its optimizer update, so the copy overlaps the
//      next forward and backward and the step waits for nothing).
//   3. when every rank's shard is durable the ranks agree; rank 0 gathers the sizes and
//      XXH3 checksums, writes manifest.pb (durably) and renames the directory to
//      TIER/step-NNNNNNNNN, then deletes all but the newest `keep` checkpoints (in a
//      thread of its own, beside training: flush() waits for it)
//   async: steps 1 and 3 are the background threads' too, agreeing on a communicator of
//      their own, so that a save costs training only save()'s few hundred microseconds
//      (and the snapshot wait, normally none); the training thread learns of the commit
//      at the first step boundary where every rank's has ended (poll(): one 4-byte
//      allreduce), so stats() grows at the same step on every rank
//   per-host tier (the memory tier): the host leaders do rank 0's directory work in their
//      hosts' directories; the writer thread copies the snapshot straight into the rank's
//      file there (mapped: no staging buffer, no second copy), sends it to the buddy rank
//      on the next host and receives the copies into their files (buddy_link.h); the
//      manifest rank 0 builds is broadcast and every host leader commits it
//   4. a failure on any rank (full disk, permissions, a NaN or an infinity in the state
//      it packs: a checkpoint of non-finite state is never written) is agreed on: the
//      partial directory is deleted, the error logged with its cause, and the previous
//      checkpoints are untouched; training goes on (the failure is counted in stats())
// So a checkpoint is visible only when complete. A save of a step that already exists
// (after a rollback) moves the old directory aside to step-N.replaced-<ms>.
//
// The background thread runs on the node's spare cores (runtime/cpu_affinity.h) when
// there are any and the writer was asked to, so that it takes no CPU from training.
//
// Only one save is in flight: a save while one is pending waits for the pending one's
// commit first, so calls must be made in the same order on every rank.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint/buddy_link.h"
#include "checkpoint/manifest.pb.h"
#include "checkpoint/mapping_cache.h"
#include "checkpoint/shard_plan.h"
#include "runtime/byte_progress.h"
#include "runtime/cpu_affinity.h"
#include "runtime/group.h"
#include "runtime/log.h"
#include "runtime/param_layout.h"

namespace etr {

struct CheckpointTier {
  std::filesystem::path dir;
  std::string name;  // "durable", "fast", "memory"
  int keep = 0;      // newest complete checkpoints kept; < 1 keeps all
  // The memory tier: `dir` is each host's own (a tmpfs), written by its ranks and holding
  // their shards plus the buddy copies of another host's (checkpoint/buddy_link.h); each
  // host's leader makes its directories and writes the manifest (every file listed) into
  // it. Only an async writer saves to such a tier.
  bool per_host = false;
};

struct SaveStats {
  uint64_t step = 0;
  std::string tier;
  std::filesystem::path dir;  // the committed checkpoint
  bool ok = false;
  std::string error;          // why not (the first failing rank's sentence)
  uint64_t bytes = 0;         // of all shard files
  double stall_seconds = 0;   // the caller's time producing the states and in save()
                              // (async: plus its wait in wait_for_snapshot(); the
                              // previous save's commit not in it)
  double write_seconds = 0;   // slowest rank's shard write, fsync included
  double total_seconds = 0;   // save() to manifest committed
  double commit_seconds = 0;  // the caller's time in the commit (this rank's; async: its
                              // wait for the writer thread's commit, normally none)
  double writer_cpu_seconds = 0;  // async: this rank's writer thread's CPU time
  double peer_wait_seconds = 0;   // of the stall and the commit: the time the save waited
                                  // in its agreements for the last rank to arrive (async:
                                  // the part of the caller's waits that the writer spent so),
                                  // the ranks' step-to-step difference, which the step's next
                                  // collective would wait for all the same
};

class CheckpointWriter {
 public:
  // Duplicates the group's communicator. Collective. spare_cpus: the background writer
  // runs on the node's cores that no rank of `group` is bound to, when there are any.
  CheckpointWriter(const Group& group, bool async, Logger& log, bool spare_cpus = true);
  // Not collective: ends this rank's background save without committing it (call flush()
  // first for that): the writer's waits in its agreements end at once (not its buddy
  // exchange's, bounded by the communicator timeout). A save its writer had committed
  // already stays, and retention is applied to it.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Collective. `meta` carries everything but the tensors, files, states and tier, which
  // the writer fills. `states` are full flat buffers of `layout`, equal on every rank;
  // async: they and `layout` must stay unchanged (and alive) until wait_for_snapshot()
  // returns. Returns false when a synchronous save failed; an async one returns true, and
  // its outcome is in stats() once poll(), the next save() or flush() records its commit.
  // `staged_seconds`: the caller's time producing `states` for this save (a ZeRO rank's
  // exchange of its shards into its writer range), charged to the save's stall.
  bool save(const CheckpointTier& tier, ckpt::Manifest meta, const ParamLayout& layout,
            std::span<const NamedState> states, double staged_seconds = 0);
  // Not collective: returns once the pending async save no longer reads the states
  // given to save() (its snapshot is taken); at once when nothing is pending. Call it
  // before changing them.
  void wait_for_snapshot();
  // Collective; call at every step boundary. Records a pending async save (in stats())
  // once every rank's writer thread has committed it; costs one 4-byte allreduce while a
  // save is pending.
  void poll();
  // Waits for the pending save's commit, and for the deletion of the checkpoints that
  // retention dropped. Collective in effect: the commit needs every rank's writer.
  void flush();
  bool pending() const { return pending_ != nullptr; }
  // The hosts and buddies of a per-host tier (null until the first save to one).
  const BuddyLink* buddy_link() const { return buddy_.get(); }
  // Where the background writer runs: the node's spare CPUs, or empty for the rank's own.
  const CpuList& writer_cpus() const { return writer_cpus_; }
  // What save `s` took from this rank's training: the caller's wait in save() and for the
  // snapshot, its commit, less the part of them spent waiting for the other ranks
  // (peer_wait_seconds), and the
  // writer thread's CPU time when the writer runs on the rank's own cores
  // (checkpoint.memory_max_stall weighs it against the step time).
  double training_cost(const SaveStats& s) const {
    return s.stall_seconds + s.commit_seconds - s.peer_wait_seconds +
           (writer_cpus_.empty() ? s.writer_cpu_seconds : 0.0);
  }

  // Every completed save (failed ones too), oldest first.
  const std::vector<SaveStats>& stats() const { return stats_; }

 private:
  struct Pending;
  void finish();
  void record(Pending& p, double commit_seconds);
  std::string start_agreement(Pending& p, const Group& group);
  SaveStats agree_and_publish(Pending& p, const Group& group);
  std::string publish(Pending& p);
  std::string publish_per_host(Pending& p, const Group& group, bool described);
  bool dir_leader(const CheckpointTier& tier) const;
  void announce_and_prune(const Pending& p, const SaveStats& s);
  void join_pruner();
  void prune(const CheckpointTier& tier) const;
  std::string reserve_snapshot(size_t need);
  std::string take_snapshot(Pending& p, char* dest);
  static void snapshot_taken(Pending& p);
  void write_in_background(Pending& p, const std::filesystem::path& file);
  void write_to_disk(Pending& p, const std::filesystem::path& file);
  void write_to_memory(Pending& p, const std::filesystem::path& file);
  void write_now(Pending& p, const ShardPlan& plan, const std::filesystem::path& file);
  bool save_now(Pending& p, const ShardPlan& plan, const std::filesystem::path& file);
  std::string prepare_directory(const CheckpointTier& tier, uint64_t step);
  ByteProgress save_progress(uint64_t step, uint64_t total) const;

  Group group_;
  // async: the writer threads' own communicator for their agreements (a second dup of the
  // group), so that they never share one with the training thread's calls
  std::unique_ptr<Group> commit_group_;
  bool async_;
  Logger& log_;
  std::unique_ptr<Pending> pending_;
  ShardPlanCache plans_;  // the last save's plan, kept while the layout and owners stay
  // async disk saves: this rank's shard contents, kept between saves (host memory of 1/N of the
  // saved state) so that the copy does not fault in fresh pages every time; aligned for
  // O_DIRECT writes. Only the writer thread of the pending save touches it.
  std::unique_ptr<char, void (*)(void*)> snapshot_{nullptr, std::free};
  size_t snapshot_capacity_ = 0;
  std::unique_ptr<BuddyLink> buddy_;  // per-host tiers: made at the first save to one
  MappingCache mappings_;  // per-host tiers: this rank's files, mapped between saves
  CpuList writer_cpus_;  // where the background writer runs (empty: the rank's cores)
  // The directory leader: deletes the checkpoints that retention dropped, beside training.
  // Started by the training thread when it records a commit; joined by the leader in the
  // next save's start agreement (on the writer thread, async), whose end tells the other
  // ranks that the tier is settled before they touch it.
  std::thread pruner_;
  std::vector<SaveStats> stats_;
};

}  // namespace etr
