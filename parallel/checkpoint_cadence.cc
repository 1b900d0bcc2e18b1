#include "parallel/checkpoint_cadence.h"

#include <chrono>
#include <system_error>
#include <vector>

#include "checkpoint/agreement.h"
#include "checkpoint/checkpoint_reader.h"
#include "runtime/adamw.h"
#include "runtime/error.h"

namespace etr {

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
}

CheckpointCadence::~CheckpointCadence() = default;

std::optional<std::filesystem::path> CheckpointCadence::find_resume() const {
  const auto& c = config_.checkpoint();
  if (c.resume().empty()) return std::nullopt;
  const bool latest = c.resume() == "latest";
  std::vector<std::filesystem::path> paths;
  if (latest) {
    if (!c.dir().empty()) paths.emplace_back(c.dir());
    if (!c.fast_dir().empty()) paths.emplace_back(c.fast_dir());
  } else {
    std::error_code ec;
    if (!std::filesystem::exists(c.resume(), ec)) {
      throw ConfigError("cannot resume from " + c.resume() + ": no such file or directory");
    }
    paths.emplace_back(c.resume());
  }
  const auto found = find_resumable(paths, grid_.world_group(), log_);
  if (found) return found;
  std::string where;
  for (const auto& p : paths) where += (where.empty() ? "" : " and ") + p.string();
  if (!latest) throw CheckpointError("nothing in " + where + " is a usable checkpoint to resume from");
  if (grid_.rank() == 0) log_.info("no checkpoint to resume from in ", where, "; starting from step 0");
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

Restored CheckpointCadence::restore(const std::filesystem::path& dir,
                                    std::span<const HeldState> states) const {
  const auto t0 = std::chrono::steady_clock::now();
  Restored out;
  std::string error;
  try {
    CheckpointReader reader(dir);
    check_attachments(reader.manifest());
    uint64_t total = 0;
    for (const HeldState& s : states) {
      for (const HeldRange& r : s.holder->held()) total += static_cast<uint64_t>(r.end - r.begin) * sizeof(float);
    }
    ByteProgress progress(grid_.rank() == 0 ? &log_ : nullptr,
                          "checkpoint " + dir.string() + ": rank 0 loading its share", total);
    reader.set_progress(&progress);
    for (const HeldState& s : states) {
      FlatState& state = *s.holder;
      for (size_t i = 0; i < state.held().size(); ++i) {
        const HeldRange& r = state.held()[i];
        reader.read_range(s.name, state.layout(), state.range<float>(s.name, i), r.begin, r.end);
      }
    }
    progress.finish();
    out.manifest = reader.manifest();
    out.bytes = reader.bytes_read();
  } catch (const std::exception& e) {
    error = e.what();
  }
  error = first_error(grid_.world_group(), error);
  if (!error.empty()) throw CheckpointError("cannot resume from " + dir.string() + ": " + error);
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
                             const ParamLayout& layout, std::span<const NamedState> states) {
  if (!writer_) throw ConfigError("no checkpoint directory is configured (checkpoint.dir)");
  const CheckpointTier& t = tier == "fast" ? fast_ : durable_;
  if (t.dir.empty()) throw ConfigError("the " + tier + " checkpoint tier has no directory");
  return writer_->save(t, meta, layout, states);
}

void CheckpointCadence::at_step(int64_t step, bool last, const DataPosition& position,
                                const BatchOrigin& origin, const ParamLayout& layout,
                                const std::function<std::vector<NamedState>()>& states) {
  if (!writer_) return;
  writer_->poll();
  const auto& c = config_.checkpoint();
  std::string tier;
  if (!c.dir().empty() && (last || (c.every() > 0 && step % c.every() == 0))) {
    tier = "durable";
  } else if (!c.fast_dir().empty() && c.fast_every() > 0 && step % c.fast_every() == 0) {
    tier = "fast";
  }
  if (tier.empty()) return;
  writer_->wait_for_snapshot();  // `states` may reuse the buffers the last save reads
  save(tier, manifest(position, origin), layout, states());
}

void CheckpointCadence::flush() {
  if (writer_) writer_->flush();
}

void CheckpointCadence::wait_for_snapshot() {
  if (writer_) writer_->wait_for_snapshot();
}

std::string CheckpointCadence::resize_tier() const {
  return config_.checkpoint().fast_dir().empty() ? "durable" : "fast";
}

bool CheckpointCadence::saved(int64_t step) const {
  if (!writer_ || writer_->stats().empty()) return false;
  const SaveStats& last = writer_->stats().back();
  return last.ok && last.step == static_cast<uint64_t>(step);
}

}  // namespace etr
