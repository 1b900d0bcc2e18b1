// BatchController (batch_controller.h): the plan and the micro-batch the memory holds, the
// one re-planning path, the recovery from an out-of-memory error. The shares, the automatic
// global batch and the recomputation trial are in batch_goodput.cc.
#include "parallel/batch_controller.h"

#include <algorithm>

#include "parallel/process_grid.h"
#include "parallel/step_report.h"
#include "runtime/bytes.h"
#include "runtime/control_ops.h"
#include "runtime/error.h"

namespace etr {
namespace {

class GridPeers final : public BatchPeers {
 public:
  explicit GridPeers(const ProcessGrid& grid) : grid_(grid) {}
  int dp_rank() const override { return grid_.dp_rank(); }
  int dp_size() const override { return grid_.dp_size(); }
  int world_size() const override { return grid_.size(); }
  bool leader() const override { return grid_.rank() == 0; }
  int64_t min_over_world(int64_t mine, const char* what) override {
    if (grid_.size() > 1) control::allreduce(&mine, 1, MPI_INT64_T, MPI_MIN, grid_.world_group().comm(), what);
    return mine;
  }
  std::vector<int64_t> gather_dp(std::span<const int64_t> mine, const char* what) override {
    std::vector<int64_t> all(mine.size() * static_cast<size_t>(grid_.dp_size()));
    control::allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                       grid_.dp_group().comm(), what);
    return all;
  }
  std::vector<double> gather_dp(std::span<const double> mine, const char* what) override {
    std::vector<double> all(mine.size() * static_cast<size_t>(grid_.dp_size()));
    control::allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                       grid_.dp_group().comm(), what);
    return all;
  }

 private:
  const ProcessGrid& grid_;
};

// The micro-batch of the first plan: batch.micro_batch, or 1 when automatic (start() picks it).
int64_t initial_micro_batch(const TrainConfig& c) { return std::max(1, c.batch().micro_batch()); }

}  // namespace

std::unique_ptr<BatchPeers> grid_peers(const ProcessGrid& grid) { return std::make_unique<GridPeers>(grid); }

BatchController::BatchController(const TrainConfig& config, BatchPeers& peers, Allocator& alloc,
                                 Logger& log, BatchHooks hooks, BatchLayout layout)
    : config_(config), peers_(peers), alloc_(alloc), log_(log), hooks_(std::move(hooks)), layout_(layout) {
  plan_.emplace(plan_data_parallel_batch(initial_global_batch(config_, peers_.dp_size()), peers_.dp_size(),
                                         initial_micro_batch(config_), layout_.train_samples));
}

BatchController::~BatchController() = default;

void BatchController::set_train_samples(uint64_t samples) {
  layout_.train_samples = samples;
  plan_.emplace(plan_data_parallel_batch(initial_global_batch(config_, peers_.dp_size()), peers_.dp_size(),
                                         initial_micro_batch(config_), samples));
}

void BatchController::start(MemoryModel model) {
  model_ = std::move(model);
  recompute_ = config_.runtime().recompute() == "blocks";
  if (layout_.memory_halvings > 0 && peers_.leader()) {
    log_.warn("etr-run relaunched the job after the kernel's out-of-memory killer ended a rank: "
              "the micro-batch is halved ", layout_.memory_halvings, " time(s), to at most ",
              micro_batch_cap());
  }
  if (hooks_.read_budget) hooks_.read_budget();
  replan(Replan::kStart, fit_micro_batch(micro_batch_cap()));
  if (config_.batch().micro_batch() > 0 && micro_batch_ < micro_batch_cap()) {
    log_.warn("rank ", peers_.dp_rank(), ": batch.micro_batch = ", micro_batch_cap(),
              " does not fit the memory budget of ", format_bytes(static_cast<double>(budget())),
              " (its planned peak is ", format_bytes(static_cast<double>(model_.peak(micro_batch_cap(), recompute_))),
              "); running micro-batches of ", micro_batch_, " instead, the global batch unchanged");
  }
  setup_shares();
  setup_goodput();
  setup_trial();
}

