// MemoryModel: a rank's peak as fixed parts plus the activations of b (memory_model.h).
#include "parallel/memory_model.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr {

MemoryModel::MemoryModel(std::vector<MemoryPart> fixed, ActivationBytes activations,
                         VariableParts variable)
    : fixed_(std::move(fixed)), activations_(std::move(activations)), variable_(std::move(variable)) {
  if (!activations_) throw InvalidArgument("a memory model needs the activations' bytes");
}

std::vector<MemoryPart> MemoryModel::parts(int64_t b, bool recompute) const {
  std::vector<MemoryPart> all = fixed_;
  if (variable_) {
    for (MemoryPart& p : variable_(b)) all.push_back(std::move(p));
  }
  all.push_back({recompute ? "activations (recomputed blocks)" : "activations",
                 activations_(b, recompute)});
  return all;
}

size_t MemoryModel::peak(int64_t b, bool recompute) const {
  size_t sum = 0;
  for (const MemoryPart& p : parts(b, recompute)) sum += p.bytes;
  return sum;
}

std::string MemoryModel::dominant(int64_t b, bool recompute) const {
  const std::vector<MemoryPart> all = parts(b, recompute);
  return std::max_element(all.begin(), all.end(), [](const MemoryPart& x, const MemoryPart& y) {
           return x.bytes < y.bytes;
         })->name;
}

int64_t MemoryModel::largest_fitting(size_t budget, double margin, int64_t max_b,
                                     bool recompute) const {
  const double usable = (1.0 - margin) * static_cast<double>(budget);
  auto fits = [&](int64_t b) { return static_cast<double>(peak(b, recompute)) <= usable; };
  if (max_b < 1 || !fits(1)) return 0;
  int64_t lo = 1, hi = max_b;  // fits(lo); the answer is in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

std::vector<std::string> MemoryModel::plan_table(size_t budget, double margin, int64_t max_b,
                                                 bool can_recompute) const {
  auto mib = [](size_t bytes) { return format_bytes(static_cast<double>(bytes)); };
  std::vector<std::string> out;
  char line[256];
  out.push_back("memory model per rank (the allocator's peak in a step), budget " + mib(budget) +
                ", margin " + std::to_string(static_cast<int>(margin * 100 + 0.5)) + " %:");
  for (const MemoryPart& p : fixed_) out.push_back("  " + p.name + ": " + mib(p.bytes));
  if (variable_) {
    const std::vector<MemoryPart> lo = variable_(1), hi = variable_(max_b);
    for (size_t i = 0; i < lo.size() && i < hi.size(); ++i) {
      out.push_back("  " + lo[i].name + ": " + mib(lo[i].bytes) + " at b = 1, " + mib(hi[i].bytes) +
                    " at b = " + std::to_string(max_b));
    }
  }
  std::snprintf(line, sizeof line, "  %8s %16s %16s %s", "b", "peak", "activations",
                can_recompute ? "  peak with recomputation" : "");
  out.emplace_back(line);
  const double usable = (1.0 - margin) * static_cast<double>(budget);
  for (int64_t b = 1; b <= max_b; b = (b == max_b ? max_b + 1 : std::min(2 * b, max_b))) {
    const size_t p = peak(b, false);
    std::string rc;
    if (can_recompute) rc = "  " + mib(peak(b, true));
    std::snprintf(line, sizeof line, "  %8lld %16s %16s%s%s", static_cast<long long>(b),
                  mib(p).c_str(), mib(activations_(b, false)).c_str(), rc.c_str(),
                  static_cast<double>(p) <= usable ? "" : "  (does not fit)");
    out.emplace_back(line);
    if (static_cast<double>(p) > usable && (!can_recompute || static_cast<double>(peak(b, true)) > usable))
      break;
  }
  const int64_t best = largest_fitting(budget, margin, max_b, false);
  if (best > 0) {
    out.push_back("  the largest micro-batch that fits: " + std::to_string(best) + " (peak " +
                  mib(peak(best, false)) + ", dominated by " + dominant(best, false) + ")");
  } else {
    out.push_back("  not even a micro-batch of 1 fits (peak " + mib(peak(1, false)) +
                  ", dominated by " + dominant(1, false) + ")");
  }
  if (can_recompute) {
    const int64_t rc = largest_fitting(budget, margin, max_b, true);
    out.push_back("  with activation recomputation: " +
                  (rc > 0 ? std::to_string(rc) + " (peak " + mib(peak(rc, true)) + ")"
                          : std::string("not even 1")));
  }
  return out;
}

}  // namespace etr
