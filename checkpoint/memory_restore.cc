#include "checkpoint/memory_restore.h"

#include <algorithm>
#include <array>
#include <deque>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>
#include <vector>

#include "checkpoint/agreement.h"
#include "checkpoint/buddy_link.h"
#include "checkpoint/catalog.h"
#include "checkpoint/checksum.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/manifest.h"
#include "runtime/error.h"
#include "runtime/mpi_wait.h"

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

// The files some host leader lacks, in `lacks` ([rank][file]: 1 when that rank lacks it),
// from their holders to those leaders only, all at once; each checked against the
// manifest before it is written. This rank's error, "" when none.
std::string fetch_lacking(const fs::path& dir, const ckpt::Manifest& m,
                          const std::vector<int64_t>& holder, const std::vector<uint8_t>& lacks,
                          bool leader, const Group& group) {
  const size_t files = holder.size();
  const int me = group.rank(), ranks = group.size();
  auto lacking = [&](int r, size_t f) { return lacks[static_cast<size_t>(r) * files + f] != 0; };
  auto wanted = [&](size_t f) {
    for (int r = 0; r < ranks; ++r) {
      if (lacking(r, f)) return true;
    }
    return false;
  };
  auto root_of = [&](size_t f) { return static_cast<int>(holder[f] % ranks); };
  struct Buffers {
    std::deque<std::string> out, in;  // a deque: its strings stay where they are
    std::vector<MPI_Request> requests;
  };
  auto b = std::make_shared<Buffers>();
  std::string error;  // a holder reads what it sends first: a failed read sends nothing
  for (size_t f = 0; f < files && error.empty(); ++f) {
    if (root_of(f) != me || !wanted(f)) continue;
    try {
      b->out.push_back(read_whole(dir / m.files(static_cast<int>(f)).name()));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  error = first_error(group, error);
  if (!error.empty()) return error;
  std::vector<size_t> received;  // the files in b->in, in order
  for (size_t f = 0, sent = 0; f < files; ++f) {
    if (!wanted(f)) continue;
    if (root_of(f) == me) {
      std::string& bytes = b->out[sent++];
      for (int r = 0; r < ranks; ++r) {
        if (lacking(r, f)) post_pieces(b->requests, bytes.data(), bytes.size(), r, group.comm(), true);
      }
    }
    if (!lacking(me, f)) continue;
    b->in.emplace_back(m.files(static_cast<int>(f)).bytes(), '\0');
    received.push_back(f);
    post_pieces(b->requests, b->in.back().data(), b->in.back().size(), root_of(f), group.comm(), false);
  }
  try {
    for (MPI_Request& r : b->requests) wait_with_timeout(r, "the memory checkpoint's files between hosts");
  } catch (const CommError&) {
    static_cast<void>(new std::shared_ptr<Buffers>(b));  // still active: leaked on purpose
    throw;
  }
  for (size_t i = 0; i < received.size() && leader; ++i) {
    const ckpt::ShardFile& want = m.files(static_cast<int>(received[i]));
    const std::string& bytes = b->in[i];
    try {
      if (Checksum::of(bytes.data(), bytes.size()) != want.xxh3()) {
        throw CheckpointError("the copy of " + want.name() + " sent by rank " +
                              std::to_string(root_of(received[i])) + " does not match its checksum");
      }
      const fs::path at = dir / want.name();
      write_file_durably(at, bytes.data(), bytes.size());
      write_file_durably(at.string() + kBuddyMarkerSuffix, nullptr, 0);
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
  }
  return error;
}

// Step 3: every file some host lacks, and the manifest, from a holder.
void put_together(const fs::path& dir, const std::vector<int64_t>& holder,
                  const std::vector<int64_t>& mine, bool leader, const Group& group) {
  const size_t files = holder.size();
  std::vector<uint8_t> lacks(files, 0);  // leaders: 1 where their host lacks it
  bool has_manifest = true;
  ckpt::Manifest m;
  if (leader) {
    for (size_t f = 0; f < files; ++f) lacks[f] = mine[f] == kNone ? 1 : 0;
    try {
      m = read_manifest(dir);
    } catch (const std::exception&) {
      has_manifest = false;  // none here, or a damaged one: replaced by the holder's
    }
  }
  const int manifest_root = static_cast<int>(holder[0] % group.size());
  std::string manifest_bytes, error;
  if (!all_true(group, has_manifest)) {
    manifest_bytes = broadcast_bytes(
        group, group.rank() == manifest_root ? read_whole(dir / "manifest.pb") : "", manifest_root);
  }
  if (leader && !has_manifest) {
    ckpt::ManifestFile envelope;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) error = "cannot create " + dir.string() + ": " + ec.message();
    if (!envelope.ParseFromString(manifest_bytes) || !m.ParseFromString(envelope.manifest())) {
      error = "the manifest sent by rank " + std::to_string(manifest_root) + " does not parse";
    }
  }
  error = first_error(group, error);
  if (error.empty()) {
    error = fetch_lacking(dir, m, holder, all_gather_bytes(group, lacks), leader, group);
  }
  if (leader && !has_manifest && error.empty()) {
    try {
      write_file_durably(dir / "manifest.pb", manifest_bytes.data(), manifest_bytes.size());
      fsync_directory(dir.parent_path());
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  error = first_error(group, error);
  if (!error.empty()) throw CheckpointError("cannot put the memory checkpoint together: " + error);
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
    put_together(dir, holder, mine, hosts.host_leader(), group);
    const bool buddy = std::any_of(holder.begin(), holder.end(),
                                   [&](int64_t h) { return h >= group.size(); });
    return MemoryResume{dir, step, buddy ? "memory-buddy" : "memory-local"};
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
  return root / kRecycle / name;
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
