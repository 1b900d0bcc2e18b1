// A tensor record's extents as runs (format version 2; checkpoint/manifest.proto, ExtentRun):
// writing them, walking them, and converting from and to format version 1's one record per
// extent.
//
//   ckpt::TensorRecord rec;
//   append_extent(rec, {rank, byte_offset, first_element, count});  // extends the last run
//   for_each_extent(rec, lo, hi, [&](const ExtentRef& x) { ... });  // those overlapping [lo, hi)
//
// A run holds extents that form one arithmetic progression: the same count, one after
// another in the tensor, with a constant step in file index and in byte offset. A ZeRO
// rank's block of a bucket lies at the same offset of every rank's file, so the blocks of
// a bucket that a tensor crosses are one run, however many ranks wrote them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "checkpoint/manifest.pb.h"

namespace etr {

// One extent: tensor elements [tensor_begin, tensor_begin + count) at byte `file_offset`
// of the manifest's files(file).
struct ExtentRef {
  int file = 0;
  uint64_t file_offset = 0;
  uint64_t tensor_begin = 0;
  uint64_t count = 0;
  bool operator==(const ExtentRef&) const = default;
};

// Appends extent `x` (count >= 1, starting where the record's extents end) to `rec`'s
// runs: the last run grows when `x` continues its progression, else a run begins.
void append_extent(ckpt::TensorRecord& rec, const ExtentRef& x);

// Extent k of run `r` (0 <= k <= r.more()).
inline ExtentRef extent_of(const ckpt::ExtentRun& r, uint64_t k) {
  return {static_cast<int>(static_cast<int64_t>(r.file()) + static_cast<int64_t>(k) * r.file_step()),
          r.file_offset() + k * static_cast<uint64_t>(r.offset_step()), r.tensor_begin() + k * r.count(),
          r.count()};
}

// Calls fn(const ExtentRef&) for each extent of `rec` that overlaps tensor elements
// [lo, hi), in tensor order, reaching them by arithmetic (a reader of a small range of a
// large world's checkpoint visits only its extents). The runs must make sense
// (check_manifest_sense): in order, contiguous, count >= 1.
template <typename Fn>
void for_each_extent(const ckpt::TensorRecord& rec, uint64_t lo, uint64_t hi, Fn&& fn) {
  const auto& runs = rec.runs();
  // The last run that begins at or before lo, then the ones after it.
  auto it = std::upper_bound(runs.begin(), runs.end(), lo,
                             [](uint64_t x, const ckpt::ExtentRun& r) { return x < r.tensor_begin(); });
  if (it != runs.begin()) --it;
  for (; it != runs.end() && it->tensor_begin() < hi; ++it) {
    const uint64_t tb = it->tensor_begin(), n = it->count();
    const uint64_t first = lo > tb ? (lo - tb) / n : 0;
    const uint64_t last = std::min<uint64_t>(it->more(), (hi - 1 - tb) / n);
    for (uint64_t k = first; k <= last; ++k) fn(extent_of(*it, k));
  }
}

// Every extent of `rec`, in tensor order.
template <typename Fn>
void for_each_extent(const ckpt::TensorRecord& rec, Fn&& fn) {
  for (const ckpt::ExtentRun& r : rec.runs()) {
    for (uint64_t k = 0; k <= r.more(); ++k) fn(extent_of(r, k));
  }
}

// The number of extents `rec`'s runs stand for.
uint64_t extent_count(const ckpt::TensorRecord& rec);

// A format version 1 manifest's extents (a record per extent, naming its file) as runs,
// in place; "" or one sentence naming the first extent whose file the manifest does not
// list. Empty extents are dropped.
std::string runs_from_extents(ckpt::Manifest& m);

// The other way (for the format's comparison in etr-bench and the tests' version 1
// manifests): each run's extents as version 1 records, the runs cleared.
void extents_from_runs(ckpt::Manifest& m);

}  // namespace etr
