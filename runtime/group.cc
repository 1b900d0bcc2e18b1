#include "runtime/group.h"

#include <utility>

#include "runtime/mpi_check.h"

namespace etr {

Group::Group(MPI_Comm comm, std::string name, bool owned)
    : comm_(comm), name_(std::move(name)), owned_(owned) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

Group::Group(Group&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      name_(std::move(other.name_)),
      owned_(std::exchange(other.owned_, false)),
      rank_(other.rank_),
      size_(other.size_) {}

Group& Group::operator=(Group&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    name_ = std::move(other.name_);
    owned_ = std::exchange(other.owned_, false);
    rank_ = other.rank_;
    size_ = other.size_;
  }
  return *this;
}

Group::~Group() { release(); }

void Group::release() noexcept {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
  comm_ = MPI_COMM_NULL;
  owned_ = false;
}

std::vector<int> Group::world_ranks() const {
  std::vector<int> mine(static_cast<size_t>(size_)), world(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) mine[r] = r;
  MPI_Group local = MPI_GROUP_NULL, global = MPI_GROUP_NULL;
  MPI_CHECK(MPI_Comm_group(comm_, &local));
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &global));
  MPI_CHECK(MPI_Group_translate_ranks(local, size_, mine.data(), global, world.data()));
  MPI_Group_free(&local);
  MPI_Group_free(&global);
  return world;
}

Group Group::dup(const std::string& name) const {
  MPI_Comm comm;
  MPI_CHECK(MPI_Comm_dup(comm_, &comm));
  MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  return Group(comm, name);
}

std::optional<Group> Group::split(std::optional<int> color, int key,
                                  const std::string& name) const {
  MPI_Comm comm;
  MPI_CHECK(MPI_Comm_split(comm_, color ? *color : MPI_UNDEFINED, key, &comm));
  if (comm == MPI_COMM_NULL) return std::nullopt;
  MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  return Group(comm, name);
}

}  // namespace etr
