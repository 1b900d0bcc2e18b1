#include "parallel/step_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr {

std::string nonfinite_text(double x) {
  return std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
}

StepReporter::StepReporter(const TrainConfig& config, Logger& log, bool leader, bool resumed)
    : config_(config), log_(log), leader_(leader) {
  if (!leader_) return;
  if (!config_.log().metrics_file().empty()) {
    metrics_.open(config_.log().metrics_file(),
                  std::ios::out | (resumed ? std::ios::app : std::ios::trunc));
    if (!metrics_) throw IoError("cannot write the metrics file " + config_.log().metrics_file());
  }
  if (!config_.log().tensorboard_dir().empty()) {
    tensorboard_ = std::make_unique<TensorBoardWriter>(config_.log().tensorboard_dir());
    log_.info("TensorBoard: writing ", tensorboard_->path().string());
  }
}

StepReporter::~StepReporter() = default;

void StepReporter::write_metrics(const std::string& line) {
  if (metrics_.is_open()) metrics_ << line << '\n' << std::flush;
}

namespace {

// "step 120/150  80% ETA 22s | loss ... | peak 1.2 GiB (plan ...) | ...".
std::string progress_line(const StepStats& s, const StepContext& c, double tps, double gflops,
                          double left) {
  char line[460];
  int n = c.scaled ? std::snprintf(line, sizeof line, "step %5lld", static_cast<long long>(c.step))
                   : std::snprintf(line, sizeof line, "step %5lld/%lld", static_cast<long long>(c.step),
                                   static_cast<long long>(c.max_steps));
  n += std::snprintf(line + n, sizeof line - n,
                     " %3.0f%% ETA %s | loss %.4f | lr %.3e | norm %.3f | %7.0f tok/s | %7.1f ms | "
                     "%6.2f GFLOP/s | peak %s",
                     c.progress * 100, format_duration(left).c_str(), s.loss, s.lr, s.grad_norm, tps,
                     s.seconds * 1e3, gflops, format_bytes(static_cast<double>(s.peak_bytes)).c_str());
  auto room = [&] { return n > 0 && n < static_cast<int>(sizeof line); };
  if (s.predicted_peak > 0 && room()) {
    n += std::snprintf(line + n, sizeof line - n, " (plan %s) | b %lld x %lld%s",
                       format_bytes(static_cast<double>(s.predicted_peak)).c_str(),
                       static_cast<long long>(s.micro_batch), static_cast<long long>(s.accumulation),
                       s.recompute ? " recompute" : "");
  }
  if (s.global_batch > 0 && room()) {
    n += std::snprintf(line + n, sizeof line - n, " | B %lld, noise %.0f",
                       static_cast<long long>(s.global_batch), s.noise_scale);
  }
  if (c.communicates && room()) {
    n += std::snprintf(line + n, sizeof line - n, " | comm %.1f ms, exposed %.1f ms, hidden %.0f%%",
                       s.comm.comm_seconds * 1e3, s.comm.exposed_seconds * 1e3,
                       s.comm.hidden_fraction() * 100);
  }
  if (s.bubble >= 0 && room()) {
    n += std::snprintf(line + n, sizeof line - n, " | bubble %.0f%% (theory %.0f%%)", s.bubble * 100,
                       s.bubble_theory * 100);
  }
  if (c.skipped_steps > 0 && room()) {
    std::snprintf(line + n, sizeof line - n, " | %s%lld non-finite step(s) skipped",
                  s.skipped ? "SKIPPED, " : "", static_cast<long long>(c.skipped_steps));
  }
  return line;
}

// The step's metrics record (one JSON line of log.metrics_file).
nlohmann::json step_record(const StepStats& s, const StepContext& c, double tps, double gflops,
                           double left) {
  nlohmann::json j = {{"step", c.step},           {"loss", s.loss},   {"lr", s.lr},
                      {"grad_norm", s.grad_norm}, {"ms", s.seconds * 1e3},
                      {"tokens_per_s", tps},      {"gflops", gflops}, {"peak_bytes", s.peak_bytes}};
  j["progress"] = c.progress;
  if (std::isfinite(left)) j["eta_s"] = left;
  j["predicted_peak_bytes"] = s.predicted_peak;
  if (s.device_peak_bytes > 0) j["device_peak_bytes"] = s.device_peak_bytes;
  j["budget_bytes"] = c.budget;
  j["global_batch"] = s.global_batch > 0 ? s.global_batch : c.global_batch;
  if (s.global_batch > 0) j["noise_scale"] = std::isfinite(s.noise_scale) ? s.noise_scale : -1.0;
  j["micro_batch"] = s.micro_batch;
  j["accumulation"] = s.accumulation;
  j["recompute"] = s.recompute;
  j["oom_recoveries"] = c.oom_recoveries;
  j["memory_replans"] = c.replans;
  if (c.shares.size() > 1) j["shares"] = c.shares;
  j["zero_stage"] = c.memory.stage;
  j["state_bytes"] = c.memory.state_bytes();
  j["analytic_state_bytes"] = c.memory.analytic_bytes();
  if (c.memory.stage >= 2) j["unreduced_grad_peak_bytes"] = c.memory.unreduced_peak;
  if (c.memory.stage >= 3) j["gathered_param_peak_bytes"] = c.memory.gathered_peak;
  if (c.skipped_steps > 0) {
    j["skipped"] = s.skipped;
    j["skipped_steps"] = c.skipped_steps;
  }
  if (s.bubble >= 0) {
    j["bubble"] = s.bubble;
    j["bubble_theory"] = s.bubble_theory;
    j["norm_wait_ms"] = s.norm_wait_seconds * 1e3;
    j["stage_activation_bytes"] = c.stage_activation_bytes;
  }
  if (c.communicates) {
    j["comm_ms"] = s.comm.comm_seconds * 1e3;
    j["exposed_comm_ms"] = s.comm.exposed_seconds * 1e3;
    j["hidden_fraction"] = s.comm.hidden_fraction();
  }
  if (c.world > 0) j["world_size"] = c.world;
  return j;
}

}  // namespace

