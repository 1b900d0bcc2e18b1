#include "bench/collective_model.h"

#include <algorithm>
#include <climits>

#include "runtime/bytes.h"
#include "runtime/error.h"

namespace etr::bench {

std::vector<Point> plan_sizes(const Settings& s, int n) {
  int64_t esize = static_cast<int64_t>(dtype_size(s.dtype));
  int64_t unit = s.kind == Kind::kAllreduce ? 1 : n;  // whole buffer = a multiple of this
  std::vector<Point> points;
  for (size_t b = s.min_bytes;; b *= static_cast<size_t>(s.step_factor)) {
    int64_t blocks = std::max<int64_t>(1, static_cast<int64_t>(b) / (esize * unit));
    Point p;
    p.count = blocks * unit;
    p.bytes = static_cast<size_t>(p.count * esize);
    p.in_count = s.kind == Kind::kAllgather ? blocks : p.count;
    p.out_count = s.kind == Kind::kReduceScatter ? blocks : p.count;
    if (points.empty() || points.back().count != p.count) points.push_back(p);
    if (b > s.max_bytes / static_cast<size_t>(s.step_factor)) break;
  }
  if (points.back().count > INT_MAX) {
    throw ConfigError("--max-bytes " + format_bytes(static_cast<double>(s.max_bytes)) +
                      " is more elements than one MPI call can count (2^31 - 1)");
  }
  return points;
}

double bus_factor(Kind k, int n) {
  return k == Kind::kAllreduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n;
}

const char* bus_factor_text(Kind k) {
  return k == Kind::kAllreduce ? "2(n-1)/n" : "(n-1)/n";
}

// Memory-traffic model: the least DRAM traffic per rank (bytes read + written) of the
// ring algorithms, with S the whole buffer, counting a peer's chunk read straight out of
// its buffer (shared memory) and each partial result written once:
//   reduce-scatter  n-1 steps x (read own input chunk + read peer's chunk + write result)
//                   = 3(n-1)/n S
//   allgather       n-1 steps x (read peer's chunk + write own output) = 2(n-1)/n S,
//                   plus, out of place, own block copied in (read + write S/n) = 2S in all
//   allreduce       reduce-scatter + allgather (own block already in place) = 5(n-1)/n S
// With B the streaming bandwidth of one rank while all ranks stream, time >= traffic / B,
// so the busbw ceiling (busbw = factor x S / time) is factor x S x B / traffic:
//   allreduce 2(n-1)/n / (5(n-1)/n) B = 0.4 B;  reduce_scatter (n-1)/n / (3(n-1)/n) B = B/3;
//   allgather (n-1)/n / 2 B = (n-1)/(2n) B.
// Returns the multiple of B (nothing for one rank, where busbw is 0 by definition).
std::optional<double> ceiling_factor(Kind k, int n) {
  if (n < 2) return std::nullopt;
  switch (k) {
    case Kind::kAllreduce:
      return 0.4;
    case Kind::kReduceScatter:
      return 1.0 / 3.0;
    case Kind::kAllgather:
      return (n - 1) / (2.0 * n);
  }
  return std::nullopt;
}

const char* traffic_model_text(Kind k) {
  switch (k) {
    case Kind::kAllreduce:
      return "ring reduce-scatter 3(n-1)/n S + ring allgather 2(n-1)/n S = 5(n-1)/n S "
             "per rank, ceiling busbw = 2(n-1)/n S / (5(n-1)/n S / B) = 0.4 B";
    case Kind::kReduceScatter:
      return "ring reduce-scatter: read own chunk + read peer's chunk + write result, "
             "3(n-1)/n S per rank, ceiling busbw = (n-1)/n S / (3(n-1)/n S / B) = B/3";
    case Kind::kAllgather:
      return "ring allgather out of place: read peer's chunk + write output 2(n-1)/n S, "
             "own block 2S/n, = 2S per rank, ceiling busbw = (n-1)/n S / (2S / B) = (n-1)/(2n) B";
  }
  return "";
}

}  // namespace etr::bench
