// Trainer's checkpoints (trainer.h): what a checkpoint of etr-train holds, when it is
// saved, and resuming from one (checkpoint/ does the writing, reading and verifying).
#include <chrono>
#include <cstdio>
#include <system_error>

#include "checkpoint/agreement.h"
#include "checkpoint/checkpoint_reader.h"
#include "examples/train/trainer.h"
#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

void Trainer::setup_checkpoints() {
  const auto& c = config_.checkpoint();
  durable_tier_ = CheckpointTier{c.dir(), "durable", c.keep()};
  fast_tier_ = CheckpointTier{c.fast_dir(), "fast", c.fast_keep()};
  if (!c.dir().empty() || !c.fast_dir().empty()) {
    ckpt_writer_ = std::make_unique<CheckpointWriter>(
        grid_->dp_group(), c.async(), log_, c.writer_cpus() == config::WRITER_CPUS_SPARE);
  }
  if (c.resume().empty()) return;
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
  const auto found = find_resumable(paths, grid_->dp_group(), log_);
  if (!found) {
    std::string where;
    for (const auto& p : paths) where += (where.empty() ? "" : " and ") + p.string();
    if (!latest) throw CheckpointError("nothing in " + where + " is a usable checkpoint to resume from");
    if (leader()) log_.info("no checkpoint to resume from in ", where, "; starting from step 0");
    return;
  }
  restore(*found);
}

ckpt::Manifest Trainer::checkpoint_meta() const {
  ckpt::Manifest m;
  m.set_step(position_.step);
  m.mutable_data()->set_samples_seen(position_.samples_seen);
  m.mutable_data()->set_tokens_seen(position_.samples_seen * static_cast<uint64_t>(model_config_.seq_len));
  m.mutable_data()->set_seed(position_.seed);
  m.mutable_data()->set_batch_origin_step(batch_origin_step_);
  m.mutable_data()->set_batch_origin_samples(batch_origin_samples_);
  // The sampler is positional: sample i's window is a function of (seed, i), so the
  // seed and the sample index are the whole state of the data stream. Initialisation and
  // sampling use fixed seeds from the config; training itself draws no random numbers.
  ckpt::RngState* rng = m.add_rng();
  rng->set_name("data.sampler");
  rng->set_state("seed " + std::to_string(position_.seed) + ", next sample " +
                 std::to_string(position_.samples_seen));
  const auto& s = config_.schedule();
  m.mutable_schedule()->set_step(position_.step);
  m.mutable_schedule()->set_next_lr(learning_rate(static_cast<int64_t>(position_.step),
                                                  config_.optimizer().lr(), s.warmup_steps(),
                                                  s.max_steps(), s.min_lr_ratio()));
  m.mutable_batch()->set_global_batch(config_.batch().global_batch());
  m.mutable_batch()->set_micro_batch(config_.batch().micro_batch());
  *m.mutable_config() = config_;
  m.mutable_layout()->set_world_size(grid_->size());
  m.mutable_layout()->set_dp_size(grid_->dp_size());
  m.mutable_layout()->set_pp_size(1);
  m.mutable_layout()->set_zero_stage(0);
  m.set_writer("etr-train");
  return m;
}

bool Trainer::save_checkpoint(const std::string& tier) {
  if (!ckpt_writer_) throw ConfigError("no checkpoint directory is configured (checkpoint.dir)");
  const CheckpointTier& t = tier == "fast" ? fast_tier_ : durable_tier_;
  if (t.dir.empty()) throw ConfigError("the " + tier + " checkpoint tier has no directory");
  const NamedState states[] = {{"param", model_->params()},
                               {"adam.m", static_cast<const float*>(m_.data())},
                               {"adam.v", static_cast<const float*>(v_.data())}};
  return ckpt_writer_->save(t, checkpoint_meta(), model_->layout(), states);
}

void Trainer::flush_checkpoints() {
  if (ckpt_writer_) ckpt_writer_->flush();
}

void Trainer::checkpoint_if_due(int64_t step, bool last) {
  if (!ckpt_writer_) return;
  ckpt_writer_->poll();
  const auto& c = config_.checkpoint();
  if (!c.dir().empty() && (last || (c.every() > 0 && step % c.every() == 0))) {
    save_checkpoint("durable");
  } else if (!c.fast_dir().empty() && c.fast_every() > 0 && step % c.fast_every() == 0) {
    save_checkpoint("fast");
  }
}

