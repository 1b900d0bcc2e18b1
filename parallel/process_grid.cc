// ProcessGrid: see process_grid.h for the rank mapping and why it was chosen.
#include "parallel/process_grid.h"

#include <string>

#include "runtime/error.h"

namespace etr {

namespace {

// Group::split with a colour every rank passes, so the result always exists.
Group split_all(const Group& world, int color, int key, const std::string& name) {
  std::optional<Group> g = world.split(color, key, name);
  if (!g) throw CommError("MPI_Comm_split returned no communicator for group '" + name + "'");
  return std::move(*g);
}

}  // namespace

int ProcessGrid::checked_dp_size(int world_size, int pp_size) {
  if (pp_size < 1) {
    throw ConfigError("the pipeline size is " + std::to_string(pp_size) +
                      " but must be at least 1; use 1 for no pipeline parallelism");
  }
  if (world_size % pp_size != 0) {
    throw ConfigError(
        "a pipeline of " + std::to_string(pp_size) + " stages does not divide the world of " +
        std::to_string(world_size) + " ranks; run with a multiple of " + std::to_string(pp_size) +
        " ranks or choose a pipeline size that divides " + std::to_string(world_size));
  }
  return world_size / pp_size;
}

ProcessGrid::ProcessGrid(const Group& world, int pp_size)
    : rank_(world.rank()),
      pp_size_(pp_size),
      dp_size_(checked_dp_size(world.size(), pp_size)),
      pp_rank_(world.rank() % pp_size),
      dp_rank_(world.rank() / pp_size),
      // Same stage -> one dp group, ordered by replica; same replica -> one pipeline,
      // ordered by stage.
      world_group_(world.dup("world")),
      dp_group_(split_all(world, pp_rank_, dp_rank_, "dp")),
      pp_group_(split_all(world, dp_rank_, pp_rank_, "pp")) {}

std::optional<int> ProcessGrid::prev_stage() const {
  if (is_first_stage()) return std::nullopt;
  return pp_rank_ - 1;
}

std::optional<int> ProcessGrid::next_stage() const {
  if (is_last_stage()) return std::nullopt;
  return pp_rank_ + 1;
}

int ProcessGrid::world_rank(int dp_rank, int pp_rank) const {
  if (dp_rank < 0 || dp_rank >= dp_size_ || pp_rank < 0 || pp_rank >= pp_size_) {
    throw InvalidArgument("grid coordinates (replica " + std::to_string(dp_rank) + ", stage " +
                          std::to_string(pp_rank) + ") are outside the grid of " +
                          std::to_string(dp_size_) + " replicas x " + std::to_string(pp_size_) +
                          " stages");
  }
  return dp_rank * pp_size_ + pp_rank;
}

std::string ProcessGrid::str() const {
  return "dp " + std::to_string(dp_size_) + " x pp " + std::to_string(pp_size_) +
         ", this rank: replica " + std::to_string(dp_rank_) + ", stage " + std::to_string(pp_rank_);
}

}  // namespace etr
