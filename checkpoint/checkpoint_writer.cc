#include "checkpoint/checkpoint_writer.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <system_error>

#include <time.h>

#include "checkpoint/agreement.h"
#include "checkpoint/catalog.h"
#include "checkpoint/checksum.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/shard_sink.h"
#include "checkpoint/snapshot_copy.h"
#include "checkpoint/manifest.h"
#include "checkpoint/memory_restore.h"
#include "runtime/byte_progress.h"
#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch()).count();
}

// ".step-NNNNNNNNN.partial": a save in flight (never a checkpoint name).
std::string partial_name(uint64_t step) {
  std::string name(".");
  name.append(step_dir_name(step)).append(".partial");
  return name;
}

struct ShardInfo {
  uint64_t bytes;
  uint64_t xxh3;
  double write_seconds;
};

}  // namespace

struct CheckpointWriter::Pending {
  CheckpointTier tier;
  uint64_t step = 0;
  fs::path partial, final_dir;
  ckpt::Manifest manifest;
  std::vector<std::string> file_names;  // every rank's
  // async: what the writer thread copies, and the copy (this rank's file, in snapshot_)
  std::unique_ptr<ShardPlan> plan;
  std::vector<const float*> buffers;
  std::vector<int64_t> begins;  // buffers[i][0] is flat element begins[i]
  std::span<const char> snapshot;
  uint64_t snapshot_xxh3 = 0;
  std::thread thread;
  std::atomic<bool> copied{false};  // async: the states are no longer read
  std::atomic<bool> done{false};
  std::string error;
  ShardInfo info{0, 0, 0};
  Clock::time_point t0;
  double stall = 0;  // save() and wait_for_snapshot()
  double writer_cpu = 0;  // the writer thread's CPU seconds
  double peer_wait = 0;   // save()'s first agreement (SaveStats::peer_wait_seconds)
};

CheckpointWriter::CheckpointWriter(const Group& group, bool async, Logger& log, bool spare_cpus)
    : group_(group.dup(group.name() + ".checkpoint")), async_(async), log_(log) {
  if (!async_) return;
  if (spare_cpus) writer_cpus_ = spare_node_cpus(group_);
  if (group_.rank() == 0) {
    log_.debug("checkpoint: the background writer of rank 0 runs on ",
               writer_cpus_.empty() ? "its own cores (" + format_cpus(this_thread_cpus()) + ")"
                                    : "spare CPU(s) " + format_cpus(writer_cpus_),
               spare_cpus ? "" : " (checkpoint.writer_cpus = rank)");
  }
}

CheckpointWriter::~CheckpointWriter() {
  // No collective here: a writer is also destroyed while an exception unwinds on one rank
  // only, and a commit would wait for peers that are elsewhere. A save still pending is
  // left as its .partial directory (invisible; the next save removes it).
  join_pruner();
  if (!pending_) return;
  if (pending_->thread.joinable()) pending_->thread.join();
  if (group_.rank() == 0) {
    log_.warn("checkpoint of step ", pending_->step, " was not committed (the job ended before "
              "flush()); it stays invisible in ", pending_->partial.string());
  }
}

// Rank 0: an empty TIER/.step-N.partial; stale partial directories are removed.
std::string CheckpointWriter::prepare_directory(const CheckpointTier& tier, uint64_t step) {
  std::error_code ec;
  fs::create_directories(tier.dir, ec);
  if (ec) return "cannot create the checkpoint directory " + tier.dir.string() + ": " + ec.message();
  for (const auto& item : fs::directory_iterator(tier.dir, ec)) {
    const std::string name = item.path().filename().string();
    if (name.starts_with(".step-") && name.ends_with(".partial")) fs::remove_all(item.path(), ec);
  }
  const fs::path partial = tier.dir / partial_name(step);
  fs::create_directory(partial, ec);
  if (ec) return "cannot create " + partial.string() + ": " + ec.message();
  return "";
}

