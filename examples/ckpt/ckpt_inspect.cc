// etr-ckpt list, show, verify: reading checkpoints, never changing them.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <system_error>

#include "checkpoint/catalog.h"
#include "checkpoint/checksum.h"
#include "checkpoint/extent_runs.h"
#include "checkpoint/manifest.h"
#include "examples/ckpt/ckpt_commands.h"
#include "runtime/bytes.h"
#include "runtime/config/train_config.h"
#include "runtime/error.h"

namespace etr::ckpt_tool {
namespace fs = std::filesystem;

void require_directory(const fs::path& path, const std::string& what) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw IoError(what + " " + path.string() + " does not exist");
  }
  if (!fs::is_directory(path, ec)) {
    throw IoError(what + " " + path.string() + " is not a directory");
  }
}

ckpt::Manifest open_checkpoint(const fs::path& path) {
  require_directory(path, "the checkpoint");
  std::error_code ec;
  if (!fs::exists(path / ckpt_format::kManifestName, ec) && !list_checkpoints(path).empty()) {
    throw CheckpointError(path.string() +
                          " is a directory of checkpoints, not a checkpoint; "
                          "name one of its step-* directories (etr-ckpt list " +
                          path.string() + " shows them)");
  }
  return read_manifest(path);
}

std::string verify_checkpoint(const fs::path& dir) {
  try {
    return verify_files(dir, read_manifest(dir));
  } catch (const Error& e) {
    return e.what();
  }
}

std::string describe_layout(const ckpt::Layout& l) {
  return "world " + std::to_string(l.world_size()) + " (dp " + std::to_string(l.dp_size()) +
         ", pp " + std::to_string(l.pp_size()) + ", zero " + std::to_string(l.zero_stage()) + ")";
}

namespace {

// Bytes of the regular files in `dir` (not recursive).
uint64_t bytes_on_disk(const fs::path& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(dir, ec)) {
    if (item.is_regular_file(ec)) total += item.file_size(ec);
  }
  return total;
}

// verify_files without the checksums: every file there, with its recorded size.
std::string check_sizes(const fs::path& dir, const ckpt::Manifest& m) {
  for (const auto& f : m.files()) {
    std::error_code ec;
    const uint64_t size = fs::file_size(dir / f.name(), ec);
    if (ec) return "shard file " + (dir / f.name()).string() + " is missing";
    if (size != f.bytes()) {
      return "shard file " + (dir / f.name()).string() + " has " + std::to_string(size) +
             " bytes where the manifest records " + std::to_string(f.bytes());
    }
  }
  return "";
}

struct Row {
  CheckpointEntry entry;
  std::string tier = "-";
  std::string world = "-";
  uint64_t bytes = 0;
  bool usable = false;  // a resuming job may take it
  std::string status;   // "complete", "corrupt: ...", "incomplete ..."
};

Row inspect(const CheckpointEntry& e, bool quick) {
  Row row;
  row.entry = e;
  row.bytes = bytes_on_disk(e.dir);
  if (!e.has_manifest) {
    row.status = "incomplete (no manifest.pb: the save did not finish)";
    return row;
  }
  try {
    const ckpt::Manifest m = read_manifest(e.dir);
    row.tier = m.tier().empty() ? "-" : m.tier();
    row.world = std::to_string(m.layout().world_size());
    const std::string bad = quick ? check_sizes(e.dir, m) : verify_files(e.dir, m);
    row.usable = bad.empty();
    row.status = !bad.empty() ? "corrupt: " + bad : quick ? "complete (not verified)" : "complete";
  } catch (const Error& err) {
    row.status = std::string("corrupt: ") + err.what();
  }
  return row;
}

