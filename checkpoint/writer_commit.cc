// CheckpointWriter's agreements and commit (checkpoint_writer.h, steps 1 and 3 of a save):
// the directory made and agreed on, the outcome agreed on, the manifest written and the
// directory renamed, what retention drops deleted beside training. On the training thread
// for a synchronous save; on the writer thread, with commit_group_, for an asynchronous one.
#include <algorithm>
#include <chrono>
#include <system_error>

#include "checkpoint/agreement.h"
#include "checkpoint/buddy_link.h"
#include "checkpoint/catalog.h"
#include "checkpoint/manifest.h"
#include "checkpoint/memory_restore.h"
#include "checkpoint/writer_pending.h"
#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/peer_wait.h"

namespace etr {
namespace fs = std::filesystem;
using writer_detail::Clock;
using writer_detail::seconds_since;
using writer_detail::ShardInfo;

namespace writer_detail {

std::string partial_name(uint64_t step) {
  std::string name(".");
  name.append(step_dir_name(step)).append(".partial");
  return name;
}

}  // namespace writer_detail

namespace {

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

// Rank 0: an empty TIER/.step-N.partial; stale partial directories are removed.
std::string CheckpointWriter::prepare_directory(const CheckpointTier& tier, uint64_t step) {
  std::error_code ec;
  fs::create_directories(tier.dir, ec);
  if (ec) return "cannot create the checkpoint directory " + tier.dir.string() + ": " + ec.message();
  for (const auto& item : fs::directory_iterator(tier.dir, ec)) {
    const std::string name = item.path().filename().string();
    if (name.starts_with(".step-") && name.ends_with(".partial")) fs::remove_all(item.path(), ec);
  }
  const fs::path partial = tier.dir / writer_detail::partial_name(step);
  fs::create_directory(partial, ec);
  if (ec) return "cannot create " + partial.string() + ": " + ec.message();
  return "";
}

// Collective over `group`: the directory leader makes the save's partial directory, and
// the ranks agree that it exists (every rank writes into it next). Its error, "" if none.
// The directory leader first waits for its pruner (the last commit's retention): the
// agreement then tells every rank of the host that the tier's recycled files are settled.
std::string CheckpointWriter::start_agreement(Pending& p, const Group& group) {
  join_pruner();
  std::string err = dir_leader(p.tier) ? prepare_directory(p.tier, p.step) : "";
  p.start_wait.begin = Clock::now();
  err = first_error(group, err);
  p.start_wait.end = Clock::now();
  p.peer_wait += std::chrono::duration<double>(p.start_wait.end - p.start_wait.begin).count();
  if (!err.empty() && group.rank() == 0) {
    log_.error("checkpoint of step ", p.step, " not saved: ", err,
               "; the previous checkpoints are untouched");
  }
  p.start_error = err;
  return err;
}

// Rank 0, every shard durable: the manifest (with each file's size and checksum), then
// the rename that makes the checkpoint visible. Returns the error, "" when it worked.
std::string CheckpointWriter::publish(Pending& p) {
  try {
    join_pruner();  // the tier's directory changes only here, and one deletion at a time
    p.manifest.set_created_unix_ms(unix_ms());
    write_manifest(p.partial, p.manifest);
    std::error_code ec;
    if (fs::exists(p.final_dir, ec)) {
      const fs::path aside = p.final_dir.string() + ".replaced-" + std::to_string(unix_ms());
      fs::rename(p.final_dir, aside, ec);
      if (ec) {
        throw IoError("cannot move the existing " + p.final_dir.string() + " aside: " + ec.message());
      }
      log_.warn("checkpoint: ", p.final_dir.string(), " existed; moved it to ", aside.string());
    }
    fs::rename(p.partial, p.final_dir, ec);
    if (ec) {
      throw IoError("cannot rename " + p.partial.string() + " to " + p.final_dir.string() + ": " +
                    ec.message());
    }
    fsync_directory(p.tier.dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Who makes and commits a tier's directories: rank 0, or each host's leader (per host).
bool CheckpointWriter::dir_leader(const CheckpointTier& tier) const {
  return tier.per_host ? buddy_->host_leader() : group_.rank() == 0;
}

// A per-host tier: rank 0's manifest (with every file) to every rank, and each host's
// leader publishes it in its host's directory. `described`: rank 0 completed the manifest
// (else it sends nothing, and no host publishes). The error, "" when it worked.
std::string CheckpointWriter::publish_per_host(Pending& p, const Group& group, bool described) {
  try {
    const std::string bytes = broadcast_bytes(
        group, group.rank() == 0 && described ? p.manifest.SerializeAsString() : "", 0);
    if (bytes.empty()) return "rank 0 could not complete the manifest";
    if (!buddy_->host_leader()) return "";
    if (group.rank() != 0 && !p.manifest.ParseFromString(bytes)) {
      return "the manifest rank 0 sent does not parse";
    }
    return publish(p);
  } catch (const CommError&) {
    throw;  // a stopped peer: not a failed save but a failed job
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Collective over `group`, every shard written (or failed): the ranks agree on the
// outcome, rank 0 gathers the files' sizes and checksums into the manifest, and the
// directory leader(s) publish it; on a failure the partial directory goes.
SaveStats CheckpointWriter::agree_and_publish(Pending& p, const Group& group) {
  SaveStats s;
  s.step = p.step;
  s.tier = p.tier.name;
  p.commit_wait.begin = Clock::now();
  std::string err = first_error(group, p.error);
  p.commit_wait.end = Clock::now();
  p.peer_wait += std::chrono::duration<double>(p.commit_wait.end - p.commit_wait.begin).count();
  const std::vector<ShardInfo> infos = all_gather(group, p.info);
  // Rank 0's manifest: the tensors' extents (described here, off the training thread of
  // an async save) and every rank's file. A failure (memory) is an agreed one, not a hang.
  const auto complete = [&]() -> std::string {
    try {
      p.plan->describe(p.manifest);
      for (int r = 0; r < group.size(); ++r) {
        ckpt::ShardFile* f = p.manifest.add_files();
        f->set_name(p.plan->file_name(r));
        f->set_bytes(infos[static_cast<size_t>(r)].bytes);
        f->set_xxh3(infos[static_cast<size_t>(r)].xxh3);
        f->set_writer_rank(r);
      }
      return "";
    } catch (const std::exception& e) {
      return std::string("cannot complete the manifest: ") + e.what();
    }
  };
  if (err.empty()) {
    std::string local;
    if (group.rank() == 0) {
      local = complete();
      if (local.empty() && !p.tier.per_host) local = publish(p);
    }
    if (p.tier.per_host) {
      const std::string shared = publish_per_host(p, group, local.empty());
      if (local.empty()) local = shared;
    }
    err = first_error(group, local);
  }
  s.total_seconds = seconds_since(p.t0);
  for (const ShardInfo& i : infos) {
    s.bytes += i.bytes;
    s.write_seconds = std::max(s.write_seconds, i.write_seconds);
  }
  if (err.empty()) {
    s.ok = true;
    s.dir = p.final_dir;
    return s;
  }
  s.error = err;
  if (dir_leader(p.tier)) {
    std::error_code ec;
    fs::remove_all(p.partial, ec);
  }
  if (group.rank() == 0 && err != p.start_error) {  // start_agreement said so already
    log_.error("checkpoint of step ", p.step, " to ", p.tier.dir.string(), " failed: ", err,
               "; the previous checkpoints are untouched");
  }
  return s;
}

// The training thread, the pending async save's commit ended on every rank (poll()) or
// to be waited for (save(), flush()): its outcome into stats().
void CheckpointWriter::finish() {
  writer_detail::Interval waited{Clock::now(), {}};
  std::unique_ptr<Pending> p = std::move(pending_);
  if (p->thread.joinable()) {
    const PeerWaitScope on_peers;  // the writer's commit waits on the other ranks
    p->thread.join();
  }
  if (p->failure) std::rethrow_exception(p->failure);
  waited.end = Clock::now();
  p->caller_peer_wait += waited.overlap_seconds(p->start_wait) + waited.overlap_seconds(p->commit_wait);
  record(*p, std::chrono::duration<double>(waited.end - waited.begin).count());
}

// A save's outcome into stats(), with the caller's share of its time; a committed one
// announced, and what retention drops deleted.
void CheckpointWriter::record(Pending& p, double commit_seconds) {
  SaveStats s = p.result;
  s.stall_seconds = p.stall;
  s.commit_seconds = commit_seconds;
  s.writer_cpu_seconds = p.writer_cpu;
  // async: of the caller's own waits, the part the writer spent waiting for the others
  s.peer_wait_seconds = async_ ? p.caller_peer_wait : p.peer_wait;
  if (s.ok && dir_leader(p.tier)) announce_and_prune(p, s);
  stats_.push_back(s);
}

// Rank 0, a checkpoint committed: says so, and deletes what retention drops beside
// training (ext4: ~20 ms for 130 MB, almost no CPU); the next commit or flush() waits.
void CheckpointWriter::announce_and_prune(const Pending& p, const SaveStats& s) {
  char timing[160];
  std::snprintf(timing, sizeof timing, "written in %.3f s (%s/s), step stall %.1f ms",
                s.write_seconds,
                format_bytes(static_cast<double>(s.bytes) / std::max(s.write_seconds, 1e-9)).c_str(),
                s.stall_seconds * 1e3);
  if (group_.rank() == 0) {
    log_.info("checkpoint ", p.final_dir.string(), " (", p.tier.name, ") saved: ", group_.size(),
              " shard file(s), ", format_bytes(static_cast<double>(s.bytes)), ", ", timing);
  }
  join_pruner();  // done in publish() already; assigning a running thread would terminate
  try {
    pruner_ = std::thread([this, tier = p.tier] { prune(tier); });
  } catch (const std::system_error&) {
    prune(p.tier);  // no thread to be had: delete them now
  }
}

// The directory leader: deletes all but the tier's newest `keep` checkpoints (the memory
// tier's shard files into its recycle bin). Never throws: a failure is a warning.
void CheckpointWriter::prune(const CheckpointTier& tier) const {
  try {
    for (const fs::path& gone : tier.per_host ? prune_memory_tier(tier.dir, tier.keep)
                                              : prune_checkpoints(tier.dir, tier.keep)) {
      log_.debug("checkpoint: deleted ", gone.string(), " (", tier.name, " keeps ", tier.keep, ")");
    }
  } catch (const std::exception& e) {
    log_.warn("checkpoint: ", e.what());
  }
}

void CheckpointWriter::join_pruner() {
  if (pruner_.joinable()) pruner_.join();
}

}  // namespace etr
