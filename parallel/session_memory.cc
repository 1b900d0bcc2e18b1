// TrainSession: the memory side of the batch policy (train_session.h, "Memory"): the
// budget read (less the checkpoint memory tier's copies), the memory model handed to the
// batch controller (parallel/batch_controller.h) and what each of its plans asks of the
// engines, the activations taken at the start of each step and given back at its end, and
// ZeRO's gradient mode.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "checkpoint/buddy_link.h"
#include "parallel/train_session.h"
#include "runtime/bytes.h"
#include "runtime/cpu_affinity.h"
#include "runtime/mpi_check.h"
#include "runtime/state_names.h"
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

// The batch controller over the grid, told of the job's layout (collective where it plans).
void TrainSession::setup_batch() {
  peers_ = grid_peers(*grid_);
  BatchHooks hooks;
  hooks.read_budget = [this] { read_budget(); };
  hooks.release_activations = [this] { release_activations(); };
  hooks.planned = [this](int64_t b) { planned(b); };
  hooks.decision = [this](uint64_t step, const std::string& tag, const std::string& text) {
    report_decision(step, tag, text);
  };
  BatchLayout layout;
  layout.pipeline = grid_->pp_size() > 1;
  layout.same_counts = config_.parallel().zero_stage() == 3 && !layout.pipeline;
  layout.on_gpu = device().is_cuda();
  layout.memory_halvings = memory_halvings();
  batch_ = std::make_unique<BatchController>(config_, *peers_, work_alloc(), log_, std::move(hooks), layout);
}

void TrainSession::read_budget() {
  const MemoryBudget::Reading r = mem_.budget->read(alloc_.stats().reserved);
  const size_t base = r.bytes > mem_.memory_tier ? r.bytes - mem_.memory_tier : 0;
  size_t bytes = base;
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
    const double moved = std::fabs(static_cast<double>(bytes) - static_cast<double>(mem_.logged_budget));
    if (mem_.budget_read && moved > 0.05 * static_cast<double>(mem_.logged_budget)) {
      const bool was_cut = bytes < base;
      log_.info("rank ", grid_->rank(), ": memory budget ",
                format_bytes(static_cast<double>(mem_.logged_budget)), " -> ",
                format_bytes(static_cast<double>(bytes)), " (",
                was_cut ? std::string("ETR_TEST_BUDGET_CUT") : r.describe(), ")");
      mem_.logged_budget = bytes;
    }
    alloc_.set_budget(bytes);
  }
  if (!mem_.budget_read) mem_.logged_budget = bytes;
  mem_.budget_read = true;
}

// The checkpoint memory tier's copies are host RAM (tmpfs pages count against the host's
// memory and its cgroup, not this process's resident set, so the budget's measure of what
// lies outside the allocator misses them): read_budget() takes them off the host budget,
// so the micro-batch the model picks leaves room for them (on a GPU the host's budget
// only; the model stays what the allocator holds). What a rank's file holds follows its
// engine's owners, and what it receives, the hosts' ranks (collective: both agreed).
void TrainSession::setup_memory_tier() {
  const std::shared_ptr<const ShardOwners> owners = engine_->checkpoint_owners();
  const ShardPlan plan(model_.stack->layout(), grid_->size(),
                       {std::string(state::kParam), std::string(state::kAdamM), std::string(state::kAdamV)},
                       owners.get());
  const std::vector<size_t> tier =
      etr::memory_tier_bytes(config_.checkpoint(), plan, gather_hosts(grid_->world_group()));
  mem_.memory_tier = tier[static_cast<size_t>(grid_->rank())];
  if (leader()) {
    const auto most = std::max_element(tier.begin(), tier.end());
    const std::string where = most == tier.begin()
                                  ? std::string(" on rank 0, the most of any rank")
                                  : " on rank " + std::to_string(most - tier.begin()) + " (rank 0: " +
                                        format_bytes(static_cast<double>(tier.front())) + ")";
    log_.info("memory: the checkpoint memory tier holds up to ", format_bytes(static_cast<double>(*most)),
              " of host RAM", where, ": checkpoint.memory_keep + 1 saves of a rank's shard and of the "
              "buddy copies it receives, in tmpfs, taken off each rank's host budget");
  }
}

