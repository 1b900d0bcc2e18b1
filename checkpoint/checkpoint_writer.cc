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
#include "checkpoint/writer_pending.h"
#include "checkpoint/manifest.h"
#include "checkpoint/memory_restore.h"
#include "runtime/byte_progress.h"
#include "runtime/bytes.h"
#include "runtime/error.h"
#include "runtime/mpi_wait.h"
#include "runtime/peer_wait.h"

namespace etr {
namespace fs = std::filesystem;
using writer_detail::Clock;
using writer_detail::seconds_since;
namespace {

double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

CheckpointWriter::CheckpointWriter(const Group& group, bool async, Logger& log, bool spare_cpus)
    : group_(group.dup(group.name() + ".checkpoint")), async_(async), log_(log) {
  if (!async_) return;
  commit_group_ = std::make_unique<Group>(group_.dup(group.name() + ".checkpoint-commit"));
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
  // left as its .partial directory (invisible; the next save removes it), or committed
  // when its writer thread got that far (whose publish may join the pruner: first); then
  // retention applies to it here, so that a relaunch finds no more copies than `keep`.
  if (pending_) {
    pending_->abandon.store(true, std::memory_order_relaxed);
    if (pending_->thread.joinable()) pending_->thread.join();
  }
  join_pruner();
  if (!pending_) return;
  if (pending_->result.ok) {
    if (dir_leader(pending_->tier)) prune(pending_->tier);
    return;
  }
  if (group_.rank() == 0) {
    log_.warn("checkpoint of step ", pending_->step, " may not have been committed (the job "
              "ended before flush()); if not, it stays invisible in ", pending_->partial.string());
  }
}

bool CheckpointWriter::save(const CheckpointTier& tier, ckpt::Manifest meta,
                            const ParamLayout& layout, std::span<const NamedState> states,
                            double staged_seconds) {
  if (pending_) finish();
  const auto t0 = Clock::now();
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
  std::vector<std::string> names;
  std::vector<std::vector<StatePiece>> sources;
  for (const NamedState& s : states) {
    names.push_back(s.name);
    sources.push_back(pieces_of(s, layout.numel()));
    if (s.owners != states.front().owners) {
      throw InvalidArgument("the states of a checkpoint follow different owners");
    }
  }
  auto p = std::make_unique<Pending>();
  p->plan = plans_.get(layout, group_.size(), names,
                       states.empty() ? nullptr : states.front().owners);
  const ShardPlan& plan = *p->plan;
  p->tier = tier;
  p->step = meta.step();
  p->partial = tier.dir / writer_detail::partial_name(p->step);
  p->final_dir = tier.dir / step_dir_name(p->step);
  // The tensor records come at the commit, on rank 0 alone (agree_and_publish): on the
  // writer thread of an async save, not in this stall.
  p->manifest = std::move(meta);
  p->manifest.set_tier(tier.name);
  p->t0 = t0;
  const fs::path file = p->partial / plan.file_name(group_.rank());
  p->staged = staged_seconds;
  p->sources = std::move(sources);
  if (!async_) return save_now(*p, plan, file);
  Pending* raw = p.get();
  p->thread = std::thread([this, raw, file] { write_in_background(*raw, file); });
  pending_ = std::move(p);
  pending_->stall = seconds_since(t0) + staged_seconds;
  return true;
}

// A synchronous save, all of it on the caller's thread.
bool CheckpointWriter::save_now(Pending& p, const ShardPlan& plan, const fs::path& file) {
  p.error = start_agreement(p, group_);
  if (p.error.empty()) write_now(p, plan, file);
  const auto c0 = Clock::now();
  p.result = agree_and_publish(p, group_);
  record(p, seconds_since(c0));
  stats_.back().stall_seconds = stats_.back().total_seconds + p.staged;
  return stats_.back().ok;
}

// The writer thread of an async save: the agreement on the directory, the snapshot, the
// file (and the buddy copies), then the commit's agreements, on commit_group_. What it
// throws (a CommError: a peer stopped or gone) the training thread rethrows in finish().
void CheckpointWriter::write_in_background(Pending& p, const fs::path& file) {
  bind_this_thread(writer_cpus_);  // no-op without spare cores
  const double cpu0 = thread_cpu_seconds();
  try {
    {
      // The destructor ends the agreements' waits (their buffers are leaked on a
      // CommError), not the buddy exchange's: its buffers are the mappings, which the
      // destructor frees; a peer that sent late would write into freed memory.
      const WaitCancellation cancel(&p.abandon);
      p.error = start_agreement(p, *commit_group_);
    }
    const auto w0 = Clock::now();
    if (!p.error.empty()) {
      snapshot_taken(p);  // agreed by every rank: none writes, none reads the states
    } else if (p.tier.per_host) {
      write_to_memory(p, file);
    } else {
      write_to_disk(p, file);
    }
    p.info.write_seconds = seconds_since(w0);
    const WaitCancellation cancel(&p.abandon);
    p.result = agree_and_publish(p, *commit_group_);
  } catch (...) {
    p.failure = std::current_exception();
    snapshot_taken(p);  // the training thread must never wait for a copy that won't come
  }
  p.writer_cpu = thread_cpu_seconds() - cpu0;
  p.committed.store(true, std::memory_order_release);
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
void CheckpointWriter::write_now(Pending& p, const ShardPlan& plan, const fs::path& file) {
  const auto w0 = Clock::now();
  try {
    ShardSink sink(file);
    FiniteCheck finite(plan, group_.rank());
    ByteProgress progress = save_progress(p.step, plan.file_bytes(group_.rank()));
    plan.pack(group_.rank(), p.sources, [&](const void* data, size_t size) {
      finite.add(data, size);
      sink.append(data, size);
      progress.add(size);
    });
    progress.finish();
    if (!finite.error().empty()) throw CheckpointError(finite.error());
    p.info.bytes = sink.bytes();
    p.info.xxh3 = sink.commit();
  } catch (const std::exception& e) {
    p.error = e.what();
  }
  p.info.write_seconds = seconds_since(w0);
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
  p.plan->pack(group_.rank(), p.sources, [&](const void* data, size_t size) {
    copy_and_hash(dest + at, static_cast<const char*>(data), size, sum, finite);
    at += size;
  });
  store_fence();
  if (!finite.error().empty()) return finite.error();
  p.snapshot = std::span<const char>(dest, at);
  p.snapshot_xxh3 = sum.digest();
  return "";
}

void CheckpointWriter::wait_for_snapshot() {
  if (!pending_ || pending_->copied.load(std::memory_order_acquire)) return;
  const PeerWaitScope on_peers;  // the writer's start agreement waits on the other ranks
  writer_detail::Interval waited{Clock::now(), {}};
  pending_->copied.wait(false, std::memory_order_acquire);
  waited.end = Clock::now();
  pending_->stall += std::chrono::duration<double>(waited.end - waited.begin).count();
  pending_->caller_peer_wait += waited.overlap_seconds(pending_->start_wait);  // set before copied
}

void CheckpointWriter::poll() {
  if (!pending_) return;
  if (all_true(group_, pending_->committed.load(std::memory_order_acquire))) finish();
}

void CheckpointWriter::flush() {
  if (pending_) finish();  // waits for the writer thread's commit
  join_pruner();
}

}  // namespace etr
