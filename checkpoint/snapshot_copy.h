// The copy of an async save's snapshot (checkpoint/checkpoint_writer.h): one pass over
// the source that copies it with non-temporal stores, checksums it and checks that every
// f32 in it is finite, in pieces small enough that the source is still in the cache for
// the checksum and the check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checksum.h"
#include "checkpoint/shard_plan.h"

namespace etr {

// A checkpoint of NaN or infinite state is useless to resume from, so it is never
// written: this finds the first non-finite f32 in the pieces of one shard file (its
// states one after another, `state_bytes` each) as they go by.
class FiniteCheck {
 public:
  FiniteCheck(const ShardPlan& plan, int rank);
  void add(const void* data, size_t bytes);
  // "" while every value was finite.
  const std::string& error() const { return error_; }

 private:
  static constexpr uint32_t kExponent = 0x7f800000u;  // all ones: NaN or infinity
  const std::vector<std::string>& states_;
  uint64_t state_bytes_;
  uint64_t seen_ = 0;
  std::string error_;
};

// dst[0, n) = src[0, n) (non-temporal stores where the CPU has them: the copy does not
// evict the training thread's working set), with `sum` and `finite` fed the source.
// Call store_fence() after the last copy, before the destination is read.
void copy_and_hash(char* dst, const char* src, size_t n, Checksum& sum, FiniteCheck& finite);
void store_fence();

}  // namespace etr
