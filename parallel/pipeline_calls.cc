#include "parallel/pipeline_calls.h"

#include <algorithm>
#include <cstdint>

namespace etr {

std::string engine_call_name(const EngineCall& call) {
  switch (call.kind) {
    case EngineCallKind::kBeforeForward: return "before_forward layer " + std::to_string(call.layer);
    case EngineCallKind::kBeginBackward: return "begin_backward";
    case EngineCallKind::kBeforeBackward: return "before_backward layer " + std::to_string(call.layer);
    case EngineCallKind::kAfterBackward: return "grads_final layer " + std::to_string(call.layer);
  }
  return "engine call";
}

Needs needs_of(const std::vector<PipeAction>& list, int chunk, int m, bool first) {
  std::vector<uint8_t> weights(static_cast<size_t>(m), 0), sent(static_cast<size_t>(m), first);
  std::vector<uint8_t> dout(static_cast<size_t>(m), 0);
  Needs now, most;
  auto done = [&](size_t mb) {
    if (!weights[mb] || !sent[mb]) return;
    --now.slots;
    if (!first) --now.inputs;
  };
  for (const PipeAction& a : list) {
    if (a.chunk != chunk || a.micro_batch < 0) continue;
    const size_t mb = static_cast<size_t>(a.micro_batch);
    const bool reads_dout = a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardInput;
    if (reads_dout && dout[mb]) --now.douts;
    if (a.op == PipeOp::kRecvActivation) ++now.inputs;
    if (a.op == PipeOp::kForward) ++now.slots;
    if (a.op == PipeOp::kRecvGrad) ++now.douts, dout[mb] = 1;
    if (a.op == PipeOp::kBackward || a.op == PipeOp::kBackwardWeight) weights[mb] = 1, done(mb);
    if (a.op == PipeOp::kSendGrad) sent[mb] = 1, done(mb);
    most = {std::max(most.slots, now.slots), std::max(most.inputs, now.inputs),
            std::max(most.douts, now.douts)};
  }
  return most;
}


void append_engine_calls(const PipeAction& a, int layers, bool final, std::vector<EngineCall>& out) {
  if (a.op == PipeOp::kForward) {
    for (int i = 0; i < layers; ++i) out.push_back({EngineCallKind::kBeforeForward, i, false});
    return;
  }
  const bool input_only = a.op == PipeOp::kBackwardInput;
  if (!input_only && a.op != PipeOp::kBackward && a.op != PipeOp::kBackwardWeight) return;
  if (!input_only) out.push_back({EngineCallKind::kBeginBackward, 0, final});
  for (int i = layers - 1; i >= 0; --i) {
    out.push_back({EngineCallKind::kBeforeBackward, i, false});
    if (!input_only && final) out.push_back({EngineCallKind::kAfterBackward, i, true});
  }
}

Schedule list_at_costs(const ScheduleSpec& spec, const ActionCosts& costs) {
  Schedule unit = build_schedule(spec);
  Schedule costed = build_schedule(spec, costs);
  if (costed.stages == unit.stages ||
      simulate_schedule(costed, costs).makespan >= simulate_schedule(unit, costs).makespan) {
    return unit;
  }
  for (int s = 0; s < spec.stages; ++s) {
    for (int c = 0; c < spec.virtual_stages; ++c) {
      const bool first = virtual_stage_of(spec, s, c) == 0;
      const Needs a = needs_of(costed.stages[s], c, spec.micro_batches, first);
      const Needs b = needs_of(unit.stages[s], c, spec.micro_batches, first);
      if (a.slots > b.slots || a.inputs > b.inputs || a.douts > b.douts) return unit;
    }
  }
  return costed;
}

}  // namespace etr