// The memory model of this job (the engine's state, checkpoint staging, ZeRO 2-3's
// windows, the activations of the stack or the pipeline's plan), handed to the batch
// controller, which picks the micro-batch.
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
  if (config_.checkpoint().memory_every() > 0) setup_memory_tier();
  read_budget();
  MemoryModel::VariableParts windows;
  if (m.stage >= 2) {
    windows = [this, stage = m.stage](int64_t b) {
      const int k = static_cast<int>(batch_->accumulation_for(b));
      const auto* z = pipeline_ ? nullptr : dynamic_cast<const ZeroEngine*>(engine_.get());
      const bool each = z && zero_reduces_each(b);
      const Engine::WindowBytes w = z ? z->predicted_windows_if(k, each) : engine_->predicted_windows(k);
      // The plan states the gradient mode: with several micro-batches a step, the window is
      // kept whole until the last, or each micro-batch is reduce-scattered (in blocks when
      // the layers write through the engine's sink).
      std::string name = "unreduced gradient window";
      if (z && k > 1) {
        name += each ? (z->blocks_gradients_if(true) ? " (each micro-batch reduce-scattered, in blocks)"
                                                     : " (each micro-batch reduce-scattered)")
                     : " (kept whole until the last micro-batch)";
      }
      std::vector<MemoryPart> parts{{name, w.grads}};
      if (stage >= 3) parts.push_back({"gathered parameter window", w.params});
      return parts;
    };
  }
  MemoryModel::ActivationBytes act;
  if (pipeline_) {
    act = [this, T](int64_t b, bool) {
      return pipeline_->planned_bytes(static_cast<int>(batch_->accumulation_for(b)), b, T);
    };
  } else {
    act = [this, T](int64_t b, bool rc) {
      return with_stack([&](auto& stack) { return stack.activation_bytes(b, T, 1, false, rc); });
    };
  }
  batch_->start(MemoryModel(std::move(fixed), std::move(act), std::move(windows)));
  if (batch_->automatic_global_batch()) engine_->measure_local_norm(true);
}

// After each plan (BatchHooks::planned; collective): a pipeline's schedule for the new
// micro-batch count, room for the step's tokens, ZeRO's gradient mode.
void TrainSession::planned(int64_t micro_batch) {
  const int64_t T = config_.model().seq_len();
  if (pipeline_) {
    pipeline_->plan(static_cast<int>(rank_batch().accumulation), micro_batch, T);
    gather_stage_activation_bytes();
  }
  // Room for every micro-batch of a step (a pipeline's are all in flight): k b <= n + b.
  const size_t tokens = static_cast<size_t>((static_cast<int64_t>(rank_batch().samples()) +
                                             std::max(batch_->micro_batch_cap(), micro_batch)) * T);
  if (step_.inputs.size() < tokens) {
    step_.inputs.resize(tokens);
    step_.targets.resize(tokens);
  }
  choose_zero_reduction(micro_batch);
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
  const int k = static_cast<int>(batch_->accumulation_for(b));
  if (k <= 1) return false;
  const Engine::WindowBytes whole = z->predicted_windows_if(k, false);
  const int64_t T = config_.model().seq_len();
  const size_t act = with_stack([&](auto& stack) { return stack.activation_bytes(b, T, 1, false, batch_->recompute()); });
  const size_t fixed = batch_->memory_model().fixed_bytes();
  const double margin = config_.batch().micro_batch() == 0 ? config_.batch().memory_margin() : 0.0;
  return static_cast<double>(fixed + act + whole.grads + whole.params) >
         (1.0 - margin) * static_cast<double>(work_alloc().stats().budget);
}

