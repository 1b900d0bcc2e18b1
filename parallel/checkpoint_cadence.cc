#include "parallel/checkpoint_cadence.h"

#include <array>
#include <chrono>
#include <system_error>
#include <vector>

#include "checkpoint/agreement.h"
#include "checkpoint/buddy_link.h"
#include "checkpoint/catalog.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checksum.h"
#include "checkpoint/peer_read.h"
#include "checkpoint/memory_restore.h"
#include "parallel/memory_cadence.h"
#include "runtime/adamw.h"
#include "runtime/error.h"

namespace etr {
namespace fs = std::filesystem;
namespace {

// checkpoint.memory_dir, or /dev/shm/etr-mem-<XXH3 of the absolute durable directory>: the
// same path on every host and every launch of the job, another for another job.
fs::path memory_tier_dir(const config::CheckpointConfig& c) {
  if (!c.memory_dir().empty()) return c.memory_dir();
  std::error_code ec;
  fs::path durable = fs::absolute(c.dir(), ec).lexically_normal();
  const std::string key = durable.string();
  return fs::path("/dev/shm") / ("etr-mem-" + format_checksum(Checksum::of(key.data(), key.size())));
}

// The newest complete step in the disk tiers (0: none), by name: find_resumable verifies.
uint64_t newest_on_disk(std::span<const fs::path> roots) {
  uint64_t newest = 0;
  for (const fs::path& root : roots) {
    for (const CheckpointEntry& e : list_checkpoints(root)) {
      if (e.has_manifest) newest = std::max(newest, e.step);
    }
  }
  return newest;
}

}  // namespace

CheckpointCadence::CheckpointCadence(const TrainConfig& config, const ProcessGrid& grid,
                                     Logger& log, int64_t seq_len)
    : config_(config), grid_(grid), log_(log), seq_len_(seq_len) {
  const auto& c = config_.checkpoint();
  durable_ = CheckpointTier{c.dir(), "durable", c.keep()};
  fast_ = CheckpointTier{c.fast_dir(), "fast", c.fast_keep()};
  if (!c.dir().empty() || !c.fast_dir().empty()) {
    writer_ = std::make_unique<CheckpointWriter>(grid_.world_group(), c.async(), log_,
                                                 c.writer_cpus() == config::WRITER_CPUS_SPARE);
  }
  if (c.memory_every() > 0) {
    memory_ = CheckpointTier{memory_tier_dir(c), "memory", c.memory_keep(), /*per_host=*/true};
    memory_writer_ = std::make_unique<CheckpointWriter>(
        grid_.world_group(), /*async=*/true, log_, c.writer_cpus() == config::WRITER_CPUS_SPARE);
    memory_cadence_ = std::make_unique<MemoryCadence>(c.memory_every(), c.memory_max_stall());
  }
}

std::vector<size_t> memory_tier_bytes(const config::CheckpointConfig& c, const ShardPlan& plan,
                                      const std::vector<int>& host_of) {
  std::vector<size_t> out(host_of.size(), 0);
  if (c.memory_every() <= 0) return out;
  const std::vector<int> buddies = buddy_ranks(host_of);
  for (size_t r = 0; r < host_of.size(); ++r) {
    const size_t file = plan.file_bytes(static_cast<int>(r));
    out[r] += file;
    if (buddies[r] >= 0) out[static_cast<size_t>(buddies[r])] += file;
  }
  const size_t saves = static_cast<size_t>(c.memory_keep()) + 1;
  for (size_t& b : out) b *= saves;
  return out;
}

CheckpointCadence::~CheckpointCadence() = default;

std::optional<ResumePoint> CheckpointCadence::find_resume(bool relaunch) const {
  const auto& c = config_.checkpoint();
  const bool latest = c.resume() == "latest";
  if (memory_writer_ && !(relaunch && latest)) clear_memory_tier_on_hosts();
  if (c.resume().empty()) return std::nullopt;
  std::vector<fs::path> paths;
  if (latest) {
    if (!c.dir().empty()) paths.emplace_back(c.dir());
    if (!c.fast_dir().empty()) paths.emplace_back(c.fast_dir());
  } else {
    std::error_code ec;
    if (!fs::exists(c.resume(), ec)) {
      throw ConfigError("cannot resume from " + c.resume() + ": no such file or directory");
    }
    paths.emplace_back(c.resume());
  }
  if (memory_writer_ && relaunch && latest) {
    if (auto found = find_in_memory(newest_on_disk(paths))) return found;
    // Resuming from an older step: the copies it left would be replaced one by one (and
    // kept aside) as the run passes their steps again.
    clear_memory_tier_on_hosts();
  }
  const auto found = find_resumable(paths, grid_.world_group(), log_);
  if (found) {
    const bool fast = !c.fast_dir().empty() && found->parent_path() == fs::path(c.fast_dir());
    return ResumePoint{*found, fast ? "fast" : "durable", nullptr};
  }
  std::string where;
  for (const auto& p : paths) where += (where.empty() ? "" : " and ") + p.string();
  if (!latest) throw CheckpointError("nothing in " + where + " is a usable checkpoint to resume from");
  if (grid_.rank() == 0) log_.info("no checkpoint to resume from in ", where, "; starting from step 0");
  return std::nullopt;
}

// Collective: each host's leader empties the memory tier's directory on its host.
void CheckpointCadence::clear_memory_tier_on_hosts(bool remove_dir) const {
  const BuddyLink hosts(grid_.world_group());
  if (hosts.host_leader()) {
    clear_memory_tier(memory_.dir);
    std::error_code ec;
    if (remove_dir) fs::remove(memory_.dir, ec);  // only when nothing else is in it
  }
  all_true(grid_.world_group(), true);  // emptied everywhere before anyone saves
}

// Collective: the memory tier's newest complete copy when it is at least `disk_step`,
// else nothing (the reason logged: the disk tiers are tried next).
std::optional<ResumePoint> CheckpointCadence::find_in_memory(uint64_t disk_step) const {
  std::string why;
  std::optional<MemoryResume> m;
  try {
    m = find_memory_resumable(memory_.dir, grid_.world_group(), log_, why);
  } catch (const CheckpointError& e) {
    why = e.what();
  }
  if (m && m->step >= disk_step) {
    auto memory = std::make_shared<const MemoryResume>(std::move(*m));
    return ResumePoint{memory->dir, memory->tier, memory};
  }
  if (m) why = "its newest complete copy (step " + std::to_string(m->step) +
               ") is older than the disk's (step " + std::to_string(disk_step) + ")";
  if (grid_.rank() == 0) log_.info("checkpoint: not resuming from the memory tier: ", why, "; trying disk");
  return std::nullopt;
}

// A run resumes only with the program's files the checkpoint was saved with (etr-train:
// the same tokenizer, or none in both): other files would give the ids another meaning.
void CheckpointCadence::check_attachments(const ckpt::Manifest& m) const {
  auto names = [](const auto& list) {
    std::string s;
    for (const ckpt::Attachment& a : list) s += (s.empty() ? "" : ", ") + a.name();
    return s.empty() ? std::string("none") : s;
  };
  const std::string why =
      "a run resumes only with the files it was saved with (etr-train: its "
      "tokenizer)";
  if (names(m.attachments()) != names(attachments_)) {
    throw CheckpointError("it was saved with the files " + names(m.attachments()) +
                          " and this run has " + names(attachments_) + "; " + why);
  }
  for (int i = 0; i < m.attachments_size(); ++i) {
    if (m.attachments(i).data() != attachments_[static_cast<size_t>(i)].data()) {
      throw CheckpointError("its " + m.attachments(i).name() + " is not this run's (" +
                            std::to_string(m.attachments(i).data().size()) + " bytes, this run's " +
                            std::to_string(attachments_[static_cast<size_t>(i)].data().size()) +
                            ", not the same); " + why);
    }
  }
}

Restored CheckpointCadence::restore(const ResumePoint& point,
                                    std::span<const HeldState> states) const {
  const auto t0 = std::chrono::steady_clock::now();
  Restored out;
  std::string error;
  std::optional<CheckpointReader> reader;
  std::vector<ShardRead> reads;  // this rank's, planned before any byte moves
  uint64_t total = 0;
  try {
    if (point.memory) {
      reader.emplace(point.dir, point.memory->manifest);
    } else {
      reader.emplace(point.dir);
    }
    check_attachments(reader->manifest());
    for (const HeldState& s : states) {
      FlatState& state = *s.holder;
      for (size_t i = 0; i < state.held().size(); ++i) {
        const HeldRange& r = state.held()[i];
        for (const ShardRead& read : reader->plan_range(s.name, state.layout(), state.range<float>(s.name, i), r.begin, r.end)) {
          reads.push_back(read);
          total += read.bytes;
        }
      }
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  error = first_error(grid_.world_group(), error);
  if (error.empty() && point.memory) {
    PeerReadResult got;
    error = read_with_peers(*reader, point.memory->files, reads, grid_.world_group(), got);
    out.received = got.received_bytes;
    out.bytes = got.local_bytes + got.received_bytes;
  } else if (error.empty()) {
    ByteProgress progress(grid_.rank() == 0 ? &log_ : nullptr,
                          "checkpoint " + point.dir.string() + ": rank 0 loading its share", total);
    reader->set_progress(&progress);
    try {
      reader->read(reads);
      progress.finish();
    } catch (const std::exception& e) {
      error = e.what();
    }
    out.bytes = reader->bytes_read();
  }
  error = first_error(grid_.world_group(), error);
  if (!error.empty()) throw CheckpointError("cannot resume from " + point.dir.string() + ": " + error);
  if (point.memory) {
    for (uint64_t b : all_gather(grid_.world_group(), out.received)) out.moved += b;
  }
  out.manifest = reader->manifest();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

ckpt::Manifest CheckpointCadence::manifest(const DataPosition& position,
                                           const BatchOrigin& origin) const {
  ckpt::Manifest m;
  m.set_step(position.step);
  m.mutable_data()->set_samples_seen(position.samples_seen);
  m.mutable_data()->set_tokens_seen(position.samples_seen *
                                    static_cast<uint64_t>(seq_len_));
  m.mutable_data()->set_seed(position.seed);
  m.mutable_data()->set_batch_origin_step(origin.step);
  m.mutable_data()->set_batch_origin_samples(origin.samples);
  // The sample order is positional: sample i is a function of (seed, i), so the seed and
  // the sample index are the whole state of the data stream. Initialisation and sampling
  // use fixed seeds from the config; training itself draws no random numbers.
  ckpt::RngState* rng = m.add_rng();
  rng->set_name("data.sampler");
  rng->set_state("seed " + std::to_string(position.seed) + ", next sample " +
                 std::to_string(position.samples_seen));
  const auto& s = config_.schedule();
  m.mutable_schedule()->set_step(position.step);
  m.mutable_schedule()->set_next_lr(learning_rate(static_cast<int64_t>(position.step),
                                                  config_.optimizer().lr(), s.warmup_steps(),
                                                  s.max_steps(), s.min_lr_ratio()));
  *m.mutable_batch() = batch_policy_;
  if (m.batch().global_batch() == 0) m.mutable_batch()->set_global_batch(config_.batch().global_batch());
  m.mutable_batch()->set_micro_batch(config_.batch().micro_batch());
  *m.mutable_config() = config_;
  m.mutable_layout()->set_world_size(grid_.size());
  m.mutable_layout()->set_dp_size(grid_.dp_size());
  m.mutable_layout()->set_pp_size(grid_.pp_size());
  m.mutable_layout()->set_zero_stage(config_.parallel().zero_stage());
  m.set_writer("etr-train");
  for (const ckpt::Attachment& a : attachments_) *m.add_attachments() = a;
  return m;
}

bool CheckpointCadence::save(const std::string& tier, const ckpt::Manifest& meta,
                             const ParamLayout& layout, std::span<const NamedState> states,
                             double staged_seconds) {
  if (tier == "memory" && memory_writer_) {
    return memory_writer_->save(memory_, meta, layout, states, staged_seconds);
  }
  if (!writer_) throw ConfigError("no checkpoint directory is configured (checkpoint.dir)");
  const CheckpointTier& t = tier == "fast" ? fast_ : durable_;
  if (t.dir.empty()) throw ConfigError("the " + tier + " checkpoint tier has no directory");
  return writer_->save(t, meta, layout, states, staged_seconds);
}

namespace {

// The states to save, and the time producing them took on the training thread (charged to
// the save's stall: a pipeline's collection of its stages' states, a GPU's downloads).
struct StagedStates {
  std::vector<NamedState> states;
  double seconds = 0;
};

StagedStates stage(const std::function<std::vector<NamedState>()>& states) {
  const auto s0 = std::chrono::steady_clock::now();
  StagedStates out{states(), 0};
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
  return out;
}

}  // namespace

bool CheckpointCadence::save(const std::string& tier, const ckpt::Manifest& meta,
                             const ParamLayout& layout,
                             const std::function<std::vector<NamedState>()>& states) {
  wait_for_snapshot();  // `states` may reuse the buffers the last saves read
  const StagedStates s = stage(states);
  return save(tier, meta, layout, s.states, s.seconds);
}

void CheckpointCadence::at_step(int64_t step, bool last, const DataPosition& position,
                                const BatchOrigin& origin, const ParamLayout& layout,
                                const std::function<std::vector<NamedState>()>& states) {
  if (memory_writer_) {
    const auto now = std::chrono::steady_clock::now();
    if (last_step_end_ != std::chrono::steady_clock::time_point{}) {
      memory_cadence_->step_ended(std::chrono::duration<double>(now - last_step_end_).count());
    }
    last_step_end_ = now;
    memory_writer_->poll();
    observe_memory_saves();
  }
  if (writer_) writer_->poll();
  const auto& c = config_.checkpoint();
  std::string tier;
  if (!writer_) {
  } else if (!c.dir().empty() && (last || (c.every() > 0 && step % c.every() == 0))) {
    tier = "durable";
  } else if (!c.fast_dir().empty() && c.fast_every() > 0 && step % c.fast_every() == 0) {
    tier = "fast";
  }
  // The memory tier keeps its own cadence beside the disk's (the same step may go to both).
  const bool memory = memory_writer_ && memory_cadence_->due(step);
  if (tier.empty() && !memory) return;
  wait_for_snapshot();  // `states` may reuse the buffers the last saves read
  // Once: both saves read the same buffers, and the first one's stall carries the time.
  const StagedStates s = stage(states);
  const ckpt::Manifest meta = manifest(position, origin);
  if (memory) {
    memory_writer_->save(memory_, meta, layout, s.states, s.seconds);
    memory_cadence_->saved(step);
  }
  if (!tier.empty()) save(tier, meta, layout, s.states, memory ? 0.0 : s.seconds);
}

// Collective (the memory tier's commits are): each committed memory save's cost to
// training, the largest over the ranks, to the cadence, which may change its interval.
void CheckpointCadence::observe_memory_saves() {
  const std::vector<SaveStats>& stats = memory_writer_->stats();
  if (!memory_cadence_->adaptive() || stats.size() == memory_saves_seen_) return;
  memory_saves_seen_ = stats.size();
  const std::array<double, 2> local = {memory_writer_->training_cost(stats.back()),
                                       memory_cadence_->step_seconds()};
  std::array<double, 2> agreed = {0, 0};  // the largest of each: the same on every rank
  for (const auto& r : all_gather(grid_.world_group(), local)) {
    agreed = {std::max(agreed[0], r[0]), std::max(agreed[1], r[1])};
  }
  const std::string change = memory_cadence_->observe(agreed[0], agreed[1]);
  if (!change.empty() && grid_.rank() == 0) log_.info("checkpoint: ", change);
}

void CheckpointCadence::flush() {
  if (memory_writer_) memory_writer_->flush();
  if (writer_) writer_->flush();
}

void CheckpointCadence::wait_for_snapshot() {
  if (memory_writer_) memory_writer_->wait_for_snapshot();
  if (writer_) writer_->wait_for_snapshot();
}

std::string CheckpointCadence::resize_tier() const {
  return config_.checkpoint().fast_dir().empty() ? "durable" : "fast";
}

std::string CheckpointCadence::stop_tier() const {
  if (!writer_) return "";
  return config_.checkpoint().dir().empty() ? "fast" : "durable";
}

bool CheckpointCadence::saved(int64_t step) const {
  if (!writer_ || writer_->stats().empty()) return false;
  const SaveStats& last = writer_->stats().back();
  return last.ok && last.step == static_cast<uint64_t>(step);
}

void CheckpointCadence::release_memory_tier(int64_t last_step) {
  if (!memory_writer_ || !saved(last_step)) return;
  memory_writer_->flush();
  clear_memory_tier_on_hosts(/*remove_dir=*/true);
}

void refuse_earlier_checkpoints(const config::CheckpointConfig& c, const Group& group) {
  const std::array<std::string, 2> roots = {c.dir(), c.fast_dir()};
  uint64_t found = 0;  // the newest complete checkpoint's step + 1; 0: none
  uint64_t where = 0;  // its index in roots
  for (size_t i = 0; i < roots.size() && group.rank() == 0; ++i) {
    if (roots[i].empty()) continue;
    for (const CheckpointEntry& e : list_checkpoints(roots[i])) {
      if (e.has_manifest && e.step + 1 > found) {
        found = e.step + 1;
        where = i;
      }
    }
  }
  found = broadcast<uint64_t>(group, found, 0);
  if (found == 0) return;
  where = broadcast<uint64_t>(group, where, 0);  // every rank's sentence names the same
  throw ConfigError(roots[where] + " holds checkpoints of an earlier run (the newest: step " +
                    std::to_string(found - 1) + "); --resume latest continues from it, or "
                    "remove them (or set another checkpoint.dir) to start over");
}

}  // namespace etr
