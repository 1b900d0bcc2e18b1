#include "parallel/pipeline_zero_bubble.h"

#include <array>
#include <climits>
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
// list-scheduling run with unit times for every chunk's F, B and W: at each step a free
// stage runs the first ready of, in this order, chunk 1's next F, chunk 0's next F (each
// only while fewer than 2P chunk-micro-batches are held, a micro-batch's chunk being held
// from its F to its W: P whole micro-batches, 1F1B's first stage), chunk 0's next B, chunk
// 1's next B, and its oldest pending W; otherwise it waits. F's and B's of a chunk run in
// micro-batch order, so the channels pair up in order, and W's in the order of their B's,
// so stage 0 finishes chunk 1's (the tied wte's user) before chunk 0's (its owner). For
// m >= 2P (check_schedule_spec) the makespan is 6m + P - 1 chunk units for P <= 8,
// m <= 32 (pipeline_schedule_test): every stage busy from its first input to the end.
std::vector<Actions> zero_bubble_v_compute(const ScheduleSpec& spec) {
  const int p = spec.stages, m = spec.micro_batches;
  constexpr int kNever = INT_MAX;
  using Times = std::vector<std::array<std::vector<int>, 2>>;  // [stage][chunk][mb] end
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
  std::vector<Actions> out(p);
  // Whether the input of (s, chunk c, mb)'s F, or the gradient its B needs, is there at t.
  auto f_ready = [&](int s, int c, int mb, int t) {
    if (c == 0) return s == 0 || f_done[s - 1][0][mb] <= t;
    return s < p - 1 ? f_done[s + 1][1][mb] <= t : f_done[s][0][mb] <= t;
  };
  auto b_ready = [&](int s, int c, int mb, int t) {
    if (c == 1) return s > 0 ? b_done[s - 1][1][mb] <= t : f_done[0][1][mb] <= t;
    return s < p - 1 ? b_done[s + 1][0][mb] <= t : b_done[s][1][mb] <= t;
  };
  size_t left = static_cast<size_t>(p) * 6 * m;
  for (int t = 0; left > 0; ++t) {
    if (t > 12 * (m + p) + 12) throw Error("the zb-v list scheduling did not finish (a bug in etr).");
    for (int s = 0; s < p; ++s) {
      std::optional<PipeAction> run;
      for (int c : {1, 0}) {  // F: chunk 1 first
        const int mb = next_f[s][c];
        if (run || mb >= m || held[s] >= 2 * p || !f_ready(s, c, mb, t)) continue;
        run = PipeAction{PipeOp::kForward, mb, c};
      }
      for (int c : {0, 1}) {  // B: chunk 0 first
        const int mb = next_b[s][c];
        if (run || mb >= m || !b_ready(s, c, mb, t)) continue;
        run = PipeAction{PipeOp::kBackwardInput, mb, c};
      }
      if (!run && !pending_w[s].empty()) {
        run = PipeAction{PipeOp::kBackwardWeight, pending_w[s].front().second, pending_w[s].front().first};
        pending_w[s].pop_front();
      }
      if (!run) continue;
      const int c = run->chunk, mb = run->micro_batch;
      if (run->op == PipeOp::kForward) ++held[s], ++next_f[s][c], f_done[s][c][mb] = t + 1;
      if (run->op == PipeOp::kBackwardInput) {
        ++next_b[s][c];
        b_done[s][c][mb] = t + 1;
        pending_w[s].push_back({c, mb});
      }
      if (run->op == PipeOp::kBackwardWeight) --held[s];
      out[s].push_back(*run);
      --left;
    }
  }
  return out;
}

}  // namespace etr
