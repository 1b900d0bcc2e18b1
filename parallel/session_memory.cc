// TrainSession: the batch policy's memory side (train_session.h, "Memory"): the budget,
// the memory model, the micro-batch it picks, the activations taken at the start of each
// step and given back at its end, and the recovery from an out-of-memory error.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "parallel/train_session.h"
#include "runtime/bytes.h"
#include "runtime/cpu_affinity.h"
#include "runtime/mpi_check.h"
#include "runtime/env.h"
#include "runtime/control_ops.h"

namespace etr {
namespace {

// ETR_RUN_MEMORY_HALVINGS (set by etr-run after the kernel's OOM killer ended a rank):
// how many times to halve the micro-batch. 0 when unset.
int memory_halvings() {
  const char* v = env_value(EnvNames::kRunMemoryHalvings);
  if (!v || !*v) return 0;
  int n = 0;
  const std::string_view s(v);
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || end != s.data() + s.size() || n < 0 || n > 62) {
    throw ConfigError("ETR_RUN_MEMORY_HALVINGS='" + std::string(s) +
                      "' is not a number of halvings in [0, 62]");
  }
  return n;
}

}  // namespace

size_t TrainSession::read_budget() {
  const MemoryBudget::Reading r = budget_->read(alloc_.stats().reserved);
  size_t bytes = r.bytes;
  // During step s = position_.step + 1; a boundary cut is seen at the end of the step before.
  const int64_t now = static_cast<int64_t>(position_.step) + (faults_.budget_cut.boundary ? 2 : 1);
  const bool cut = faults_.budget_cut.step > 0 && now >= faults_.budget_cut.step;
  // On a GPU the test's cut is the device's (the model's memory is there).
  if (device().is_cuda()) read_device_budget(cut ? faults_.budget_cut.bytes : SIZE_MAX);
  if (cut && !device().is_cuda()) {
    bytes = std::min(bytes, faults_.budget_cut.bytes);
  }
  if (bytes != alloc_.stats().budget) {
    // A change of more than 5 % since the last one logged (a cgroup's share moves a little
    // with the memory outside the allocator); not the first reading (the allocator's own
    // default comes before it).
    const double moved = std::fabs(static_cast<double>(bytes) - static_cast<double>(logged_budget_));
    if (budget_read_ && moved > 0.05 * static_cast<double>(logged_budget_)) {
      const bool was_cut = bytes < r.bytes;
      log_.info("rank ", grid_->rank(), ": memory budget ",
                format_bytes(static_cast<double>(logged_budget_)), " -> ",
                format_bytes(static_cast<double>(bytes)), " (",
                was_cut ? std::string("ETR_TEST_BUDGET_CUT") : r.describe(), ")");
      logged_budget_ = bytes;
    }
    alloc_.set_budget(bytes);
  }
  if (!budget_read_) logged_budget_ = bytes;
  budget_read_ = true;
  return bytes;
}

void TrainSession::setup_memory() {
  const int64_t T = config_.model().seq_len();
  std::vector<MemoryPart> fixed;
  const EngineMemory m = engine_->memory();
  fixed.push_back({"parameters", m.params});
  fixed.push_back({"gradients", m.grads});
  fixed.push_back({"optimizer state", m.optimizer});
  const bool checkpoints = !config_.checkpoint().dir().empty() || !config_.checkpoint().fast_dir().empty();
  const size_t staging = checkpoints ? engine_->predicted_checkpoint_staging() : 0;
  if (staging > 0) fixed.push_back({"checkpoint staging", staging});
  fixed_bytes_ = 0;
  for (const MemoryPart& p : fixed) fixed_bytes_ += p.bytes;
  MemoryModel::VariableParts windows;
  if (m.stage >= 2) {
    windows = [this, stage = m.stage](int64_t b) {
      const int k = static_cast<int>(accumulation_for(b));
      const auto* z = pipeline_ ? nullptr : dynamic_cast<const ZeroEngine*>(engine_.get());
      const Engine::WindowBytes w = z ? z->predicted_windows_if(k, zero_reduces_each(b))
                                      : engine_->predicted_windows(k);
      std::vector<MemoryPart> parts{{"unreduced gradient window", w.grads}};
      if (stage >= 3) parts.push_back({"gathered parameter window", w.params});
      return parts;
    };
  }
  MemoryModel::ActivationBytes act;
  if (pipeline_) {
    act = [this, T](int64_t b, bool) {
      return pipeline_->planned_bytes(static_cast<int>(accumulation_for(b)), b, T);
    };
  } else {
    act = [this, T](int64_t b, bool rc) {
      return with_stack([&](auto& stack) { return stack.activation_bytes(b, T, 1, false, rc); });
    };
  }
  memory_model_ = MemoryModel(std::move(fixed), std::move(act), std::move(windows));
  recompute_ = config_.runtime().recompute() == "blocks";
  memory_halvings_ = memory_halvings();
  if (memory_halvings_ > 0 && leader()) {
    log_.warn("etr-run relaunched the job after the kernel's out-of-memory killer ended a rank: "
              "the micro-batch is halved ", memory_halvings_, " time(s), to at most ",
              micro_batch_cap());
  }
  read_budget();
  set_micro_batch(agree_micro_batch(fit_micro_batch(micro_batch_cap())));
  if (config_.batch().micro_batch() > 0 && micro_batch_ < micro_batch_cap()) {
    log_.warn("rank ", grid_->rank(), ": batch.micro_batch = ", micro_batch_cap(),
              " does not fit the memory budget of ",
              format_bytes(static_cast<double>(work_alloc().stats().budget)), " (its planned peak is ",
              format_bytes(static_cast<double>(memory_model_.peak(micro_batch_cap(), recompute_))),
              "); running micro-batches of ", micro_batch_, " instead, the global batch unchanged");
  }
}