// The one path of a new plan (its shares set by the caller): the old plan's activations
// back, every rank's micro-batch agreed, the engines told, and the allocator's peak from here on the new plan's
// (the run's peak keeps the old one).
void BatchController::replan(Replan why, int64_t b) {
  if (why != Replan::kStart && hooks_.release_activations) hooks_.release_activations();
  apply_micro_batch(agree_micro_batch(b));
  if (why != Replan::kStart) restart_peak();
}

double BatchController::margin() const {
  return config_.batch().micro_batch() == 0 ? config_.batch().memory_margin() : 0.0;
}

uint64_t BatchController::accumulation_for(int64_t b) const {
  const uint64_t n = rank_batch().samples();
  return (n + static_cast<uint64_t>(b) - 1) / static_cast<uint64_t>(b);
}

int64_t BatchController::micro_batch_cap() const {
  const int64_t share = static_cast<int64_t>(rank_batch().samples());
  const int64_t configured = config_.batch().micro_batch();
  if (configured == 0) return share;
  return std::min(share, std::max<int64_t>(1, configured >> layout_.memory_halvings));
}

// The largest micro-batch <= `most` whose planned peak fits the budget (less the margin
// when automatic); with runtime.recompute = auto, recomputation when b = 1 does not fit
// otherwise. 0 when nothing fits.
int64_t BatchController::fit_micro_batch(int64_t most) {
  if (layout_.pipeline) return fit_pipeline_micro_batch(most, budget(), margin());
  const std::string& rc = config_.runtime().recompute();
  int64_t b = model_.largest_fitting(budget(), margin(), most, recompute_);
  if (b == 0 && !recompute_ && rc == "auto") {
    const int64_t with = model_.largest_fitting(budget(), margin(), most, true);
    recompute_ = true;  // (when nothing fits either way, the sentence gives its figure)
    if (with > 0 && peers_.leader()) log_.info("activation recomputation on: without it not even a micro-batch of 1 fits");
    b = with;
  }
  return b;
}

// A pipeline's schedule takes only some micro-batch counts (interleaved: multiples of the
// stages): the largest b <= most whose count it takes and whose peak fits, from the top.
int64_t BatchController::fit_pipeline_micro_batch(int64_t most, size_t budget, double margin) const {
  const double usable = (1.0 - margin) * static_cast<double>(budget);
  for (int64_t b = most; b >= 1; --b) {
    try {
      if (static_cast<double>(model_.peak(b, false)) <= usable) return b;
    } catch (const ConfigError&) {
      // this b gives a micro-batch count the schedule cannot run
    }
  }
  return 0;
}

// Collective over the world: every rank's micro-batch (the smallest under a pipeline,
// whose stages run the same micro-batches). OutOfMemory with a sentence when some rank
// has none that fits (`mine` = 0).
int64_t BatchController::agree_micro_batch(int64_t mine) {
  const int64_t lowest = peers_.min_over_world(mine, "the micro-batch agreement (batch_controller)");
  if (lowest >= 1) return layout_.pipeline ? lowest : mine;
  const bool here = mine < 1;
  const MemoryStats s = alloc_.stats();
  throw OutOfMemory(
      "not even a micro-batch of 1 sequence of " + std::to_string(config_.model().seq_len()) + " tokens fits" +
          (recompute_ ? " with activation recomputation" : "") +
          (here ? ": this rank would need " + format_bytes(static_cast<double>(model_.peak(1, recompute_))) +
                      " (" + model_.dominant(1, recompute_) + " the most) under a budget of " +
                      format_bytes(static_cast<double>(s.budget))
                : " on another rank") +
          (layout_.on_gpu ? "; free the GPU of other processes (or raise ETR_CUDA_MEMORY_BUDGET), "
                            "use a smaller model, or shorten model.seq_len."
                          : "; raise runtime.memory_budget (or the job's memory limit), use more "
                            "ranks with a higher parallel.zero_stage, or shorten model.seq_len."),
      here ? model_.peak(1, recompute_) : 0, s.in_use, s.peak, s.budget);
}

