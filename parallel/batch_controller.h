// BatchController: the batch policy of a training job in one place (docs/design.md,
// "Adaptive batch sizing"):
//   - the plan: each data-parallel rank's share of the global batch as micro-batches
//     (parallel/batch_policy.h);
//   - the micro-batch: batch.micro_batch, or with `auto` the largest whose planned peak
//     (parallel/memory_model.h) fits the budget less batch.memory_margin; lowered as soon as
//     the budget (re-read at every step boundary) no longer holds it, raised again when a
//     larger one leaves another 5 % free; activation recomputation when not even 1 fits;
//   - the recovery from an out-of-memory error inside a step: half the micro-batch, twice
//     the accumulation, the same samples and learning rate; at 1, recomputation; after
//     that the sentence that says what would fit;
//   - the shares (batch.shares = throughput): each rank's share follows its measured speed
//     (parallel/share_balancer.h);
//   - the automatic global batch (batch.global_batch = auto): the gradient noise scale and
//     the step times choose B (parallel/goodput.h), the learning rate follows the
//     schedule's scale-invariant progress (batch_goodput.cc);
//   - the recomputation trial (runtime.recompute = auto with an automatic micro-batch):
//     two steps without and two with, the faster kept (batch_goodput.cc).
// Every change of the plan goes through replan(reason): the activations are given back,
// every rank's micro-batch agreed, the plan made, the engines told (BatchHooks::planned),
// the allocator's peak restarted, and the decision logged.
//
// The controller knows nothing of the session: its peers (BatchPeers: the collectives its
// decisions are agreed by), the allocator whose budget it plans against, the memory model
// and what a new plan asks of the engines (BatchHooks) are given to it, so a test drives it
// with injected budgets, step times and gradient norms (tests/unit/batch_controller_test).
// Collective: every rank calls the same methods in the same order with the numbers of the
// step's agreed sums, so every rank takes the same decisions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/manifest.pb.h"
#include "parallel/batch_policy.h"
#include "parallel/checkpoint_cadence.h"
#include "parallel/memory_model.h"
#include "parallel/share_balancer.h"
#include "runtime/allocator.h"
#include "runtime/config/train_config.h"
#include "runtime/log.h"

namespace etr {

class ProcessGrid;

// The ranks a batch decision is agreed with. The collectives wait with the collective
// timeout and name `what` in their error (runtime/control_ops.h).
class BatchPeers {
 public:
  virtual ~BatchPeers() = default;
  virtual int dp_rank() const = 0;
  virtual int dp_size() const = 0;
  virtual int world_size() const = 0;
  // Rank 0 of the world: it logs the decisions.
  virtual bool leader() const = 0;
  virtual int64_t min_over_world(int64_t mine, const char* what) = 0;
  // Every data-parallel rank's values, rank after rank.
  virtual std::vector<int64_t> gather_dp(std::span<const int64_t> mine, const char* what) = 0;
  virtual std::vector<double> gather_dp(std::span<const double> mine, const char* what) = 0;
};

// The peers of a ProcessGrid, through runtime/control_ops.h.
std::unique_ptr<BatchPeers> grid_peers(const ProcessGrid& grid);

// What a plan needs of the job around it.
struct BatchHooks {
  // Re-reads the memory budget into the allocator (a session: the job's cgroup share, the
  // device's free memory, a test's cut). Null: the allocator's budget stands.
  std::function<void()> read_budget;
  // Before a new plan: the activations of the old one go back to the allocator.
  std::function<void()> release_activations;
  // After a new plan with this rank's micro-batch (a pipeline's schedule, ZeRO's gradient
  // mode). Collective.
  std::function<void(int64_t micro_batch)> planned;
  // A decision's line, also as TensorBoard text under `tag` (leader only).
  std::function<void(uint64_t step, const std::string& tag, const std::string& text)> decision;
};

// The job's layout, as far as the batch policy cares.
struct BatchLayout {
  bool pipeline = false;          // parallel.pp > 1: every stage runs the same micro-batches
  bool same_counts = false;       // ZeRO-3 without a pipeline: every rank runs as many micro-batches
  bool on_gpu = false;            // the sentences name the GPU's settings
  int memory_halvings = 0;        // ETR_RUN_MEMORY_HALVINGS: etr-run's after the OOM killer
  uint64_t train_samples = 0;     // the data's distinct samples (0: not checked)
};

// Why the plan changes (replan's argument; also in the logged line).
enum class Replan {
  kStart,          // the first plan, from the memory model
  kBudget,         // the budget moved at a step boundary
  kOutOfMemory,    // a step ran out of memory: half the micro-batch
  kShares,         // the ranks' speeds moved the shares
  kRecompute,      // the recomputation trial switched
  kGlobalBatch,    // the automatic global batch chose another B
};

// The agreed numbers of a finished step (parallel/step_agreement.h).
struct StepOutcome {
  uint64_t step = 0;                // the step just finished (1-based)
  uint64_t samples_seen = 0;        // the data position after it
  bool replan = false;              // some rank's budget asks for another micro-batch
  double compute_seconds = 0;       // this rank's forward and backward
  double summed_compute_seconds = 0;  // over the ranks
  double summed_noise_term = 0;     // the automatic global batch's n_r |g_r|^2 summed
  double summed_optimizer_seconds = 0;
  int ranks = 1;                    // the ranks the sums ran over
  double grad_norm = 0;             // of the summed gradient
};

class BatchController {
 public:
  // The first plan (the configured or automatic global batch, micro-batch batch.micro_batch
  // or 1 until start()). ConfigError when the batch does not fit the ranks or the data.
  BatchController(const TrainConfig& config, BatchPeers& peers, Allocator& alloc, Logger& log,
                  BatchHooks hooks, BatchLayout layout);
  ~BatchController();
  BatchController(const BatchController&) = delete;
  BatchController& operator=(const BatchController&) = delete;

