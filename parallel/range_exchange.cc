#include "parallel/range_exchange.h"

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "runtime/mpi_check.h"
#include "runtime/mpi_wait.h"

namespace etr {
namespace {

int as_count(int64_t n) {
  if (n > INT_MAX) {
    throw InvalidArgument("a range exchange of " + std::to_string(n) +
                          " elements to one rank is more than MPI counts");
  }
  return static_cast<int>(n);
}

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
  std::vector<float> data;
  std::vector<int> header_counts(n, 0), data_counts(n, 0);
  for (int d = 0; d < n; ++d) {
    const int64_t lo = wants[2 * d], hi = wants[2 * d + 1];
    int64_t sent = 0;
    for (const FlatPiece& p : pieces) {
      const int64_t a = std::max(lo, p.begin), b = std::min(hi, p.end);
      if (a >= b) continue;
      headers.push_back(a);
      headers.push_back(b - a);
      data.insert(data.end(), p.data + (a - p.begin), p.data + (b - p.begin));
      header_counts[d] += 2;
      sent += b - a;
    }
    data_counts[d] = as_count(sent);
  }
  std::vector<int> counts(2 * static_cast<size_t>(n)), in_counts(counts.size());
  for (int d = 0; d < n; ++d) counts[2 * d] = header_counts[d], counts[2 * d + 1] = data_counts[d];
  MPI_CHECK(MPI_Ialltoall(counts.data(), 2, MPI_INT, in_counts.data(), 2, MPI_INT, group.comm(), &r));
  wait(r);
  std::vector<int> in_headers(n), in_data(n);
  for (int d = 0; d < n; ++d) in_headers[d] = in_counts[2 * d], in_data[d] = in_counts[2 * d + 1];
  const std::vector<int> hd = displacements(header_counts), ihd = displacements(in_headers);
  const std::vector<int> dd = displacements(data_counts), idd = displacements(in_data);
  std::vector<int64_t> got_headers(static_cast<size_t>(ihd.back() + in_headers.back()));
  std::vector<float> got(static_cast<size_t>(idd.back()) + static_cast<size_t>(in_data.back()));
  MPI_CHECK(MPI_Ialltoallv(headers.data(), header_counts.data(), hd.data(), MPI_INT64_T,
                           got_headers.data(), in_headers.data(), ihd.data(), MPI_INT64_T,
                           group.comm(), &r));
  wait(r);
  MPI_CHECK(MPI_Ialltoallv(data.data(), data_counts.data(), dd.data(), MPI_FLOAT, got.data(),
                           in_data.data(), idd.data(), MPI_FLOAT, group.comm(), &r));
  wait(r);
  size_t at = 0;
  for (size_t h = 0; h + 1 < got_headers.size(); h += 2) {
    const int64_t offset = got_headers[h], count = got_headers[h + 1];
    std::copy(got.begin() + static_cast<int64_t>(at), got.begin() + static_cast<int64_t>(at) + count,
              out + (offset - out_begin));
    at += static_cast<size_t>(count);
  }
}

}  // namespace etr