void Trainer::save_for_resize(int64_t step) {
  const auto& c = config_.checkpoint();
  if (leader()) {
    log_.info("resize requested: saving step ", step,
              " and stopping so that etr-run relaunches the job at its new size");
  }
  flush_checkpoints();  // a save in flight (perhaps of this very step) commits first
  const auto& stats = ckpt_writer_->stats();
  if (stats.empty() || !stats.back().ok || stats.back().step != static_cast<uint64_t>(step)) {
    save_checkpoint(c.fast_dir().empty() ? "durable" : "fast");
    flush_checkpoints();
  }
  if (elastic_ && leader()) {
    const bool ok = !ckpt_writer_->stats().empty() && ckpt_writer_->stats().back().ok;
    elastic_->event("resize-exit step=" + std::to_string(step) + " saved=" + (ok ? "1" : "0"));
  }
}

void Trainer::log_relaunch(int64_t first_step) const {
  const ElasticLaunch& l = elastic_->launch();
  const int64_t resumed = first_step - 1;
  if (l.restart == 0) {
    log_.info("elastic: launched by etr-run on ", grid_->size(), " rank(s)",
              resumed > 0 ? ", resumed from step " + std::to_string(resumed) : std::string());
    return;
  }
  std::string text = "elastic: relaunch " + std::to_string(l.restart) + " after a " + l.reason +
                     ": world " + std::to_string(l.prev_world) + " -> " +
                     std::to_string(grid_->size()) + ", resumed from step " + std::to_string(resumed);
  if (l.last_step >= 0) {
    const int64_t lost = std::max<int64_t>(0, l.last_step - resumed);
    text += " (the last launch completed step " + std::to_string(l.last_step) + ": " +
            std::to_string(lost) + " step" + (lost == 1 ? "" : "s") + " lost)";
  }
  if (l.event_ms > 0) {
    char t[96];
    std::snprintf(t, sizeof t, ", first step %.2f s after the last launch ended (restore %.2f s)",
                  static_cast<double>(unix_ms() - l.event_ms) / 1000.0, restore_seconds_);
    text += t;
  }
  log_.info(text);
}

void Trainer::restore(const std::filesystem::path& dir) {
  const auto t0 = Clock::now();
  std::string error;
  ckpt::Manifest m;
  uint64_t bytes = 0;
  try {
    CheckpointReader reader(dir);
    const int64_t n = model_->layout().numel();
    reader.read_state("param", model_->layout(), model_->params(), 0, n);
    reader.read_state("adam.m", model_->layout(), static_cast<float*>(m_.data()), 0, n);
    reader.read_state("adam.v", model_->layout(), static_cast<float*>(v_.data()), 0, n);
    m = reader.manifest();
    bytes = reader.bytes_read();
  } catch (const std::exception& e) {
    error = e.what();
  }
  error = first_error(grid_->dp_group(), error);
  if (!error.empty()) throw CheckpointError("cannot resume from " + dir.string() + ": " + error);
  if (leader() && m.data().seed() != position_.seed) {
    log_.warn("the checkpoint was trained with data.seed ", m.data().seed(), " but this run has ",
              position_.seed, "; the data order from here on differs from the original run's");
  }
  if (m.batch().global_batch() != config_.batch().global_batch()) {
    if (leader()) {
      log_.warn("the global batch changed from ", m.batch().global_batch(), " to ",
                config_.batch().global_batch(), "; training continues at sample ",
                m.data().samples_seen(), " but not as the uninterrupted run would");
    }
    batch_origin_step_ = m.step();
    batch_origin_samples_ = m.data().samples_seen();
  } else {
    batch_origin_step_ = m.data().batch_origin_step();
    batch_origin_samples_ = m.data().batch_origin_samples();
  }
  // read_manifest checked that the step fits the schedule's arithmetic (int64) and that
  // the data position agrees with it (check_manifest_sense).
  position_.step = m.step();
  position_.samples_seen = m.data().samples_seen();
  resumed_from_ = dir;
  restore_seconds_ = seconds_since(t0);
  if (elastic_ && leader()) {
    elastic_->event("restored step=" + std::to_string(m.step()) + " world=" +
                    std::to_string(m.layout().world_size()));
  }
  if (leader()) {
    const double sec = restore_seconds_;
    log_.info("resumed from ", dir.string(), ": step ", m.step(), ", sample ",
              m.data().samples_seen(), "; saved by ", m.layout().world_size(),
              " rank(s), now ", grid_->size(), "; rank 0 read ",
              format_bytes(static_cast<double>(bytes)), " in ", std::to_string(sec).substr(0, 5), " s");
  }
}

}  // namespace etr::train
