#include "parallel/pipeline_zero_bubble.h"

#include <array>
#include <algorithm>
#include <climits>
#include <limits>
#include <deque>
#include <optional>
#include <utility>

#include "runtime/error.h"

namespace etr {

using Actions = std::vector<PipeAction>;

// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): the 1F1B order with each
// backward split into B (input gradient, sent on at once) and W (weight gradient). The
// W's are placed by a list-scheduling run with unit times for F, B and W: at each step a
// free stage runs its next 1F1B action if it can (input or gradient arrived, and for a
// forward fewer than P micro-batches held, a micro-batch being held until its W: the
// paper's bound, 1F1B's peak on its first stage); otherwise its oldest pending W, filling
// what would be a bubble; otherwise it waits. Later stages thus defer W's past their B's
// (the last stage up to P - 1 of them), which is what closes the cool-down bubble. Every
// stage runs F's and B's in micro-batch order, so the channels pair up in order.
std::vector<Actions> zero_bubble_h1_compute(const ScheduleSpec& spec) {
  const int p = spec.stages, m = spec.micro_batches;
  std::vector<Actions> order(p), out(p);
  std::vector<std::vector<int>> f_done(p, std::vector<int>(m, INT_MAX));  // [s][mb] end
  std::vector<std::vector<int>> b_done(p, std::vector<int>(m, INT_MAX));
  std::vector<size_t> next(p, 0);
  std::vector<std::deque<int>> pending_w(p);
  std::vector<int> held(p, 0), free_at(p, 0);
  for (int s = 0; s < p; ++s) order[s] = one_f_one_b_compute(spec, s, PipeOp::kBackwardInput);
  size_t left = static_cast<size_t>(p) * 3 * m;
  for (int t = 0; left > 0; ++t) {
    if (t > 6 * (m + p) + 6) {
      throw Error("the zb-h1 list scheduling did not finish (a bug in etr).");
    }
    for (int s = 0; s < p; ++s) {
      if (free_at[s] > t) continue;
      std::optional<PipeAction> run;
      if (next[s] < order[s].size()) {
        const PipeAction& a = order[s][next[s]];
        const bool ready = a.op == PipeOp::kForward
                               ? (s == 0 || f_done[s - 1][a.micro_batch] <= t) && held[s] < p
                               : s == p - 1 || b_done[s + 1][a.micro_batch] <= t;
        if (ready) run = order[s][next[s]++];
      }
      if (!run && !pending_w[s].empty()) {
        run = PipeAction{PipeOp::kBackwardWeight, pending_w[s].front(), 0};
        pending_w[s].pop_front();
      }
      if (!run) continue;
      if (run->op == PipeOp::kForward) {
        ++held[s];
        f_done[s][run->micro_batch] = t + 1;
      }
      if (run->op == PipeOp::kBackwardInput) {
        b_done[s][run->micro_batch] = t + 1;
        pending_w[s].push_back(run->micro_batch);
      }
      if (run->op == PipeOp::kBackwardWeight) --held[s];
      out[s].push_back(*run);
      free_at[s] = t + 1;
      --left;
    }
  }
  return out;
}

// ZB-V (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", section 6): two chunks per
// stage in a V (stage s holds virtual stages s and 2P-1-s, so the last one, with the loss,
// is on stage 0 beside the first), each backward split into B and W. Placed by a
// list-scheduling run with the given times of a chunk's F, B and W (unit times by
// default): the stage that can start soonest picks, among what is ready then, in this
// order, chunk 1's next F, chunk 0's next F (each only while fewer than 2P
// chunk-micro-batches are held, a micro-batch's chunk being held from its F to its W: P
// whole micro-batches, 1F1B's first stage), chunk 0's next B, chunk 1's next B, and its
// oldest pending W; with nothing ready and no W pending it waits for the first input to
// arrive. F's and B's of a chunk run in micro-batch order, so the channels pair up in
// order, and W's in the order of their B's, so stage 0 finishes chunk 1's (the tied wte's
// user) before chunk 0's (its owner), and every chunk adds its micro-batches' weight
// gradients in micro-batch order whatever the times (the same sums for every list). At
// unit times, for m >= 2P (check_schedule_spec), the makespan is 6m + P - 1 chunk units
// for P <= 8, m <= 32 (pipeline_schedule_test): every stage busy from its first input to
// the end. At measured times (B slower than W, say) the unit list idles where one placed
// at those times does not (PipelineEngine places it again from a step's times); that
// placement holds no more micro-batches on any stage's chunk than the unit list does, so
// the activations planned for the unit list still hold it.
namespace {

// ZB-V's list at `costs`; `caps` (when given): the most micro-batches each stage's chunk
// may hold (from its F to its W), peaks[s][c] the most each did.
using ChunkCounts = std::vector<std::array<int, 2>>;
std::vector<Actions> place_zero_bubble_v(const ScheduleSpec& spec, const ActionCosts& costs,
                                         const ChunkCounts* caps, ChunkCounts& peaks) {
  const int p = spec.stages, m = spec.micro_batches;
  constexpr double kNever = std::numeric_limits<double>::infinity();
  using Times = std::vector<std::array<std::vector<double>, 2>>;  // [stage][chunk][mb] end
  Times f_done(p), b_done(p);
  for (int s = 0; s < p; ++s) {
    for (int c = 0; c < 2; ++c) {
      f_done[s][c].assign(m, kNever);
      b_done[s][c].assign(m, kNever);
    }
  }
  std::vector<std::array<int, 2>> next_f(p, {0, 0}), next_b(p, {0, 0});
  std::vector<std::deque<std::pair<int, int>>> pending_w(p);  // (chunk, mb)
  std::vector<int> held(p, 0);
  ChunkCounts chunk_held(p, {0, 0});
  peaks.assign(p, {0, 0});
  std::vector<double> free_at(p, 0);
  std::vector<Actions> out(p);
  // When the input of (s, chunk c, mb)'s F, or the gradient its B needs, is there.
  auto f_ready = [&](int s, int c, int mb) {
    if (c == 0) return s == 0 ? 0.0 : f_done[s - 1][0][mb];
    return s < p - 1 ? f_done[s + 1][1][mb] : f_done[s][0][mb];
  };
  auto b_ready = [&](int s, int c, int mb) {
    if (c == 1) return s > 0 ? b_done[s - 1][1][mb] : f_done[0][1][mb];
    return s < p - 1 ? b_done[s + 1][0][mb] : b_done[s][1][mb];
  };
  // Stage s's choice if it starts at `t` (none when nothing is ready then), and the
  // earliest time one of its F's or B's can start (kNever: none is waiting for anything
  // scheduled yet).
  auto choose = [&](int s, double t, double* earliest) {
    std::optional<PipeAction> run;
    *earliest = kNever;
    for (int c : {1, 0}) {  // F: chunk 1 first
      const int mb = next_f[s][c];
      if (mb >= m || held[s] >= 2 * p || (caps && chunk_held[s][c] >= (*caps)[s][c])) continue;
      const double at = f_ready(s, c, mb);
      *earliest = std::min(*earliest, at);
      if (!run && at <= t) run = PipeAction{PipeOp::kForward, mb, c};
    }
    for (int c : {0, 1}) {  // B: chunk 0 first
      const int mb = next_b[s][c];
      if (mb >= m) continue;
      const double at = b_ready(s, c, mb);
      *earliest = std::min(*earliest, at);
      if (!run && at <= t) run = PipeAction{PipeOp::kBackwardInput, mb, c};
    }
    if (!run && !pending_w[s].empty()) {
      run = PipeAction{PipeOp::kBackwardWeight, pending_w[s].front().second, pending_w[s].front().first};
    }
    return run;
  };
  for (size_t left = static_cast<size_t>(p) * 6 * m; left > 0; --left) {
    // The stage that starts soonest (the lowest on a tie) runs its choice: no later
    // start can make anything ready before it.
    int best = -1;
    double best_t = kNever;
    for (int s = 0; s < p; ++s) {
      double earliest = kNever;
      const double t = choose(s, free_at[s], &earliest) ? free_at[s] : std::max(free_at[s], earliest);
      if (t < best_t) best = s, best_t = t;
    }
    if (best < 0) throw Error("the zb-v list scheduling deadlocked (a bug in etr).");
    double unused = 0;
    const PipeAction a = *choose(best, best_t, &unused);
    const int c = a.chunk, mb = a.micro_batch;
    double cost = costs.forward;
    if (a.op == PipeOp::kForward) {
      ++held[best], ++next_f[best][c], f_done[best][c][mb] = best_t + cost;
      peaks[best][c] = std::max(peaks[best][c], ++chunk_held[best][c]);
    }
    if (a.op == PipeOp::kBackwardInput) {
      cost = costs.backward_input;
      ++next_b[best][c];
      b_done[best][c][mb] = best_t + cost;
      pending_w[best].push_back({c, mb});
    }
    if (a.op == PipeOp::kBackwardWeight) {
      cost = costs.backward_weight;
      --held[best], --chunk_held[best][c];
      pending_w[best].pop_front();
    }
    free_at[best] = best_t + cost;
    out[best].push_back(a);
  }
  return out;
}

}  // namespace

std::vector<Actions> zero_bubble_v_compute(const ScheduleSpec& spec, const ActionCosts& costs) {
  ChunkCounts unit_peaks, peaks;
  std::vector<Actions> unit = place_zero_bubble_v(spec, ActionCosts{}, nullptr, unit_peaks);
  const ActionCosts one;
  if (costs.forward == one.forward && costs.backward_input == one.backward_input &&
      costs.backward_weight == one.backward_weight) {
    return unit;
  }
  return place_zero_bubble_v(spec, costs, &unit_peaks, peaks);  // each chunk's activations as planned
}

}  // namespace etr
