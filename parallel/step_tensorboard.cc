// StepReporter's TensorBoard output (parallel/step_report.h; the file format is
// runtime/tensorboard_writer.h). The tags, grouped by the part before the slash:
//   train/   loss, lr, grad_norm, progress (fraction done), eta_s, skipped_steps
//   eval/    loss (held-out)
//   perf/    tokens_per_s, step_ms, gflops
//   memory/  peak_bytes, predicted_peak_bytes, device_peak_bytes (on a GPU, the driver's
//            count), budget_bytes, state_bytes,
//            analytic_state_bytes, unreduced_grad_peak_bytes, gathered_param_peak_bytes,
//            zero_stage, oom_recoveries, replans; text: decisions (re-plans,
//            out-of-memory recoveries, recomputation)
//   batch/   global_batch, micro_batch, accumulation, noise_scale (-1: not measured);
//            text: decisions
//   comm/    comm_ms, exposed_ms, hidden_fraction (data parallel)
//   pipeline/ bubble, bubble_theory, norm_wait_ms (a pipeline)
//   elastic/ world_size; text: launch
//   checkpoint/ stall_ms, write_s, bytes; text: saves
// A step's scalars are one event (kStepScalars below: the metrics record's numbers).
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

namespace {

// The metrics record's numbers and their TensorBoard tags: one table, so that both show
// the same numbers (tensorboard_compat fails on a number of the record that TensorBoard
// lacks). A key absent from a record (comm/ without data parallelism, eta_s before
// there is a pace) gives no point.
struct ScalarTag {
  const char* key;
  const char* tag;
};
constexpr ScalarTag kStepScalars[] = {
    {"loss", "train/loss"},
    {"lr", "train/lr"},
    {"grad_norm", "train/grad_norm"},
    {"progress", "train/progress"},
    {"eta_s", "train/eta_s"},
    {"skipped_steps", "train/skipped_steps"},
    {"tokens_per_s", "perf/tokens_per_s"},
    {"ms", "perf/step_ms"},
    {"gflops", "perf/gflops"},
    {"peak_bytes", "memory/peak_bytes"},
    {"predicted_peak_bytes", "memory/predicted_peak_bytes"},
    {"device_peak_bytes", "memory/device_peak_bytes"},
    {"budget_bytes", "memory/budget_bytes"},
    {"state_bytes", "memory/state_bytes"},
    {"analytic_state_bytes", "memory/analytic_state_bytes"},
    {"unreduced_grad_peak_bytes", "memory/unreduced_grad_peak_bytes"},
    {"gathered_param_peak_bytes", "memory/gathered_param_peak_bytes"},
    {"zero_stage", "memory/zero_stage"},
    {"oom_recoveries", "memory/oom_recoveries"},
    {"memory_replans", "memory/replans"},
    {"global_batch", "batch/global_batch"},
    {"micro_batch", "batch/micro_batch"},
    {"accumulation", "batch/accumulation"},
    {"noise_scale", "batch/noise_scale"},
    {"comm_ms", "comm/comm_ms"},
    {"exposed_comm_ms", "comm/exposed_ms"},
    {"hidden_fraction", "comm/hidden_fraction"},
    {"bubble", "pipeline/bubble"},
    {"bubble_theory", "pipeline/bubble_theory"},
    {"norm_wait_ms", "pipeline/norm_wait_ms"},
    {"world_size", "elastic/world_size"},
};

}  // namespace

void StepReporter::tensorboard_step(const nlohmann::json& record) {
  if (!tensorboard_) return;
  std::vector<std::pair<std::string, double>> values;
  for (const ScalarTag& s : kStepScalars) {
    const auto it = record.find(s.key);
    if (it != record.end() && it->is_number()) values.emplace_back(s.tag, it->get<double>());
  }
  tensorboard_->add_scalars(record.at("step").get<int64_t>(), values);
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
