// The checkpoints in a directory: listing, finding the newest, retention, rollback
// (docs/design.md, "Checkpoints"). A directory of checkpoints ("a tier") holds step-NNNNNNNNN/
// directories; one with a manifest.pb is complete (whether it verifies is a separate
// question: checkpoint/manifest.h), one without is a save that never finished. Anything
// else in the directory (".step-...partial" saves in flight, "rolled-back-..." folders)
// is not a checkpoint and never chosen.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace etr {

struct CheckpointEntry {
  std::filesystem::path dir;
  uint64_t step = 0;
  bool has_manifest = false;
};

// The step-* directories of `root`, by ascending step; empty when root does not exist.
std::vector<CheckpointEntry> list_checkpoints(const std::filesystem::path& root);

// The candidates to resume from, newest first: each path is a checkpoint directory (a
// step-* directory or one holding manifest.pb: it and the older checkpoints beside it)
// or a directory of checkpoints (all of them). Ties in step: the order of `paths`.
std::vector<std::filesystem::path> resume_candidates(
    std::span<const std::filesystem::path> paths);

// Deletes all but the newest `keep` complete checkpoints of `root`, and unfinished ones
// older than the newest complete one. Returns what it deleted. keep < 1 keeps all.
std::vector<std::filesystem::path> prune_checkpoints(const std::filesystem::path& root, int keep);

// Moves the checkpoints of `root` newer than `step` into root/rolled-back-<unix ms>/ (not
// deleted), so that the newest one left is `step`'s. Returns what it moved. Throws
// CheckpointError when `root` has no complete checkpoint at `step`.
std::vector<std::filesystem::path> roll_back(const std::filesystem::path& root, uint64_t step);

// roll_back's move without its check: the checkpoints of `root` newer than `step`
// (complete or not) go into root/rolled-back-<unix ms>/, whether or not `step` exists
// (etr-ckpt rollback of several tiers, one of which lacks the step). Returns the new paths.
std::vector<std::filesystem::path> move_aside_newer(const std::filesystem::path& root,
                                                    uint64_t step);

}  // namespace etr
