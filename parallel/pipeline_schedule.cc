// Pipeline schedules as data (parallel/pipeline_schedule.h): each builder first lays out a
// stage's compute actions (forwards and backwards, in the order the stage runs them), then
// with_communication() adds the point-to-point actions around them:
//   - the receive a compute action waits for is posted right after the stage's previous
//     compute action (at the start for the first), so the transfer overlaps that compute;
//     receives therefore come in the order of their consumers on this stage;
//   - the send of a compute action's output follows the action at once.
// Senders and receivers order a channel's messages by the same rule (forward order for
// activations, backward order for gradients), so the pairing order matches on both sides;
// validate_schedule() checks it.
//
// Orders of the compute actions of stage s (P stages, m micro-batches, v chunks):
//   GPipe        all m forwards, then all m backwards, both in micro-batch order.
//   1F1B         min(P-s-1, m) warm-up forwards, then forward/backward pairs, then the
//                remaining backwards (PipeDream-Flush, Megatron-LM's non-interleaved one).
//   interleaved  Megatron-LM's forward_backward_pipelining_with_interleaving: forward k of
//                the step is chunk (k mod Pv) / P of micro-batch (k / Pv) P + k mod P,
//                backward k the same with the chunk mirrored (v-1-chunk); 2(P-s-1) + (v-1)P
//                warm-up forwards (at most mv), then forward/backward pairs, then the rest.
//   ZB-H1, ZB-V  pipeline_zero_bubble.cc.
#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <array>
#include <climits>
#include <deque>
#include <optional>

#include "parallel/pipeline_zero_bubble.h"
#include "runtime/error.h"