bool CheckpointWriter::save(const CheckpointTier& tier, ckpt::Manifest meta,
                            const ParamLayout& layout, std::span<const NamedState> states) {
  const auto t0 = Clock::now();  // the stall includes completing the previous save
  if (pending_) commit();
  const uint64_t step = meta.step();
  if (tier.per_host && !async_) {
    throw ConfigError("the " + tier.name + " tier is per host and needs an asynchronous writer");
  }
  if (tier.per_host && !buddy_) {
    buddy_ = std::make_unique<BuddyLink>(group_);
    if (group_.rank() == 0 && buddy_->hosts() < 2) {
      log_.info("checkpoint: the ", tier.name, " tier has one host (", buddy_->host_name(0),
                "): no buddy copies on another host; a lost host falls back to disk");
    }
  }
  std::string err = dir_leader(tier) ? prepare_directory(tier, step) : "";
  const auto a0 = Clock::now();
  err = first_error(group_, err);
  const double peer_wait = seconds_since(a0);
  if (!err.empty()) {
    if (group_.rank() == 0) {
      log_.error("checkpoint of step ", step, " not saved: ", err,
                 "; the previous checkpoints are untouched");
    }
    stats_.push_back(SaveStats{step, tier.name, {}, false, err, 0, seconds_since(t0), 0, 0});
    return false;
  }
  std::vector<std::string> names;
  std::vector<const float*> buffers;
  std::vector<int64_t> begins;
  for (const NamedState& s : states) {
    names.push_back(s.name);
    buffers.push_back(s.data);
    begins.push_back(s.begin);
  }
  const ShardPlan plan(layout, group_.size(), names);
  auto p = std::make_unique<Pending>();
  p->tier = tier;
  p->step = step;
  p->partial = tier.dir / partial_name(step);
  p->final_dir = tier.dir / step_dir_name(step);
  p->manifest = std::move(meta);
  plan.describe(p->manifest);
  p->manifest.set_tier(tier.name);
  for (int r = 0; r < group_.size(); ++r) p->file_names.push_back(plan.file_name(r));
  p->t0 = t0;
  p->peer_wait = peer_wait;
  const fs::path file = p->partial / plan.file_name(group_.rank());
  Pending* raw = p.get();
  if (tier.per_host) join_pruner();  // its recycled files are what the new save writes over
  if (async_) {
    p->plan = std::make_unique<ShardPlan>(plan);
    p->buffers = std::move(buffers);
    p->begins = std::move(begins);
    p->stall = seconds_since(t0);
    p->thread = std::thread([this, raw, file] { write_in_background(*raw, file); });
    pending_ = std::move(p);
    return true;
  }
  p->begins = std::move(begins);
  write_now(*p, plan, buffers, file);
  pending_ = std::move(p);
  commit();
  stats_.back().stall_seconds = stats_.back().total_seconds;
  return stats_.back().ok;
}

// The writer thread of an async save: the snapshot, then the file (and the buddy copies).
void CheckpointWriter::write_in_background(Pending& p, const fs::path& file) {
  bind_this_thread(writer_cpus_);  // no-op without spare cores
  const auto w0 = Clock::now();
  const double cpu0 = thread_cpu_seconds();
  if (p.tier.per_host) {
    write_to_memory(p, file);
  } else {
    write_to_disk(p, file);
  }
  p.info.write_seconds = seconds_since(w0);
  p.writer_cpu = thread_cpu_seconds() - cpu0;
  p.done.store(true, std::memory_order_release);
}

void CheckpointWriter::snapshot_taken(Pending& p) {
  p.copied.store(true, std::memory_order_release);
  p.copied.notify_all();
}

// The snapshot into snapshot_, then written around the page cache: the copy into it would
// cost a shared core more CPU than the disk costs time (etr-bench ckpt).
void CheckpointWriter::write_to_disk(Pending& p, const fs::path& file) {
  std::string err = reserve_snapshot(p.plan->file_bytes(group_.rank()));
  if (err.empty()) err = take_snapshot(p, snapshot_.get());
  snapshot_taken(p);
  if (!err.empty()) {  // failed like a write: the ranks agree on it at the commit
    p.error = err;
    return;
  }
  try {
    DurableFile out(file, /*direct_io=*/true);
    ByteProgress progress = save_progress(p.step, p.snapshot.size());
    for (size_t off = 0; off < p.snapshot.size(); off += kShardStagingBytes) {
      const size_t n = std::min(kShardStagingBytes, p.snapshot.size() - off);
      out.write(p.snapshot.data() + off, n);
      progress.add(n);
    }
    progress.finish();
    out.commit();
    p.info.bytes = p.snapshot.size();
    p.info.xxh3 = p.snapshot_xxh3;
  } catch (const std::exception& e) {
    p.error = e.what();
  }
}