// Collective over the dp group (after a plan): every rank reduces each micro-batch when any
// needs to, and only when every rank runs the same number of micro-batches (each one's
// reduce-scatters must meet); said when it changes.
void TrainSession::choose_zero_reduction(int64_t micro_batch) {
  auto* z = pipeline_ ? nullptr : dynamic_cast<ZeroEngine*>(engine_.get());
  if (!z || z->zero_stage() < 2 || device().is_cuda()) return;
  int each = zero_reduces_each(micro_batch) ? 1 : 0;
  control::allreduce(&each, 1, MPI_INT, MPI_MAX, grid_->dp_group().comm(),
                     "the ZeRO gradient mode agreement (session_memory)");
  for (int r = 0; r < grid_->dp_size(); ++r) {
    if (batch_plan().rank(r).accumulation != rank_batch().accumulation) each = 0;
  }
  if ((each != 0) == z->reduces_each_micro_batch()) return;
  z->set_reduce_each_micro_batch(each != 0);
  if (leader()) {
    log_.info("ZeRO-", z->zero_stage(), ": ",
              each ? "the whole gradient window does not fit beside micro-batches of " +
                         std::to_string(micro_batch) +
                         ", so each micro-batch's gradients are reduce-scattered into the shard" +
                         (z->blocks_gradients() ? " in blocks of a bucket (the window holds " +
                                                      format_bytes(static_cast<double>(z->predicted_windows(2).grads)) + ")"
                                                : std::string())
                   : std::string("the gradients are reduced once a step (the whole window fits)"));
  }
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
    if (!mem_.activations_held) {
      try {
        with_stack([&](auto& stack) {
          stack.plan(work_alloc(), batch_->micro_batch(), T, 1, false, batch_->recompute());
        });
        mem_.activations_held = true;
      } catch (const OutOfMemory& e) {
        failure = e.what();
      }
    }
    // Every rank learns whether any failed before the step communicates at all (a sum with
    // the collectives' timeout: a peer that died ends the job with a sentence, not a hang).
    double failed = failure.empty() ? 0 : 1;
    sum_over_ranks(&failed, 1);
    if (failed == 0) return;
    batch_->recover_from_oom(position_.step + 1, failure);
  }
}

void TrainSession::release_activations() {
  if (pipeline_ || !mem_.activations_held) return;
  with_stack([](auto& stack) { stack.release(); });
  mem_.activations_held = false;
}

void TrainSession::measure_outside() {
  if (mem_.outside_measured || device().is_cuda()) return;
  mem_.outside_measured = true;
  const size_t resident = resident_bytes(), reserved = alloc_.stats().reserved;
  mem_.outside_bytes = resident > reserved ? resident - reserved : 0;
  if (leader()) {
    log_.info("memory outside the allocator after the first step (the binary, MPI, OpenBLAS, the "
              "data, the collectives' scratch): ", format_bytes(static_cast<double>(mem_.outside_bytes)),
              "; the process's resident peak should be about ",
              format_bytes(static_cast<double>(predicted_resident_peak())));
  }
}

std::vector<std::string> TrainSession::memory_plan() const {
  std::vector<std::string> lines = batch_->plan_table();
  if (mem_.memory_tier > 0) {  // after the table's first line, which states the budget
    lines.insert(lines.begin() + (lines.empty() ? 0 : 1),
                 "  checkpoint memory tier: " + format_bytes(static_cast<double>(mem_.memory_tier)) +
                     " of host RAM in tmpfs (checkpoint.memory_keep + 1 saves of this rank's file and "
                     "of the buddy copies it receives), not in the peak: taken off the host's budget" +
                     (device().is_cuda() ? std::string(" (the device's is not)") : std::string(" above")));
  }
  if (device().is_cuda()) {
    lines.insert(lines.begin(),
                 "on " + device().str() + " (" + dev_.context.describe() + "): the device's budget " +
                     format_bytes(static_cast<double>(dev_.budget)) +
                     (dev_.mixed ? ", less cuBLAS's and cuBLASLt's 32 MiB workspaces for the allocator"
                             : ", less cuBLAS's 32 MiB workspace for the allocator"));
  }
  return lines;
}

}  // namespace etr