// Entries of `root` that are neither checkpoints nor files: what a rollback or an
// unfinished save left.
std::vector<std::string> other_entries(const fs::path& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(root, ec)) {
    const std::string name = item.path().filename().string();
    if (parse_step_dir_name(name)) continue;
    if (name.starts_with("rolled-back-")) {
      out.push_back(name + "/ (moved aside by a rollback)");
    } else if (name.starts_with(".step-") && name.ends_with(".partial")) {
      out.push_back(name + "/ (a save in progress, or one that was interrupted)");
    } else if (name.find(".replaced-") != std::string::npos) {
      out.push_back(name + "/ (replaced by a newer save of the same step)");
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string format_time_ms(int64_t unix_ms) {
  if (unix_ms <= 0) return "unknown";
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string shape_text(const ckpt::TensorRecord& t) {
  std::string s = "[";
  for (int d = 0; d < t.shape_size(); ++d) s += (d ? ", " : "") + std::to_string(t.shape(d));
  return s + "]";
}

uint32_t format_version(const fs::path& dir) {
  std::ifstream in(dir / ckpt_format::kManifestName, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  ckpt::ManifestFile envelope;
  return envelope.ParseFromString(bytes) ? envelope.format_version() : 0;
}

}  // namespace

int run_list(const ListOptions& o) {
  std::vector<fs::path> roots;
  for (const std::string& d : o.dirs) {
    const fs::path root(d);
    require_directory(root, "the checkpoint directory");
    std::error_code ec;
    if (fs::exists(root / ckpt_format::kManifestName, ec)) {
      throw CheckpointError(root.string() +
                            " is a checkpoint, not a directory of checkpoints; "
                            "list its parent, or use etr-ckpt show or verify on it");
    }
    roots.push_back(root);
  }
  std::map<fs::path, Row> rows;
  for (const fs::path& root : roots) {
    for (const CheckpointEntry& e : list_checkpoints(root)) rows[e.dir] = inspect(e, o.quick);
  }
  // The checkpoint etr-train --resume would take: the newest candidate that verifies.
  fs::path resume;
  for (const fs::path& c : resume_candidates(roots)) {
    auto it = rows.find(c);
    if (it != rows.end() && it->second.usable) {
      resume = c;
      break;
    }
  }
  for (const fs::path& root : roots) {
    const auto entries = list_checkpoints(root);
    std::printf("%s: %zu checkpoint(s)\n", root.c_str(), entries.size());
    if (!entries.empty()) {
      std::printf("  %9s  %-8s  %5s  %10s  %s\n", "STEP", "TIER", "WORLD", "SIZE", "STATUS");
    }
    for (const CheckpointEntry& e : entries) {
      const Row& r = rows.at(e.dir);
      std::string status = r.status;
      if (e.dir == resume) status += "  <- resume";
      std::printf("  %9" PRIu64 "  %-8s  %5s  %10s  %s\n", e.step, r.tier.c_str(), r.world.c_str(),
                  format_bytes(static_cast<double>(r.bytes)).c_str(), status.c_str());
    }
    for (const std::string& other : other_entries(root)) {
      std::printf("  also here: %s\n", other.c_str());
    }
  }
  const char* from = o.dirs.size() == 1 ? o.dirs[0].c_str() : "these directories";
  if (resume.empty()) {
    std::printf("no checkpoint in %s to resume from\n", from);
  } else if (o.quick) {
    std::printf(
        "a job resuming from %s would take %s if its checksums match (--quick did "
        "not check them)\n",
        from, resume.c_str());
  } else {
    std::printf("a job resuming from %s takes %s\n", from, resume.c_str());
  }
  return 0;
}

int run_show(const std::string& checkpoint) {
  const fs::path dir(checkpoint);
  const ckpt::Manifest m = open_checkpoint(dir);
  std::printf("checkpoint %s\n", dir.c_str());
  std::printf("  format version  %u\n", format_version(dir));
  std::printf("  step            %" PRIu64 "\n", m.step());
  std::printf("  data            %" PRIu64 " samples, %" PRIu64 " tokens seen; seed %" PRIu64 "\n",
              m.data().samples_seen(), m.data().tokens_seen(), m.data().seed());
  for (const auto& rng : m.rng()) {
    std::printf("  rng             %s: %s\n", rng.name().c_str(), rng.state().c_str());
  }
  std::printf("  schedule        next step %" PRIu64 ", next lr %.6g\n", m.schedule().step(),
              m.schedule().next_lr());
  std::printf("  batch           global %" PRId64 ", micro %" PRId64 "\n", m.batch().global_batch(),
              m.batch().micro_batch());
  std::printf("  layout          %s\n", describe_layout(m.layout()).c_str());
  std::printf("  tier            %s\n", m.tier().empty() ? "-" : m.tier().c_str());
  std::printf("  created         %s (unix ms %" PRId64 ")\n",
              format_time_ms(m.created_unix_ms()).c_str(), m.created_unix_ms());
  std::printf("  writer          %s\n", m.writer().empty() ? "-" : m.writer().c_str());
  std::string states;
  for (const auto& s : m.states()) states += (states.empty() ? "" : ", ") + s;
  std::printf("  states          %s\n", states.c_str());
  for (const auto& a : m.attachments()) {  // etr-train: the tokenizer's model
    std::printf("  attachment      %s (%zu bytes, in the manifest)\n", a.name().c_str(),
                a.data().size());
  }

  std::printf("files (%d, %s):\n", m.files_size(),
              format_bytes(static_cast<double>(shard_bytes(m))).c_str());
  for (const auto& f : m.files()) {
    std::printf("  %-28s %12" PRIu64 " bytes  xxh3 %s  rank %d\n", f.name().c_str(), f.bytes(),
                format_checksum(f.xxh3()).c_str(), f.writer_rank());
  }

  size_t width = 4;
  for (const auto& t : m.tensors()) width = std::max(width, t.name().size());
  std::printf("tensors (%d records):\n", m.tensors_size());
  std::printf("  %-*s  %-7s  %-5s  %-18s  %7s  %s\n", static_cast<int>(width), "NAME", "STATE",
              "DTYPE", "SHAPE", "EXTENTS", "RUNS");
  for (const auto& t : m.tensors()) {
    std::printf("  %-*s  %-7s  %-5s  %-18s  %7" PRIu64 "  %d\n", static_cast<int>(width),
                t.name().c_str(), t.state().c_str(), t.dtype().c_str(), shape_text(t).c_str(),
                extent_count(t), t.runs_size());
  }

  std::printf("config:\n");
  std::istringstream config(format_config(m.config()));
  for (std::string line; std::getline(config, line);) std::printf("  %s\n", line.c_str());
  return 0;
}

int run_verify(const std::string& checkpoint) {
  const fs::path dir(checkpoint);
  const ckpt::Manifest m = open_checkpoint(dir);
  const std::string bad = verify_files(dir, m);
  if (!bad.empty()) throw CheckpointError(bad);
  const uint64_t bytes = shard_bytes(m);
  std::printf("OK: step %" PRIu64 ", %d files, %" PRIu64 " bytes verified (%s)\n", m.step(),
              m.files_size(), bytes, format_bytes(static_cast<double>(bytes)).c_str());
  return 0;
}

}  // namespace etr::ckpt_tool
