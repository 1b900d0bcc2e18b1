// ShardPlan: where every byte of a saved state goes, for a writer of world N
// (checkpoint/manifest.proto explains the packed layout).
//
//   packed state  = the layout's tensors back to back, no padding: P elements
//   rank r writes = packed elements [P r / N, P (r+1) / N) of every state, state after
//                   state, into shard-RRRRR-of-NNNNN.bin            (the even split)
//              or = the elements its engine owns (`owners`: a ZeRO rank's block of every
//                   bucket), in flat order, state after state        (the owners' split)
//
// so the ranks split replicated state and no byte is written twice; with the owners'
// split a ZeRO rank writes what it holds, with no exchange between the ranks first.
// describe() turns the plan into the manifest's tensor records (one extent per piece of a
// file a tensor touches, in tensor order, stored as runs: checkpoint/extent_runs.h); pack() produces rank r's file contents from
// the in-memory flat buffers (which have padding) or from the pieces a rank holds.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/manifest.pb.h"
#include "runtime/param_layout.h"

namespace etr {

// Flat elements [begin, end) of a state held at data (data[0] is element begin).
struct StatePiece {
  int64_t begin = 0;
  int64_t end = 0;
  const float* data = nullptr;
};

// owners[r]: the flat ranges [first, second) rank r writes, sorted; together the ranks'
// ranges cover every tensor element once (padding may be anyone's or no one's).
using ShardOwners = std::vector<std::vector<std::pair<int64_t, int64_t>>>;

// One flat buffer of a job's state, laid out by the model's ParamLayout (f32).
struct NamedState {
  NamedState() = default;
  NamedState(std::string n, const float* d = nullptr, int64_t b = 0)
      : name(std::move(n)), data(d), begin(b) {}

  std::string name;  // "param", "adam.m", "adam.v"
  const float* data = nullptr;
  // data[0] is flat element `begin`: a rank may pass only the range its writer packs.
  int64_t begin = 0;
  // When not empty (sorted, disjoint): the state is held in these pieces only, and data
  // and begin are unused (a ZeRO rank's blocks).
  std::vector<StatePiece> pieces;
  // When set: the writers follow these owners (the same for every state of a save)
  // instead of the even split, each rank writing the ranges it owns.
  std::shared_ptr<const ShardOwners> owners;
};

// The pieces of `s` (its buffer as one piece of a layout of `numel` elements, or its own).
std::vector<StatePiece> pieces_of(const NamedState& s, int64_t numel);

class ShardPlan {
 public:
  // The even split, or the owners' when `owners` is given (InvalidArgument when its ranges
  // are not `world` lists that cover every tensor element once).
  ShardPlan(const ParamLayout& layout, int world, std::vector<std::string> states,
            const ShardOwners* owners = nullptr);

  int world() const { return world_; }
  int64_t packed_numel() const { return packed_numel_; }
  // The even split's packed elements [first, second) of each state that `rank` writes.
  std::pair<int64_t, int64_t> range(int rank) const;
  // The elements [first, second) of the in-memory flat buffer that range(rank) spans
  // (padding between its tensors included): what a reader must fill before pack(rank).
  // The even split's, whatever the plan.
  std::pair<int64_t, int64_t> flat_range(int rank) const;
  // The packed ranges rank `rank` writes of each state, in file order.
  const std::vector<std::pair<int64_t, int64_t>>& packed_pieces(int rank) const {
    return packed_[static_cast<size_t>(rank)];
  }
  uint64_t file_bytes(int rank) const;
  std::string file_name(int rank) const;
  const std::vector<std::string>& states() const { return states_; }

  // Adds the states' names and every tensor record (name, state, dtype, shape, extent
  // runs). The runs name rank r's file as files(r): the writers list the files in rank order.
  // The records are worked out once per plan (and its copies) and copied at each call: a
  // writer that keeps its plan (ShardPlanCache) describes every later save by a copy.
  void describe(ckpt::Manifest& manifest) const;

  // Rank `rank`'s file contents, in order, as pieces of the flat buffers: sink(data,
  // bytes) is called once per contiguous piece. `buffers` are in states() order;
  // buffers[i][0] is flat element begins[i] (0 when `begins` is empty).
  void pack(int rank, std::span<const float* const> buffers,
            const std::function<void(const void*, size_t)>& sink,
            std::span<const int64_t> begins = {}) const;
  // The same from each state's pieces (sources[i] sorted, covering what `rank` writes).
  void pack(int rank, std::span<const std::vector<StatePiece>> sources,
            const std::function<void(const void*, size_t)>& sink) const;

 private:
  struct Tensor {
    const TensorEntry* entry;
    int64_t packed_begin;
  };
  // The tensor that holds packed element p.
  std::vector<Tensor>::const_iterator tensor_at(int64_t p) const;
  void describe_into(ckpt::Manifest& manifest) const;
  struct Described {  // describe()'s records, worked out at the first call (any thread)
    std::once_flag once;
    ckpt::Manifest records;
  };
  std::shared_ptr<Described> described_ = std::make_shared<Described>();
  void own(const ShardOwners& owners);
  // packed_[r]: what rank r writes of each state; the even split's when no owners.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> packed_;
  const ParamLayout& layout_;
  int world_;
  std::vector<std::string> states_;
  std::vector<Tensor> tensors_;
  int64_t packed_numel_ = 0;
};

// The plan of the last save, given again while a save has the same layout, world, states
// and owners (the same ShardOwners object: an engine agrees on its owners once and keeps
// them). Building a plan with owners is O(ranks x pieces): 35 ms at 1024 ranks of GPT-2
// 124M (`etr-bench manifest`), on every rank's training thread at every save otherwise.
class ShardPlanCache {
 public:
  // The plan, built or kept; it stays valid while the caller holds it, whatever later
  // calls give (it refers to a copy of the layout that it keeps alive).
  std::shared_ptr<const ShardPlan> get(const ParamLayout& layout, int world,
                                       const std::vector<std::string>& states,
                                       std::shared_ptr<const ShardOwners> owners);

 private:
  struct Entry;
  std::shared_ptr<const Entry> last_;
};

// The pieces of `s` that `rank` of `world` writes (its owners' ranges, or the even split's
// flat range), sorted: what a rank contributes when its state is moved elsewhere.
std::vector<StatePiece> owned_pieces(const NamedState& s, const ParamLayout& layout, int world,
                                     int rank);

}  // namespace etr