// A plan with micro-batch b on this rank (every rank with its own b). ZeRO stage 3
// gathers each layer's parameters in every micro-batch's forward and backward,
// collectively: there every rank runs as many micro-batches (equal_counts), or a rank
// would wait in a gather that another never joins.
void BatchController::apply_micro_batch(int64_t b) {
  const int64_t most = !layout_.same_counts
                           ? b
                           : model_.largest_fitting(budget(), margin(),
                                                    static_cast<int64_t>(rank_batch().samples()), recompute_);
  const int64_t mine[2] = {b, std::max(most, b)};
  const std::vector<int64_t> both = peers_.gather_dp(mine, "the ranks' batch limits (batch_controller)");
  std::vector<RankBatch> ranks;
  std::vector<int64_t> memory;
  for (int r = 0; r < peers_.dp_size(); ++r) {
    const uint64_t n = plan_->rank(r).samples();
    const uint64_t mb = std::min<uint64_t>(static_cast<uint64_t>(both[2 * static_cast<size_t>(r)]), n);
    const uint64_t k = (n + mb - 1) / mb;
    const uint64_t last = n - mb * (k - 1);
    ranks.push_back({mb, k, last == mb ? 0 : last});
    memory.push_back(both[2 * static_cast<size_t>(r) + 1]);
  }
  if (layout_.same_counts) ranks = equal_counts(std::move(ranks), memory);
  plan_.emplace(plan_->global_batch(), std::move(ranks));
  // The activations hold the larger of b and the plan's (equal counts may raise it).
  micro_batch_ = std::max<int64_t>(b, static_cast<int64_t>(rank_batch().micro_batch));
  if (hooks_.planned) hooks_.planned(micro_batch_);
}

// Every rank's share in the same number k of micro-batches: the most any rank needs for
// its memory, or fewer when a share cannot be cut in that many (fewer samples than
// pieces; 4 in 3 pieces of ceil(4 / 3)). Rank r's pieces are ceil(n_r / k) samples, the
// last one shorter; ConfigError when that is more than memory[r], the most that fits rank r.
std::vector<RankBatch> BatchController::equal_counts(std::vector<RankBatch> ranks,
                                                     const std::vector<int64_t>& memory) const {
  auto cuts = [&](uint64_t k) {
    for (const RankBatch& r : ranks) {
      const uint64_t n = r.samples(), b = (n + k - 1) / k;
      if (b * (k - 1) >= n) return false;
    }
    return true;
  };
  uint64_t k = 0;
  for (const RankBatch& r : ranks) k = std::max(k, r.accumulation);
  while (k > 1 && !cuts(k)) --k;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const uint64_t n = ranks[i].samples(), b = (n + k - 1) / k;
    if (b > static_cast<uint64_t>(memory[i])) {
      throw ConfigError("at parallel.zero_stage = 3 every rank runs the same number of micro-batches "
                        "(each gathers the parameters), so rank " + std::to_string(i) + " would run " +
                        std::to_string(b) + " of its " + std::to_string(n) + " samples at once, more "
                        "than the " + std::to_string(memory[i]) + " its memory holds; make "
                        "batch.global_batch a multiple of the ranks, or give the job more memory.");
    }
    const uint64_t last = n - b * (k - 1);
    ranks[i] = {b, k, last == b ? 0 : last};
  }
  return ranks;
}

// Hysteresis: a smaller micro-batch as soon as the plan no longer fits; a larger one only
// when its peak leaves another 5 % of the budget free (the largest that does), so a budget
// that wavers (a cgroup's share less the memory outside the allocator) does not re-plan
// every step.
bool BatchController::budget_wants_replan() {
  if (hooks_.read_budget) hooks_.read_budget();
  return wanted_micro_batch() != micro_batch_;
}