// The memory tier: the snapshot is copied straight into this rank's file in the tmpfs
// (mapped over a recycled file's pages, the mapping kept between saves), which then goes
// to the buddy: one pass over the state, no staging buffer, no second copy via write().
void CheckpointWriter::write_to_memory(Pending& p, const fs::path& file) {
  std::optional<DurableFile> out;
  std::span<char> mapped;
  try {
    out.emplace(file, recycled_shard(p.tier.dir, file.filename().string()));
    mapped = out->map(p.plan->file_bytes(group_.rank()), &mappings_);
  } catch (const std::exception& e) {
    p.error = e.what();
  }
  if (p.error.empty()) p.error = take_snapshot(p, mapped.data());
  snapshot_taken(p);
  if (p.error.empty()) {
    try {
      out->commit();  // the mapping stays valid for the buddy's copy
      p.info.bytes = p.snapshot.size();
      p.info.xxh3 = p.snapshot_xxh3;
    } catch (const std::exception& e) {
      p.error = e.what();
    }
  }
  std::vector<char> filler;  // the buddy waits for its copy all the same
  if (p.snapshot.size() != p.plan->file_bytes(group_.rank())) {
    filler.resize(p.plan->file_bytes(group_.rank()));
    p.snapshot = filler;
  }
  const std::string buddy_error = buddy_->exchange(p.snapshot, *p.plan, p.partial);
  if (p.error.empty()) p.error = buddy_error;
  p.snapshot = {};
}

// Lines on how far rank 0's shard write is, when it takes long (the other ranks: none).
ByteProgress CheckpointWriter::save_progress(uint64_t step, uint64_t total) const {
  return ByteProgress(group_.rank() == 0 ? &log_ : nullptr,
                      "checkpoint of step " + std::to_string(step) + ": rank 0 writing its shard",
                      total);
}

// A synchronous save: this rank's shard packed straight from the states into its file.
void CheckpointWriter::write_now(Pending& p, const ShardPlan& plan,
                                 const std::vector<const float*>& buffers, const fs::path& file) {
  const auto w0 = Clock::now();
  try {
    ShardSink sink(file);
    FiniteCheck finite(plan, group_.rank());
    ByteProgress progress = save_progress(p.step, plan.file_bytes(group_.rank()));
    plan.pack(
        group_.rank(), buffers,
        [&](const void* data, size_t size) {
          finite.add(data, size);
          sink.append(data, size);
          progress.add(size);
        },
        p.begins);
    progress.finish();
    if (!finite.error().empty()) throw CheckpointError(finite.error());
    p.info.bytes = sink.bytes();
    p.info.xxh3 = sink.commit();
  } catch (const std::exception& e) {
    p.error = e.what();
  }
  p.info.write_seconds = seconds_since(w0);
  p.done.store(true, std::memory_order_release);
}

// The buffer of disk saves' snapshots: one for every save, faulted in once (a fresh one per
// save spends most of the copy in page faults and zeroing: etr-bench ckpt, 75-89 ms
// against 13 ms for 130 MB). "" or why not.
std::string CheckpointWriter::reserve_snapshot(size_t need) {
  if (snapshot_capacity_ >= need) return "";
  constexpr size_t kAlign = DurableFile::kDirectAlignment;
  const size_t capacity = (need + kAlign - 1) / kAlign * kAlign;
  snapshot_.reset(static_cast<char*>(std::aligned_alloc(kAlign, capacity)));
  snapshot_capacity_ = snapshot_ ? capacity : 0;
  if (!snapshot_) {
    return "no host memory for the " + format_bytes(static_cast<double>(capacity)) +
           " snapshot of an asynchronous save";
  }
  std::memset(snapshot_.get(), 0, capacity);  // fault the pages in now, once
  return "";
}

// The writer thread: this rank's shard contents into `dest` (its file's size), with the
// checksum and the finiteness check on the way; "" or why not.
std::string CheckpointWriter::take_snapshot(Pending& p, char* dest) {
  size_t at = 0;
  Checksum sum;
  FiniteCheck finite(*p.plan, group_.rank());
  p.plan->pack(
      group_.rank(), p.buffers,
      [&](const void* data, size_t size) {
        copy_and_hash(dest + at, static_cast<const char*>(data), size, sum, finite);
        at += size;
      },
      p.begins);
  store_fence();
  if (!finite.error().empty()) return finite.error();
  p.snapshot = std::span<const char>(dest, at);
  p.snapshot_xxh3 = sum.digest();
  return "";
}