uint64_t TrainSession::accumulation_for(int64_t b) const {
  const uint64_t n = plan_->rank(grid_->dp_rank()).samples();
  return (n + static_cast<uint64_t>(b) - 1) / static_cast<uint64_t>(b);
}

// The largest micro-batch <= `most` whose planned peak fits the budget (less the margin
// when automatic); with runtime.recompute = auto, recomputation when b = 1 does not fit
// otherwise. 0 when nothing fits.
int64_t TrainSession::fit_micro_batch(int64_t most) {
  const size_t budget = work_alloc().stats().budget;
  const bool automatic = config_.batch().micro_batch() == 0;
  const double margin = automatic ? config_.batch().memory_margin() : 0.0;
  const bool can_recompute = config_.runtime().recompute() != "off" && !pipeline_;
  if (pipeline_) return fit_pipeline_micro_batch(most, budget, margin);
  int64_t b = memory_model_.largest_fitting(budget, margin, most, recompute_);
  if (b == 0 && !recompute_ && can_recompute && config_.runtime().recompute() == "auto") {
    const int64_t rc = memory_model_.largest_fitting(budget, margin, most, true);
    recompute_ = true;  // (when nothing fits either way, the sentence gives its figure)
    if (rc > 0 && leader()) log_.info("activation recomputation on: without it not even a micro-batch of 1 fits");
    b = rc;
  }
  return b;
}

// A pipeline's schedule takes only some micro-batch counts (interleaved: multiples of the
// stages): the largest b <= most whose count it takes and whose peak fits, from the top.
int64_t TrainSession::fit_pipeline_micro_batch(int64_t most, size_t budget, double margin) const {
  const double usable = (1.0 - margin) * static_cast<double>(budget);
  for (int64_t b = most; b >= 1; --b) {
    try {
      if (static_cast<double>(memory_model_.peak(b, false)) <= usable) return b;
    } catch (const ConfigError&) {
      // this b gives a micro-batch count the schedule cannot run
    }
  }
  return 0;
}

// Collective over the world: every rank's micro-batch (the smallest under a pipeline,
// whose stages run the same micro-batches). OutOfMemory with a sentence when some rank
// has none that fits (`mine` = 0).
int64_t TrainSession::agree_micro_batch(int64_t mine) {
  int64_t lowest = mine;
  if (grid_->size() > 1) {
    control::allreduce(&lowest, 1, MPI_INT64_T, MPI_MIN, grid_->world_group().comm(),
                       "the micro-batch agreement (session_memory)");
  }
  if (lowest < 1) {
    const int64_t T = config_.model().seq_len();
    const bool here = mine < 1;
    throw OutOfMemory(
        std::string("not even a micro-batch of 1 sequence of ") + std::to_string(T) + " tokens fits" +
        (recompute_ ? " with activation recomputation" : "") +
        (here ? ": this rank would need " +
                    format_bytes(static_cast<double>(memory_model_.peak(1, recompute_))) + " (" +
                    memory_model_.dominant(1, recompute_) + " the most) under a budget of " +
                    format_bytes(static_cast<double>(work_alloc().stats().budget))
              : " on another rank") +
        (device().is_cuda()
             ? std::string("; free the GPU of other processes (or raise ETR_CUDA_MEMORY_BUDGET), "
                           "use a smaller model, or shorten model.seq_len.")
             : std::string("; raise runtime.memory_budget (or the job's memory limit), use more "
                           "ranks with a higher parallel.zero_stage, or shorten model.seq_len.")),
        here ? memory_model_.peak(1, recompute_) : 0, work_alloc().stats().in_use, work_alloc().stats().peak,
        work_alloc().stats().budget);
  }
  return pipeline_ ? lowest : mine;
}

