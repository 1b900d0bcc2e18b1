#include "checkpoint/memory_restore.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <system_error>
#include <vector>

#include "checkpoint/agreement.h"
#include "checkpoint/buddy_link.h"
#include "checkpoint/catalog.h"
#include "checkpoint/manifest.h"
#include "runtime/error.h"

namespace etr {
namespace fs = std::filesystem;
namespace {

constexpr const char* kRecycle = ".recycle";
constexpr int kMaxListed = 4;  // the tier keeps 2; a few more do no harm
constexpr int64_t kNone = std::numeric_limits<int64_t>::max();

struct Listing {
  std::array<uint64_t, kMaxListed> steps{};
  std::array<uint32_t, kMaxListed> files{};  // the manifest's shard files
  int count = 0;
};

Listing list_host(const fs::path& root) {
  Listing out;
  const std::vector<CheckpointEntry> all = list_checkpoints(root);
  for (auto it = all.rbegin(); it != all.rend() && out.count < kMaxListed; ++it) {
    if (!it->has_manifest) continue;
    try {
      const ckpt::Manifest m = read_manifest(it->dir);
      out.steps[static_cast<size_t>(out.count)] = it->step;
      out.files[static_cast<size_t>(out.count)] = static_cast<uint32_t>(m.files_size());
      ++out.count;
    } catch (const std::exception&) {
      // an unreadable manifest: this host offers nothing of that step
    }
  }
  return out;
}

std::string read_whole(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  if (!in) throw IoError("cannot read " + path.string());
  return s.str();
}

// A host leader's offer for step `dir`: per file, (buddy ? 1 : 0) * W + rank when its
// copy here is intact, else kNone; `note` says why a copy present here is not intact.
std::vector<int64_t> offer(const fs::path& dir, uint32_t files, const Group& group,
                           std::string& note) {
  std::vector<int64_t> codes(files, kNone);
  ckpt::Manifest m;
  try {
    m = read_manifest(dir);
  } catch (const std::exception&) {
    return codes;  // no manifest of that step on this host
  }
  if (static_cast<uint32_t>(m.files_size()) != files) return codes;
  std::error_code ec;
  for (int f = 0; f < m.files_size(); ++f) {
    const fs::path file = dir / m.files(f).name();
    if (!fs::exists(file, ec)) continue;
    const std::string bad = verify_files(dir, m, f, m.files_size());
    if (!bad.empty()) {
      if (note.empty()) note = bad;
      continue;
    }
    const bool buddy = fs::exists(file.string() + kBuddyMarkerSuffix, ec);
    codes[static_cast<size_t>(f)] = (buddy ? 1 : 0) * int64_t{group.size()} + group.rank();
  }
  return codes;
}

// Step 3: where this rank reads each file from (its host, or the file's holder), and the
// manifest on every rank: read here, or sent from the holder of file 0 to every rank when
// some host lacks it (checked as one read from a file).
MemoryResume sources(const fs::path& dir, uint64_t step, const std::vector<int64_t>& holder,
                     const std::vector<int64_t>& mine, const BuddyLink& hosts,
                     const Group& group) {
  const size_t files = holder.size();
  const int ranks = group.size(), me = group.rank();
  std::vector<uint8_t> held(files, 0);  // leaders: 1 where their host holds an intact copy
  for (size_t f = 0; f < files && hosts.host_leader(); ++f) held[f] = mine[f] != kNone ? 1 : 0;
  const std::vector<uint8_t> all = all_gather_bytes(group, held);
  int leader = me;  // the lowest rank of this rank's host
  for (int r = 0; r < me; ++r) {
    if (hosts.host_of(r) == hosts.host_of(me)) {
      leader = r;
      break;
    }
  }
  MemoryResume out{dir, step, "", {}, {}};
  for (size_t f = 0; f < files; ++f) {
    out.files.holder.push_back(static_cast<int>(holder[f] % ranks));
    out.files.here.push_back(all[static_cast<size_t>(leader) * files + f]);
  }
  std::optional<ckpt::Manifest> m;
  try {
    m = read_manifest(dir);
  } catch (const std::exception&) {
    // none on this host, or a damaged one: the holder's is sent
  }
  std::string error;
  if (!all_true(group, m.has_value())) {
    const int root = out.files.holder[0];
    std::string bytes;
    if (me == root) {
      try {
        bytes = read_whole(dir / "manifest.pb");
      } catch (const std::exception&) {
        // sent empty: the ranks that need it fail to parse it, in one sentence
      }
    }
    bytes = broadcast_bytes(group, bytes, root);
    if (!m) {
      try {
        m = parse_manifest(bytes, "the manifest of " + dir.string() + " sent by rank " + std::to_string(root));
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
  }
  error = first_error(group, error);
  if (!error.empty()) throw CheckpointError("cannot restore from the memory tier: " + error);
  out.manifest = std::move(*m);
  return out;
}

}  // namespace

std::optional<MemoryResume> find_memory_resumable(const fs::path& root, const Group& group,
                                                  Logger& log, std::string& why_not) {
  const BuddyLink hosts(group);
  const std::vector<Listing> lists = all_gather(group, list_host(root));
  std::vector<std::pair<uint64_t, uint32_t>> steps;  // (step, files), newest first
  for (const Listing& l : lists) {
    for (int i = 0; i < l.count; ++i) steps.emplace_back(l.steps[static_cast<size_t>(i)], l.files[static_cast<size_t>(i)]);
  }
  std::sort(steps.begin(), steps.end(), std::greater<>());
  steps.erase(std::unique(steps.begin(), steps.end(),
                          [](const auto& a, const auto& b) { return a.first == b.first; }),
              steps.end());
  why_not = "no host of this launch holds a memory checkpoint in " + root.string();
  for (const auto& [step, files] : steps) {
    const fs::path dir = root / step_dir_name(step);
    std::string note;
    const std::vector<int64_t> mine =
        hosts.host_leader() ? offer(dir, files, group, note) : std::vector<int64_t>(files, kNone);
    const std::vector<int64_t> holder = all_min(group, mine);
    note = first_error(group, note);
    const auto missing = std::find(holder.begin(), holder.end(), kNone);
    if (missing != holder.end() || holder.empty()) {
      why_not = "the hosts of this launch hold no intact copy of shard file " +
                std::to_string(missing - holder.begin()) + " of the memory checkpoint of step " +
                std::to_string(step) +
                (note.empty() ? std::string(" (its host and its buddy's copy are gone)")
                              : " (" + note + ")");
      if (group.rank() == 0) log.warn("checkpoint: ", why_not);
      continue;
    }
    if (!note.empty() && group.rank() == 0) {
      log.warn("checkpoint: a memory copy is damaged (", note, "); another host's copy is used");
    }
    MemoryResume out = sources(dir, step, holder, mine, hosts, group);
    const bool buddy = std::any_of(holder.begin(), holder.end(),
                                   [&](int64_t h) { return h >= group.size(); });
    out.tier = buddy ? "memory-buddy" : "memory-local";
    return out;
  }
  return std::nullopt;
}

void clear_memory_tier(const fs::path& root) {
  std::error_code ec;
  std::vector<fs::path> gone;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.starts_with("step-") || name.starts_with(".step-") || name == kRecycle) {
      gone.push_back(it->path());
    }
  }
  for (const fs::path& p : gone) fs::remove_all(p, ec);
}

fs::path recycled_shard(const fs::path& root, const std::string& name) {
  const fs::path bin = root / kRecycle;
  std::error_code ec;
  if (fs::exists(bin / name, ec)) return bin / name;
  // Another world size names its files otherwise (shard-00000-of-00003.bin after
  // -of-00002): any file's pages will do, the largest first (the fewest fresh pages).
  fs::path best;
  uintmax_t best_size = 0;
  for (fs::directory_iterator it(bin, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() != ".bin") continue;
    std::error_code size_ec;
    const uintmax_t size = it->file_size(size_ec);
    if (!size_ec && (best.empty() || size > best_size)) {
      best = it->path();
      best_size = size;
    }
  }
  return best.empty() ? bin / name : best;
}

std::vector<fs::path> prune_memory_tier(const fs::path& root, int keep) {
  std::vector<CheckpointEntry> complete;
  for (const CheckpointEntry& e : list_checkpoints(root)) {
    if (e.has_manifest) complete.push_back(e);
  }
  if (keep > 0 && complete.size() > static_cast<size_t>(keep)) {
    const fs::path newest_dropped = complete[complete.size() - static_cast<size_t>(keep) - 1].dir;
    const fs::path bin = root / kRecycle;
    std::error_code ec;
    fs::remove_all(bin, ec);
    fs::create_directory(bin, ec);
    for (fs::directory_iterator it(newest_dropped, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".bin") {
        std::error_code moved;
        fs::rename(it->path(), bin / it->path().filename(), moved);
      }
    }
  }
  return prune_checkpoints(root, keep);
}

}  // namespace etr
