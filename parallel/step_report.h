// What the training loop reports (parallel/train_session.h): the progress line and the
// metrics (JSON lines) of rank 0, and the merged Chrome trace of every rank.
//
//   step    12/400   3% ETA 1m47s | loss 4.1234 | lr 3.000e-04 | norm 0.912 |   21345 tok/s |
//   95.9 ms | 12.34 GFLOP/s | peak 1.2 GiB | comm 3.1 ms, exposed 0.4 ms, hidden 87%
//
// With log.tensorboard_dir, rank 0 also writes the same numbers as TensorBoard scalars,
// and launches, decisions and checkpoint saves as text (parallel/step_tensorboard.cc).
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "checkpoint/checkpoint_writer.h"
#include "parallel/engine.h"
#include "parallel/progress_clock.h"
#include "runtime/config/train_config.h"
#include "runtime/elastic.h"
#include "runtime/group.h"
#include "runtime/log.h"
#include "runtime/tensorboard_writer.h"
#include "runtime/trace.h"

namespace etr {

struct StepStats {
  double loss = 0;  // mean over the global batch's tokens (every rank has it)
  double lr = 0;
  double grad_norm = 0;
  double seconds = 0;
  // This rank's forward and backward seconds in the step (what batch.shares = throughput
  // divides its samples by; ETR_SLOW_RANK's factor included).
  double compute_seconds = 0;
  // Gradient communication (nothing on one rank): see parallel/bucket_reducer.h.
  ReduceStats comm;
  // Some rank had a resize request (SIGUSR1 from etr-run) when the step's sums were
  // taken: every rank sees the same value.
  bool resize = false;
  // Some rank had a stop request (SIGTERM, SIGINT, or SIGUSR2 from etr-run): likewise.
  bool stop = false;
  // The loss or gradient norm was not finite and optimizer.skip_nonfinite_steps let the
  // step be skipped: parameters and moments are as before it (the data moved on).
  bool skipped = false;
  // A pipeline (parallel.pp > 1): the measured bubble (1 - compute / wall of the
  // schedule's actions, mean over the ranks), the schedule's theory, and the mean time a
  // rank waited in the gradient norm's sum over the stages (the clipping's stall).
  // The plan the step ran with (this rank's micro-batch and accumulation, after any
  // out-of-memory recovery inside it), and its memory model's peak.
  int64_t micro_batch = 0;
  int64_t accumulation = 0;
  size_t predicted_peak = 0;
  size_t peak_bytes = 0;    // the allocator's peak at the step's end (since the last re-plan)
  // On a GPU: device memory the job holds by the driver's count (cudaMemGetInfo's used
  // bytes now less before the session began: the allocator's blocks, cuBLAS's workspace,
  // the kernels' modules), the most at any step's end so far. 0 on the host.
  size_t device_peak_bytes = 0;
  bool recompute = false;   // activation recomputation in the step
  // An automatic global batch: the B the step ran with (0 otherwise), and the gradient
  // noise scale after it (NaN before the first estimate).
  int64_t global_batch = 0;
  double noise_scale = std::nan("");
  double bubble = -1;
  double bubble_theory = 0;
  double norm_wait_seconds = 0;
};

struct RunSummary {
  int64_t start_step = 0;  // the step training started (or resumed) from
  int64_t steps = 0;       // steps run by this run() call
  double first_loss = 0;
  double final_loss = 0;
  double final_val_loss = -1;  // -1: never evaluated
  double seconds = 0;
  double tokens_per_second = 0;
  size_t peak_bytes = 0;
  size_t device_peak_bytes = 0;  // StepStats::device_peak_bytes at the end
  int64_t oom_recoveries = 0;  // steps redone after an out-of-memory error
  int64_t memory_replans = 0;  // micro-batch changes for the memory budget
  // StepStats::comm summed over comm_steps steps (all but the first, which warms up).
  ReduceStats comm;
  int64_t comm_steps = 0;
  int64_t skipped_steps = 0;  // StepStats::skipped in this run() call
  std::string sample;
  // The run stopped early for etr-run to relaunch it at another size (a checkpoint of the
  // last step was saved); the program should exit with kResizeExitCode.
  bool resized = false;
  // The run stopped early on a stop request (a durable checkpoint of the last step was
  // saved, or tried); the program should exit with 128 + stop_signal, or 1 when that
  // save was tried and failed (stop_save_failed).
  bool stopped = false;
  int stop_signal = 0;  // SIGUSR2 under etr-run; else this rank's, SIGTERM without one
  bool stop_save_failed = false;  // the stop's checkpoint was tried and not saved
};

// The numbers of a step the progress line shows beside StepStats.
struct StepContext {
  uint64_t step = 0;            // steps completed
  int64_t max_steps = 0;        // schedule.max_steps
  // The fraction of the run done, in [0, 1]: step / max_steps, or with an automatic
  // global batch its scale-invariant progress / max_steps (then `scaled` is set and the
  // line shows no "/max_steps").
  double progress = 0;
  bool scaled = false;
  double tokens = 0;            // tokens in the global batch
  double flops_per_token = 0;   // of the model (0: no GFLOP/s figure)
  int64_t global_batch = 0;     // the plan's (a step's own, with an automatic one, is in StepStats)
  int64_t oom_recoveries = 0;   // steps redone after an out-of-memory error, so far
  int64_t replans = 0;          // micro-batch changes for the memory budget, so far
  size_t budget = 0;            // the allocator's budget
  std::vector<uint64_t> shares; // each data-parallel rank's samples of the global batch
  bool communicates = false;    // data parallel: show the gradient communication
  int64_t skipped_steps = 0;    // non-finite steps skipped so far
  EngineMemory memory;          // what a rank holds (ZeRO: the shards), for the metrics
  // A pipeline: the activations each stage planned (activations, scratch, transfers).
  std::vector<double> stage_activation_bytes;
  int world = 0;  // ranks in the job
};

class StepReporter {
 public:
  // Rank 0 (`leader`) opens log.metrics_file, appending when `resumed` (a resumed run
  // continues the metrics of the run it resumes), and a new event file in
  // log.tensorboard_dir; IoError when it cannot.
  StepReporter(const TrainConfig& config, Logger& log, bool leader, bool resumed);
  ~StepReporter();

