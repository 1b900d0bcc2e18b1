// TrainSession: choosing activation recomputation for speed (train_session.h, "Memory").
// With runtime.recompute = auto and an automatic micro-batch, recomputation is also tried
// when it lets a larger micro-batch fit: after a warm-up step, two steps at the largest
// micro-batch without it, then (after another warm-up step) two at the largest with it;
// the faster per sample is kept, recomputation only when it wins by more than 3 %. The
// times are the ranks' forward and backward seconds summed on the step's sums, so every
// rank takes the same decision. (At b = 1 it is turned on anyway when nothing else fits.)
#include <algorithm>

#include "parallel/train_session.h"
#include "runtime/mpi_check.h"
#include "runtime/control_ops.h"

namespace etr {

void TrainSession::setup_recompute_trial() {
  if (pipeline_ || config_.batch().micro_batch() != 0 || config_.runtime().recompute() != "auto" ||
      recompute_) {
    return;
  }
  const int64_t with = memory_model_.largest_fitting(work_alloc().stats().budget, config_.batch().memory_margin(),
                                                     micro_batch_cap(), true);
  // Every rank must gain a larger micro-batch, or none tries.
  int64_t gains = with > micro_batch_ ? 1 : 0;
  if (grid_->size() > 1) {
    control::allreduce(&gains, 1, MPI_INT64_T, MPI_MIN, grid_->world_group().comm(),
                       "the recomputation trial's verdict (session_recompute)");
  }
  if (gains == 0) return;
  trial_.phase = 1;
  trial_.without = micro_batch_;
  trial_.with = with;
  if (leader()) {
    log_.info("activation recomputation would let micro-batch ", with, " fit instead of ", micro_batch_,
              "; timing both over the next steps");
  }
}

bool TrainSession::recompute_trial_active() const { return trial_.phase == 1 || trial_.phase == 2; }

// After a step: `compute` is the ranks' summed forward and backward seconds, `samples` the
// step's global batch.
void TrainSession::recompute_trial_step(double compute, double samples) {
  RecomputeTrial& t = trial_;
  if (!recompute_trial_active()) return;
  if (++t.steps == 1) return;  // a warm-up step at each choice
  (t.phase == 1 ? t.seconds_without : t.seconds_with) += compute / samples;
  if (t.steps < 3) return;
  t.steps = 0;
  release_activations();
  if (t.phase == 1) {
    t.phase = 2;
    recompute_ = true;
    set_micro_batch(agree_micro_batch(t.with));
    restart_peak();
    return;
  }
  t.phase = 3;
  const bool keep = t.seconds_with < 0.97 * t.seconds_without;
  if (!keep) {
    recompute_ = false;
    set_micro_batch(agree_micro_batch(fit_micro_batch(micro_batch_cap())));
    restart_peak();
  }
  if (leader()) {
    const std::string text =
        to_text("activation recomputation ", keep ? "on" : "off", ": micro-batch ", t.with,
                " with it took ", 1e3 * t.seconds_with / 2, " ms per sample, ", t.without,
                " without it ", 1e3 * t.seconds_without / 2, " ms (summed over the ranks)");
    log_.info(text);
    report_decision(position_.step, "memory/decisions", text);
  }
}

}  // namespace etr
