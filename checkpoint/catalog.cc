#include "checkpoint/catalog.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <system_error>

#include "checkpoint/durable_file.h"
#include "checkpoint/manifest.h"
#include "runtime/error.h"

namespace etr {
namespace fs = std::filesystem;

std::vector<CheckpointEntry> list_checkpoints(const fs::path& root) {
  std::vector<CheckpointEntry> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& item : fs::directory_iterator(root, ec)) {
    const auto step = parse_step_dir_name(item.path().filename().string());
    if (!step || !item.is_directory(ec)) continue;
    out.push_back(CheckpointEntry{item.path(), *step,
                                  fs::is_regular_file(item.path() / ckpt_format::kManifestName, ec)});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.step < b.step; });
  return out;
}

std::vector<fs::path> resume_candidates(std::span<const fs::path> paths) {
  struct Candidate {
    uint64_t step;
    size_t order;
    fs::path dir;
  };
  std::vector<Candidate> all;
  std::error_code ec;
  for (size_t i = 0; i < paths.size(); ++i) {
    // "ck/step-000000004/" (as a shell completes it) names the same checkpoint.
    fs::path p = paths[i].lexically_normal();
    if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
    const auto own_step = parse_step_dir_name(p.filename().string());
    const bool is_checkpoint = own_step || fs::is_regular_file(p / ckpt_format::kManifestName, ec);
    if (is_checkpoint) {
      // This one first, then the older ones beside it (the fallbacks).
      const uint64_t limit = own_step ? *own_step : UINT64_MAX;
      all.push_back(Candidate{UINT64_MAX, i, p});
      for (const auto& e : list_checkpoints(p.parent_path())) {
        if (e.step < limit && e.dir != p) all.push_back(Candidate{e.step, i, e.dir});
      }
    } else {
      for (const auto& e : list_checkpoints(p)) all.push_back(Candidate{e.step, i, e.dir});
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return a.step != b.step ? a.step > b.step : a.order < b.order;
  });
  std::vector<fs::path> out;
  for (auto& c : all) {
    if (std::find(out.begin(), out.end(), c.dir) == out.end()) out.push_back(std::move(c.dir));
  }
  return out;
}

std::vector<fs::path> prune_checkpoints(const fs::path& root, int keep) {
  std::vector<fs::path> removed;
  if (keep < 1) return removed;
  const auto all = list_checkpoints(root);
  int complete_seen = 0;
  bool any_complete_newer = false;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    bool drop = false;
    if (it->has_manifest) {
      drop = ++complete_seen > keep;
      any_complete_newer = true;
    } else {
      drop = any_complete_newer;  // an unfinished save older than a complete one
    }
    if (!drop) continue;
    std::error_code ec;
    fs::remove_all(it->dir, ec);
    if (ec) {
      throw IoError("cannot delete the old checkpoint " + it->dir.string() + ": " + ec.message());
    }
    removed.push_back(it->dir);
  }
  return removed;
}

std::vector<fs::path> roll_back(const fs::path& root, uint64_t step) {
  const auto all = list_checkpoints(root);
  const bool found = std::any_of(all.begin(), all.end(), [&](const CheckpointEntry& e) {
    return e.step == step && e.has_manifest;
  });
  if (!found) {
    throw CheckpointError(root.string() + " has no complete checkpoint at step " +
                          std::to_string(step) + " to roll back to");
  }
  return move_aside_newer(root, step);
}

std::vector<fs::path> move_aside_newer(const fs::path& root, uint64_t step) {
  const auto all = list_checkpoints(root);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  // A fresh folder even when another rollback ran in the same millisecond.
  fs::path aside = root / ("rolled-back-" + std::to_string(ms));
  std::error_code ec;
  for (int i = 2; fs::exists(aside, ec); ++i) {
    aside = root / ("rolled-back-" + std::to_string(ms) + "-" + std::to_string(i));
  }
  std::vector<fs::path> moved;
  for (const auto& e : all) {
    if (e.step <= step) continue;
    fs::create_directories(aside, ec);
    fs::rename(e.dir, aside / e.dir.filename(), ec);
    if (ec) {
      throw IoError("cannot move " + e.dir.string() + " aside into " + aside.string() + ": " +
                    ec.message());
    }
    moved.push_back(aside / e.dir.filename());
  }
  if (!moved.empty()) {  // the renames survive a crash
    fsync_directory(aside);
    fsync_directory(root);
  }
  return moved;
}

}  // namespace etr
