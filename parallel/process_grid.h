// ProcessGrid: the dp x pp process grid of docs/design.md ("Layers and folders", parallel/).
//
// The world's N ranks form dp = N / pp replicas of a pp-stage pipeline. Rank r is
//
//   pp_rank (stage) = r % pp        dp_rank (replica) = r / pp
//   r = dp_rank * pp + pp_rank
//
// so the stages of one pipeline are consecutive world ranks. Why this way round:
//  - launchers place consecutive ranks on one node (mpirun by slot, srun block), so a
//    pipeline's neighbouring stages share a node whenever pp divides the slots per node;
//    their activation/gradient sends happen for every micro-batch and sit on the
//    critical path of the schedule (the bubble), while the dp allreduce is overlapped
//    with backward and is one bandwidth-bound ring per step anyway;
//  - elasticity changes dp and keeps pp: growing from dp to dp' replicas appends ranks
//    [dp*pp, dp'*pp) as whole new pipelines, and every existing rank keeps its
//    (dp_rank, pp_rank), so its stage's layers and checkpoint ranges stay the same.
//    (With stage = r / dp, every rank's stage would move on each resize.)
//
// Invariants: pp_size() * dp_size() == size(); the pp group is ordered by stage (its
// rank == pp_rank()) and the dp group by replica (its rank == dp_rank()). Constructing
// one is collective over the world group; impossible layouts throw ConfigError on every
// rank alike, before any communication.
#pragma once

#include <optional>
#include <string>

#include "runtime/group.h"

namespace etr {

class ProcessGrid {
 public:
  // Collective over `world`. Throws ConfigError when pp_size < 1 or does not divide
  // world.size().
  ProcessGrid(const Group& world, int pp_size);

  int rank() const { return rank_; }  // in the world
  int size() const { return dp_size_ * pp_size_; }
  int dp_rank() const { return dp_rank_; }
  int dp_size() const { return dp_size_; }
  int pp_rank() const { return pp_rank_; }  // this rank's pipeline stage
  int pp_size() const { return pp_size_; }

  // The ranks holding the same stage in every replica ("dp"), and the stages of this
  // rank's replica ("pp").
  const Group& dp_group() const { return dp_group_; }
  // Every rank of the grid (a duplicate of the world it was built from): checkpoints,
  // which span the stages, and the sums every rank takes part in.
  const Group& world_group() const { return world_group_; }
  const Group& pp_group() const { return pp_group_; }

  bool is_first_stage() const { return pp_rank_ == 0; }
  bool is_last_stage() const { return pp_rank_ == pp_size_ - 1; }
  // The neighbouring stages as ranks in pp_group(); nothing at either end of the pipeline.
  std::optional<int> prev_stage() const;
  std::optional<int> next_stage() const;

  // The world rank at grid coordinates (dp_rank, pp_rank); throws InvalidArgument
  // outside the grid.
  int world_rank(int dp_rank, int pp_rank) const;

  // "dp 2 x pp 2, this rank: replica 1, stage 0", for the start-up log.
  std::string str() const;

 private:
  // Checks the layout before the collective splits; see the constructor.
  static int checked_dp_size(int world_size, int pp_size);

  // Declaration order matters: dp_size_ (which validates pp_size) is initialised before
  // the coordinates that divide by pp_size, and those before the groups split by them.
  int rank_;
  int pp_size_;
  int dp_size_;
  int pp_rank_;
  int dp_rank_;
  Group world_group_;
  Group dp_group_;
  Group pp_group_;
};

}  // namespace etr