  // The progress line and its metrics record (rank 0).
  void step(const StepStats& s, const StepContext& c);
  // "step 12 | held-out loss 3.21" and its metrics record (rank 0).
  void held_out(uint64_t step, double loss);
  // Collective over `group`: writes the trace (log.trace_file) when tracing.
  void write_trace(Tracer& tracer, const Group& group);
  void write_metrics(const std::string& json_line);

  // TensorBoard (rank 0, with log.tensorboard_dir; no-ops otherwise). Each call writes
  // its records through to the event file; one that cannot be written is logged once and
  // ends the TensorBoard output, not the training.
  // This process starts training at `step` on `world` ranks: the text "elastic/launch"
  // (under etr-run, `launch`: which relaunch, why, old and new world, the step resumed
  // from); a relaunch also gets a metrics record (not only with TensorBoard): {"step":
  // resumed step, "event": "relaunch", "restart", "reason", "world_before", "world_after",
  // "steps_lost" (when known)}.
  void launched(uint64_t step, int world, const ElasticLaunch* launch,
                const std::optional<std::filesystem::path>& resumed_from);
  // A decision of the batch policy or the memory plan, as text under `tag`
  // ("batch/decisions", "memory/decisions") at `step`.
  void decision(uint64_t step, const std::string& tag, const std::string& text);
  // The checkpoint saves in `stats` not reported yet (CheckpointWriter::stats(), which
  // only grows): "checkpoint/stall_ms", "checkpoint/write_s", "checkpoint/bytes" at the
  // saved step, a text line each, and a metrics record each.
  void checkpoints(const std::vector<SaveStats>& stats);

 private:
  void relaunch_record(uint64_t step, int world, const ElasticLaunch& launch);
  // Every number of a step's metrics record, as TensorBoard scalars of its step.
  void tensorboard_step(const nlohmann::json& record);
  void flush_tensorboard();

  const TrainConfig& config_;
  Logger& log_;
  bool leader_;
  std::ofstream metrics_;
  ProgressClock clock_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  size_t saves_reported_ = 0;
};

// The text of `args` as the Logger would print them (for a line both logged and reported).
template <typename... Args>
std::string to_text(const Args&... args) {
  std::ostringstream s;
  (s << ... << args);
  return s.str();
}

// "nan", "inf" or "-inf".
std::string nonfinite_text(double x);

}  // namespace etr
