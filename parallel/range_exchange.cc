#include "parallel/range_exchange.h"

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "runtime/control_ops.h"
#include "runtime/error.h"
#include "runtime/mpi_check.h"
#include "runtime/mpi_wait.h"

namespace etr {
namespace {

constexpr int64_t kMaxMessage = int64_t{1} << 30;  // elements per message (MPI counts are int)
constexpr int kTag = 0x5e7;

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace

void exchange_pieces(const Group& group, std::span<const FlatPiece> pieces, float* out,
                     int64_t out_begin, int64_t out_end) {
  const int n = group.size();
  const int64_t want[2] = {out_begin, out_end};
  std::vector<int64_t> wants(static_cast<size_t>(2 * n));
  // Nonblocking calls waited for with the collectives' timeout: a stuck rank is an error.
  auto wait = [](MPI_Request& r) { wait_with_timeout(r, "a range exchange between the ranks"); };
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallgather(want, 2, MPI_INT64_T, wants.data(), 2, MPI_INT64_T, group.comm(), &r));
  wait(r);
  std::vector<int64_t> headers;  // (offset, count) per sent run, destination by destination
  struct Run {
    int to;
    const float* data;
    int64_t offset, count;
  };
  std::vector<Run> runs;
  std::vector<int> header_counts(n, 0);
  const int me = group.rank();
  for (int d = 0; d < n; ++d) {
    const int64_t lo = wants[2 * d], hi = wants[2 * d + 1];
    for (const FlatPiece& p : pieces) {
      const int64_t a = std::max(lo, p.begin), b = std::min(hi, p.end);
      if (a >= b) continue;
      if (d == me) {  // (this rank's own: copied, not sent)
        std::copy(p.data + (a - p.begin), p.data + (b - p.begin), out + (a - out_begin));
        continue;
      }
      headers.push_back(a);
      headers.push_back(b - a);
      header_counts[d] += 2;
      runs.push_back({d, p.data + (a - p.begin), a, b - a});
    }
  }
  std::vector<int> in_headers(n);
  MPI_CHECK(MPI_Ialltoall(header_counts.data(), 1, MPI_INT, in_headers.data(), 1, MPI_INT, group.comm(), &r));
  wait(r);
  const std::vector<int> hd = displacements(header_counts), ihd = displacements(in_headers);
  std::vector<int64_t> got_headers(static_cast<size_t>(ihd.back() + in_headers.back()));
  MPI_CHECK(MPI_Ialltoallv(headers.data(), header_counts.data(), hd.data(), MPI_INT64_T,
                           got_headers.data(), in_headers.data(), ihd.data(), MPI_INT64_T,
                           group.comm(), &r));
  wait(r);
  // The elements go straight from the pieces into `out` (no packed copy on either side:
  // the tied gradients and checkpoint ranges this moves can be hundreds of MiB), each run
  // in messages of at most kMaxMessage elements, in the same order on both sides (MPI keeps
  // the order of messages between two ranks with one tag).
  std::vector<MPI_Request> requests;
  auto each_message = [](int64_t count, const auto& f) {
    for (int64_t at = 0; at < count; at += kMaxMessage) f(at, std::min(kMaxMessage, count - at));
  };
  for (int s = 0; s < n; ++s) {
    for (int h = ihd[s]; h < ihd[s] + in_headers[s]; h += 2) {
      float* to = out + (got_headers[static_cast<size_t>(h)] - out_begin);
      each_message(got_headers[static_cast<size_t>(h) + 1], [&](int64_t at, int64_t count) {
        requests.push_back(MPI_REQUEST_NULL);
        MPI_CHECK(MPI_Irecv(to + at, static_cast<int>(count), MPI_FLOAT, s, kTag, group.comm(),
                            &requests.back()));
      });
    }
  }
  for (const Run& run : runs) {
    each_message(run.count, [&](int64_t at, int64_t count) {
      requests.push_back(MPI_REQUEST_NULL);
      MPI_CHECK(MPI_Isend(run.data + at, static_cast<int>(count), MPI_FLOAT, run.to, kTag, group.comm(),
                          &requests.back()));
    });
  }
  for (MPI_Request& q : requests) wait(q);
}

std::vector<std::vector<std::pair<int64_t, int64_t>>> gather_ranges(
    const Group& group, std::span<const std::pair<int64_t, int64_t>> mine) {
  const char* site = "the agreement on the ranks' checkpoint pieces (range_exchange)";
  const auto n = static_cast<size_t>(group.size());
  const auto count = static_cast<int64_t>(mine.size());
  std::vector<int64_t> counts(n);
  control::allgather(&count, 1, MPI_INT64_T, counts.data(), group.comm(), site);
  // Every rank's list padded to the longest: one fixed-size all-gather.
  const int64_t most = *std::max_element(counts.begin(), counts.end());
  std::vector<int64_t> flat(static_cast<size_t>(2 * most), 0);
  for (size_t i = 0; i < mine.size(); ++i) {
    flat[2 * i] = mine[i].first;
    flat[2 * i + 1] = mine[i].second;
  }
  std::vector<int64_t> all(flat.size() * n);
  control::allgather(flat.data(), static_cast<int>(flat.size()), MPI_INT64_T, all.data(),
                     group.comm(), site);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> out(n);
  for (size_t k = 0; k < n; ++k) {
    const int64_t* at = all.data() + k * flat.size();
    for (int64_t i = 0; i < counts[k]; ++i) out[k].emplace_back(at[2 * i], at[2 * i + 1]);
  }
  return out;
}

}  // namespace etr