  // The data's distinct samples are known: the plan checked against them.
  void set_train_samples(uint64_t samples);
  // With the engines built: the memory model, and the micro-batch it fits under the budget
  // (collective); then the shares, the automatic global batch and the recomputation trial
  // as configured. OutOfMemory with a sentence when not even 1 fits anywhere.
  void start(MemoryModel model);

  const BatchPlan& plan() const { return *plan_; }
  const RankBatch& rank_batch() const { return plan_->rank(peers_.dp_rank()); }
  uint64_t global_batch() const { return plan_->global_batch(); }
  // The micro-batch this rank's activations hold (>= its plan's when equal counts raise it).
  int64_t micro_batch() const { return micro_batch_; }
  // The most the micro-batch may be: batch.micro_batch (halved by etr-run after an OOM
  // kill), or the whole share when automatic.
  int64_t micro_batch_cap() const;
  // Micro-batches of b that this rank's share takes.
  uint64_t accumulation_for(int64_t b) const;
  bool recompute() const { return recompute_; }
  const MemoryModel& memory_model() const { return model_; }
  size_t predicted_peak() const { return model_.peak(micro_batch_, recompute_); }
  // The memory model's table at the budget (what `etr-train --plan` prints).
  std::vector<std::string> plan_table() const;
  // The first step of the current global batch (the data position counts from there).
  const BatchOrigin& origin() const { return origin_; }
  void set_origin(const BatchOrigin& o) { origin_ = o; }

  // The step boundary, before the step's sums: the budget re-read; true when this rank
  // wants another micro-batch (it rides on the sums: StepOutcome::replan).
  bool budget_wants_replan();
  // Every rank alike after a step whose sums carried an out-of-memory error: the step runs
  // again with half the micro-batch (at 1, with recomputation). `failure` is this rank's
  // error ("" when another rank failed). OutOfMemory when nothing smaller is left.
  void recover_from_oom(uint64_t step, const std::string& failure);
  // After a step: a re-plan when asked, the shares, the recomputation trial, the automatic
  // global batch, each in that order (collective).
  void after_step(const StepOutcome& o);

