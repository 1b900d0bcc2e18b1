// etr-ckpt restore, rollback, prune: choosing which checkpoint a job resumes from by
// copying and moving whole checkpoint directories (only prune deletes anything).
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <system_error>

#include "checkpoint/catalog.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/manifest.h"
#include "checkpoint/offline.h"
#include "examples/ckpt/ckpt_commands.h"
#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr::ckpt_tool {
namespace fs = std::filesystem;
namespace {

void print_moved(const fs::path& root, const std::vector<fs::path>& moved, uint64_t step) {
  if (moved.empty()) {
    std::printf("%s: nothing newer than step %" PRIu64 " to move aside\n", root.c_str(), step);
    return;
  }
  std::printf("%s: moved %zu newer checkpoint(s) aside into %s (not deleted):\n", root.c_str(),
              moved.size(), moved.front().parent_path().c_str());
  for (const fs::path& m : moved) std::printf("  %s\n", m.c_str());
}

}  // namespace

int run_restore(const RestoreOptions& o) {
  const fs::path src(o.checkpoint), root(o.to);
  const ckpt::Manifest m = open_checkpoint(src);
  const fs::path target = root / step_dir_name(m.step());
  std::error_code ec;
  bool copy = true;
  if (fs::exists(target, ec)) {
    const std::string bad = verify_checkpoint(target);
    if (bad.empty()) {
      std::printf("%s already holds step %" PRIu64 " and it verifies; nothing to copy\n",
                  root.c_str(), m.step());
      copy = false;
    } else {
      // Not a usable checkpoint: keep it (nothing is deleted), out of the way; but only
      // once the copy is sure to have something good to replace it with.
      const std::string src_bad = verify_files(src, m);
      if (!src_bad.empty()) throw CheckpointError(src_bad);
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
      const fs::path aside = target.string() + ".replaced-" + std::to_string(ms);
      fs::rename(target, aside, ec);
      if (ec) {
        throw IoError("cannot move the unusable " + target.string() + " aside: " + ec.message());
      }
      fsync_directory(root);
      std::printf("moved the existing %s aside to %s: %s\n", target.c_str(), aside.c_str(),
                  bad.c_str());
    }
  }
  if (copy) {
    // The copy checks every file's size and checksum as it reads it: src is verified.
    copy_checkpoint(src, root);
    std::printf("verified %s and copied it to %s (%d shard files, %s)\n", src.c_str(),
                target.c_str(), m.files_size(),
                format_bytes(static_cast<double>(shard_bytes(m))).c_str());
  }
  print_moved(root, roll_back(root, m.step()), m.step());
  std::printf("a job resuming from %s now starts from step %" PRIu64 "\n", root.c_str(), m.step());
  return 0;
}

int run_rollback(const RollbackOptions& o) {
  // Every directory first, so that nothing moves unless the rollback can be done.
  std::vector<fs::path> roots;
  std::vector<std::string> missing;  // "DIR: why it has no usable step"
  for (const std::string& d : o.dirs) {
    const fs::path root(d);
    require_directory(root, "the checkpoint directory");
    const fs::path dir = root / step_dir_name(o.step);
    std::error_code ec;
    const std::string bad =
        fs::exists(dir, ec) ? verify_checkpoint(dir) : "it has no " + step_dir_name(o.step);
    if (!bad.empty()) missing.push_back(root.string() + ": " + bad);
    roots.push_back(root);
  }
  if (missing.size() == roots.size()) {
    std::string why;
    for (const std::string& m : missing) why += (why.empty() ? "" : "; ") + m;
    throw CheckpointError("no checkpoint of step " + std::to_string(o.step) +
                          " that verifies in the directories given, so nothing was moved (" + why +
                          ")");
  }
  for (const fs::path& root : roots) print_moved(root, move_aside_newer(root, o.step), o.step);
  for (const std::string& m : missing) {
    std::printf("note: no usable step %" PRIu64 " in %s\n", o.step, m.c_str());
  }
  std::printf("a job resuming from %s now starts from step %" PRIu64 "\n",
              roots.size() == 1 ? roots[0].c_str() : "these directories", o.step);
  return 0;
}

int run_prune(const PruneOptions& o) {
  const fs::path root(o.dir);
  require_directory(root, "the checkpoint directory");
  if (o.keep < 1) {
    throw ConfigError("--keep must be at least 1 (got " + std::to_string(o.keep) +
                      "); prune never deletes every checkpoint");
  }
  const auto removed = prune_checkpoints(root, o.keep);
  for (const fs::path& r : removed) std::printf("deleted %s\n", r.c_str());
  std::string kept;
  int complete = 0;
  for (const CheckpointEntry& e : list_checkpoints(root)) {
    if (!e.has_manifest) continue;
    ++complete;
    kept += (kept.empty() ? "" : ", ") + e.dir.filename().string();
  }
  std::printf("%s: deleted %zu, kept %d complete checkpoint(s)%s%s\n", root.c_str(), removed.size(),
              complete, kept.empty() ? "" : ": ", kept.c_str());
  return 0;
}

}  // namespace etr::ckpt_tool
