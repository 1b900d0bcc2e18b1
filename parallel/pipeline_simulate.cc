// simulate_schedule and theoretical_bubble (parallel/pipeline_schedule.h): an event
// simulation of a schedule's lists with given action costs.
//
// Rules: each stage runs its list in order, one action at a time, starting at time 0.
// An action starts when the stage has finished its previous action and:
//   - a kForward on virtual stage j > 0: the kSendActivation of the same micro-batch on
//     virtual stage j - 1 has finished;
//   - a kBackward / kBackwardInput on virtual stage j < Pv - 1: the kSendGrad of the same
//     micro-batch on virtual stage j + 1 has finished.
// kRecv* are posts and take no time; sends take costs.p2p (eager: they do not wait for the
// receive to be posted); kBackward costs backward_input + backward_weight. The start time
// of every action is thus the longest path to it in a DAG; the simulation sweeps the
// stages, advancing each as far as its dependencies allow, until no stage can move. A
// stage left with actions then waits for a send that never comes: a deadlock.
#include <algorithm>
#include <string>

#include "parallel/pipeline_schedule.h"
#include "runtime/error.h"

namespace etr {
namespace {

constexpr double kNotYet = -1;

// When each (virtual stage, micro-batch)'s activation and gradient sends finish.
struct SendTimes {
  int micro_batches = 0;
  std::vector<double> activation, grad;  // [virtual stage * m + mb]
  double* slot(std::vector<double>& times, int vstage, int mb) {
    if (vstage < 0 || mb < 0 || mb >= micro_batches) return nullptr;
    const size_t i = static_cast<size_t>(vstage) * micro_batches + mb;
    return i < times.size() ? &times[i] : nullptr;
  }
};

double compute_cost(PipeOp op, const ActionCosts& costs) {
  switch (op) {
    case PipeOp::kForward:
      return costs.forward;
    case PipeOp::kBackward:
      return costs.backward_input + costs.backward_weight;
    case PipeOp::kBackwardInput:
      return costs.backward_input;
    case PipeOp::kBackwardWeight:
      return costs.backward_weight;
    default:
      return 0;
  }
}

// The send action `a` (on virtual stage j of a pipeline with `last` the last one) waits
// for, as (is-gradient, sending virtual stage); {false, -1} when it waits for none.
std::pair<bool, int> dependency(const PipeAction& a, int j, int last) {
  if (a.op == PipeOp::kForward && j > 0) return {false, j - 1};
  if ((a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardInput) && j < last) {
    return {true, j + 1};
  }
  return {false, -1};
}

std::string deadlock_message(const Schedule& schedule, const std::vector<size_t>& next) {
  const int p = schedule.spec.stages;
  const int last = p * schedule.spec.virtual_stages - 1;
  std::string msg = "pipeline schedule deadlocks:";
  for (int s = 0; s < p; ++s) {
    if (next[s] >= schedule.stages[s].size()) continue;
    const PipeAction& a = schedule.stages[s][next[s]];
    const auto [grad, from] = dependency(a, virtual_stage_of(schedule.spec, s, a.chunk), last);
    msg += " stage " + std::to_string(s) + " waits at action " + std::to_string(next[s]) + " (" +
           to_string(a) + ") for the " + (grad ? "gradient" : "activation") +
           " send of virtual stage " + std::to_string(from) + ";";
  }
  msg.back() = '.';
  return msg;
}

// Runs stage s from action next[s] until it ends or waits; returns whether it moved.
bool advance(const Schedule& schedule, int s, const ActionCosts& costs, SendTimes& sends,
             std::vector<size_t>& next, std::vector<double>& clock, std::vector<double>& busy) {
  const int p = schedule.spec.stages;
  const int last = p * schedule.spec.virtual_stages - 1;
  const std::vector<PipeAction>& list = schedule.stages[s];
  const size_t before = next[s];
  for (; next[s] < list.size(); ++next[s]) {
    const PipeAction& a = list[next[s]];
    const int j = virtual_stage_of(schedule.spec, s, a.chunk);
    double start = clock[s];
    if (const auto [grad, from] = dependency(a, j, last); from >= 0) {
      const double* done = sends.slot(grad ? sends.grad : sends.activation, from, a.micro_batch);
      if (done == nullptr) {
        throw InvalidArgument("pipeline schedule stage " + std::to_string(s) + ", action " +
                              std::to_string(next[s]) + " (" + to_string(a) +
                              "): micro-batch or chunk out of range.");
      }
      if (*done == kNotYet) break;
      start = std::max(start, *done);
    }
    const double work = compute_cost(a.op, costs);
    const bool send = a.op == PipeOp::kSendActivation || a.op == PipeOp::kSendGrad;
    clock[s] = start + work + (send ? costs.p2p : 0);
    busy[s] += work;
    if (send) {
      double* slot =
          sends.slot(a.op == PipeOp::kSendGrad ? sends.grad : sends.activation, j, a.micro_batch);
      if (slot != nullptr) *slot = clock[s];
    }
  }
  return next[s] != before;
}

}  // namespace

SimulatedRun simulate_schedule(const Schedule& schedule, const ActionCosts& costs) {
  const ScheduleSpec& spec = schedule.spec;
  const int p = spec.stages;
  if (p < 1 || spec.micro_batches < 1 || spec.virtual_stages < 1 ||
      static_cast<int>(schedule.stages.size()) != p) {
    throw InvalidArgument(
        "pipeline schedule to simulate has " + std::to_string(schedule.stages.size()) +
        " action lists for P = " + std::to_string(p) + " stages (P, m and v must be at least 1).");
  }
  const size_t units = static_cast<size_t>(p) * spec.virtual_stages * spec.micro_batches;
  SendTimes sends{spec.micro_batches, std::vector<double>(units, kNotYet),
                  std::vector<double>(units, kNotYet)};
  std::vector<size_t> next(p, 0);
  std::vector<double> clock(p, 0);
  SimulatedRun run;
  run.busy.assign(p, 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int s = 0; s < p; ++s) moved |= advance(schedule, s, costs, sends, next, clock, run.busy);
  }
  for (int s = 0; s < p; ++s) {
    if (next[s] < schedule.stages[s].size()) {
      throw InvalidArgument(deadlock_message(schedule, next));
    }
  }
  run.makespan = *std::max_element(clock.begin(), clock.end());
  double total = 0;
  for (double b : run.busy) total += b;
  run.bubble_fraction = run.makespan > 0 ? 1 - total / (p * run.makespan) : 0;
  return run;
}

double theoretical_bubble(const ScheduleSpec& spec) {
  const double idle = spec.stages - 1;
  const double m = spec.micro_batches;
  switch (spec.kind) {
    case ScheduleKind::kGPipe:
    case ScheduleKind::k1F1B:
      return idle / (m + idle);
    case ScheduleKind::kInterleaved1F1B:
      return idle / (spec.virtual_stages * m + idle);
    case ScheduleKind::kZeroBubbleH1:
      return 1 - 3 * m / std::max(3 * m + idle, 2 * m + 2 * idle + 1);
    case ScheduleKind::kZeroBubbleV:
      return idle / (6 * m + idle);
  }
  return 0;
}

}  // namespace etr
