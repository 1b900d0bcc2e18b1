#include "parallel/engine.h"

#include <algorithm>

#include "runtime/bytes.h"

namespace etr {

StackHooks Engine::hooks() {
  StackHooks h;
  h.before_forward = [this](int layer) { before_forward(layer); };
  h.before_backward = [this](int layer) { before_backward(layer); };
  h.after_backward = [this](int layer) { layer_grads_final(layer); };
  return h;
}

double zero_state_share(int stage, int ranks) {
  const double n = std::max(1, ranks);
  switch (stage) {
    case 0: return 1.0;
    case 1: return (8 + 8 / n) / 16;
    case 2: return (4 + 12 / n) / 16;
    default: return 1.0 / n;
  }
}

double EngineMemory::analytic_bytes() const {
  return 16 * static_cast<double>(psi) * zero_state_share(stage, ranks);
}

std::string EngineMemory::describe() const {
  auto b = [](double x) { return format_bytes(x); };
  std::string s = "parameters " + b(params) + ", gradients " + b(grads) + ", optimizer " +
                  b(optimizer) + ": state " + b(state_bytes()) + " per rank (ZeRO paper, stage " +
                  std::to_string(stage) + " on " + std::to_string(ranks) + " rank(s): " +
                  b(analytic_bytes()) + ")";
  if (stage >= 2) s += "; at most " + b(unreduced_peak) + " of gradients not reduced yet";
  if (stage >= 3) s += " and " + b(gathered_peak) + " of parameters gathered";
  if (checkpoint_staging > 0) s += "; checkpoint staging " + b(checkpoint_staging);
  return s;
}

}  // namespace etr