// The micro-batch this rank wants under the budget last read, with the hysteresis above.
// A rank that ran out of memory keeps the micro-batch it recovered with until the budget
// grows past what it was then: the memory model fitted the one that failed, so it cannot
// be trusted to (the failure may have come from memory it does not count).
int64_t BatchController::wanted_micro_batch() {
  if (oom_cap_ > 0 && budget() > oom_budget_) oom_cap_ = 0;
  int64_t best = fit_micro_batch(micro_batch_cap());
  if (oom_cap_ > 0) best = std::min(best, oom_cap_);
  if (best <= micro_batch_) return best;
  const double roomy_margin = margin() + 0.05;
  const int64_t roomy = layout_.pipeline ? fit_pipeline_micro_batch(best, budget(), roomy_margin)
                                         : model_.largest_fitting(budget(), roomy_margin, best, recompute_);
  return std::max(roomy, micro_batch_);
}

// Every rank alike: the step starts again with half the micro-batch and twice the
// accumulation (the same samples, the same global batch and learning rate); at 1, with
// activation recomputation; after that, the sentence of agree_micro_batch.
void BatchController::recover_from_oom(uint64_t step, const std::string& failure) {
  if (!failure.empty()) log_.warn("step ", step, ": rank ", peers_.dp_rank(), ": ", failure);
  if (hooks_.release_activations) hooks_.release_activations();
  alloc_.release_cached();  // a GPU's cached blocks back to CUDA before the retry
  ++oom_recoveries_;
  int64_t b = std::max<int64_t>(1, micro_batch_ / 2);
  if (micro_batch_ == 1) {
    const bool can = config_.runtime().recompute() != "off" && !recompute_;
    if (!can) b = 0;  // agree_micro_batch says what would fit
    recompute_ = can;
  }
  replan(Replan::kOutOfMemory, b);
  if (!failure.empty()) {
    oom_cap_ = micro_batch_;
    oom_budget_ = budget();
  }
  const RankBatch& r = rank_batch();
  decide(step, "memory/decisions",
         to_text("step ", step, ": out of memory inside the step (", oom_recoveries_,
                 " so far); every rank discards it and runs it again with micro-batch ", r.micro_batch,
                 " x ", r.accumulation, (recompute_ ? ", recomputing activations" : ""),
                 ", the global batch ", plan_->global_batch(), " and the learning rate unchanged"),
         /*warn=*/true);
}

void BatchController::after_step(const StepOutcome& o) {
  if (o.replan) {
    const int64_t before = micro_batch_;
    replan(Replan::kBudget, wanted_micro_batch());
    ++replans_;
    if (micro_batch_ != before) {
      const RankBatch& r = rank_batch();
      decide(o.step, "memory/decisions",
             to_text("step ", o.step, ": the memory budget changed; micro-batch ", before, " -> ",
                     r.micro_batch, " x ", r.accumulation, " (rank 0; planned peak ",
                     format_bytes(static_cast<double>(predicted_peak())), " of ",
                     format_bytes(static_cast<double>(budget())), ")"));
    }
  }
  balance_shares(o.step, o.compute_seconds);
  trial_step(o.step, o.summed_compute_seconds, static_cast<double>(plan_->global_batch()));
  if (goodput_) goodput_after_step(o);
}

void BatchController::decide(uint64_t step, const std::string& tag, const std::string& text, bool warn) {
  if (!peers_.leader()) return;
  if (warn) {
    log_.warn(text);
  } else {
    log_.info(text);
  }
  if (hooks_.decision) hooks_.decision(step, tag, text);
}

void BatchController::restart_peak() {
  earlier_peak_ = std::max(earlier_peak_, alloc_.stats().peak);
  alloc_.reset_peak();
}

std::vector<std::string> BatchController::plan_table() const {
  return model_.plan_table(budget(), margin(), micro_batch_cap(),
                           config_.runtime().recompute() != "off" && !layout_.pipeline);
}

}  // namespace etr
