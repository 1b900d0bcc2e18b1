// ckpt_compare A B TOL: compares two checkpoints of the same model (saved from any
// layouts): for each state (param, adam.m, adam.v) the largest |a - b| over all elements,
// computed in double. Prints one line per state; exit 0 when the parameters' largest
// difference is at most TOL (TOL 0: bitwise equal), 1 otherwise, 2 on bad input.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_reader.h"
#include "examples/gpt/gpt_model.h"
#include "runtime/host_allocator.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: ckpt_compare CKPT_A CKPT_B TOLERANCE\n");
    return 2;
  }
  try {
    char* end = nullptr;
    const double tol = std::strtod(argv[3], &end);
    if (end == argv[3] || *end != '\0' || !(tol >= 0)) {
      std::fprintf(stderr, "ckpt_compare: the tolerance '%s' is not a number >= 0\n", argv[3]);
      return 2;
    }
    etr::CheckpointReader a(argv[1]), b(argv[2]);
    const auto c = etr::gpt::GptConfig::from(a.manifest().config().model());
    etr::HostAllocator alloc;
    etr::gpt::GptModel<float> model(c, alloc);
    const auto& layout = model.layout();
    const int64_t n = layout.numel();
    if (a.manifest().step() != b.manifest().step()) {
      std::printf("steps differ: %llu vs %llu\n", static_cast<unsigned long long>(a.manifest().step()),
                  static_cast<unsigned long long>(b.manifest().step()));
      return 1;
    }
    std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    double param_diff = 0;
    for (const char* state : {"param", "adam.m", "adam.v"}) {
      a.read_state(state, layout, x.data(), 0, n);
      b.read_state(state, layout, y.data(), 0, n);
      double worst = 0, scale = 0;
      for (int64_t i = 0; i < n; ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(x[i]) - static_cast<double>(y[i])));
        scale = std::max(scale, std::abs(static_cast<double>(x[i])));
      }
      std::printf("%-7s max |diff| %.3g (max |value| %.3g) over %lld elements\n", state, worst, scale,
                  static_cast<long long>(n));
      if (std::string(state) == "param") param_diff = worst;
    }
    const bool ok = param_diff <= tol;
    std::printf("parameters %s: max |diff| %.3g, tolerance %.3g\n", ok ? "match" : "DIFFER", param_diff, tol);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_compare: error: %s\n", e.what());
    return 2;
  }
}