namespace etr {
namespace {

using Actions = std::vector<PipeAction>;

int virtual_stage(const ScheduleSpec& spec, int stage, int chunk) {
  return virtual_stage_of(spec, stage, chunk);
}
int last_virtual_stage(const ScheduleSpec& spec) {
  return spec.stages * spec.virtual_stages - 1;
}
bool is_backward_input(PipeOp op) {
  return op == PipeOp::kBackward || op == PipeOp::kBackwardInput;
}

// The receive compute action `a` of `stage` waits for, if any.
std::optional<PipeAction> recv_of(const ScheduleSpec& spec, int stage, const PipeAction& a) {
  const int j = virtual_stage(spec, stage, a.chunk);
  if (a.op == PipeOp::kForward && j > 0) {
    return PipeAction{PipeOp::kRecvActivation, a.micro_batch, a.chunk};
  }
  if (is_backward_input(a.op) && j < last_virtual_stage(spec)) {
    return PipeAction{PipeOp::kRecvGrad, a.micro_batch, a.chunk};
  }
  return std::nullopt;
}

// The send of compute action `a`'s output, if any.
std::optional<PipeAction> send_of(const ScheduleSpec& spec, int stage, const PipeAction& a) {
  const int j = virtual_stage(spec, stage, a.chunk);
  if (a.op == PipeOp::kForward && j < last_virtual_stage(spec)) {
    return PipeAction{PipeOp::kSendActivation, a.micro_batch, a.chunk};
  }
  if (is_backward_input(a.op) && j > 0) {
    return PipeAction{PipeOp::kSendGrad, a.micro_batch, a.chunk};
  }
  return std::nullopt;
}

// The compute actions with their receives, sends and the final optimizer step (see top).
Actions with_communication(const ScheduleSpec& spec, int stage, const Actions& compute) {
  Actions out;
  auto post_recv = [&](size_t i) {
    if (i >= compute.size()) return;
    if (auto r = recv_of(spec, stage, compute[i])) out.push_back(*r);
  };
  post_recv(0);
  for (size_t i = 0; i < compute.size(); ++i) {
    out.push_back(compute[i]);
    post_recv(i + 1);
    if (auto s = send_of(spec, stage, compute[i])) out.push_back(*s);
  }
  out.push_back({PipeOp::kOptimizerStep, -1, 0});
  return out;
}

Actions gpipe_compute(const ScheduleSpec& spec) {
  Actions out;
  for (int mb = 0; mb < spec.micro_batches; ++mb) out.push_back({PipeOp::kForward, mb, 0});
  for (int mb = 0; mb < spec.micro_batches; ++mb) out.push_back({PipeOp::kBackward, mb, 0});
  return out;
}

// Forward or backward number k of a stage in Megatron-LM's interleaved order.
PipeAction interleaved_item(const ScheduleSpec& spec, int k, bool forward) {
  const int p = spec.stages, v = spec.virtual_stages;
  const int in_group = k % (p * v);
  int chunk = in_group / p;
  if (!forward) chunk = v - 1 - chunk;
  const int mb = (k / (p * v)) * p + k % p;
  return {forward ? PipeOp::kForward : PipeOp::kBackward, mb, chunk};
}

Actions interleaved_compute(const ScheduleSpec& spec, int stage) {
  const int p = spec.stages, v = spec.virtual_stages;
  const int total = spec.micro_batches * v;
  const int warmup = std::min(2 * (p - stage - 1) + (v - 1) * p, total);
  Actions out;
  for (int k = 0; k < warmup; ++k) out.push_back(interleaved_item(spec, k, true));
  for (int k = 0; k + warmup < total; ++k) {
    out.push_back(interleaved_item(spec, k + warmup, true));
    out.push_back(interleaved_item(spec, k, false));
  }
  for (int k = total - warmup; k < total; ++k) out.push_back(interleaved_item(spec, k, false));
  return out;
}

// What a stage has done so far for one (micro-batch, chunk).
struct UnitState {
  bool recv_act = false, forward = false, sent_act = false, recv_grad = false;
  bool input_grad = false, weight_grad = false, split = false, sent_grad = false;
};

[[noreturn]] void refuse(int stage, size_t index, const PipeAction& a, const std::string& why) {
  throw InvalidArgument("pipeline schedule stage " + std::to_string(stage) + ", action " +
                        std::to_string(index) + " (" + to_string(a) + "): " + why + ".");
}

// Applies action `a` to its unit's state; returns why it is out of place, or "".
std::string apply_action(const ScheduleSpec& spec, int stage, const PipeAction& a, UnitState& u) {
  const int j = virtual_stage(spec, stage, a.chunk);
  const bool first = j == 0, last = j == last_virtual_stage(spec);
  switch (a.op) {
    case PipeOp::kRecvActivation:
      if (first) return "virtual stage 0 receives no activation";
      if (u.recv_act) return "the activation is received twice";
      if (u.forward) return "the receive is posted after the forward that needs it";
      return u.recv_act = true, "";
    case PipeOp::kForward:
      if (u.forward) return "the micro-batch is forwarded twice";
      if (!first && !u.recv_act) return "the forward comes before its input's receive is posted";
      return u.forward = true, "";
    case PipeOp::kSendActivation:
      if (last) return "the last virtual stage sends no activation";
      if (!u.forward) return "the activation is sent before its forward";
      if (u.sent_act) return "the activation is sent twice";
      return u.sent_act = true, "";
    case PipeOp::kRecvGrad:
      if (last) return "the last virtual stage receives no gradient";
      if (u.recv_grad) return "the gradient is received twice";
      if (u.input_grad) return "the receive is posted after the backward that needs it";
      return u.recv_grad = true, "";
    case PipeOp::kBackward:
    case PipeOp::kBackwardInput:
      if (!u.forward) return "the backward comes before its forward";
      if (u.input_grad) return "the micro-batch is backed up twice";
      if (!last && !u.recv_grad)
        return "the backward comes before its gradient's receive is posted";
      u.split = a.op == PipeOp::kBackwardInput;
      u.weight_grad = !u.split;
      return u.input_grad = true, "";
    case PipeOp::kBackwardWeight:
      if (u.weight_grad) return "the weight gradient is computed twice";
      if (!u.split) return "the weight gradient comes before its backward-input";
      return u.weight_grad = true, "";
    case PipeOp::kSendGrad:
      if (first) return "virtual stage 0 sends no gradient";
      if (!u.input_grad) return "the gradient is sent before its backward";
      if (u.sent_grad) return "the gradient is sent twice";
      return u.sent_grad = true, "";
    case PipeOp::kOptimizerStep:
      break;
  }
  return "the action is not one of PipeOp's";
}

// The first action the unit (mb, chunk) of `stage` still lacks at the end of the list.
std::optional<PipeAction> missing_action(const ScheduleSpec& spec, int stage, int mb, int chunk,
                                         const UnitState& u) {
  const int j = virtual_stage(spec, stage, chunk);
  const bool first = j == 0, last = j == last_virtual_stage(spec);
  auto act = [&](PipeOp op) { return PipeAction{op, mb, chunk}; };
  if (!first && !u.recv_act) return act(PipeOp::kRecvActivation);
  if (!u.forward) return act(PipeOp::kForward);
  if (!last && !u.sent_act) return act(PipeOp::kSendActivation);
  if (!last && !u.recv_grad) return act(PipeOp::kRecvGrad);
  if (!u.input_grad) return act(PipeOp::kBackward);
  if (!u.weight_grad) return act(PipeOp::kBackwardWeight);
  if (!first && !u.sent_grad) return act(PipeOp::kSendGrad);
  return std::nullopt;
}

void check_stage(const ScheduleSpec& spec, int stage, const Actions& list) {
  const int m = spec.micro_batches, v = spec.virtual_stages;
  std::vector<UnitState> units(static_cast<size_t>(m) * v);
  for (size_t i = 0; i < list.size(); ++i) {
    const PipeAction& a = list[i];
    if (a.op == PipeOp::kOptimizerStep) {
      if (i + 1 != list.size()) refuse(stage, i, a, "the optimizer step is not the last action");
      if (a.micro_batch != -1 || a.chunk != 0) {
        refuse(stage, i, a, "the optimizer step has micro-batch -1 and chunk 0");
      }
      continue;
    }
    if (a.micro_batch < 0 || a.micro_batch >= m || a.chunk < 0 || a.chunk >= v) {
      refuse(stage, i, a,
             "micro-batch or chunk out of range (m = " + std::to_string(m) +
                 ", v = " + std::to_string(v) + ")");
    }
    const std::string why = apply_action(spec, stage, a, units[a.chunk * m + a.micro_batch]);
    if (!why.empty()) refuse(stage, i, a, why);
  }
  if (list.empty() || list.back().op != PipeOp::kOptimizerStep) {
    throw InvalidArgument("pipeline schedule stage " + std::to_string(stage) +
                          " does not end with optimizer-step.");
  }
  for (int c = 0; c < v; ++c) {
    for (int mb = 0; mb < m; ++mb) {
      if (auto a = missing_action(spec, stage, mb, c, units[c * m + mb])) {
        throw InvalidArgument("pipeline schedule stage " + std::to_string(stage) + " never does " +
                              to_string(*a) + ".");
      }
    }
  }
}

// The messages of one channel (a stage's activations to the next stage, or its gradients
// to the previous one), in order: (micro-batch, receiving virtual stage).
using Channel = std::vector<std::pair<int, int>>;

void check_pairing(const Schedule& schedule) {
  const ScheduleSpec& spec = schedule.spec;
  const int p = spec.stages;
  // [from stage * P + to stage][0: activations, 1: gradients]
  std::vector<std::array<Channel, 2>> sent(static_cast<size_t>(p) * p), received(sent.size());
  auto channel = [&](int from, int to) { return static_cast<size_t>(from) * p + to; };
  for (int s = 0; s < p; ++s) {
    for (const PipeAction& a : schedule.stages[s]) {
      const int j = virtual_stage(spec, s, a.chunk);
      if (a.op == PipeOp::kSendActivation) {
        sent[channel(s, stage_of_virtual(spec, j + 1))][0].push_back({a.micro_batch, j + 1});
      }
      if (a.op == PipeOp::kSendGrad) sent[channel(s, stage_of_virtual(spec, j - 1))][1].push_back({a.micro_batch, j - 1});
      if (a.op == PipeOp::kRecvActivation) {
        received[channel(stage_of_virtual(spec, j - 1), s)][0].push_back({a.micro_batch, j});
      }
      if (a.op == PipeOp::kRecvGrad) received[channel(stage_of_virtual(spec, j + 1), s)][1].push_back({a.micro_batch, j});
    }
  }
  for (int from = 0; from < p; ++from) {
    for (int to = 0; to < p; ++to) {
      for (int kind = 0; kind < 2; ++kind) {
        const Channel &out = sent[channel(from, to)][kind], &in = received[channel(from, to)][kind];
        const auto [o, r] = std::mismatch(out.begin(), out.end(), in.begin(), in.end());
        if (o == out.end() && r == in.end()) continue;
        auto describe = [&](Channel::const_iterator it, const Channel& c) {
          return it == c.end() ? std::string("nothing")
                               : "mb " + std::to_string(it->first) + " for virtual stage " +
                                     std::to_string(it->second);
        };
        throw InvalidArgument(
            "pipeline schedule stage " + std::to_string(from) + " sends " +
            (kind == 0 ? "activations" : "gradients") + " to stage " + std::to_string(to) +
            " in another order than stage " + std::to_string(to) + " receives them: message " +
            std::to_string(o - out.begin()) + " is " + describe(o, out) +
            " on the sending side and " + describe(r, in) + " on the receiving side.");
      }
    }
  }
}

}  // namespace

// `backward` is kBackward for 1F1B and kBackwardInput for the order ZB-H1 starts from.
std::vector<PipeAction> one_f_one_b_compute(const ScheduleSpec& spec, int stage, PipeOp backward) {
  const int m = spec.micro_batches;
  const int warmup = std::min(spec.stages - stage - 1, m);
  std::vector<PipeAction> out;
  for (int mb = 0; mb < warmup; ++mb) out.push_back({PipeOp::kForward, mb, 0});
  for (int i = 0; i + warmup < m; ++i) {
    out.push_back({PipeOp::kForward, warmup + i, 0});
    out.push_back({backward, i, 0});
  }
  for (int mb = std::max(m - warmup, 0); mb < m; ++mb) out.push_back({backward, mb, 0});
  return out;
}

ScheduleKind parse_schedule_kind(std::string_view name) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  if (name == "interleaved" || name == "interleaved-1f1b") return ScheduleKind::kInterleaved1F1B;
  if (name == "zb-h1") return ScheduleKind::kZeroBubbleH1;
  if (name == "zb-v") return ScheduleKind::kZeroBubbleV;
  throw ConfigError("unknown pipeline schedule '" + std::string(name) +
                    "'; choose gpipe, 1f1b, interleaved (or interleaved-1f1b), zb-h1 or zb-v.");
}

