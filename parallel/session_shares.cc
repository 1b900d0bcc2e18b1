// TrainSession: per-rank shares of the global batch (train_session.h, "Shares"): with
// batch.shares = throughput each rank's share follows its measured speed
// (parallel/share_balancer.h), re-balanced at step boundaries; and ETR_SLOW_RANK, which
// slows a rank down to show it.
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "parallel/train_session.h"
#include "runtime/mpi_check.h"
#include "runtime/env.h"
#include "runtime/control_ops.h"

namespace etr {

void TrainSession::slow_down(double seconds) const {
  if (faults_.slow_factor > 1) {
    std::this_thread::sleep_for(std::chrono::duration<double>((faults_.slow_factor - 1) * seconds));
  }
}

void TrainSession::setup_shares() {
  if (config_.batch().shares() != "throughput" || grid_->dp_size() < 2) return;
  if (pipeline_ || config_.parallel().zero_stage() == 3) {
    throw ConfigError("batch.shares = throughput does not combine with parallel.pp > 1 or "
                      "parallel.zero_stage = 3 yet; use batch.shares = equal there.");
  }
  balancer_ = std::make_unique<ShareBalancer>(grid_->dp_size());
}

// Collective over the data-parallel group, after a step: every rank's samples and
// compute time, the balancer's proposal, and a new plan when it makes one.
void TrainSession::balance_shares(double compute_seconds) {
  if (!balancer_) return;
  const int dp = grid_->dp_size();
  double mine[2] = {compute_seconds, static_cast<double>(rank_batch().samples())};
  std::vector<double> all(2 * static_cast<size_t>(dp));
  control::allgather(mine, 2, MPI_DOUBLE, all.data(), grid_->dp_group().comm(),
                     "the ranks' throughput for the shares (session_shares)");
  std::vector<uint64_t> samples(static_cast<size_t>(dp));
  std::vector<double> seconds(static_cast<size_t>(dp));
  for (size_t r = 0; r < samples.size(); ++r) {
    seconds[r] = all[2 * r];
    samples[r] = static_cast<uint64_t>(all[2 * r + 1]);
  }
  balancer_->observe(samples, seconds);
  const std::optional<std::vector<uint64_t>> next = balancer_->propose(samples);
  if (!next) return;
  std::vector<RankBatch> ranks;
  for (uint64_t n : *next) ranks.push_back({1, n, 0});
  plan_.emplace(plan_->global_batch(), std::move(ranks));
  release_activations();
  set_micro_batch(agree_micro_batch(fit_micro_batch(micro_batch_cap())));
  ++rebalances_;
  if (leader()) {
    std::string text;
    for (size_t r = 0; r < next->size(); ++r) {
      text += (r ? ", " : "") + std::to_string((*next)[r]) + " (" +
              std::to_string(static_cast<int>(balancer_->rates()[r] + 0.5)) + "/s)";
    }
    text = to_text("step ", position_.step,
                   ": shares of the global batch re-balanced to the ranks' speeds: ", text);
    log_.info(text);
    report_decision(position_.step, "batch/decisions", text);
  }
}

}  // namespace etr