void CheckpointWriter::wait_for_snapshot() {
  if (!pending_ || pending_->copied.load(std::memory_order_acquire)) return;
  const auto t0 = Clock::now();
  pending_->copied.wait(false, std::memory_order_acquire);
  pending_->stall += seconds_since(t0);
}

void CheckpointWriter::poll() {
  if (!pending_) return;
  if (all_true(group_, pending_->done.load(std::memory_order_acquire))) commit();
}

void CheckpointWriter::flush() {
  if (pending_) commit();  // commit() waits for the writer thread
  join_pruner();
}

void CheckpointWriter::join_pruner() {
  if (pruner_.joinable()) pruner_.join();
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
// leader publishes it in its host's directory. The error, "" when it worked.
std::string CheckpointWriter::publish_per_host(Pending& p) {
  try {
    const std::string bytes =
        broadcast_bytes(group_, group_.rank() == 0 ? p.manifest.SerializeAsString() : "", 0);
    if (!buddy_->host_leader()) return "";
    if (group_.rank() != 0 && !p.manifest.ParseFromString(bytes)) {
      return "the manifest rank 0 sent does not parse";
    }
    return publish(p);
  } catch (const CommError&) {
    throw;  // a stopped peer: not a failed save but a failed job
  } catch (const std::exception& e) {
    return e.what();
  }
}

void CheckpointWriter::commit() {
  const auto c0 = Clock::now();
  std::unique_ptr<Pending> p = std::move(pending_);
  if (p->thread.joinable()) p->thread.join();
  SaveStats s;
  s.step = p->step;
  s.tier = p->tier.name;
  s.stall_seconds = p->stall;
  s.writer_cpu_seconds = p->writer_cpu;
  const auto a0 = Clock::now();
  std::string err = first_error(group_, p->error);
  s.peer_wait_seconds = p->peer_wait + seconds_since(a0);
  const std::vector<ShardInfo> infos = all_gather(group_, p->info);
  if (err.empty()) {
    std::string local;
    if (group_.rank() == 0) {
      for (int r = 0; r < group_.size(); ++r) {
        ckpt::ShardFile* f = p->manifest.add_files();
        f->set_name(p->file_names[static_cast<size_t>(r)]);
        f->set_bytes(infos[static_cast<size_t>(r)].bytes);
        f->set_xxh3(infos[static_cast<size_t>(r)].xxh3);
        f->set_writer_rank(r);
      }
      if (!p->tier.per_host) local = publish(*p);
    }
    if (p->tier.per_host) local = publish_per_host(*p);
    err = first_error(group_, local);
  }
  s.total_seconds = seconds_since(p->t0);
  s.commit_seconds = seconds_since(c0);
  for (const ShardInfo& i : infos) {
    s.bytes += i.bytes;
    s.write_seconds = std::max(s.write_seconds, i.write_seconds);
  }
  if (!err.empty()) {
    s.error = err;
    if (dir_leader(p->tier)) {
      std::error_code ec;
      fs::remove_all(p->partial, ec);
    }
    if (group_.rank() == 0) {
      log_.error("checkpoint of step ", p->step, " to ", p->tier.dir.string(), " failed: ", err,
                 "; the previous checkpoints are untouched");
    }
    stats_.push_back(s);
    return;
  }
  s.ok = true;
  s.dir = p->final_dir;
  if (dir_leader(p->tier)) announce_and_prune(*p, s);
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
  auto prune = [this, tier = p.tier] {
    try {
      for (const fs::path& gone : tier.per_host ? prune_memory_tier(tier.dir, tier.keep)
                                                : prune_checkpoints(tier.dir, tier.keep)) {
        log_.debug("checkpoint: deleted ", gone.string(), " (", tier.name, " keeps ", tier.keep, ")");
      }
    } catch (const std::exception& e) {
      log_.warn("checkpoint: ", e.what());
    }
  };
  try {
    pruner_ = std::thread(prune);
  } catch (const std::system_error&) {
    prune();  // no thread to be had: delete them now
  }
}

}  // namespace etr