std::string_view schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe:
      return "gpipe";
    case ScheduleKind::k1F1B:
      return "1f1b";
    case ScheduleKind::kInterleaved1F1B:
      return "interleaved";
    case ScheduleKind::kZeroBubbleH1:
      return "zb-h1";
    case ScheduleKind::kZeroBubbleV:
      return "zb-v";
  }
  return "unknown";
}

std::string_view pipe_op_name(PipeOp op) {
  switch (op) {
    case PipeOp::kRecvActivation:
      return "recv-activation";
    case PipeOp::kForward:
      return "forward";
    case PipeOp::kSendActivation:
      return "send-activation";
    case PipeOp::kRecvGrad:
      return "recv-grad";
    case PipeOp::kBackward:
      return "backward";
    case PipeOp::kBackwardInput:
      return "backward-input";
    case PipeOp::kBackwardWeight:
      return "backward-weight";
    case PipeOp::kSendGrad:
      return "send-grad";
    case PipeOp::kOptimizerStep:
      return "optimizer-step";
  }
  return "unknown";
}

std::string to_string(const PipeAction& action) {
  std::string out(pipe_op_name(action.op));
  if (action.op == PipeOp::kOptimizerStep) return out;
  return out + "(mb " + std::to_string(action.micro_batch) + ", chunk " +
         std::to_string(action.chunk) + ")";
}

