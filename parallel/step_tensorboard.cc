// StepReporter's TensorBoard output (parallel/step_report.h; the file format is
// runtime/tensorboard_writer.h). The tags, grouped by the part before the slash:
//   train/   loss, lr, grad_norm, progress (fraction done), eta_s, skipped_steps
//   eval/    loss (held-out)
//   perf/    tokens_per_s, step_ms, gflops
//   memory/  peak_bytes, predicted_peak_bytes, budget_bytes, state_bytes, oom_recoveries,
//            replans; text: decisions (re-plans, out-of-memory recoveries, recomputation)
//   batch/   global_batch, micro_batch, accumulation, noise_scale; text: decisions
//   comm/    comm_ms, exposed_ms, hidden_fraction (data parallel)
//   pipeline/ bubble, bubble_theory, norm_wait_ms (a pipeline)
//   elastic/ world_size; text: launch
//   checkpoint/ stall_ms, write_s, bytes; text: saves
// A relaunch that resumes from step S writes steps after S again, into its own file:
// TensorBoard shows both points of such a step (the relaunch's come later in wall time).
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "parallel/step_report.h"
#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr {

void StepReporter::flush_tensorboard() {
  if (!tensorboard_) return;
  try {
    tensorboard_->flush();
  } catch (const IoError& e) {
    log_.warn(e.what(), "; no more TensorBoard output in this run");
    tensorboard_.reset();
  }
}

void StepReporter::tensorboard_step(const StepStats& s, const StepContext& c, double tps,
                                    double gflops, double eta_s) {
  if (!tensorboard_) return;
  TensorBoardWriter& w = *tensorboard_;
  const auto step = static_cast<int64_t>(c.step);
  w.add_scalar("train/loss", step, s.loss);
  w.add_scalar("train/lr", step, s.lr);
  w.add_scalar("train/grad_norm", step, s.grad_norm);
  w.add_scalar("train/progress", step, c.progress);
  if (std::isfinite(eta_s)) w.add_scalar("train/eta_s", step, eta_s);
  if (c.skipped_steps > 0)
    w.add_scalar("train/skipped_steps", step, static_cast<double>(c.skipped_steps));
  w.add_scalar("perf/tokens_per_s", step, tps);
  w.add_scalar("perf/step_ms", step, s.seconds * 1e3);
  w.add_scalar("perf/gflops", step, gflops);
  w.add_scalar("memory/peak_bytes", step, static_cast<double>(s.peak_bytes));
  if (s.predicted_peak > 0) {
    w.add_scalar("memory/predicted_peak_bytes", step, static_cast<double>(s.predicted_peak));
  }
  w.add_scalar("memory/budget_bytes", step, static_cast<double>(c.budget));
  w.add_scalar("memory/state_bytes", step, static_cast<double>(c.memory.state_bytes()));
  w.add_scalar("memory/oom_recoveries", step, static_cast<double>(c.oom_recoveries));
  w.add_scalar("memory/replans", step, static_cast<double>(c.replans));
  w.add_scalar("batch/global_batch", step,
               static_cast<double>(s.global_batch > 0 ? s.global_batch : c.global_batch));
  w.add_scalar("batch/micro_batch", step, static_cast<double>(s.micro_batch));
  w.add_scalar("batch/accumulation", step, static_cast<double>(s.accumulation));
  if (s.global_batch > 0 && std::isfinite(s.noise_scale)) {
    w.add_scalar("batch/noise_scale", step, s.noise_scale);
  }
  if (c.communicates) {
    w.add_scalar("comm/comm_ms", step, s.comm.comm_seconds * 1e3);
    w.add_scalar("comm/exposed_ms", step, s.comm.exposed_seconds * 1e3);
    w.add_scalar("comm/hidden_fraction", step, s.comm.hidden_fraction());
  }
  if (s.bubble >= 0) {
    w.add_scalar("pipeline/bubble", step, s.bubble);
    w.add_scalar("pipeline/bubble_theory", step, s.bubble_theory);
    w.add_scalar("pipeline/norm_wait_ms", step, s.norm_wait_seconds * 1e3);
  }
  if (c.world > 0) w.add_scalar("elastic/world_size", step, c.world);
  flush_tensorboard();
}

namespace {

// "relaunch 2 after a failure: world 4 -> 2, resumed from step 120 (...)".
std::string launch_text(uint64_t step, int world, const ElasticLaunch* launch,
                        const std::optional<std::filesystem::path>& resumed_from) {
  const std::string from = resumed_from ? "resumed from step " + std::to_string(step) + " (" +
                                              resumed_from->string() + ")"
                                        : "from step " + std::to_string(step);
  if (!launch) return "start: " + std::to_string(world) + " rank(s), " + from;
  if (launch->restart == 0) {
    return "etr-run launch: " + std::to_string(world) + " rank(s), " + from;
  }
  std::string text = "etr-run relaunch " + std::to_string(launch->restart) + " after a " +
                     launch->reason + ": world " + std::to_string(launch->prev_world) + " -> " +
                     std::to_string(world) + ", " + from;
  if (launch->last_step >= 0) {
    text += "; the last launch completed step " + std::to_string(launch->last_step);
  }
  return text;
}

}  // namespace

void StepReporter::launched(uint64_t step, int world, const ElasticLaunch* launch,
                            const std::optional<std::filesystem::path>& resumed_from) {
  if (!leader_) return;
  if (launch && launch->restart > 0) relaunch_record(step, world, *launch);
  if (!tensorboard_) return;
  // (the world size is a scalar of every logged step: one here, at the step resumed
  // from, would contradict the one the last launch logged there)
  tensorboard_->add_text("elastic/launch", static_cast<int64_t>(step),
                         launch_text(step, world, launch, resumed_from));
  flush_tensorboard();
}

void StepReporter::decision(uint64_t step, const std::string& tag, const std::string& text) {
  if (!tensorboard_) return;
  tensorboard_->add_text(tag, static_cast<int64_t>(step), text);
  flush_tensorboard();
}

void StepReporter::checkpoints(const std::vector<SaveStats>& stats) {
  if (!leader_) return;
  for (; saves_reported_ < stats.size(); ++saves_reported_) {
    const SaveStats& s = stats[saves_reported_];
    write_metrics(nlohmann::json{
        {"step", s.step},
        {"checkpoint_tier", s.tier},
        {"checkpoint_ok", s.ok},
        {"checkpoint_stall_ms", s.stall_seconds * 1e3},
        {"checkpoint_write_s", s.write_seconds},
        {"checkpoint_bytes",
         s.bytes}}.dump());
    if (!tensorboard_) continue;
    const auto step = static_cast<int64_t>(s.step);
    char text[160];
    std::snprintf(text, sizeof text, "%s checkpoint of step %llu: %s, %.1f ms stall, %.2f s write",
                  s.tier.c_str(), static_cast<unsigned long long>(s.step),
                  s.ok ? format_bytes(static_cast<double>(s.bytes)).c_str() : "FAILED",
                  s.stall_seconds * 1e3, s.write_seconds);
    tensorboard_->add_text("checkpoint/saves", step,
                           std::string(text) + (s.ok ? " -> " + s.dir.string() : ": " + s.error));
    if (!s.ok) continue;
    tensorboard_->add_scalar("checkpoint/stall_ms", step, s.stall_seconds * 1e3);
    tensorboard_->add_scalar("checkpoint/write_s", step, s.write_seconds);
    tensorboard_->add_scalar("checkpoint/bytes", step, static_cast<double>(s.bytes));
  }
  flush_tensorboard();
}

}  // namespace etr
