// ShardPlan: where every byte of a saved state goes, for a writer of world N
// (checkpoint/manifest.proto explains the packed layout).
//
//   packed state  = the layout's tensors back to back, no padding: P elements
//   rank r writes = packed elements [P r / N, P (r+1) / N) of every state, state after
//                   state, into shard-RRRRR-of-NNNNN.bin
//
// so the ranks split replicated state and no byte is written twice. describe() turns the
// plan into the manifest's tensor records (one extent per file a tensor touches); pack()
// produces rank r's file contents from the in-memory flat buffers (which have padding).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/manifest.pb.h"
#include "runtime/param_layout.h"

namespace etr {

// One flat buffer of a job's state, laid out by the model's ParamLayout (f32).
struct NamedState {
  std::string name;  // "param", "adam.m", "adam.v"
  const float* data = nullptr;
  // data[0] is flat element `begin`: a ZeRO rank passes only the range its writer packs.
  int64_t begin = 0;
};

class ShardPlan {
 public:
  ShardPlan(const ParamLayout& layout, int world, std::vector<std::string> states);

  int world() const { return world_; }
  int64_t packed_numel() const { return packed_numel_; }
  // Packed elements [first, second) of each state that `rank` writes.
  std::pair<int64_t, int64_t> range(int rank) const;
  // The elements [first, second) of the in-memory flat buffer that range(rank) spans
  // (padding between its tensors included): what a reader must fill before pack(rank).
  std::pair<int64_t, int64_t> flat_range(int rank) const;
  uint64_t file_bytes(int rank) const;
  std::string file_name(int rank) const;
  const std::vector<std::string>& states() const { return states_; }

  // Adds the states' names and every tensor record (name, state, dtype, shape, extents).
  void describe(ckpt::Manifest& manifest) const;

  // Rank `rank`'s file contents, in order, as pieces of the flat buffers: sink(data,
  // bytes) is called once per contiguous piece. `buffers` are in states() order;
  // buffers[i][0] is flat element begins[i] (0 when `begins` is empty).
  void pack(int rank, std::span<const float* const> buffers,
            const std::function<void(const void*, size_t)>& sink,
            std::span<const int64_t> begins = {}) const;

 private:
  struct Tensor {
    const TensorEntry* entry;
    int64_t packed_begin;
  };
  const ParamLayout& layout_;
  int world_;
  std::vector<std::string> states_;
  std::vector<Tensor> tensors_;
  int64_t packed_numel_ = 0;
};

}  // namespace etr