void check_schedule_spec(const ScheduleSpec& spec) {
  const std::string name(schedule_name(spec.kind));
  const std::string p = std::to_string(spec.stages), m = std::to_string(spec.micro_batches);
  const std::string v = std::to_string(spec.virtual_stages);
  if (spec.stages < 1) throw ConfigError("pipeline stages = " + p + " must be at least 1.");
  if (spec.micro_batches < 1) {
    throw ConfigError("pipeline micro-batches = " + m + " must be at least 1.");
  }
  if (spec.virtual_stages < 1) {
    throw ConfigError("pipeline virtual stages = " + v + " must be at least 1.");
  }
  if (spec.kind == ScheduleKind::kZeroBubbleV) {
    if (spec.virtual_stages != 2) {
      throw ConfigError("the zb-v pipeline schedule runs 2 chunks per stage (a V), not " + v + ".");
    }
    if (spec.stages < 2) {
      throw ConfigError("the zb-v pipeline schedule needs at least 2 stages, not " + p + ".");
    }
    if (spec.micro_batches < 2 * spec.stages) {
      throw ConfigError("the zb-v pipeline schedule needs at least 2 x stages = " +
                        std::to_string(2 * spec.stages) + " micro-batches, not " + m +
                        " (below that its lists cannot fill the V).");
    }
    if (spec.micro_batches > (INT_MAX / 16) / spec.stages) {
      throw ConfigError("pipeline stages x micro-batches is too large.");
    }
    return;
  }
  if (spec.kind != ScheduleKind::kInterleaved1F1B) {
    if (spec.virtual_stages > 1) {
      throw ConfigError("pipeline virtual stages = " + v + " needs the interleaved schedule; " +
                        name + " runs 1 chunk per stage.");
    }
    return;
  }
  if (spec.virtual_stages < 2) {
    throw ConfigError("the interleaved pipeline schedule needs virtual stages >= 2, not " + v +
                      "; use 1f1b for 1 chunk per stage.");
  }
  if (spec.stages < 2) {
    throw ConfigError("the interleaved pipeline schedule needs at least 2 stages, not " + p +
                      " (its chunks would send to their own stage).");
  }
  if (spec.micro_batches % spec.stages != 0) {
    throw ConfigError("the interleaved pipeline schedule needs micro-batches (" + m +
                      ") to be a multiple of the stages (" + p + ").");
  }
  if (static_cast<int64_t>(spec.stages) * spec.virtual_stages > (INT_MAX / 4) / spec.micro_batches) {
    throw ConfigError("pipeline stages x virtual stages x micro-batches is too large.");
  }
}