  // The automatic global batch and the schedule.
  bool automatic_global_batch() const { return goodput_ != nullptr; }
  // Whether the step's compute time decides something (a GPU then waits for it).
  bool times_steps() const { return goodput_ || balancer_ || trial_active(); }
  // The step's learning rate: the schedule at `step`, or with an automatic global batch at
  // the scale-invariant progress times the rule's gain (the progress then advances).
  double learning_rate(uint64_t step);
  bool finished(uint64_t step) const;
  double progress_fraction(uint64_t step) const;
  double schedule_progress(uint64_t step) const;
  double noise_scale() const;  // NaN before there is one, or without the automatic batch
  // One rank with an automatic global batch: |gradient|^2 after the first of k >= 2
  // micro-batches of the step (its noise sample).
  void first_micro_batch(double grad_sq_norm, uint64_t samples);
  bool wants_first_micro_batch() const;
  // This rank's term of the step's sums: n_r |g_r|^2 from its gradient's |g_r|^2 before
  // the reduction (0 on one rank).
  double local_noise_term(double local_grad_sq_norm) const;
  ckpt::BatchPolicy policy_state() const;
  // A resumed job: the origin of the current global batch and, automatic, the checkpoint's
  // B, progress and noise averages.
  void restore_policy(const ckpt::Manifest& m);

  int64_t oom_recoveries() const { return oom_recoveries_; }
  int64_t replans() const { return replans_; }
  int64_t rebalances() const { return rebalances_; }
  int trial_phase() const { return trial_.phase; }
  bool trial_active() const { return trial_.phase == 1 || trial_.phase == 2; }
  // The allocator's highest peak over the plans so far (each plan restarts it).
  size_t peak_before_replans() const { return earlier_peak_; }

 private:
  struct Goodput;
  struct GoodputDeleter {
    void operator()(Goodput* g) const;
  };
  // The one path of every change of the plan (its shares already set): `b` this rank's
  // wanted micro-batch.
  void replan(Replan why, int64_t b);
  int64_t fit_micro_batch(int64_t most);
  int64_t fit_pipeline_micro_batch(int64_t most, size_t budget, double margin) const;
  int64_t agree_micro_batch(int64_t mine);
  void apply_micro_batch(int64_t b);
  std::vector<RankBatch> equal_counts(std::vector<RankBatch> ranks, const std::vector<int64_t>& memory) const;
  int64_t wanted_micro_batch();
  double margin() const;
  size_t budget() const { return alloc_.stats().budget; }
  void restart_peak();
  void decide(uint64_t step, const std::string& tag, const std::string& text, bool warn = false);
  // batch_goodput.cc
  void setup_goodput();
  void setup_shares();
  void setup_trial();
  void balance_shares(uint64_t step, double compute_seconds);
  void trial_step(uint64_t step, double compute, double samples);
  void goodput_after_step(const StepOutcome& o);
  void set_global_batch(uint64_t B, uint64_t step, uint64_t samples_seen);

  const TrainConfig& config_;
  BatchPeers& peers_;
  Allocator& alloc_;
  Logger& log_;
  BatchHooks hooks_;
  BatchLayout layout_;
  std::optional<BatchPlan> plan_;
  BatchOrigin origin_;
  MemoryModel model_;
  int64_t micro_batch_ = 0;
  bool recompute_ = false;
  int64_t oom_cap_ = 0;    // after this rank ran out of memory: its micro-batch then (0: none)
  size_t oom_budget_ = 0;  // and the budget then
  int64_t oom_recoveries_ = 0, replans_ = 0, rebalances_ = 0;
  size_t earlier_peak_ = 0;
  std::unique_ptr<ShareBalancer> balancer_;
  std::unique_ptr<Goodput, GoodputDeleter> goodput_;
  struct Trial {
    int phase = 0;  // 0 none, 1 timing without, 2 timing with, 3 decided
    int steps = 0;  // steps at the current choice
    int64_t without = 0, with = 0;
    double seconds_without = 0, seconds_with = 0;  // per sample, summed over the timed steps
  } trial_;
};

// The global batch of the first plan: batch.global_batch, or batch.min_global_batch (at
// least one sample per data-parallel rank) when automatic.
int64_t initial_global_batch(const TrainConfig& config, int dp);

}  // namespace etr