// A new plan with micro-batch b on this rank (every rank calls it with its own b).
// ZeRO stage 3 gathers each layer's parameters in every micro-batch's forward and
// backward, collectively: there every rank runs as many micro-batches (equal_counts), or
// a rank would wait in a gather that another never joins.
void TrainSession::set_micro_batch(int64_t b) {
  // Each rank's b, and the most its memory holds (batch.micro_batch aside).
  const bool automatic = config_.batch().micro_batch() == 0;
  const bool same_count = config_.parallel().zero_stage() == 3 && !pipeline_;
  const int64_t most = !same_count ? b : memory_model_.largest_fitting(
      work_alloc().stats().budget, automatic ? config_.batch().memory_margin() : 0.0,
      static_cast<int64_t>(rank_batch().samples()), recompute_);
  const int64_t mine[2] = {b, std::max(most, b)};
  std::vector<int64_t> both(2 * static_cast<size_t>(grid_->dp_size()));
  control::allgather(mine, 2, MPI_INT64_T, both.data(), grid_->dp_group().comm(),
                     "the ranks' batch limits (session_memory)");
  std::vector<int64_t> all, memory;
  for (size_t r = 0; r < both.size(); r += 2) {
    all.push_back(both[r]);
    memory.push_back(both[r + 1]);
  }
  std::vector<RankBatch> ranks;
  for (int r = 0; r < grid_->dp_size(); ++r) {
    const uint64_t n = plan_->rank(r).samples();
    const uint64_t mb = std::min<uint64_t>(static_cast<uint64_t>(all[static_cast<size_t>(r)]), n);
    const uint64_t k = (n + mb - 1) / mb;
    const uint64_t last = n - mb * (k - 1);
    ranks.push_back({mb, k, last == mb ? 0 : last});
  }
  if (same_count) ranks = equal_counts(std::move(ranks), memory);
  plan_.emplace(plan_->global_batch(), std::move(ranks));
  // The activations hold the larger of b and the plan's (equal counts may raise it).
  micro_batch_ = std::max<int64_t>(b, static_cast<int64_t>(rank_batch().micro_batch));
  if (pipeline_) {
    pipeline_->plan(static_cast<int>(rank_batch().accumulation), b, config_.model().seq_len());
    gather_stage_activation_bytes();
  }
  choose_zero_reduction();
}

// ZeRO 2-3 on the host, accumulating, with a fixed global batch: true when the whole
// gradient window (kept until the last micro-batch) does not fit beside the rest of
// micro-batch b's plan, so each micro-batch reduces instead (fit first, then speed).
bool TrainSession::zero_reduces_each(int64_t b) {
  const auto* z = pipeline_ ? nullptr : dynamic_cast<const ZeroEngine*>(engine_.get());
  if (!z || z->zero_stage() < 2 || device().is_cuda()) return false;
  // The automatic global batch measures each rank's gradient of the whole step before the
  // sum (its noise); reducing each micro-batch leaves only the last one's to measure.
  if (config_.batch().global_batch() == 0) return false;
  const int k = static_cast<int>(accumulation_for(b));
  if (k <= 1) return false;
  const Engine::WindowBytes whole = z->predicted_windows_if(k, false);
  const int64_t T = config_.model().seq_len();
  const size_t act = with_stack([&](auto& stack) { return stack.activation_bytes(b, T, 1, false, recompute_); });
  const double margin = config_.batch().micro_batch() == 0 ? config_.batch().memory_margin() : 0.0;
  return static_cast<double>(fixed_bytes_ + act + whole.grads + whole.params) >
         (1.0 - margin) * static_cast<double>(work_alloc().stats().budget);
}