Schedule build_schedule(const ScheduleSpec& spec, const ActionCosts& costs) {
  check_schedule_spec(spec);
  Schedule schedule{spec, std::vector<Actions>(spec.stages)};
  std::vector<Actions> zero_bubble;
  if (spec.kind == ScheduleKind::kZeroBubbleH1) zero_bubble = zero_bubble_h1_compute(spec);
  if (spec.kind == ScheduleKind::kZeroBubbleV) zero_bubble = zero_bubble_v_compute(spec, costs);
  for (int s = 0; s < spec.stages; ++s) {
    Actions compute;
    switch (spec.kind) {
      case ScheduleKind::kGPipe:
        compute = gpipe_compute(spec);
        break;
      case ScheduleKind::k1F1B:
        compute = one_f_one_b_compute(spec, s, PipeOp::kBackward);
        break;
      case ScheduleKind::kInterleaved1F1B:
        compute = interleaved_compute(spec, s);
        break;
      case ScheduleKind::kZeroBubbleH1:
      case ScheduleKind::kZeroBubbleV:
        compute = std::move(zero_bubble[s]);
        break;
    }
    schedule.stages[s] = with_communication(spec, s, compute);
  }
  return schedule;
}

int max_in_flight(const Schedule& schedule, int stage) {
  if (stage < 0 || stage >= static_cast<int>(schedule.stages.size())) {
    throw InvalidArgument("pipeline stage " + std::to_string(stage) + " is not in 0.." +
                          std::to_string(schedule.stages.size()) + ".");
  }
  int held = 0, most = 0;
  for (const PipeAction& a : schedule.stages[stage]) {
    if (a.op == PipeOp::kForward) most = std::max(most, ++held);
    if (a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight) --held;
  }
  return most;
}

void validate_schedule(const Schedule& schedule) {
  const ScheduleSpec& spec = schedule.spec;
  if (spec.stages < 1 || spec.micro_batches < 1 || spec.virtual_stages < 1) {
    throw InvalidArgument("pipeline schedule spec has P = " + std::to_string(spec.stages) +
                          ", m = " + std::to_string(spec.micro_batches) + ", v = " +
                          std::to_string(spec.virtual_stages) + "; each must be at least 1.");
  }
  if (static_cast<int>(schedule.stages.size()) != spec.stages) {
    throw InvalidArgument("pipeline schedule has " + std::to_string(schedule.stages.size()) +
                          " action lists for " + std::to_string(spec.stages) + " stages.");
  }
  for (int s = 0; s < spec.stages; ++s) check_stage(spec, s, schedule.stages[s]);
  check_pairing(schedule);
}

int virtual_stage_of(const ScheduleSpec& spec, int stage, int chunk) {
  if (spec.kind == ScheduleKind::kZeroBubbleV && chunk == 1) return 2 * spec.stages - 1 - stage;
  return chunk * spec.stages + stage;
}

int stage_of_virtual(const ScheduleSpec& spec, int vstage) {
  const int p = spec.stages;
  if (spec.kind == ScheduleKind::kZeroBubbleV && vstage >= p) return 2 * p - 1 - vstage;
  return ((vstage % p) + p) % p;
}

}  // namespace etr