void StepReporter::step(const StepStats& s, const StepContext& c) {
  if (!leader_) return;
  const double tps = c.tokens / s.seconds;
  const double gflops = c.flops_per_token * tps / 1e9;
  double left = clock_.update(c.progress, ProgressClock::Clock::now());
  // The first line of a launch: this step's time for each step left, until there is a pace.
  if (!std::isfinite(left) && !c.scaled) {
    left = static_cast<double>(c.max_steps - static_cast<int64_t>(c.step)) * s.seconds;
  }
  log_.info(progress_line(s, c, tps, gflops, left));
  const nlohmann::json record = step_record(s, c, tps, gflops, left);
  write_metrics(record.dump());
  tensorboard_step(record);
}

void StepReporter::held_out(uint64_t step, double loss) {
  if (!leader_) return;
  log_.info("step ", step, " | held-out loss ", loss);
  write_metrics(nlohmann::json{{"step", step}, {"val_loss", loss}}.dump());
  if (tensorboard_) {
    tensorboard_->add_scalar("eval/loss", static_cast<int64_t>(step), loss);
    flush_tensorboard();
  }
}

void StepReporter::relaunch_record(uint64_t step, int world, const ElasticLaunch& l) {
  nlohmann::json j = {{"step", step},           {"event", "relaunch"},      {"restart", l.restart},
                      {"reason", l.reason},     {"world_before", l.prev_world}, {"world_after", world}};
  if (l.last_step >= 0) {
    j["steps_lost"] = std::max<int64_t>(0, l.last_step - static_cast<int64_t>(step));
  }
  write_metrics(j.dump());
}

void StepReporter::write_trace(Tracer& tracer, const Group& group) {
  const std::string& path = config_.log().trace_file();
  if (path.empty()) return;
  tracer.write_merged(group, path);
  if (leader_) log_.info("wrote the trace of ", group.size(), " rank(s) to ", path);
}

}  // namespace etr
