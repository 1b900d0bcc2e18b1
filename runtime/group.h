// Group: an owned MPI communicator with a name that error messages can use
// ("allreduce on group 'dp'..."). Move-only; frees its communicator when destroyed.
#pragma once

#include <mpi.h>

#include <optional>
#include <string>
#include <vector>

namespace etr {

class Group {
 public:
  // Takes ownership of `comm` (it will be freed) unless `owned` is false.
  Group(MPI_Comm comm, std::string name, bool owned = true);
  Group(Group&& other) noexcept;
  Group& operator=(Group&& other) noexcept;
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group();

  MPI_Comm comm() const { return comm_; }
  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  // [size]: each rank's rank in MPI_COMM_WORLD (error messages and etr-run name peers by it).
  std::vector<int> world_ranks() const;

  // A new communicator over the same ranks (separate message space).
  Group dup(const std::string& name) const;
  // MPI_Comm_split: ranks with the same color form a group ordered by key. Collective
  // over this group. Returns nothing for ranks that pass std::nullopt as color.
  std::optional<Group> split(std::optional<int> color, int key, const std::string& name) const;

 private:
  void release() noexcept;

  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 0;
};

}  // namespace etr
