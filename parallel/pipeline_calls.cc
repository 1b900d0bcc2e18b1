#include "parallel/pipeline_calls.h"

namespace etr {

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

}  // namespace etr