// Collective over the dp group (after a plan): every rank reduces each micro-batch when any
// needs to, and only when every rank runs the same number of micro-batches (each one's
// reduce-scatters must meet); said when it changes.
void TrainSession::choose_zero_reduction() {
  auto* z = pipeline_ ? nullptr : dynamic_cast<ZeroEngine*>(engine_.get());
  if (!z || z->zero_stage() < 2 || device().is_cuda()) return;
  int each = zero_reduces_each(micro_batch_) ? 1 : 0;
  control::allreduce(&each, 1, MPI_INT, MPI_MAX, grid_->dp_group().comm(),
                     "the ZeRO gradient mode agreement (session_memory)");
  for (int r = 0; r < grid_->dp_size(); ++r) {
    if (plan_->rank(r).accumulation != rank_batch().accumulation) each = 0;
  }
  if ((each != 0) == z->reduces_each_micro_batch()) return;
  z->set_reduce_each_micro_batch(each != 0);
  if (leader()) {
    log_.info("ZeRO-", z->zero_stage(), ": ",
              each ? "the whole gradient window does not fit beside micro-batches of " +
                         std::to_string(micro_batch_) +
                         ", so each micro-batch's gradients are reduce-scattered into the shard"
                   : std::string("the gradients are reduced once a step (the whole window fits)"));
  }
}

// Every rank's share in the same number k of micro-batches: the most any rank needs for
// its memory, or fewer when a share cannot be cut in that many (fewer samples than
// pieces; 4 in 3 pieces of ceil(4 / 3)). Rank r's pieces are ceil(n_r / k) samples, the
// last one shorter; ConfigError when that is more than memory[r], the most that fits rank r.
std::vector<RankBatch> TrainSession::equal_counts(std::vector<RankBatch> ranks,
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

// The most this rank's micro-batch may be: batch.micro_batch (halved by etr-run after an
// OOM kill), or its whole share when automatic.
int64_t TrainSession::micro_batch_cap() const {
  const int64_t share = static_cast<int64_t>(plan_->rank(grid_->dp_rank()).samples());
  const int64_t configured = config_.batch().micro_batch();
  if (configured == 0) return share;
  return std::min(share, std::max<int64_t>(1, configured >> memory_halvings_));
}

void TrainSession::acquire_activations() {
  if (pipeline_) return;  // a pipeline keeps its plan between steps
  if (faults_.budget_cut.step > 0 && !faults_.budget_cut.boundary &&
      static_cast<int64_t>(position_.step) + 1 == faults_.budget_cut.step) {
    read_budget();  // the test's cut, after the step boundary's check
  }
  const int64_t T = config_.model().seq_len();
  for (;;) {
    std::string failure;
    if (!activations_held_) {
      try {
        with_stack([&](auto& stack) { stack.plan(work_alloc(), micro_batch_, T, 1, false, recompute_); });
        activations_held_ = true;
      } catch (const OutOfMemory& e) {
        failure = e.what();
      }
    }
    // Every rank learns whether any failed before the step communicates at all (a sum with
    // the collectives' timeout: a peer that died ends the job with a sentence, not a hang).
    double failed = failure.empty() ? 0 : 1;
    sum_over_ranks(&failed, 1);
    if (failed == 0) return;
    recover_from_oom(failure);
  }
}

void TrainSession::release_activations() {
  if (pipeline_ || !activations_held_) return;
  with_stack([](auto& stack) { stack.release(); });
  activations_held_ = false;
}

// Every rank alike: the step starts again with half the micro-batch and twice the
// accumulation (the same samples, the same global batch and learning rate); at 1, with
// activation recomputation; after that, the sentence of agree_micro_batch.
void TrainSession::recover_from_oom(const std::string& failure) {
  const int64_t step = static_cast<int64_t>(position_.step) + 1;
  if (!failure.empty()) log_.warn("step ", step, ": rank ", grid_->rank(), ": ", failure);
  release_activations();
  work_alloc().release_cached();  // a GPU's cached blocks back to CUDA before the retry
  ++oom_recoveries_;
  const int64_t before = micro_batch_;
  int64_t b = std::max<int64_t>(1, micro_batch_ / 2);
  if (before == 1) {
    const bool can = config_.runtime().recompute() != "off" && !recompute_;
    if (!can) b = 0;  // agree_micro_batch says what would fit
    recompute_ = can;
  }
  set_micro_batch(agree_micro_batch(b));
  if (!failure.empty()) {
    oom_cap_ = micro_batch_;
    oom_budget_ = work_alloc().stats().budget;
  }
  restart_peak();
  if (leader()) {
    const RankBatch& r = rank_batch();
    const std::string text = to_text(
        "step ", step, ": out of memory inside the step (", oom_recoveries_,
        " so far); every rank discards it and runs it again with micro-batch ", r.micro_batch,
        " x ", r.accumulation, (recompute_ ? ", recomputing activations" : ""),
        ", the global batch ", plan_->global_batch(), " and the learning rate unchanged");
    log_.warn(text);
    report_decision(static_cast<uint64_t>(step), "memory/decisions", text);
  }
}

// At the end of a step, before its sums: re-reads the budget; true when this rank's
// micro-batch should change (the budget no longer holds it, or holds a larger one that
// an automatic or reduced micro-batch may take).
// Hysteresis: a smaller micro-batch as soon as the plan no longer fits; a larger one only
// when its peak leaves another 5 % of the budget free, so a budget that wavers (a cgroup's
// share less the memory outside the allocator) does not re-plan every step.
bool TrainSession::budget_wants_replan() {
  read_budget();
  return wanted_micro_batch() != micro_batch_;
}

// The micro-batch this rank wants under the budget last read, with the hysteresis above.
// A rank that ran out of memory keeps the micro-batch it recovered with until the budget
// grows past what it was then: the memory model fitted the one that failed, so it cannot
// be trusted to (the failure may have come from memory it does not count).
int64_t TrainSession::wanted_micro_batch() {
  const size_t budget = work_alloc().stats().budget;
  if (oom_cap_ > 0 && budget > oom_budget_) oom_cap_ = 0;
  int64_t best = fit_micro_batch(micro_batch_cap());
  if (oom_cap_ > 0) best = std::min(best, oom_cap_);
  if (best <= micro_batch_) return best;
  const bool automatic = config_.batch().micro_batch() == 0;
  const double margin = (automatic ? config_.batch().memory_margin() : 0.0) + 0.05;
  const bool room = static_cast<double>(memory_model_.peak(best, recompute_)) <=
                    (1.0 - margin) * static_cast<double>(work_alloc().stats().budget);
  return room ? best : micro_batch_;
}

// Collective, after a step whose sums carried a replan request (the ranks that did not ask
// keep theirs unless it no longer fits).
void TrainSession::replan() {
  release_activations();
  const int64_t before = micro_batch_;
  const int64_t b = wanted_micro_batch();
  set_micro_batch(agree_micro_batch(b));
  ++replans_;
  restart_peak();
  if (leader() && micro_batch_ != before) {
    const RankBatch& r = rank_batch();
    const std::string text =
        to_text("step ", position_.step, ": the memory budget changed; micro-batch ", before,
                " -> ", r.micro_batch, " x ", r.accumulation, " (rank 0; planned peak ",
                format_bytes(static_cast<double>(predicted_peak())), " of ",
                format_bytes(static_cast<double>(work_alloc().stats().budget)), ")");
    log_.info(text);
    report_decision(position_.step, "memory/decisions", text);
  }
}

// The allocator's peak from here on is the new plan's (the memory model's figure); the
// run's peak keeps the old one.
void TrainSession::restart_peak() {
  earlier_peak_ = std::max(earlier_peak_, work_alloc().stats().peak);
  work_alloc().reset_peak();
}

void TrainSession::measure_outside() {
  if (outside_measured_ || device().is_cuda()) return;
  outside_measured_ = true;
  const size_t resident = resident_bytes(), reserved = alloc_.stats().reserved;
  outside_bytes_ = resident > reserved ? resident - reserved : 0;
  if (leader()) {
    log_.info("memory outside the allocator after the first step (the binary, MPI, OpenBLAS, the "
              "data, the collectives' scratch): ", format_bytes(static_cast<double>(outside_bytes_)),
              "; the process's resident peak should be about ",
              format_bytes(static_cast<double>(predicted_resident_peak())));
  }
}

size_t TrainSession::predicted_peak() const { return memory_model_.peak(micro_batch_, recompute_); }

std::vector<std::string> TrainSession::memory_plan() const {
  const bool automatic = config_.batch().micro_batch() == 0;
  std::vector<std::string> lines = memory_model_.plan_table(
      work_alloc().stats().budget, automatic ? config_.batch().memory_margin() : 0.0,
      micro_batch_cap(), config_.runtime().recompute() != "off" && !pipeline_);
  if (device().is_cuda()) {
    lines.insert(lines.begin(),
                 "on " + device().str() + " (" + device_.describe() + "): the device's budget " +
                     format_bytes(static_cast<double>(device_budget_)) +
                     (mixed_ ? ", less cuBLAS's and cuBLASLt's 32 MiB workspaces for the allocator"
                             : ", less cuBLAS's 32 MiB workspace for the allocator"));
  }
  return lines;
}

}  // namespace etr
